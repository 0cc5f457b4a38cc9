"""What the benchmarks share: the emulator in a child process, contenders measured in their own
processes (wall, peak RSS, CPU), and the environment they ran in."""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from etl_emulator.server import EmulatorControl

HERE = Path(__file__).resolve().parent
PY = sys.executable
SERIES = ("raw", "average", "candles")


@dataclass
class Measurement:
    seconds: float  # sign-in to last write, as the contender reports it
    wall: float  # the whole process, interpreter start-up and imports included
    peak_rss_mb: float
    cpu_seconds: float  # user + system of the contender process
    emulator_cpu_seconds: float
    rows: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Emulator:
    """`etl emulator serve` in a child process."""

    def __init__(self, workdir: Path, name: str, args: list[str]) -> None:
        self.port = free_port()
        self.log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PY, "-m", "etl", "emulator", "serve", "--port", str(self.port), "--log-level", "warning", *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.url + "/sem-restservices"
        try:
            subprocess.run(
                [PY, "-m", "etl", "emulator", "wait", "--url", self.url, "--timeout", "30"], check=True
            )
        except BaseException:
            self.proc.kill()
            self.log.close()
            raise
        self.control = EmulatorControl(self.url)
        self.ps = psutil.Process(self.proc.pid)

    def cpu_seconds(self) -> float:
        """CPU of the server and its worker processes, if any."""
        return tree_cpu_seconds(self.ps)

    def stop(self) -> None:
        self.control.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def tree_cpu_seconds(root: psutil.Process) -> float:
    """CPU so far of a process and of its children."""
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def run_child(
    cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = True
) -> tuple[dict, dict]:
    """Run one contender through measure.py: its JSON output, and wall, peak_rss_mb, cpu_seconds.
    `check`: a contender that fails raises (else its JSON output is read whatever its exit code)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err, usage = (Path(tmp) / name for name in ("out", "err", "usage"))
        with out.open("wb") as o, err.open("wb") as e:
            code = subprocess.call(
                [PY, str(HERE / "measure.py"), str(usage), *cmd],
                stdout=o,
                stderr=e,
                env=None if env is None else {**os.environ, **env},
                cwd=cwd,
            )
        if code != 0 and check:
            raise RuntimeError(f"{' '.join(cmd[:4])}... exited {code}: {err.read_text().strip()[-2000:]}")
        return json.loads(out.read_text()), json.loads(usage.read_text())


def parquet_rows(root: Path) -> int:
    """Rows of the series tables under root: a folder per series, or one file per series."""
    files = [f for t in SERIES for f in [*(root / t).rglob("*.parquet"), root / f"{t}.parquet"] if f.exists()]
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def lake_rows(root: Path, fmt: str) -> int:
    """Rows of the series tables' current snapshots (sink.format delta / iceberg)."""
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.atomic import Storage

    lake = Lake(SinkConfig(format=fmt, path=str(root)), Storage(str(root)))
    return sum(t.dataset().count_rows() for t in (lake.series(s) for s in SERIES) if t.exists())


def etl_run(config: Path, out: Path, emulator: Emulator, fmt: str = "parquet") -> Measurement:
    shutil.rmtree(out, ignore_errors=True)
    cpu = emulator.cpu_seconds()
    summary, usage = run_child([PY, "-m", "etl", "run", "-c", str(config), "--json", "--no-progress"])
    rows = parquet_rows(out) if fmt == "parquet" else lake_rows(out, fmt)
    return Measurement(
        summary["seconds"],
        usage["wall"],
        usage["peak_rss_mb"],
        usage["cpu_seconds"],
        emulator.cpu_seconds() - cpu,
        rows,
    )


def peer_run(name: str, requests: Path, out: Path, emulator: Emulator) -> Measurement:
    shutil.rmtree(out, ignore_errors=True)
    cpu = emulator.cpu_seconds()
    line, usage = run_child(
        [PY, str(HERE / "peers.py"), name, "--requests", str(requests), "--out", str(out)]
    )
    rows = parquet_rows(out / "data" / "series" if name == "dlt" else out)  # the ceilings write nothing
    return Measurement(
        line["seconds"],
        usage["wall"],
        usage["peak_rss_mb"],
        usage["cpu_seconds"],
        emulator.cpu_seconds() - cpu,
        rows,
    )


def environment() -> dict:
    versions = {}
    for name in ("etl", "httpx", "orjson", "numpy", "pyarrow", "pandas", "uvicorn", "dlt"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "when": datetime.now(tz=UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
    }


def save(doc: dict, path: Path) -> None:
    """A benchmark's results, with the load average at its end, as JSON at `path`."""
    doc["environment"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"load average at the end: {doc['environment']['load_average_end']}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    print(f"results: {path}")
