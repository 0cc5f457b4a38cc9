"""Files under one root (a local folder or any fsspec URL), written so readers never see a partial one."""

from __future__ import annotations

import os
import uuid
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from etl.errors import StorageError

TMP_SUFFIX = ".tmp"


def _storage_error(action: str, path: str, exc: OSError) -> StorageError:
    reason = exc.strerror or str(exc) or type(exc).__name__
    return StorageError(f"cannot {action} {path}: {reason}")


class Storage:
    """Relative paths under `url`. Local writes go to a hidden temp name, are fsynced, then renamed;
    object stores get a single PUT, which is atomic there."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **(options or {}))
        self.root = self.root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)

    def full(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def display(self, rel: str = "") -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def write_atomic(self, rel: str, data: bytes) -> None:
        path = self.full(rel)
        try:
            if not self.local:
                self.fs.pipe_file(path, data)
                return
            directory, name = os.path.split(path)
            os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
            try:
                with open(tmp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the rename itself must survive a power cut before we checkpoint
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise _storage_error("write", self.display(rel), exc) from None

    def read(self, rel: str) -> bytes | None:
        try:
            with self.fs.open(self.full(rel), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _storage_error("read", self.display(rel), exc) from None

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.full(rel))

    def listdir(self, rel: str) -> list[str]:
        """Names (not paths) in a folder; empty if it does not exist."""
        try:
            entries = self.fs.ls(self.full(rel), detail=False)
        except FileNotFoundError:
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def find(self, rel: str = "") -> list[str]:
        """Every file below rel, as paths relative to the root."""
        base = self.full(rel)
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        prefix = self.root + "/"
        return sorted(f[len(prefix):] if f.startswith(prefix) else f for f in found)

    def remove(self, rel: str) -> None:
        try:
            self.fs.rm_file(self.full(rel))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _storage_error("remove", self.display(rel), exc) from None

    def check_writable(self) -> None:
        """Fail before fetching anything if the location cannot be written."""
        probe = f".probe-{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"  # a temp name: a killed run's probe is swept too
        self.write_atomic(probe, b"")
        self.remove(probe)

    def remove_temp_files(self) -> int:
        """Leftovers of a killed writer (local only: object stores have no temp names)."""
        if not self.local:
            return 0
        leftovers = [f for f in self.find() if f.rsplit("/", 1)[-1].startswith(".") and f.endswith(TMP_SUFFIX)]
        for rel in leftovers:
            self.remove(rel)
        return len(leftovers)
