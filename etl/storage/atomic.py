"""Files under one root (a local folder or any fsspec URL), written so readers never see a partial one.

Local files go to a hidden temp name, are fsynced, then renamed. Object stores get one PUT per file
(S3 makes an object visible only once its upload is complete, multipart included), so no temp names
exist there. Replacing a file another writer may change meanwhile is optimistic: `open_version` reads
a version (its local path and a token), the new content is written aside (`new_output`), and
`commit` swaps it in only if the file is still that version. The token is the ETag on S3 (a
conditional PUT), the inode, size and mtime locally (checked and renamed under an flock of the folder
itself, so no lock file lands among the data). Large files never need to be held in memory.
"""

from __future__ import annotations

import enum
import fcntl
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar, cast

import fsspec
from fsspec.asyn import sync
from fsspec.implementations.local import LocalFileSystem

from etl.errors import EtlError, LostRace, StorageError
from etl.storage import s3, tempfiles
from etl.storage.tempfiles import TMP_SUFFIX
from etl.support import optimistic, redact
from etl.support.optional import require

log = logging.getLogger(__name__)
T = TypeVar("T")


class Keep(enum.Enum):
    """What an `update` change returns to leave the file as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP
# An `update`'s change: the file's bytes (None: no such file) -> new bytes, None to delete it, or KEEP.
Change = Callable[[bytes | None], bytes | None | Keep]
_UNCONDITIONAL: set[str] = set()  # S3 endpoints that answered 501 Not Implemented to a conditional write
_SECRET_OPTIONS = ("secret", "token", "password", "key", "sas_token", "account_key")


@dataclass
class Version:
    """One version of a file, read for a rewrite: an open handle (None: the file did not exist) and the
    token `Storage.commit` compares. Object stores are spooled to a local temp file, so nothing large is
    held in memory and the version cannot change under the reader."""

    rel: str
    handle: IO[bytes] | None
    token: Any
    _spool: str | None = field(default=None, repr=False)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        if self._spool:
            with suppress(FileNotFoundError):
                os.unlink(self._spool)


def _storage_error(action: str, path: str, exc: BaseException) -> StorageError:
    reason = (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).splitlines()[0]
    if not isinstance(exc, OSError):
        reason = f"{type(exc).__name__}: {reason}"  # NoCredentialsError and friends say little alone
    return StorageError(redact.redact(f"cannot {action} {path}: {reason}"))


def storage_options(url: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """The fsspec options of a URL. For s3:// the standard AWS_ENDPOINT_URL(_S3) variable is passed on
    explicitly: recent botocore reads it itself, older botocore and pyarrow's S3 filesystem do not."""
    options = dict(options or {})
    redact.register(
        *(str(v) for k, v in options.items() if isinstance(v, str) and k.lower().endswith(_SECRET_OPTIONS))
    )
    if (
        url.startswith(("s3://", "s3a://"))
        and "endpoint_url" not in options
        and "endpoint_url" not in options.get("client_kwargs", {})
    ):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options["endpoint_url"] = endpoint
    return options


class Storage:
    """Relative paths under `url`; every method raises StorageError (exit 7) rather than what the
    backend raised, so a missing bucket or credential is one clear line."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        if self.url.startswith(("s3://", "s3a://")):
            require("s3fs", self.url)
        self.options = storage_options(self.url, options)
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.options)
        except (ImportError, ValueError) as exc:
            raise StorageError(f"cannot open {self.url}: {exc}") from None
        self.root = self.root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self.s3 = "s3" in protocols
        self._endpoint = str(
            self.options.get("endpoint_url") or self.options.get("client_kwargs", {}).get("endpoint_url")
        )

    @property
    def conditional(self) -> bool:
        """S3 conditional writes, until the store answers 501 to one."""
        return self._endpoint not in _UNCONDITIONAL

    @property
    def compare_and_swap(self) -> bool:
        """Whether `update` is safe against concurrent writers: a local flock, or S3 conditional writes."""
        return self.local or (self.s3 and self.conditional)

    def full(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def display(self, rel: str = "") -> str:
        return f"{self.url}/{rel}" if rel else self.url

    @contextmanager
    def errors(self, action: str, rel: str) -> Iterator[None]:
        """Whatever the backend raises while doing `action` on `rel`, as one StorageError line."""
        try:
            yield
        except EtlError:
            raise
        except OSError as exc:
            raise _storage_error(action, self.display(rel), exc) from None
        except Exception as exc:
            if self.local:
                raise
            raise _storage_error(action, self.display(rel), exc) from None

    # -- whole files ---------------------------------------------------------------------------

    def write_atomic(self, rel: str, data: bytes) -> None:
        path = self.full(rel)
        with self.errors("write", rel):
            if not self.local:
                self.fs.pipe_file(path, data)
                return
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = tempfiles.beside(path)
            try:
                with open(tmp, "wb") as handle:
                    handle.write(data)
                _fsync(tmp)
                os.replace(tmp, path)
            except BaseException:
                with suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            _fsync(os.path.dirname(path))  # the rename itself must survive a power cut before we checkpoint

    def read(self, rel: str) -> bytes | None:
        # cat_file is one GET: unlike open(), it trusts no cached size of a file another process rewrote.
        with self.errors("read", rel):
            try:
                return cast(bytes, self.fs.cat_file(self.full(rel)))
            except FileNotFoundError:
                return None

    def read_many(self, rels: list[str]) -> list[bytes | None]:
        """Several small files (concurrently on object stores); None for those that do not exist."""
        if not rels:
            return []
        if self.local:
            return [self.read(rel) for rel in rels]
        paths = [self.full(rel) for rel in rels]
        with self.errors("read", rels[0]):
            found = self.fs.cat(paths, on_error="omit")
        return [found.get(p) for p in paths]

    def remove(self, rel: str) -> None:
        with self.errors("remove", rel), suppress(FileNotFoundError):
            self.fs.rm_file(self.full(rel))

    def remove_tree(self, rel: str = "") -> None:
        """A folder and everything in it (nothing if it is not there)."""
        with self.errors("remove", rel), suppress(FileNotFoundError):
            self.fs.rm(self.full(rel), recursive=True)

    def prune(self, rel: str = "") -> None:
        """Empty folders below `rel` removed (local only: object stores keep no folders)."""
        if not self.local:
            return
        for folder, _, _ in os.walk(self.full(rel), topdown=False):
            with suppress(OSError):  # not empty, or gone
                os.rmdir(folder)

    # -- rewriting large files: read a version, write aside, swap in if unchanged ------------------

    def open_version(self, rel: str) -> Version:
        path = self.full(rel)
        with self.errors("read", rel):
            if self.local:
                try:
                    handle = open(path, "rb")  # noqa: SIM115 - closed by Version.close
                except FileNotFoundError:
                    return Version(rel, None, None)
                return Version(rel, handle, _local_token(os.fstat(handle.fileno())))
            spool = tempfiles.spool()
            try:
                token = self._s3(s3.download, rel, spool) if self.s3 else self._download(path, spool)
            except BaseException:
                with suppress(FileNotFoundError):
                    os.unlink(spool)
                raise
            if token is None:
                os.unlink(spool)
                return Version(rel, None, None)
            return Version(rel, open(spool, "rb"), token, spool)  # noqa: SIM115

    def new_output(self, rel: str) -> str:
        """A local path to write a new version of `rel` to (beside it locally, so the swap is a rename)."""
        if not self.local:
            return tempfiles.spool()
        path = self.full(rel)
        with self.errors("write", rel):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return tempfiles.beside(path)

    def commit(self, rel: str, output: str | None, token: Any) -> bool:
        """Make `output` (None: no file) the content of `rel` if it is still the version `token` names
        (None: absent). True: done, `output` is consumed. False: another writer changed the file
        meanwhile; `output` is left to the caller."""
        with self.errors("write", rel):
            if self.local:
                return self._commit_local(rel, output, token)
            if self.s3:
                if output is None:
                    done = self._s3_put_if(rel, None, token)
                else:
                    with open(output, "rb") as body:
                        done = self._s3_put_if(rel, body, token)
            else:
                if output is None:
                    self.remove(rel)
                else:
                    self.fs.put_file(output, self.full(rel))
                done = True
        if done:
            self.discard(output)
        return done

    def publish(self, rel: str, output: str) -> None:
        """Make `output` the content of `rel`, whatever is there: a rename locally, one PUT elsewhere."""
        with self.errors("write", rel):
            if self.local:
                _fsync(output)
                os.replace(output, self.full(rel))
                _fsync(os.path.dirname(self.full(rel)))
            else:
                self.fs.put_file(output, self.full(rel))
                self.discard(output)

    @contextmanager
    def replacing(self, rel: str) -> Iterator[str]:
        """A local path to write `rel`'s new content to: made `rel` whole when the block ends (`publish`),
        discarded if it raises."""
        output = self.new_output(rel)
        try:
            yield output
            self.publish(rel, output)
        except BaseException:
            self.discard(output)
            raise

    def discard(self, output: str | None) -> None:
        if output:
            with suppress(FileNotFoundError):
                os.unlink(output)

    def _commit_local(self, rel: str, output: str | None, token: Any) -> bool:
        path = self.full(rel)
        if output is not None:
            _fsync(output)
        with self._folder_lock(rel):
            try:
                current = _local_token(os.stat(path))
            except FileNotFoundError:
                current = None
            if current != token:
                return False
            if output is not None:
                os.replace(output, path)
            elif current is not None:
                os.unlink(path)
            _fsync(os.path.dirname(path))
        return True

    def _download(self, path: str, spool: str) -> Any:
        try:
            info = self.fs.info(path)
            self.fs.get_file(path, spool)
        except FileNotFoundError:
            return None
        return info.get("ETag") or info.get("etag") or (info.get("size"), info.get("mtime"))

    # -- read-modify-write of small files ----------------------------------------------------------

    def update(self, rel: str, change: Change, attempts: int = optimistic.ATTEMPTS) -> bytes | None | Keep:
        """Replace `rel` by change(current bytes or None). change returns new bytes, None to delete,
        or KEEP. No concurrent `update` of the same file is lost: locally the folder is flocked;
        on S3 the write is conditional on the version read (retried with a fresh read on conflict).
        Other object stores get a plain read and write. Returns what change returned."""
        if self.s3:
            return self._update_s3(rel, change, attempts)
        with self._folder_lock(rel) if self.local else nullcontext():
            result = change(self.read(rel))
            if result is None:
                self.remove(rel)
            elif isinstance(result, bytes):
                self.write_atomic(rel, result)
            return result

    def _update_s3(self, rel: str, change: Change, attempts: int) -> bytes | None | Keep:
        def attempt() -> bytes | None | Keep:
            with self.errors("read", rel):
                data, etag = self._s3(s3.get, rel)
            result = change(data)
            if result is KEEP or (result is None and data is None):
                return result
            with self.errors("write", rel):
                if self._s3_put_if(rel, result, etag):
                    return result
            raise LostRace(f"cannot update {self.display(rel)}: other writers kept changing it")

        def again() -> None:
            log.debug("%s changed while being updated; reading it again", self.display(rel))

        return optimistic.swap(attempt, again=again, attempts=attempts)

    def _s3(self, call: Callable[..., Awaitable[T]], rel: str, *args: object) -> T:
        """One of etl/storage/s3.py's calls on this store's bucket and key, from synchronous code."""
        bucket, _, key = self.full(rel).partition("/")
        return cast(T, sync(self.fs.loop, call, self.fs, bucket, key, *args))

    def _s3_put_if(self, rel: str, body: bytes | IO[bytes] | None, etag: str | None) -> bool:
        try:
            return self._s3(s3.put_if, rel, body, etag, self.conditional)
        except s3.ConditionsUnsupported:
            log.warning(
                "%s does not support conditional writes: concurrent writers of one file "
                "(shards of different layouts, two runs of one state) are not protected",
                self.url,
            )
            _UNCONDITIONAL.add(self._endpoint)
            if body is not None and not isinstance(body, bytes):
                body.seek(0)
            return self._s3(s3.put_if, rel, body, etag, False)
        finally:
            self.fs.invalidate_cache(self.full(rel))

    @contextmanager
    def _folder_lock(self, rel: str) -> Iterator[None]:
        """An flock of the file's folder itself: held for one check-and-swap, milliseconds."""
        directory = os.path.dirname(self.full(rel))
        with self.errors("lock", rel):
            os.makedirs(directory, exist_ok=True)
            fd = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- listings ------------------------------------------------------------------------------

    def listdir(self, rel: str) -> list[str]:
        """Names (not paths) in a folder; empty if it does not exist. Never from a listing cache:
        another process may have written there since."""
        path = self.full(rel)
        with self.errors("list", rel):
            try:
                if self.local:  # fsspec's ls builds a record per entry; a slab lists each of its folders
                    return sorted(os.listdir(path))
                self.fs.invalidate_cache(path)
                entries = self.fs.ls(path, detail=False)
            except FileNotFoundError:
                return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def find(self, rel: str = "") -> list[str]:
        """Every file below rel, as paths relative to the root."""
        base = self.full(rel)
        with self.errors("list", rel):
            self.fs.invalidate_cache(base)
            try:
                found = self.fs.find(base)
            except FileNotFoundError:
                return []
        prefix = self.root + "/"
        return sorted(f[len(prefix) :] if f.startswith(prefix) else f for f in found)

    def check_writable(self) -> None:
        """Fail before fetching anything if the location cannot be written."""
        probe = f".probe-{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"  # a temp name: a killed run's probe is swept too
        try:
            self.write_atomic(probe, b"")
            self.remove(probe)
        except StorageError as exc:  # the user's folder, not our probe's name, is what to name
            raise StorageError(str(exc).replace(self.display(probe), self.display())) from None

    def remove_temp_files(self) -> int:
        """Leftovers of killed writers (local only: object stores have no temp names). Temp files of
        live writers (another shard writing the same folders right now) are left alone."""
        if not self.local:
            return 0
        leftovers = [
            f
            for f in self.find()
            if tempfiles.is_temp(f.rsplit("/", 1)[-1]) and tempfiles.abandoned(self.full(f))
        ]
        for rel in leftovers:
            self.remove(rel)
        return len(leftovers)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _local_token(stat: os.stat_result) -> tuple[int, int, int]:
    return stat.st_ino, stat.st_size, stat.st_mtime_ns
