"""A quick look at one parameter's series, read from a config's output."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pandas as pd
import pyarrow.compute as pc
import pyarrow.dataset as ds

from etl.config import Config
from etl.dataset.gaps import with_breaks
from etl.dataset.names import lookup
from etl.errors import NothingToRead, StorageError
from etl.model import TS, Series
from etl.sinks.output import Output
from etl.support.optional import require


def load(config: Config, param_id: int, series: Series, start: int, end: int) -> pd.DataFrame:
    output = Output(config)
    storage, layout = output.data, output.layout(series)
    fmt = "parquet" if config.sink.format != "csv" else "csv"
    if output.lake is not None:  # the table's current snapshot
        table = output.lake.series(series)
        if not table.exists():
            raise NothingToRead(f"no {series} table in {config.sink.path} yet: 'etl run' writes it")
        dataset = table.dataset()
    else:
        try:
            dataset = ds.dataset(
                storage.full(series.value),
                schema=layout.schema if fmt == "parquet" else None,
                filesystem=None if storage.local else storage.fs,
                format=fmt,
                partitioning="hive",
                exclude_invalid_files=True,
            )
        except FileNotFoundError:
            raise NothingToRead(
                f"no {series} series in {config.sink.path} yet: 'etl run' writes it"
            ) from None
    ts = pc.field("ts").cast(TS) if fmt == "csv" else pc.field("ts")
    mine = (pc.field("source") == config.source.name) | pc.field("source").is_null()
    table = dataset.to_table(
        filter=(pc.field("param_id") == param_id)
        & mine
        & (ts >= pc.scalar(start).cast(TS))
        & (ts < pc.scalar(end).cast(TS))
    )
    if table.num_rows == 0:
        raise NothingToRead(f"no {series} points of parameter {param_id} in the output for that window")
    return cast(pd.DataFrame, table.sort_by("ts").to_pandas())


def plot(config: Config, param_id: int, series: Series, start: int, end: int, out: Path) -> int:
    matplotlib = require("matplotlib", "'etl plot'")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = Series(series)
    frame = load(config, param_id, series, start, end)
    points = len(frame)
    frame, gaps = with_breaks(frame)  # a spacing well above the period is a gap: the line breaks there
    names = lookup(config, param_id)
    fig, ax = plt.subplots(figsize=(11, 4))
    for gap_start, gap_end in gaps[:500]:
        # matplotlib's units registry takes the stamps where its stubs say float
        ax.axvspan(gap_start, gap_end, color="0.85", alpha=0.5, linewidth=0)  # type: ignore[arg-type]
    if series is Series.CANDLES:
        ax.fill_between(frame["ts"], frame["low"], frame["high"], alpha=0.3, label="low..high")
        ax.plot(frame["ts"], frame["close"], linewidth=1, label="close")
        ax.legend()
    else:
        ax.plot(
            frame["ts"],
            frame["value"],
            linewidth=0.8,
            drawstyle="steps-post" if series is Series.RAW else "default",
        )
    title = f"{names.title()}: {series}"
    # Names and units come from the platform: drawn as text, never as mathtext ($...$ would be parsed)
    ax.set_title(
        f"{title}\nparameter {param_id} ({frame['kind'].iloc[0]}), {len(gaps)} gap(s) shaded",
        fontsize=10,
        parse_math=False,
    )
    if names.unit:
        ax.set_ylabel(names.unit, parse_math=False)
    ax.set_xlabel("UTC")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110, metadata={"Title": title, "Description": f"{len(gaps)} gaps"})
    except OSError as exc:
        raise StorageError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return points
