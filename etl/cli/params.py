"""Parameter types, the options several commands share, and the client a connection option names."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import click

from etl.errors import ConfigError, StorageError
from etl.model import SERIES, Shard
from etl.timeutil import parse_duration_ms, parse_time

if TYPE_CHECKING:
    from etl.client import MonitoringClient

T = TypeVar("T")
# A command function, as click's decorators take and return it.
Command = TypeVar("Command", bound=Callable[..., Any])


class TimeType(click.ParamType):  # type: ignore[type-arg]  # click before 8.4 takes no type argument at run time
    """ISO 8601 with a UTC offset, or an epoch number (seconds, ms or us by size, or with its unit);
    converted to epoch ms (etl.timeutil.parse_time)."""

    name = "time"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "TIME"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        try:
            return parse_time(text)
        except ValueError as exc:
            if re.fullmatch(r"[+-]?\d+\s*[a-zµ]*", text) or re.match(r"\d{4}-\d\d-\d\d", text):
                self.fail(str(exc), param, ctx)  # an epoch number, or ISO 8601 with a problem it names
            self.fail(
                f"{text!r} is not a time: write ISO 8601 like 2026-11-01T00:00:00Z or "
                "2026-11-01T03:00:00+03:00, or an epoch number (1793491200s, 1793491200000ms)",
                param,
                ctx,
            )


class ParsedType(click.ParamType, Generic[T]):  # type: ignore[type-arg]  # as TimeType
    """A value `parse` makes from text (ValueError: the message click shows); `kind` passes through."""

    def __init__(self, name: str, metavar: str, parse: Callable[[str], T], kind: type[T]) -> None:
        self.name, self.metavar, self.parse, self.kind = name, metavar, parse, kind

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return self.metavar

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> T:
        if isinstance(value, self.kind):
            return value
        try:
            return self.parse(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def parse_sample(text: str) -> float:
    """`--sample`: all, a fraction in (0, 1] or a percentage (1%), as the fraction (all: 1)."""
    text = text.strip().lower()
    if text == "all":
        return 1.0
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{text!r}: give all, a fraction such as 0.01, or a percentage such as 1%") from None
    if not 0 < value <= 1:
        raise ValueError(f"{text!r}: a fraction above 0 and at most 1 (all)")
    return value


TIME = TimeType()
SHARD = ParsedType("shard", "I/N", Shard.parse, Shard)  # shard I of N (etl.model.Shard)
DURATION = ParsedType("duration", "DURATION", parse_duration_ms, int)  # '90s', '30m', '3h', '7d' -> ms
SAMPLE = ParsedType("sample", "FRACTION|all", parse_sample, float)
SERIES_CHOICE = click.Choice([s.value for s in SERIES])


config_option = click.option(
    "-c",
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="YAML run configuration.",
)
connection_option = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Take the connection from this config's source (default: ETL_BASE_URL, ETL_USERNAME, ETL_PASSWORD).",
)


def series_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--series raw|average|candles (default raw). --kind, its old name, still works and warns: in the
    data, `kind` is the parameter's kind (physical, calculated, signal), not the series."""

    @functools.wraps(command)
    def with_series(*args: Any, series: str | None, old_kind: str | None, **kwargs: Any) -> Any:
        if old_kind is not None:
            if series is not None and series != old_kind:
                raise click.UsageError(
                    f"--kind {old_kind} and --series {series} disagree: give --series only"
                )
            click.echo("etl: warning: --kind is now --series (the series: raw, average or candles)", err=True)
        return command(*args, series=series or old_kind or "raw", **kwargs)

    series = click.option(
        "--series", type=SERIES_CHOICE, help="Which series: raw, average or candles.  [default: raw]"
    )
    old = click.option("--kind", "old_kind", type=SERIES_CHOICE, hidden=True)
    return series(old(with_series))


def output_file(path: str, suffixes: tuple[str, ...]) -> Path:
    """A file a command will write, checked before any work: its name says a format it writes (exit 2),
    its folder exists (exit 7)."""
    out = Path(path)
    if out.suffix.lower() not in suffixes:
        raise ConfigError(
            f"output {path}: name it {' or '.join(f'FILE{s}' for s in suffixes)} (the name picks the format)"
        )
    folder = out.parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise StorageError(f"cannot write {path}: the folder {folder} {why}")
    return out


def window_options(required: bool, what: str, end_note: str = "exclusive") -> Callable[[Command], Command]:
    """--from and --to, as epoch ms."""
    start = click.option(
        "--from",
        "start",
        type=TIME,
        required=required,
        help=f"{what} from this time: ISO 8601 with an offset, or epoch s, ms or us (1793491200s).",
    )
    end = click.option(
        "--to", "end", type=TIME, required=required, help=f"{what} up to this time ({end_note})."
    )

    def both(command: Command) -> Command:
        return start(end(command))

    return both


def open_client(config_path: str | None) -> MonitoringClient:
    """The client of a config's source, or of ETL_BASE_URL, ETL_USERNAME and ETL_PASSWORD."""
    from etl.client import MonitoringClient
    from etl.config import load_config
    from etl.pipeline.build import Build

    if config_path:
        return Build(load_config(config_path)).client()
    names = ("ETL_BASE_URL", "ETL_USERNAME", "ETL_PASSWORD")
    missing = [v for v in names if not os.environ.get(v)]
    if missing:
        raise ConfigError(f"no connection: pass --config FILE or set {', '.join(missing)}")
    return MonitoringClient(*(os.environ[name] for name in names))
