"""The default Iceberg catalog (etl/sinks/lake/sqlite_catalog.py) as pyiceberg's own `SqlCatalog` opens it,
at the pinned pyiceberg (this environment's) and at the newest on the package index (installed with
`pip install --target` into a folder of its own, shadowing this one in a child process): each lists the
tables etl made, reads one and appends a row of its own source to it; then etl runs on top, exact, and
leaves the other writers' rows as they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from etl.timeutil import to_ms
from tests.support.configs import make_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SERIES, SOURCE, expected_table
from tests.support.output import read_lake
from tests.support.pipeline import run

MIDDLE = "2026-11-01T12:00:00Z"

# Run by pyiceberg's SqlCatalog (through SQLAlchemy): argv = warehouse folder, the source name to append.
SCRIPT = """
import json, sys
import pyarrow as pa
import pyiceberg
from pyiceberg.catalog.sql import SqlCatalog

root, source = sys.argv[1], sys.argv[2]
catalog = SqlCatalog("etl", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
tables = sorted(".".join(t) for t in catalog.list_tables("etl"))
raw = catalog.load_table("etl.raw")
rows = raw.scan().to_arrow()
field = rows.schema.get_field_index("source")
raw.append(rows.slice(0, 1).set_column(field, "source", pa.array([source], rows.schema.field(field).type)))
print(json.dumps({
    "version": pyiceberg.__version__,
    "module": pyiceberg.__file__,
    "tables": tables,
    "rows": rows.num_rows,
    "after": catalog.load_table("etl.raw").scan().to_arrow().num_rows,
}))
"""


def newest_pyiceberg(folder: Path) -> Path:
    """The newest pyiceberg release installed into `folder` (its dependencies are this environment's);
    the test is skipped when the package index cannot be reached."""
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--retries",
        "1",
    ]
    done = subprocess.run(
        [*install, "--no-deps", "--target", str(folder), "pyiceberg"], capture_output=True, text=True
    )
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        pytest.skip(f"the newest pyiceberg could not be installed from the package index: {reason}")
    return folder


def pyiceberg_writes(root: Path, source: str, path: Path | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(path)} if path is not None else None
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), source], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_pyiceberg_at_the_pinned_and_the_newest_release_shares_the_catalog_with_etl(emulator, tmp_path):
    import pyiceberg

    out = tmp_path / "out"
    run(make_config(emulator.base_url, out, sink={"format": "iceberg"}, window={"end": MIDDLE}))
    made = sorted(f"etl.{name}" for name in (*SERIES, "quality"))
    before = read_lake(out, "raw", "iceberg").num_rows

    pinned = pyiceberg_writes(out, "pinned", None)
    assert pinned["version"] == pyiceberg.__version__
    newest = pyiceberg_writes(out, "newest", newest_pyiceberg(tmp_path / "newest"))
    assert newest["module"].startswith(str(tmp_path / "newest"))  # not this environment's
    for seen, rows in ((pinned, before), (newest, before + 1)):
        assert set(made) <= set(seen["tables"]), seen
        assert (seen["rows"], seen["after"]) == (rows, rows + 1), seen

    run(make_config(emulator.base_url, out, sink={"format": "iceberg"}))  # on top, to END
    settings = emulator_config()
    for name in SERIES:
        rows = read_lake(out, name, "iceberg")
        ours = rows.filter(pc.equal(rows["source"], SOURCE)).drop_columns(["date"])
        ours = ours.sort_by([("param_id", "ascending"), ("ts", "ascending")])
        want = expected_table(settings, name, to_ms(START), to_ms(END))
        assert ours.select(want.column_names).equals(want), name
    others = read_lake(out, "raw", "iceberg")["source"].to_pylist()
    assert sorted(s for s in others if s != SOURCE) == ["newest", "pinned"]
