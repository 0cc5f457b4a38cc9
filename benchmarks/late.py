"""What late data costs: the same hourly schedule against a punctual platform and a late one.

    python benchmarks/late.py [--hours 48] [--formats parquet delta iceberg] [--json PATH]

The schedule of tests/support/schedule.py: a first run over a day, then hourly runs with `end: now`,
the emulator's clock moved an hour before each, default late-data settings. The late platform plays
tests/support/schedule.py's `mixed_lateness` (a parameter 3 hours late, a calculated one 2 hours late
and revised after 4, another revised after 3, a controller offline for 14 hours whose backlog comes at
once); the punctual one the same fleet with none of it. Printed per format: requests and bytes the
server sent on each, their ratio, whether the late output is exact (row for row, every series), and
what the runs said of the late points.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from etl_emulator.lateness import Lateness  # noqa: E402
from etl_emulator.server import run_emulator  # noqa: E402
from tests.support.schedule import assert_exact, config_for, late_emulator, mixed_lateness, run_schedule  # noqa: E402


def measure(fmt: str, hours: int) -> dict[str, object]:
    figures: dict[str, object] = {"format": fmt, "hours": hours}
    for name, lateness in (("punctual", Lateness()), ("late", mixed_lateness())):
        emulator_config = late_emulator(lateness)
        with tempfile.TemporaryDirectory() as out, run_emulator(emulator_config) as emulator:
            schedule = run_schedule(emulator, config_for(emulator, Path(out), fmt), hours)
            failed = [s.error for s in schedule.summaries if s.status != "ok"]
            exact = not failed
            if exact:
                try:
                    final = replace(emulator_config, now_ms=schedule.last_end + 60_000)
                    assert_exact(Path(out), final, schedule.last_end, fmt)
                except AssertionError:
                    exact = False
        late = [s.late for s in schedule.summaries]
        figures[name] = {
            "requests": schedule.requests,
            "bytes": schedule.bytes,
            "exact": exact,
            "failed_runs": failed,
            "late_points": sum(f.points for f in late),
            "longest_late_seconds": max(f.longest_ms for f in late) / 1000,
            "revised_blocks": sum(f.revised for f in late),
            "probes": sum(f.probes for f in late),
        }
    punctual, late_run = figures["punctual"], figures["late"]
    assert isinstance(punctual, dict) and isinstance(late_run, dict)
    figures["requests_ratio"] = round(late_run["requests"] / punctual["requests"], 3)
    figures["bytes_ratio"] = round(late_run["bytes"] / punctual["bytes"], 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=int, default=48)
    parser.add_argument("--formats", nargs="+", default=["parquet", "delta", "iceberg"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = [measure(fmt, args.hours) for fmt in args.formats]
    print(f"a day, then {args.hours} hourly runs; requests and bytes the server sent (late / punctual)")
    print(
        f"{'format':<9} {'requests':>17} {'ratio':>6} {'MB':>13} {'ratio':>6} {'exact':>6} {'late pts':>9} "
        f"{'longest':>8} {'revised':>8} {'probes':>7}"
    )
    for r in rows:
        p, lt = r["punctual"], r["late"]
        assert isinstance(p, dict) and isinstance(lt, dict)
        print(
            f"{r['format']:<9} {lt['requests']:>8}/{p['requests']:<8} {r['requests_ratio']:>6} "
            f"{lt['bytes'] / 1e6:>6.2f}/{p['bytes'] / 1e6:<6.2f} {r['bytes_ratio']:>6} "
            f"{'yes' if lt['exact'] and p['exact'] else 'NO':>6} {lt['late_points']:>9} "
            f"{lt['longest_late_seconds'] / 3600:>7.1f}h {lt['revised_blocks']:>8} {lt['probes']:>7}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
