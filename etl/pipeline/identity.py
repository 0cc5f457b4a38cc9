"""What an output holds is kept: a run whose config would write its rows a second time, or not see them,
stops (exit 2, one line saying what to do) before it writes anything.

The first run of a source records, beside its checkpoints, what it writes (`_state/{source}/layout.json`,
`etl.state.store.Recorded`): files per partition, format, partitioning, source name and platform. A later
run whose config differs stops:

- `sink.format`: the checkpoints would skip the window in the other format (nothing written, a table
  missing), or its rows be written again beside the first ones;
- `sink.dsn`, `sink.schema` (PostgreSQL): the checkpoints are of other tables; those of the new ones
  would miss what they cover;
- `sink.partition_by`: rows fetched again (the overlap, a backfill) would land in new folders beside the
  old ones;
- a state folder moved to another source name by hand: its rows carry the old name;
- an unfinished `etl state rename-source`.

An older record names no format: the reference tables' note (`dimensions.json`) says which format wrote
them. `sink.buckets` may change: files of another count are moved out as they are rewritten.

A source new to the output (no checkpoints yet) is also checked against the others. The default source
name is base_url's host, so `127.0.0.1` becoming `localhost` in a config (the same server) makes a new
source, and so does adding `source.name` to a config whose output was written under the host: the next run
would fetch everything again and every query without a source filter would count it twice. The checkpoints
of each other source in the state folder are read, and if they cover half or more of the parameters this
run selected, and that source is this platform, the run stops naming both names. This platform: any source
when the name was not given on purpose; with `source.name` given, one whose record names the same base URL
(an older record, none: one named after this config's host). Checkpoints exist for every sink format
(files and lake tables alike), and name parameter ids, which the same platform keeps under any host name.

A source new to its state folder whose rows the output already holds (its reference tables are there) is
warned of: `state.path` moved, and the window is fetched again (rows are replaced, never added).
"""

from __future__ import annotations

import logging

import numpy as np

from etl.config import Config
from etl.errors import ConfigError, StorageError
from etl.model import Shard
from etl.pipeline.dimensions import table_file
from etl.sinks.output import Output
from etl.state import Coverage, StateStore
from etl.state.store import LAYOUT, SNAPSHOT
from etl.storage.atomic import Storage

log = logging.getLogger(__name__)
RENAME = "etl state rename-source -c CONFIG --from {old}"


def _param_ids(folder: str, config: Config) -> np.ndarray:
    """Every parameter id a source's checkpoints cover (in `folder`), its shards' included."""
    options, lease = config.sink.storage_options, config.state.lease / 1000
    shards = [name for name in Storage(folder, options).listdir("") if Shard.from_folder(name)]
    ids = [
        StateStore(Storage(f"{folder}/{shard}" if shard else folder, options), lease).load().key // 4
        for shard in ["", *shards]
    ]
    return np.unique(np.concatenate(ids))


def check_layout(config: Config) -> None:
    """Stop a run (or `etl compact`) whose config would write this source's output otherwise than recorded.
    `etl.run` asks before the run opens its output, and again under the run lock (`check_source_identity`)."""
    source, sink = config.source, config.sink
    output = Output(config)
    for store in output.state_stores():
        renaming = store.renaming()
        if renaming is not None:
            raise ConfigError(
                f"config error: source.name: renaming source {renaming['from']!r} to {renaming['to']!r} did not "
                f"finish: run {RENAME.format(old=renaming['from'])} again, with source.name: {renaming['to']}"
            )
        recorded, where = store.layout(), store.storage.display(LAYOUT)
        if recorded.source is not None and recorded.source != source.name:
            raise ConfigError(
                f"config error: source.name: the checkpoints in {store.storage.display()} are source "
                f"{recorded.source!r}'s ({where}): its rows carry that name; set source.name: {recorded.source} "
                f"(to rename it, move that folder back and run {RENAME.format(old=recorded.source)})"
            )
        written = recorded.format or store.snapshot().get("sink")
        if isinstance(written, str) and written != sink.format:
            said = where if recorded.format else store.storage.display(SNAPSHOT)
            raise ConfigError(
                f"config error: sink.format: {sink.path} holds source {source.name!r} as {written} ({said}); "
                f"as {sink.format} a run would skip what the checkpoints cover, or write it a second time: set "
                f"sink.format: {written}, or give {sink.format} a new sink.path"
            )
        database = output.database
        if recorded.tables is not None and database is not None and recorded.tables != database.target:
            raise ConfigError(
                f"config error: sink.dsn: the checkpoints in {store.storage.display()} are of the tables in "
                f"{recorded.tables} ({where}); those in {database.target} would miss what they cover: set "
                "sink.dsn and sink.schema back, or give these tables a new sink.path"
            )
        if recorded.partition_by is not None and list(recorded.partition_by) != sink.partition_by:
            old = "[" + ", ".join(recorded.partition_by) + "]"
            raise ConfigError(
                f"config error: sink.partition_by: {sink.path} holds source {source.name!r} partitioned by "
                f"{old} ({where}); partitioned by [{', '.join(sink.partition_by)}], rows fetched again would be "
                f"written beside the old ones, twice: set sink.partition_by: {old}, or use a new sink.path"
            )


def check_source_identity(config: Config, coverage: Coverage, param_ids: np.ndarray) -> None:
    """Stop a run that would write what the output holds a second time, or not see it (see the module)."""
    check_layout(config)
    source = config.source
    if len(coverage) or not len(param_ids):
        return
    options = config.sink.storage_options
    if any(name not in ("lock", SNAPSHOT) for name in Storage(config.state_path, options).listdir("")):
        return  # checkpoints of this source after all (another shard's)
    _state_elsewhere(config)
    root = config.state_root
    for other in Storage(root, options).listdir(""):
        if other == source.name:
            continue
        same = _same_platform(config, f"{root}/{other}", other)
        if source.name_given and not same:
            continue
        shared = int(np.isin(param_ids, _param_ids(f"{root}/{other}", config)).sum())
        if shared and shared * 2 >= len(param_ids):
            raise ConfigError(_another_name(config, other, shared, len(param_ids), same))


def _same_platform(config: Config, folder: str, name: str) -> bool:
    """Whether another source of the output is this config's platform: its record names the same base URL
    (an older record, none: it is named after this config's host)."""
    try:
        recorded = StateStore(Storage(folder, config.sink.storage_options)).layout()
    except StorageError:  # another source's damaged record: its own runs name it
        return False
    if recorded.platform is not None:
        return recorded.platform == config.source.platform
    return name == config.source.default_name


def _another_name(config: Config, other: str, shared: int, selected: int, same: bool) -> str:
    source = config.source
    held = (
        f"the output already holds source {other!r} with checkpoints of {shared} of the {selected} parameters "
        "this run selects"
    )
    if not same:  # the name was not given: most likely another host name of the same server
        return (
            f"config error: source.name: {held}; as source {source.name!r} (the host of source.base_url) it "
            f"would export them all again, and queries would count them twice. The same platform: set "
            f"source.name: {other}. Another one: set source.name (e.g. {source.name}) to add it on purpose"
        )
    rename = (
        f"renaming a lake table's source is not supported: set source.name: {other}, or give {source.name!r} "
        "a new sink.path"
        if config.sink.lake
        else f"to rename it (its rows moved once): {RENAME.format(old=other)}; to keep it: set source.name: {other}"
    )
    return (
        f"config error: source.name: {held}, from this platform ({source.platform}); as source "
        f"{source.name!r} it would export them all again, and queries would count them twice: {rename}"
    )


def _state_elsewhere(config: Config) -> None:
    """Warn of a source whose rows the output holds (its reference tables) with no checkpoints here."""
    if config.sink.lake or not config.dimensions.enabled:
        return  # a lake table's commits carry its checkpoints: they are recovered from it
    output = Output(config)
    folder, _, name = table_file("objects", config.source.name, output.fmt).rpartition("/")
    if name in output.data.listdir(folder):
        log.warning(
            "%s holds no checkpoints of source %r, but %s holds its rows: the whole window is fetched again "
            "(rows are replaced, not added); if state.path moved, set it back to where they are",
            config.state_path,
            config.source.name,
            config.sink.path,
        )
