"""`etl doctor`: checks of a deployment, each a small function returning findings. Nothing is changed: the
checks read the config, the state, the run records and the output, and (unless asked not to) probe the
server as `etl init` does.

    server               the probes of etl/ops/probe.py, compared with the config
    checkpoints.now      checkpoints that reach past now (a clock or window.end in the future)
    checkpoints.source   the last checkpointed day of a few parameters, stored vs what the server has now
    runs.last            the last runs' outcome and failed windows, from _runs/*.json
    runs.age             the age of the last successful run, against --max-age
    locks                a state lock held by a run that is gone
    leftovers.temp       temp files of killed runs in the output; leftovers.spool: spools in the temp folder
    files                Parquet/CSV partitions holding more files than sink.buckets
    lake.*               lake tables: data files per partition, metadata size, versions past the retention
    sources              several source names in one output that list the same objects

A check that depends on another part's internals (where spools live, lake statistics) is one small
function here, so it moves with that part.
"""

from __future__ import annotations

import asyncio
import functools
import glob
import os
import socket
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import httpx
import numpy as np
import orjson

from etl.client import MonitoringClient
from etl.config import Config
from etl.errors import EtlError, StorageError
from etl.model import SERIES, ParamKind, Series, Shard, Window
from etl.ops.findings import Finding, fail, ok, warn, worst
from etl.ops.init import report as probe_report
from etl.ops.probe import Findings, Prober
from etl.pipeline.build import Build
from etl.pipeline.fetch import fetch_window
from etl.state.lock import LOCK_FILE
from etl.state.store import Coverage, StateStore
from etl.storage import tempfiles
from etl.storage.files import Storage
from etl.timeutil import DAY_MS, HOUR_MS, MINUTE_MS, iso, now_ms

CHECKS = ("server", "checkpoints", "runs", "locks", "leftovers", "files", "lake", "sources")
SOURCE_SAMPLES = 3  # parameters whose last checkpointed day is compared with the server
SPOOLS = ("etl-lake-*.arrow", "etl-spool-*.tmp", "etl-rows-*")  # local spools of runs (etl/sinks, storage)
_HOST = socket.gethostname()


@dataclass(frozen=True)
class Limits:
    """The bars the checks hold a deployment to."""

    max_age_ms: int | None = None  # the last successful run at most this old (None: not checked)
    retain_ms: int = 7 * DAY_MS  # lake versions older than this should be vacuumed (etl vacuum --retain)
    files_per_partition: int | None = None  # lake tables; None: 4 x sink.buckets
    metadata_bytes: int = 64 << 20  # a lake table's metadata (Delta log, Iceberg metadata file)
    runs: int = 10  # the last run records read
    future_ms: int = 5 * MINUTE_MS  # clock skew forgiven before a checkpoint counts as "past now"
    spool_dir: str | None = None  # None: the system's temp folder
    spool_age_ms: int = HOUR_MS  # a spool older than this has no live run


@dataclass
class Diagnosis:
    findings: list[Finding]
    requests_made: int = 0

    def healthy(self, strict: bool = False) -> bool:
        status = worst(self.findings)
        return status == "ok" or status == "warn" and not strict

    def as_dict(self, strict: bool = False) -> dict[str, Any]:
        return {
            "healthy": self.healthy(strict),
            "status": worst(self.findings),
            "findings": [f.as_dict() for f in self.findings],
            "requests_made": self.requests_made,
        }


@dataclass
class Deployment:
    """What the checks read, each loaded once."""

    config: Config
    config_path: str
    limits: Limits
    now: int
    checks: list[str] = field(default_factory=lambda: list(CHECKS))
    build: Build = field(init=False)

    def __post_init__(self) -> None:
        self.build = Build(self.config)

    @property
    def cmd(self) -> str:
        """How the fixes name the config."""
        return f"-c {self.config_path}"

    @cached_property
    def stores(self) -> list[tuple[StateStore, Coverage]]:
        return [(store, store.load()) for store in self.build.state_stores()]

    @cached_property
    def has_output(self) -> bool:
        names = self.build.data.listdir("")
        sink = self.config.sink
        if sink.format == "iceberg" and sink.catalog is None:
            return "catalog.db" in names  # else opening the catalog would create it
        return bool(names)

    @cached_property
    def sql(self) -> Any:
        """DuckDB over the output (etl query's views), or None when there is no output yet."""
        if not self.has_output:
            return None
        from etl.dataset.query import connect

        return connect(self.config)

    def views(self) -> set[str]:
        from etl.dataset.query import views

        return set(views(self.sql)) if self.sql is not None else set()

    def query(self, text: str, parameters: list | None = None) -> list[tuple]:
        """Rows of a query over the output; a reading problem is one StorageError line."""
        import duckdb

        try:
            return self.sql.execute(text, parameters or []).fetchall()
        except duckdb.Error as exc:
            raise StorageError(f"cannot read the output: {str(exc).splitlines()[0]}") from None


def _shard(store: StateStore) -> Shard | None:
    return Shard.from_folder(store.storage.url.rsplit("/", 1)[-1])


def _human(ms: int) -> str:
    """A duration as etl's options write them: 7d, 2d3h, 45m, 30s."""
    seconds = max(0, ms // 1000)
    if seconds >= 86400:
        days, rest = divmod(seconds, 86400)
        return f"{days}d" + (f"{rest // 3600}h" if rest >= 3600 else "")
    if seconds >= 3600:
        hours, rest = divmod(seconds, 3600)
        return f"{hours}h" + (f"{rest // 60}m" if rest >= 60 else "")
    return f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the server ---------------------------------------------------------------------------------------------


def compare(config: Config, found: Findings) -> list[Finding]:
    """The probe's findings against the config: what a run would stumble on, and what it could do better."""
    source, extract = config.source, config.extract
    out: list[Finding] = []
    if found.base_url != source.base_url:
        out.append(
            fail(
                "server.base_url",
                f"{source.base_url}/auth/login is not there; the service lives at {found.base_url}",
                f"set source.base_url: {found.base_url}",
            )
        )
    if found.sign_in != source.sign_in:
        ways = {"query": "query parameters", "form": "a form body"}
        out.append(
            fail(
                "server.sign_in",
                f"the server refuses credentials as {ways[source.sign_in]}; it takes {ways[found.sign_in]}",
                f"set source.sign_in: {found.sign_in}",
            )
        )
    if found.count_cap is not None and extract.max_points > found.count_cap:
        out.append(
            warn(
                "server.count",
                f"answers are cut at {found.count_cap} points but extract.max_points asks {extract.max_points}: "
                "runs learn the cap with extra requests",
                f"set extract.max_points: {found.count_cap}",
            )
        )
    elif found.count_refused_over is not None and extract.max_points >= found.count_refused_over:
        out.append(
            warn(
                "server.count",
                f"the server refuses count={found.count_refused_over}; extract.max_points asks {extract.max_points}",
                f"set extract.max_points below {found.count_refused_over}",
            )
        )
    if extract.concurrency * 2 < found.suggested_concurrency:
        out.append(
            warn(
                "server.latency",
                f"answers take {found.latency_ms} ms; extract.concurrency {extract.concurrency} leaves runs waiting",
                f"set extract.concurrency: {found.suggested_concurrency}",
            )
        )
    # The rest as the probe reports it, but what was compared (and the probe's own request count: the
    # doctor gives its total).
    compared = {f.check.removeprefix("server.") for f in out} | {"requests"}
    for line in probe_report(found):
        if line.check not in compared:
            out.append(Finding(f"server.{line.check}", line.status, line.message, line.fix))
    return out


async def checkpoints_ahead_of_source(client: MonitoringClient, d: Deployment) -> list[Finding]:
    """The last checkpointed day (up to the overlap, which the next run re-reads anyway) of a few raw
    parameters: the server must not hold points there that the output lacks. If it does, the checkpoint ran
    ahead of the source: points came late, or the server's clock is behind ours."""
    check = "checkpoints.source"
    overlap = d.config.window.overlap
    candidates: list[tuple[int, int, int]] = []
    for _store, coverage in d.stores:
        ids, starts, ends = coverage.of_series(Series.RAW)
        if not len(ids):
            continue
        last = np.r_[ids[1:] != ids[:-1], True]  # each parameter's last interval
        for pid, start, end in zip(
            ids[last].tolist(), starts[last].tolist(), ends[last].tolist(), strict=True
        ):
            low, high = max(start, end - DAY_MS), min(end, d.now) - overlap
            if high - low >= MINUTE_MS:
                candidates.append((pid, low, high))
    if not candidates or "raw" not in d.views():
        return [ok(check, "no raw checkpoint with stored data to compare with the server")]
    picked = [
        candidates[round(i * (len(candidates) - 1) / max(SOURCE_SAMPLES - 1, 1))]
        for i in range(SOURCE_SAMPLES)
    ]
    out, compared = [], 0
    for pid, low, high in dict.fromkeys(picked):
        stored, kind, object_id = _stored(d, pid, low, high)
        if kind is None:
            continue
        window = Window(pid, object_id, ParamKind(kind), Series.RAW, low, high)
        data = await fetch_window(client, window, d.config.extract.max_points, Counter())
        server = int(np.count_nonzero(data.ts < high))
        compared += 1
        if server > stored:
            out.append(
                fail(
                    check,
                    f"param {pid}: the server has {server - stored} point(s) in {iso(low)}..{iso(high)} that the "
                    "output lacks, inside the checkpointed span: the checkpoint ran ahead of the source (points "
                    "came late, or the server's clock is behind)",
                    f"etl run {d.cmd} --full-refresh --from {iso(low)} --to {iso(high)}; "
                    "raise window.overlap above the lateness",
                )
            )
        elif server < stored:
            out.append(
                warn(
                    check,
                    f"param {pid}: the output holds {stored - server} point(s) more than the server now has in "
                    f"{iso(low)}..{iso(high)}",
                    "the server dropped data, or another instance wrote under this source name",
                )
            )
    return out or [ok(check, f"the last checkpointed day of {compared} parameter(s) matches the server")]


def _stored(d: Deployment, pid: int, low: int, high: int) -> tuple[int, str | None, int]:
    """Stored raw points of a parameter in [low, high), its kind and object (from any of its rows)."""
    name = d.config.source.name
    since = datetime.fromtimestamp(low / 1000, UTC)
    until = datetime.fromtimestamp(high / 1000, UTC)
    [(count, kind, object_id)] = d.query(
        "select count(*), any_value(kind), any_value(object_id) from raw where param_id = ? "
        "and ts >= ? and ts < ? and coalesce(source, ?) = ?",
        [pid, since, until, name, name],
    )
    if kind is None:
        row = d.query(
            "select kind, object_id from raw where param_id = ? and coalesce(source, ?) = ? limit 1",
            [pid, name, name],
        )
        kind, object_id = row[0] if row else (None, 0)
    return int(count), kind, int(object_id or 0)


async def _server(d: Deployment) -> tuple[list[Finding], int]:
    source, build = d.config.source, d.build
    prober = Prober(
        source.base_url,
        source.username,
        build.password,
        sign_in=source.sign_in,
        verify=build.tls,
        timeout=httpx.Timeout(source.read_timeout, connect=source.connect_timeout),
    )
    async with prober:
        try:
            found = await prober.run()
        except EtlError as exc:
            return [fail("server", str(exc), "fix what it says, then etl doctor again")], prober.requests
        out = compare(d.config, found)
        if "checkpoints" in d.checks:
            try:
                out += await checkpoints_ahead_of_source(prober.client, d)
            except EtlError as exc:
                out.append(fail("checkpoints.source", f"could not compare: {exc}"))
        return out, prober.requests


# -- the state ----------------------------------------------------------------------------------------------


def checkpoints_ahead_of_now(d: Deployment) -> list[Finding]:
    out = []
    for store, coverage in d.stores:
        ahead = coverage.end > d.now + d.limits.future_ms
        if not ahead.any():
            continue
        keys = np.unique(coverage.key[ahead]).tolist()
        params = sorted({k // 4 for k in keys})
        series = sorted({SERIES[k % 4].value for k in keys})
        shard = _shard(store)
        options = " ".join(
            [f"--param {p}" for p in params[:5]]
            + [f"--series {s}" for s in series]
            + ([f"--shard {shard}"] if shard else [])
        )
        out.append(
            fail(
                "checkpoints.now",
                f"{len(keys)} checkpoint(s) of {len(params)} parameter(s)"
                + (f" (shard {shard})" if shard else "")
                + f" reach past now, up to {iso(int(coverage.end[ahead].max()))}: runs skip that span until "
                "the clock gets there",
                f"etl state reset {d.cmd} {options} --yes"
                + (" (and the other parameters)" if len(params) > 5 else "")
                + "; then find what set window.end or the clock ahead",
            )
        )
    if out:
        return out
    count = sum(len(c) for _, c in d.stores)
    return [ok("checkpoints.now", f"{count} checkpoint(s), none past now" if count else "no checkpoint yet")]


def runs(d: Deployment) -> list[Finding]:
    """The last runs' records: how the last one ended, the windows that failed, the last success's age."""
    storage, limits = d.build.data, d.limits
    names = sorted(n for n in storage.listdir("_runs") if n.endswith(".json"))[-limits.runs :]
    records = []
    for body in storage.read_many([f"_runs/{n}" for n in names]):
        try:
            record = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            record = None
        if (
            isinstance(record, dict)
            and "run_id" in record
            and record.get("source") in (None, d.config.source.name)
        ):
            records.append(record)
    if not records:
        status = fail if limits.max_age_ms else warn
        return [status("runs.last", f"no run recorded in {storage.display('_runs')}", f"etl run {d.cmd}")]
    out = []
    latest: dict[str | None, dict] = {}
    for record in records:  # oldest first: the last of each shard stays
        latest[record.get("shard")] = record
    for shard, record in sorted(latest.items(), key=lambda kv: str(kv[0])):
        where = f" (shard {shard})" if shard else ""
        path = storage.display(f"_runs/{record.get('run_id')}.json")
        failed = int(record.get("failed_window_count") or 0)
        if failed:
            first = (record.get("failed_windows") or ["?"])[0]
            again = _failing_again(records, shard, set(record.get("failed_windows") or []))
            out.append(
                fail(
                    "runs.last",
                    f"the last run {record['run_id']}{where} left {failed} window(s) failed (first: {first})"
                    + (f"; {again} of them failed in the run before too" if again else ""),
                    f"the next run retries them; if they keep failing, read the errors in {path}",
                )
            )
        elif record.get("status") == "failed":
            out.append(
                fail(
                    "runs.last",
                    f"the last run {record['run_id']}{where} failed: {record.get('error')}",
                    f"fix the cause (see {path}), then etl run {d.cmd}",
                )
            )
        elif record.get("status") == "interrupted":
            out.append(
                warn(
                    "runs.last",
                    f"the last run {record['run_id']}{where} was interrupted; the next run resumes",
                )
            )
    if not out:
        last = records[-1]
        out.append(ok("runs.last", f"the last run {last['run_id']} was ok ({len(records)} run(s) read)"))
    out.append(_age(d, records))
    return out


def _failing_again(records: list[dict], shard: str | None, failed: set[str]) -> int:
    mine = [r for r in records if r.get("shard") == shard]
    return len(failed & set(mine[-2].get("failed_windows") or [])) if len(mine) > 1 else 0


def _age(d: Deployment, records: list[dict]) -> Finding:
    finished = [
        _ms(r["started"]) + int(float(r.get("seconds") or 0) * 1000)
        for r in records
        if r.get("status") == "ok" and r.get("started")
    ]
    max_age = d.limits.max_age_ms
    if not finished:
        status = fail if max_age else warn
        return status(
            "runs.age",
            f"none of the last {len(records)} run(s) succeeded",
            "read the last run's error in _runs/",
        )
    age = d.now - max(finished)
    text = f"the last successful run finished {_human(age)} ago ({iso(max(finished))})"
    if max_age and age > max_age:
        return fail(
            "runs.age",
            f"{text}, more than --max-age {_human(max_age)}",
            "check the scheduler (cron, Airflow) and the last runs' errors",
        )
    return ok("runs.age", text)


def _ms(stamp: str) -> int:
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except (ValueError, TypeError):
        return 0  # a record from elsewhere: as old as can be


def locks(d: Deployment) -> list[Finding]:
    """A run lock held by a run that is gone. Locally the lock is an flock the kernel drops when its holder
    dies, unless a process the run started keeps the file open; on object stores a lease that expires."""
    out = []
    for store, _ in d.stores:
        storage = store.storage
        holder = _holder(storage.read(LOCK_FILE))
        where = storage.display(LOCK_FILE)
        pid, host, since = holder.get("pid"), holder.get("host"), holder.get("since")
        gone = host == _HOST and isinstance(pid, int) and not _alive(pid)
        if storage.local:
            if not _flocked(storage.full(LOCK_FILE)):
                continue
            if gone:
                out.append(
                    fail(
                        "locks",
                        f"the state lock {where} is held, but the run that took it (pid {pid}, since {since}) is "
                        "gone: a process it started keeps the lock open, and runs exit 8 until it ends",
                        f"find it with: fuser -v {storage.full(LOCK_FILE)}; stop it",
                    )
                )
            else:
                out.append(
                    ok("locks", f"a run holds the state lock now (pid {pid} on {host}, since {since})")
                )
            continue
        if "token" not in holder:
            continue
        expires = float(holder.get("expires") or 0) * 1000
        if expires <= d.now:
            out.append(
                warn(
                    "locks",
                    f"the state lock {where} was left by a run that did not finish (pid {pid} on {host}, "
                    f"since {since}); the next run takes it over",
                )
            )
        elif gone:
            status = fail if expires - d.now > 10 * MINUTE_MS else warn
            out.append(
                status(
                    "locks",
                    f"a run that is gone (pid {pid} on {host}) holds the state lock {where} until "
                    f"{iso(int(expires))}: runs exit 8 until then",
                    f"wait, or remove {where} if no run of this state is alive",
                )
            )
        else:
            out.append(ok("locks", f"a run holds the state lock (pid {pid} on {host}, since {since})"))
    return out or [ok("locks", f"no run holds the state lock ({len(d.stores)} store(s))")]


def _holder(data: bytes | None) -> dict:
    try:
        held = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError:
        held = {}
    return held if isinstance(held, dict) else {}


def _flocked(path: str) -> bool:
    """Whether some process holds an flock on the file, read from /proc/locks: taking the lock even for a
    moment could make a run starting then exit 8."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    try:
        with open("/proc/locks") as handle:
            table = handle.read()
    except OSError:  # not Linux: a shared lock taken and dropped at once
        import fcntl

        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any("FLOCK" in line.split() and device in line.split() for line in table.splitlines())


# -- leftovers ------------------------------------------------------------------------------------------------


def temp_files(d: Deployment) -> list[Finding]:
    """Temp files of killed writers in the output (and a separate state folder): local folders only,
    object stores have no temp names."""
    storages = [d.build.data]
    if d.config.state.path:
        storages.append(Storage(d.config.state.path, d.config.sink.storage_options))
    left: list[str] = []
    size = 0
    for storage in storages:
        if not storage.local:
            continue
        for rel in storage.find():
            path = storage.full(rel)
            if tempfiles.is_temp(rel.rsplit("/", 1)[-1]) and tempfiles.abandoned(path):
                left.append(path)
                size += _size(path)
    if not left:
        return [ok("leftovers.temp", "no temp file of a killed run")]
    return [
        warn(
            "leftovers.temp",
            f"{len(left)} temp file(s) of killed runs ({size / 1e6:.1f} MB), e.g. {left[0]}",
            f"the next run removes them (or etl compact {d.cmd})",
        )
    ]


def spools(d: Deployment) -> list[Finding]:
    """Local spools of killed runs (lake slabs, object-store rewrites, dimension pages) in the temp folder of
    this machine: nothing else ever removes them."""
    folder = d.limits.spool_dir or tempfile.gettempdir()
    cutoff = d.now / 1000 - d.limits.spool_age_ms / 1000
    left = [
        path
        for pattern in SPOOLS
        for path in glob.glob(os.path.join(folder, pattern))
        if _mtime(path) < cutoff
    ]
    if not left:
        return [ok("leftovers.spool", f"no old spool in {folder}")]
    size = sum(_size(p) for p in left)
    return [
        warn(
            "leftovers.spool",
            f"{len(left)} spool(s) of killed runs in {folder}, older than {_human(d.limits.spool_age_ms)} "
            f"({size / 1e6:.1f} MB)",
            "remove them: rm -r " + " ".join(os.path.join(folder, p) for p in SPOOLS),
        )
    ]


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except FileNotFoundError:
        return time.time()


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(_size(os.path.join(path, name)) for name in os.listdir(path))
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


# -- the output -------------------------------------------------------------------------------------------------


def partition_files(d: Deployment) -> list[Finding]:
    """Parquet/CSV partitions holding more of this source's files than sink.buckets: written by shards or an
    older layout, which `etl compact` merges."""
    buckets = d.config.sink.buckets
    crowded: dict[str, int] = {}
    for layout in [d.build.layout(s) for s in Series] + [d.build.quality_layout()]:
        per_folder: Counter = Counter()
        for rel in d.build.data.find(layout.name):
            folder, _, name = rel.rpartition("/")
            try:
                key = layout.data_key(name)
            except ValueError:  # a name like ours with an impossible shard: not written by etl
                continue
            if key is not None and key.source in (None, layout.source):
                per_folder[folder] += 1
        crowded.update({folder: n for folder, n in per_folder.items() if n > buckets})
    if not crowded:
        return [ok("files", f"every partition holds at most sink.buckets ({buckets}) files of this source")]
    worst_folder = max(crowded, key=crowded.__getitem__)
    return [
        warn(
            "files",
            f"{len(crowded)} partition(s) hold more files of this source than sink.buckets ({buckets}), up to "
            f"{crowded[worst_folder]} in {worst_folder}: sharded runs or an older layout",
            f"etl compact {d.cmd}",
        )
    ]


@dataclass
class TableStats:
    name: str
    files_max: int = 0  # data files in the fullest partition
    partition: str = ""
    metadata_bytes: int = 0
    old: int = 0  # versions (Iceberg snapshots, Delta files of older versions) past the retention


def lake_tables(d: Deployment) -> list[Finding]:
    lake = d.build.lake
    if lake is None:
        return []
    tables = [lake.series(s) for s in Series] + [lake.quality()]
    tables += [lake.dimension(name) for name in lake.dimension_names()]
    stats = [_table_stats(t, d) for t in tables if t.exists()]
    if not stats:
        return [ok("lake", "no lake table yet")]
    limit = d.limits.files_per_partition
    limit = 4 * d.config.sink.buckets if limit is None else limit
    out = []
    crowded = [s for s in stats if s.files_max > limit]
    if crowded:
        s = max(crowded, key=lambda s: s.files_max)
        out.append(
            warn(
                "lake.files",
                f"{len(crowded)} table(s) gather small files: up to {s.files_max} data files in one partition "
                f"({s.name} {s.partition}), over {limit}",
                f"etl compact {d.cmd}",
            )
        )
    heavy = [s for s in stats if s.metadata_bytes > d.limits.metadata_bytes]
    if heavy:
        s = max(heavy, key=lambda s: s.metadata_bytes)
        out.append(
            warn(
                "lake.metadata",
                f"{len(heavy)} table(s) carry large metadata: {s.name} {s.metadata_bytes / 1e6:.1f} MB, over "
                f"{d.limits.metadata_bytes / 1e6:.1f} MB",
                f"etl vacuum {d.cmd} --retain {_human(d.limits.retain_ms).replace(' ', '')}",
            )
        )
    old = [s for s in stats if s.old]
    if old:
        out.append(
            warn(
                "lake.versions",
                f"{len(old)} table(s) keep {sum(s.old for s in old)} old version(s) or file(s) past the retention "
                f"of {_human(d.limits.retain_ms)} (e.g. {old[0].name})",
                f"etl vacuum {d.cmd} --retain {_human(d.limits.retain_ms).replace(' ', '')}",
            )
        )
    if not out:
        out.append(
            ok(
                "lake",
                f"{len(stats)} table(s): at most {max(s.files_max for s in stats)} files per partition, "
                f"nothing past the retention of {_human(d.limits.retain_ms)}",
            )
        )
    return out


def _table_stats(table: Any, d: Deployment) -> TableStats:
    try:
        return lake_stats(table, d.build.data, d.limits.retain_ms, d.now)
    except EtlError:
        raise
    except Exception as exc:  # noqa: BLE001 - delta-rs and pyiceberg raise their own classes
        raise StorageError(f"cannot read the lake table {table.name}: {str(exc).splitlines()[0]}") from None


def lake_stats(table: Any, storage: Storage, retain_ms: int, now: int) -> TableStats:
    """Files per partition, metadata size and versions past the retention of one lake table, read from the
    table's own metadata (written against etl/sinks/lake as it is: kept here, in one function)."""
    stats = TableStats(table.name)
    if table.kind == "delta":
        import deltalake

        dt = deltalake.DeltaTable(table.uri, storage_options=table.options)
        inside = "/" + table.rel.strip("/") + "/"
        folders = Counter(uri.split(inside, 1)[-1].rpartition("/")[0] for uri in dt.file_uris())
        log_folder = storage.full(f"{table.rel}/_delta_log")
        stats.metadata_bytes = (
            int(storage.fs.du(log_folder, total=True)) if storage.fs.exists(log_folder) else 0
        )
        hours = max(0, retain_ms // HOUR_MS)
        stats.old = len(dt.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False))
    else:
        loaded = table.catalog.load_table(table.identifier)
        folders = Counter(str(tuple(task.file.partition)) for task in loaded.scan().plan_files())
        stats.metadata_bytes = len(loaded.io.new_input(loaded.metadata_location))
        current = loaded.current_snapshot()
        stats.old = sum(
            1
            for s in loaded.snapshots()
            if s.timestamp_ms < now - retain_ms and (current is None or s.snapshot_id != current.snapshot_id)
        )
    if folders:
        stats.partition, stats.files_max = max(folders.items(), key=lambda kv: kv[1])
    return stats


def sources(d: Deployment) -> list[Finding]:
    """Source names of this output (checkpoint folders, the objects table) that list the same objects: one
    instance exported twice, under two names."""
    state_root = Storage(
        d.config.state.path or d.config.sink.path.rstrip("/") + "/_state", d.config.sink.storage_options
    )
    names = set(state_root.listdir(""))
    objects: dict[str, frozenset] = defaultdict(frozenset)
    if "objects" in d.views():
        columns = {name for (name,) in d.query("select column_name from (describe objects)")}
        label = "shortname" if "shortname" in columns else "null"
        rows = d.query(f"select source, id, {label} from objects")
        grouped: dict[str, set] = defaultdict(set)
        for source, object_id, shortname in rows:
            grouped[str(source)].add((object_id, shortname))
        objects.update({k: frozenset(v) for k, v in grouped.items()})
        names |= set(objects)
    if len(names) <= 1:
        return [
            ok("sources", f"one source in this output: {', '.join(sorted(names)) or d.config.source.name}")
        ]
    same: dict[frozenset, list[str]] = defaultdict(list)
    for name in sorted(names):
        if objects.get(name):
            same[objects[name]].append(name)
    out = []
    for listed, group in same.items():
        if len(group) > 1:
            keep = d.config.source.name if d.config.source.name in group else group[0]
            others = [g for g in group if g != keep]
            out.append(
                fail(
                    "sources",
                    f"sources {', '.join(group)} list the same {len(listed)} objects: one instance exported "
                    "under several names, its data twice",
                    f"give every config of this instance source.name: {keep}; then remove the data and "
                    f"_state/ of {', '.join(others)}",
                )
            )
    return out or [ok("sources", f"{len(names)} sources, each listing its own objects")]


# -- all of them ------------------------------------------------------------------------------------------------


def _guarded(check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    """A check that cannot read what it needs says so as its finding, and the others still run."""
    try:
        return run()
    except EtlError as exc:
        return [fail(check, f"could not check: {exc}")]


def diagnose(
    config: Config,
    config_path: str,
    limits: Limits | None = None,
    *,
    server: bool = True,
    skip: tuple[str, ...] = (),
    now: int | None = None,
) -> Diagnosis:
    """Every check of a deployment but those skipped; `server`: probe the server too."""
    d = Deployment(config, config_path, limits or Limits(), now if now is not None else now_ms())
    d.checks = [c for c in CHECKS if c not in skip]
    findings: list[Finding] = []
    requests = 0
    if "checkpoints" in d.checks or "locks" in d.checks:
        try:
            d.stores  # noqa: B018 - loaded once, here, so a damaged state is one finding
        except EtlError as exc:
            findings.append(fail("checkpoints", f"cannot read the state: {exc}"))
            d.checks = [c for c in d.checks if c not in ("checkpoints", "locks")]
    if server and "server" in d.checks:
        found, requests = asyncio.run(_server(d))
        findings += found
    runs_by_check: dict[str, list[Callable[[Deployment], list[Finding]]]] = {
        "checkpoints": [checkpoints_ahead_of_now],
        "runs": [runs],
        "locks": [locks],
        "leftovers": [temp_files, spools],
        "files": [] if config.sink.lake else [partition_files],
        "lake": [lake_tables] if config.sink.lake and d.has_output else [],
        "sources": [sources],
    }
    for check in d.checks:
        for fn in runs_by_check.get(check, []):
            findings += _guarded(check, functools.partial(fn, d))
    return Diagnosis(findings, requests)
