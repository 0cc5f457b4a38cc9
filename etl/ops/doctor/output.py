"""The output: leftovers of killed runs, crowded partitions, lake tables, one instance under two names."""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from etl.errors import EtlError, StorageError
from etl.model import Series
from etl.ops.doctor.deployment import SPOOLS, Deployment, human
from etl.ops.findings import Finding, fail, ok, warn
from etl.state.lock import AdvisoryLock
from etl.storage import spools as spool_folders
from etl.storage import tempfiles
from etl.storage.atomic import Storage
from etl.support.optional import require
from etl.timeutil import HOUR_MS


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
    this machine: a run's own folder, told dead by its lock whatever its age, and older versions' loose
    spools, told by their age."""
    folder = d.limits.spool_dir or tempfile.gettempdir()
    cutoff = d.now / 1000 - d.limits.spool_age_ms / 1000
    old = [
        path
        for pattern in SPOOLS
        for path in glob.glob(os.path.join(folder, pattern))
        if _mtime(path) < cutoff
    ]
    dead = spool_folders.dead(folder)  # a killed run's spool folder (the next run removes it)
    if not old and not dead:
        return [ok("leftovers.spool", f"no spool of a killed run in {folder}")]
    size = sum(_size(p) for p in old + dead)
    found = [f"{len(dead)} spool folder(s) of killed runs"] if dead else []
    found += [f"{len(old)} spool(s) older than {human(d.limits.spool_age_ms)}"] if old else []
    return [
        warn(
            "leftovers.spool",
            f"{' and '.join(found)} in {folder} ({size / 1e6:.1f} MB)",
            "the next etl run removes them; or: rm -r "
            + " ".join([*dead, *(os.path.join(folder, p) for p in SPOOLS if old)]),
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


def partition_files(d: Deployment) -> list[Finding]:
    """Parquet/CSV partitions holding more of this source's files than sink.buckets: written by shards or an
    older layout, which `etl compact` merges."""
    buckets = d.build.buckets
    crowded: dict[str, int] = {}
    for layout in [d.build.layout(s) for s in Series] + [d.build.quality_layout()]:
        per_folder: Counter[str] = Counter()
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
    limit = 4 * d.build.buckets if limit is None else limit
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
                f"etl vacuum {d.cmd} --retain {human(d.limits.retain_ms).replace(' ', '')}",
            )
        )
    old = [s for s in stats if s.old]
    if old:
        out.append(
            warn(
                "lake.versions",
                f"{len(old)} table(s) keep {sum(s.old for s in old)} old version(s) or file(s) past the retention "
                f"of {human(d.limits.retain_ms)} (e.g. {old[0].name})",
                f"etl vacuum {d.cmd} --retain {human(d.limits.retain_ms).replace(' ', '')}",
            )
        )
    if not out:
        out.append(
            ok(
                "lake",
                f"{len(stats)} table(s): at most {max(s.files_max for s in stats)} files per partition, "
                f"nothing past the retention of {human(d.limits.retain_ms)}",
            )
        )
    return out


def postgres_tables(d: Deployment) -> list[Finding]:
    """PostgreSQL tables: reachable, made, and who holds each store's advisory lock now."""
    database, lake = d.build.database, d.build.lake
    assert database is not None and lake is not None
    made = [t.name for t in [*(lake.series(s) for s in Series), lake.quality()] if t.exists()]
    where = f"schema {database.schema} of {database.display}"
    out = [
        ok(
            "postgres",
            f"{len(made)} table(s) in {where}: {', '.join(made)}" if made else f"no table yet in {where}",
        )
    ]
    for store, _ in d.stores:
        lock = store.run_lock
        if isinstance(lock, AdvisoryLock) and (who := lock.holder()):
            out.append(ok("postgres.lock", f"a run holds the advisory lock of {lock.app}: {who}"))
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
        deltalake = require("deltalake", "sink.format delta")
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
    state_root = Storage(d.config.state_root, d.config.sink.storage_options)
    names = set(state_root.listdir(""))
    objects: dict[str, frozenset[tuple[object, object]]] = defaultdict(frozenset)
    if "objects" in d.views():
        columns = {name for (name,) in d.query("select column_name from (describe objects)")}
        label = "shortname" if "shortname" in columns else "null"
        rows = d.query(f"select source, id, {label} from objects")
        grouped: dict[str, set[tuple[object, object]]] = defaultdict(set)
        for source, object_id, shortname in rows:
            grouped[str(source)].add((object_id, shortname))
        objects.update({k: frozenset(v) for k, v in grouped.items()})
        names |= set(objects)
    if len(names) <= 1:
        return [
            ok("sources", f"one source in this output: {', '.join(sorted(names)) or d.config.source.name}")
        ]
    same: dict[frozenset[tuple[object, object]], list[str]] = defaultdict(list)
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
