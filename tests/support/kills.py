"""Runs killed at random moments, and what must hold meanwhile: when to kill, the files a kill may
leave, and a reader that reads the output the whole time (a lake table's snapshot never holds a row
twice)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq

from etl.storage.atomic import TMP_SUFFIX


def temp_files(out: Path) -> list[Path]:
    """Our temp files (a lake library's own, inside a table's log, are its business)."""
    return [
        p
        for p in out.rglob("*")
        if (p.name.endswith(TMP_SUFFIX) or "probe" in p.name) and "_delta_log" not in p.parts
    ]


def commits(out: Path) -> set[str]:
    """The lake tables' commit files (Delta log entries, Iceberg metadata files) now."""
    return {str(p) for p in out.glob("*/_delta_log/*.json")} | {
        str(p) for p in out.glob("etl/*/metadata/*.json")
    }


class Reader(threading.Thread):
    """Reads every visible file of the output over and over, as an analyst's query would; for lake tables,
    each table's current snapshot, which must never hold a row twice (a partial commit would): a
    (source, parameter, time) once."""

    def __init__(self, out: Path, fmt: str = "parquet") -> None:
        super().__init__(daemon=True)
        self.out, self.fmt = out, fmt
        self.stop = threading.Event()
        self.reads = 0
        self.failures: list[str] = []

    def run(self) -> None:
        if self.fmt != "parquet":
            return self._run_lake()
        while not self.stop.is_set():
            for path in list(self.out.rglob("*")):
                if path.name.startswith(".") or not path.name.endswith((".parquet", ".json")):
                    continue  # hidden names are the writers' temp files
                try:
                    if path.suffix == ".parquet":
                        pq.read_table(path)
                    else:
                        json.loads(path.read_bytes())
                    self.reads += 1
                except FileNotFoundError:
                    pass  # replaced or removed between listing and opening: fine
                except Exception as exc:  # a partial or damaged file
                    self.failures.append(f"{path.relative_to(self.out)}: {type(exc).__name__}: {exc}")
            time.sleep(0.002)

    def _run_lake(self) -> None:
        from etl.config import SinkConfig
        from etl.sinks.lake import Lake
        from etl.storage.atomic import Storage

        while not self.stop.is_set():
            if not self.out.exists():
                time.sleep(0.01)
                continue
            lake = Lake(SinkConfig(format=self.fmt, path=str(self.out)), Storage(str(self.out)))
            for table in [lake.series(s) for s in ("raw", "average", "candles")] + [lake.quality()]:
                try:
                    if not table.exists():
                        continue
                    rows = table.dataset().to_table(columns=["source", "param_id", table.time_key])
                except Exception as exc:  # noqa: BLE001 - a snapshot that cannot be read
                    self.failures.append(f"{table.name}: {type(exc).__name__}: {exc}")
                    continue
                keys = set(zip(*(rows.column(c).to_pylist() for c in rows.column_names), strict=True))
                if len(keys) != rows.num_rows:
                    self.failures.append(f"{table.name}: {rows.num_rows - len(keys)} row(s) seen twice")
                self.reads += 1
            time.sleep(0.01)


@contextmanager
def reading(out: Path, fmt: str = "parquet") -> Iterator[Reader]:
    reader = Reader(out, fmt)
    reader.start()
    try:
        yield reader
    finally:
        reader.stop.set()
        reader.join(timeout=10)
    assert not reader.failures, reader.failures[:5]


def kill_when(proc: subprocess.Popen, moment, timeout: float = 60) -> bool:
    """SIGKILL the run as soon as `moment()` holds; False if the run ended first."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if moment():
            proc.kill()
            proc.wait()
            return True
        assert time.monotonic() < deadline, "the run neither ended nor reached the moment"
    return False


def lake_data_files(out: Path) -> set[Path]:
    return {
        p
        for pattern in ("*/date=*/*.parquet", "etl/*/data/*/*.parquet")
        for p in out.glob(pattern)
        if not p.name.startswith(".")
    }


def spools_of(pids: list[int]) -> list[str]:
    """Spool folders (etl/storage/spools.py) of these processes, and spools in the temp folder itself."""
    from etl.storage import spools

    root = Path(spools.root())
    mine = {str(pid) for pid in pids}
    left = [p.name for p in root.glob("*-*") if p.name.split("-")[0] in mine] if root.exists() else []
    return left
