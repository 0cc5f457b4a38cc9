"""The work floor: what decoding a recording's answers into Arrow and writing them as Parquet costs in one
tight loop, with no orchestration (no HTTP, no event loop, no threads, no checkpoints).

    python benchmarks/servers/floor.py --recording DIR --out DIR

Each measurement answer is read by Arrow's streaming JSON reader (as etl's fast path does), its points
past the window's end dropped (the server's bounds are inclusive), the columns etl writes added (source,
object_id, param_id, kind), and the rows of one series, UTC day and file bucket written as one zstd
Parquet file with dictionaries on the id and kind columns (etl's defaults): the files etl writes, so an
average or candle answer that spans days is split among them. Prints one JSON line: the loop's CPU
seconds (process time, imports excluded), the points and files written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# As in an `etl` process (etl/cli/__init__.py): else OpenBLAS's idle threads spin through the loop's
# first 0.1 s and count in its CPU.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.json as pajson  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from servers.record import Recording, Request  # noqa: E402

DAY_MS = 86_400_000
BUCKETS = 4
TS = pa.timestamp("ms", tz="UTC")
POINTS = pa.schema([("points", pa.list_(pa.struct([("timestmp", TS), ("value", pa.float64())])))])
CANDLE_FIELDS = [("timestmp", pa.int64()), *((k, pa.float64()) for k in ("open", "high", "low", "close"))]
CANDLES = pa.schema([("candles", pa.list_(pa.struct(CANDLE_FIELDS)))])


def _kind(request: Request) -> str:
    return (
        "calculated"
        if "/calcvalue/" in request.path
        else "signal"
        if "/signal/" in request.path
        else "physical"
    )


def objects_of(recording: Recording) -> dict[int, int]:
    """param id -> object id, from the recorded parameter listings that name both."""
    found: dict[int, int] = {}
    for r in recording.requests:
        if r.series is None and "param" in r.path:
            try:
                doc = json.loads(recording.body(r))
            except ValueError:
                continue
            for item in doc if isinstance(doc, list) else []:
                if isinstance(item, dict) and "id" in item and item.get("objectId") is not None:
                    found[int(item["id"])] = int(item["objectId"])
    return found


def decode(body: bytes, series: str) -> pa.Table:
    schema = CANDLES if series == "candles" else POINTS
    options = pajson.ReadOptions(use_threads=False, block_size=max(len(body) + 1, 1 << 16))
    parse = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pajson.open_json(pa.BufferReader(body), read_options=options, parse_options=parse).read_all()
    records = table.column(0).combine_chunks().flatten()
    columns = dict(zip([f.name for f in records.type], records.flatten(), strict=True))
    columns["ts"] = columns.pop("timestmp").cast(TS) if series == "candles" else columns.pop("timestmp")
    return pa.table(columns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    recording = Recording.load(args.recording)
    objects = objects_of(recording)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.process_time()
    groups: dict[tuple[str, int | None, int], list[pa.Table]] = defaultdict(list)
    points = 0
    for r in recording.requests:
        # The planned windows start at UTC midnight; a request from elsewhere continued or checked an
        # answer that may have been cut (etl/pipeline/fetch.py), and its points came already.
        if r.series is None or r.window[0] % DAY_MS:
            continue
        table = decode(recording.body(r), r.series)
        start, end = r.window
        table = table.filter(pc.less(table.column("ts"), pa.scalar(end, TS)))
        n = table.num_rows
        table = table.add_column(0, "source", pa.array(["bench"] * n, pa.string()))
        table = table.add_column(1, "object_id", pa.array([objects.get(r.param_id, 0)] * n, pa.int64()))
        table = table.add_column(2, "param_id", pa.array([r.param_id] * n, pa.int64()))
        table = table.add_column(3, "kind", pa.array([_kind(r)] * n, pa.string()))
        # A raw answer is one day's; the longer answers are split by day once all are read.
        day = start // DAY_MS if end - start <= DAY_MS else None
        groups[(r.series, day, r.param_id % BUCKETS)].append(table)
        points += n
    files = 0
    for (series, day, bucket), tables in groups.items():
        table = pa.concat_tables(tables)
        if day is not None:
            parts = [(day, table)]
        else:
            days = pc.divide(table.column("ts").cast(pa.int64()), DAY_MS)
            parts = [(d, table.filter(pc.equal(days, d))) for d in pc.unique(days).to_pylist()]
        for d, part in parts:
            folder = args.out / series / f"day={d}"
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(
                part,
                folder / f"b{bucket}.parquet",
                compression="zstd",
                use_dictionary=["source", "object_id", "param_id", "kind"],
            )
            files += 1
    seconds = time.process_time() - started
    json.dump({"cpu_seconds": seconds, "points": points, "files": files}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
