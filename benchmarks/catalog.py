"""The fleet's catalog of a wide fleet: peak RSS and time of writing it, and of reading and writing it again.

    python benchmarks/catalog.py [--params 40000 4000] [--json PATH]

For each width, two processes of their own (each started from this small one, so that its peak is its own;
tests/support/peak.py says why), with the allocator settings of the `etl` command, each through the code a
run uses (etl/pipeline/discover.py's selection, etl/state/catalog.py's file):

- write: the emulator's records of `params` parameters (4 per object) taken a search page (1,000) at a time,
  as a first run lists them, and the catalog written from them;
- read and write: that catalog read a row group at a time into a new selection (a run that lists no object),
  the plan's columns made, the catalog written anew.

Printed per phase: peak RSS, RSS once etl is imported (the floor), their difference, and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PER_OBJECT = 4
PAGE = 1000


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def phase(name: str, folder: str, params: int) -> dict[str, float | int | str]:
    """One phase in this process: what it measured."""
    import numpy as np

    from etl.client.models import Parameter
    from etl.config import ParameterSelect
    from etl.pipeline.discover import _Selection
    from etl.state.catalog import Catalog, Listings
    from etl.storage.atomic import Storage
    from etl.support import allocator
    from etl_emulator.dataset import Dataset
    from etl_emulator.records import param_record

    allocator.release_freed_memory()  # what the etl command does in its own process
    catalog = Catalog(Storage(folder), "bench")
    objects = np.arange(1, params // PER_OBJECT + 1, dtype=np.int64)
    listings = Listings(objects, np.zeros(len(objects), np.int64), np.ones(len(objects), np.int64))
    floor = _rss_mib()
    started = time.perf_counter()
    selection = _Selection(ParameterSelect())
    if name == "write":
        ds = Dataset(objects=len(objects), params_per_object=PER_OBJECT - 1, calc_per_object=1)
        ids = [p for o in objects.tolist() for p in ds.physical_ids(o) + ds.calc_ids(o)]
        for first in range(0, len(ids), PAGE):
            page = [param_record(ds, pid) for pid in ids[first : first + PAGE]]
            selection.take(
                [Parameter(r["id"], Parameter.listed_as(_kind(r)), r["objectId"], r) for r in page]
            )
    else:
        with catalog.read("selection") as kept:
            assert kept is not None and kept.rows == params, "the write phase's catalog"
            for batch in kept.batches():
                selection.keep(batch, objects)
    plan = selection.params()
    catalog.write("selection", 1, listings, selection.catalog_pages())
    selection.rows.close()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert len(plan) == params
    return {
        "phase": name,
        "params": params,
        "peak_rss_mib": round(peak, 1),
        "floor_rss_mib": round(floor, 1),
        "above_floor_mib": round(peak - floor, 1),
        "seconds": round(seconds, 2),
        "file_mib": round((Path(folder) / catalog.rel).stat().st_size / 2**20, 2),
    }


def _kind(record: dict) -> object:
    from etl.model import ParamKind

    return ParamKind.CALCULATED if record["type"] == "calculated" else ParamKind.PHYSICAL


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", type=int, nargs="+", default=[40_000, 4_000])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.folder, args.params[0])))
        return
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")  # the phases' Arrow, as etl run sets it
    results = []
    for params in args.params:
        with tempfile.TemporaryDirectory() as folder:
            for name in ("write", "read-write"):
                command = [
                    sys.executable,
                    __file__,
                    "--phase",
                    name,
                    "--folder",
                    folder,
                    "--params",
                    str(params),
                ]
                done = subprocess.run(command, check=True, capture_output=True, text=True)
                result = json.loads(done.stdout.splitlines()[-1])
                results.append(result)
                print(
                    f"{params:>7} parameters  {name:<10}  peak RSS {result['peak_rss_mib']:>6} MiB  "
                    f"({result['above_floor_mib']:>5} above the {result['floor_rss_mib']} MiB once imported)  "
                    f"{result['seconds']:>6} s  file {result['file_mib']} MiB"
                )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
