"""`etl state rename-source`: an output's source renamed to the config's `source.name`, its rows moved once.

A run whose `source.name` differs from the name the output holds its platform under stops
(etl/pipeline/identity.py) and names this command. It holds every state lock of both names, then:

1. notes the rename in both state folders (`renaming.json`): until it is done, a run of either name stops
   and says to run the command again;
2. writes every file of the old source again under the new name (etl/sinks/rename.py): series, quality,
   reference tables;
3. copies the old name's checkpoints (its shards' too) to the new name's folder, recording the new name,
   and notes that the copy is whole;
4. removes the old name's checkpoints, then both notes.

Killed anywhere, it is run again and finishes: step 2 moves what is left (a file written again before its
old one was removed is written once more), step 3 copies again unless the copy was noted whole, step 4
removes what is left. Parquet/CSV datasets only: a lake table's commits carry its source's checkpoints
(its application id), which a rename would have to rewrite; the command says so, and what to do instead.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field, replace

import orjson

from etl.config import Config, source_name
from etl.errors import ConfigError
from etl.model import Series
from etl.sinks.output import Output
from etl.sinks.rename import rename_dimensions, rename_layout
from etl.state import StateStore
from etl.state.lock import LOCK_FILE
from etl.state.store import LAYOUT, RENAMING
from etl.storage.atomic import Storage


@dataclass
class Renamed:
    old: str
    new: str
    files: dict[str, int] = field(default_factory=dict)  # per dataset (and "dimensions"): files written again
    state_files: int = 0  # checkpoint files moved


def rename_source(config: Config, old: str) -> Renamed:
    """Rename the output's source `old` to the config's `source.name` (see the module)."""
    new = config.source.name
    try:
        source_name(old)
    except ValueError as exc:
        raise ConfigError(f"--from: {exc}") from None
    if old == new:
        raise ConfigError(
            f"--from: the config's source.name is {new!r} already; give the name to rename from"
        )
    if config.sink.lake:
        raise ConfigError(
            f"etl state rename-source: renaming a lake table's source is not supported (sink.format "
            f"{config.sink.format}): set source.name: {old}, or give {new!r} a new sink.path"
        )
    before = config.model_copy(update={"source": config.source.model_copy(update={"name": old})})
    source, target = Output(before), Output(config)
    done = Renamed(old, new)
    if not [n for n in source.state_store().storage.listdir("") if n != LOCK_FILE]:  # before taking its lock
        raise ConfigError(
            f"--from: the output holds no source {old!r} (no checkpoints in {before.state_path})"
        )
    with ExitStack() as locks:
        stores = source.state_stores()
        for store in [*stores, target.state_store()]:  # no run of either name meanwhile
            locks.enter_context(store.lock())
        here, there = stores[0].storage, target.state_store().storage
        note = _begin(here, there, old, new)
        data, fmt = source.data, source.fmt
        for layout in [*(source.layout(s) for s in Series), source.quality_layout()]:
            done.files[layout.name] = rename_layout(data, fmt, layout, new)
        done.files["dimensions"] = rename_dimensions(data, fmt, old, new)
        if not note.get("copied"):
            done.state_files = _copy_state(here, there, config)
            there.write_atomic(RENAMING, orjson.dumps({**note, "copied": True}))
        for rel in here.find(""):
            if rel.rsplit("/", 1)[-1] not in (LOCK_FILE, RENAMING):
                here.remove(rel)
        here.remove(RENAMING)
        there.remove(RENAMING)
    here.remove_tree()  # its lock files, once released: a run of the old name now finds the new one's
    return done


def _begin(here: Storage, there: Storage, old: str, new: str) -> dict[str, object]:
    """The rename noted in both folders (or the note of the same rename, killed before it finished)."""
    note: dict[str, object] = {"from": old, "to": new}
    for storage in (there, here):
        found = StateStore(storage).renaming()
        if found is not None and {k: found[k] for k in ("from", "to")} != note:
            raise ConfigError(
                f"--from: {storage.display()} notes another rename, of {found['from']!r} to {found['to']!r}: "
                f"finish that one first (etl state rename-source with source.name: {found['to']} --from "
                f"{found['from']})"
            )
    resumed = StateStore(there).renaming()
    if resumed is not None:
        return resumed
    if [n for n in there.listdir("") if n != LOCK_FILE]:
        raise ConfigError(
            f"--from: source {new!r} has checkpoints already ({there.display()}): renaming {old!r} to it would "
            f"mix two sources' rows; give the config another source.name"
        )
    for storage in (here, there):
        storage.write_atomic(RENAMING, orjson.dumps(note))
    return note


def _copy_state(here: Storage, there: Storage, config: Config) -> int:
    """Every checkpoint file of the old name (its shards' too) copied to the new name's folder; each
    layout record names the new source. The files copied."""
    copied = 0
    for rel in here.find(""):
        folder, _, name = rel.rpartition("/")
        if name in (LOCK_FILE, RENAMING):
            continue
        data = here.read(rel)
        if data is None:
            continue
        there.write_atomic(rel, data)
        copied += 1
        if name == LAYOUT:
            store = StateStore(
                Storage(f"{there.url}/{folder}" if folder else there.url, config.sink.storage_options)
            )
            store.note_layout(replace(store.layout(), source=config.source.name))
    return copied
