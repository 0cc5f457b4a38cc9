"""docs/output.md, the output reference, generated from what the code writes: the columns and types of the
series and the quality dataset (etl/model.py's schemas), the parameter kinds, the partition folders
(sink.partition_by) and the source's default name (etl/config.py). The meanings are written here, one per
column; `make docs-output` writes the page, and a test fails when it is out of date or a column has no
meaning.

    python -m tools.output_reference           # write docs/output.md
    python -m tools.output_reference --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

import pyarrow as pa

from etl.config import SinkConfig, SourceConfig
from etl.model import QUALITY, QUALITY_SCHEMA, QUALITY_TIME_KEY, SCHEMAS, ParamKind, Series
from tools import generated_page

PAGE = Path(__file__).resolve().parent.parent / "docs" / "output.md"
EXAMPLE_URL = "https://monitor.example.com:8443/sem-restservices"

# What a column holds: one meaning for every dataset it is in, or one per series.
SERIES_COLUMNS: dict[str, str | dict[Series, str]] = {
    "source": "the platform instance the row comes from: `source.name`, by default the host of "
    "`source.base_url` (below)",
    "object_id": "the object (site) the parameter belongs to: `objects.id`",
    "param_id": "the parameter: `parameters.id`",
    "kind": "the parameter's kind (below); not the series, which is the folder",
    "ts": {
        Series.RAW: "the point's stamp, as the platform sent it, to the millisecond",
        Series.AVERAGE: "the start of the 30-minute UTC bucket the value covers: `[ts, ts + 30 min)`",
        Series.CANDLES: "the start of the 30-minute UTC bucket the candle covers: `[ts, ts + 30 min)`",
    },
    "value": {
        Series.RAW: "the value measured or calculated (a signal's: 0 or 1)",
        Series.AVERAGE: "the mean of the parameter's raw values in the bucket",
    },
    "open": "the bucket's first raw value",
    "high": "the bucket's highest raw value",
    "low": "the bucket's lowest raw value",
    "close": "the bucket's last raw value",
}
QUALITY_COLUMNS = {
    "source": "as in the series",
    "object_id": "as in the series",
    "param_id": "as in the series",
    "kind": "as in the series",
    QUALITY_TIME_KEY: "the UTC day the row describes: its midnight",
    "points": "raw points in the day",
    "expected_points": "`span_seconds / period_seconds`, rounded; empty when no period could be inferred "
    "(fewer than 2 points)",
    "completeness": "`points / expected_points`, at most 1; 0 for a day without a point; empty when "
    "`expected_points` is",
    "longest_gap_seconds": "the longest time without a point, the span's edges included",
    "flatline_seconds": "the longest stretch of one unchanged value, from its first to its last point",
    "first_ts": "the day's first point",
    "last_ts": "the day's last point",
    "period_seconds": "the sampling period, inferred from the day's own points",
    "span_seconds": "the part of the day described: 86400, less before a window's start or after a run's end",
    "late_points": "points of the day that reached the platform after a run had read past their stamps",
    "late_seconds": "the longest of them took at least this long to arrive; empty when none was late",
}
KINDS = {
    ParamKind.PHYSICAL: "a measured parameter (routes `/db/measure/...`)",
    ParamKind.CALCULATED: "a parameter the platform calculates (`/db/calcvalue/...`); its values may be revised",
    ParamKind.SIGNAL: "a physical parameter whose values are 0 or 1 (`/db/signal/...`)",
}
FOLDERS = {
    "source": "`source=S/`: the source's rows apart, above the day",
    "date": "`date=YYYY-MM-DD/`: the UTC day of `ts` (the quality dataset: of `day`); always there",
    "object_id": "`object_id=N/`: one object's parameters apart, below the day",
}
# table -> (where the platform lists it, what etl adds or relies on)
DIMENSIONS = {  # in the order of etl query's views
    "objects": (
        "`GET /db/object`, the full model (the interface document's 2.3: `id`, `shortname`, `fullname`, "
        "`timezone`, `latitude`, `longitude`, `sdirobjectstate`, `paramtags`, `attrs`...)",
        "`id` is the series' `object_id`; the `*_named` views take `object_name` from `shortname`",
    ),
    "units": (
        "`GET /db/object/{id}/unit` of each object",
        "`object_id`, the object asked for; `deviceconnect.device.id` is the device the commands belong to",
    ),
    "parameters": (
        "the parameter listings of the selected objects (physical and calculated; the paged search where it "
        "agrees with the lists)",
        "`id` is the series' `param_id`; the `*_named` views take `param_name` from `name` and `unit` from "
        "`unit` (empty where the platform sends none)",
    ),
    "zones": ("`POST /db/zone`", ""),
    "classifiers": ("`POST /deviceclassifier`", ""),
    "room_types": ("`POST /sensor_location`", ""),
    "rooms": ("`POST /room`", ""),
    "commands": (
        "`GET /extcommand?deviceId=` of each device of the units (the document's 2.6: `id`, `name`, "
        "`description`, `cmd`, `data`, `fport`, `device`)",
        "",
    ),
}

HEADER = f"""# Output reference

<!-- Generated by `make docs-output` (tools/output_reference.py) from etl/model.py's schemas; do not edit by hand. -->

What a run writes under `sink.path`, column by column. Parquet files keep the types below; Delta and
Iceberg tables too, with timestamps in microseconds and `date` a column of the table; CSV files hold text:
timestamps as ISO 8601 UTC (`2026-11-01T00:00:00.000Z`), lists and records as JSON. Read them with
`etl query` or `etl.read` ([analysts.md](analysts.md), [python.md](python.md)), which know every format,
or with anything that reads Parquet. A span of time is always half-open, `[start, end)`, in UTC.

| folder | holds |
|---|---|
| `raw/`, `average/`, `candles/` | the series, a dataset (or a lake table) each |
| `{QUALITY}/` | a row per parameter and UTC day of raw data ([quality.md](quality.md)) |
| `dimensions/{{table}}/{{source}}.parquet` | the platform's reference records, a file per source (`.csv`; in a lake, a table), replaced whole |
| `_state/{{source}}/` | checkpoints and the run lock: read them with `etl state show`, not by hand |
| `_runs/{{run id}}.json` | a record per run, the summary `etl run --json` prints ([python.md](python.md)); none for a run refused before it asked the server, or before its output existed |
"""


def _type(kind: pa.DataType) -> str:
    if pa.types.is_timestamp(kind):
        return f"timestamp ({kind.unit}, {kind.tz})"
    return {pa.string(): "text", pa.int64(): "integer", pa.float64(): "number"}[kind]


def _meaning(meaning: str | dict[Series, str], series: Series) -> str:
    return meaning if isinstance(meaning, str) else meaning[series]


def series_rows() -> list[tuple[str, str, list[Series], str]]:
    """(column, type, the series it is in, meaning), a row per meaning, in the schemas' order."""
    rows: dict[tuple[str, str], tuple[str, list[Series]]] = {}
    for series, schema in SCHEMAS.items():
        for field in schema:
            meaning = _meaning(SERIES_COLUMNS[field.name], series)
            rows.setdefault((field.name, meaning), (_type(field.type), []))[1].append(series)
    return [(name, kind, where, meaning) for (name, meaning), (kind, where) in rows.items()]


def partition_values() -> list[str]:
    field = SinkConfig.model_fields["partition_by"]
    return list(typing.get_args(typing.get_args(field.annotation)[0]))


def render() -> str:
    out = [HEADER]
    out.append(
        "\n## The series: raw, average, candles\n\n| column | type | in | meaning |\n|---|---|---|---|\n"
    )
    for name, kind, where, meaning in series_rows():
        within = "all" if len(where) == len(SCHEMAS) else ", ".join(str(s) for s in where)
        out.append(f"| `{name}` | {kind} | {within} | {meaning} |\n")
    kinds = "\n".join(f"- `{kind}`: {KINDS[kind]}" for kind in ParamKind)
    default = SourceConfig(base_url=EXAMPLE_URL, username="u", password="p").name  # type: ignore[arg-type]
    out.append(
        f"""
A row is one point of one parameter: `(source, param_id, ts)` is unique in each series (the platform's
duplicates are dropped, the first sent kept).

**`kind`** takes one of:

{kinds}

**`ts`** is UTC. A raw row is a point at its own stamp. An average or a candle is stamped with the
**start** of its 30-minute bucket, aligned to UTC: the row at 10:30 covers the raw points of
`[10:30, 11:00)`, so its `date` folder is the day the bucket starts in. The interface document says only
that averages are taken over 30-minute intervals; etl keeps the stamp the platform sends, and reads it
as the bucket's start (the emulator stamps so, and late and revised averages are looked for so).

**`source`**, when `source.name` is not set, is the host of `source.base_url`, without scheme, port or
path (`{EXAMPLE_URL}` gives `{default}`); a character other than letters,
digits, `.`, `_` and `-` becomes `_`. Two instances on one host (two ports) need a `source.name` each.

**Folders.** `date` is always a partition, and `sink.partition_by` may add the others; each is a folder
level, read back as a column by `etl query` (`etl.read` leaves `date` out of a series: `ts` says it):

"""
    )
    out.append("".join(f"- `{value}`: {FOLDERS[value]}\n" for value in partition_values()))
    out.append(
        "\n## The quality dataset\n\nPartitioned as the series, a row per parameter and UTC day of raw data it\n"
        "was asked for (a day without a point too); how each figure is made: [quality.md](quality.md).\n"
        "\n| column | type | meaning |\n|---|---|---|\n"
    )
    for field in QUALITY_SCHEMA:
        out.append(f"| `{field.name}` | {_type(field.type)} | {QUALITY_COLUMNS[field.name]} |\n")
    out.append(
        """
## Dimension tables

The platform's records as it sends them, every field a column: names in snake_case at every level
(`objectId` is `object_id`), numbers, text and booleans typed, lists of strings as lists, nested records
as structs (`deviceconnect.device.id`); a field whose values disagree in type is JSON text. Every table
has `source` first. Beyond the fields below the interface document does not show the records' shapes:
`etl query -c CONFIG "describe parameters"` lists your platform's columns.

| table | from | columns etl adds or reads |
|---|---|---|
"""
    )
    for table, (origin, notes) in DIMENSIONS.items():
        out.append(f"| `{table}` | {origin} | {notes or '-'} |\n")
    return "".join(out)


if __name__ == "__main__":
    raise SystemExit(generated_page.main(PAGE, render, "docs-output", sys.argv[1:]))
