"""The run configuration: YAML with ${ENV} values, validated once into typed models."""

from __future__ import annotations

import difflib
import logging
import os
import re
import typing
from collections.abc import Iterator
from datetime import date, datetime
from os import PathLike
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from etl.errors import ConfigError
from etl.model import ParamKind, Series, slug
from etl.support import redact
from etl.timeutil import DAY_MS, iso_text, parse_duration_ms, to_ms

log = logging.getLogger(__name__)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _duration(value: Any) -> int:
    try:
        return parse_duration_ms(value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


# Milliseconds, written as 30s, 15m, 1h, 7d (or a number of seconds); the config reference names it.
Duration = Annotated[int, BeforeValidator(_duration)]


class RetryConfig(Strict):
    """How a request that failed in a way worth retrying (5xx, 429, timeouts, unreadable answers) is sent
    again: exponential backoff with jitter, within a deadline."""

    attempts: int = Field(6, ge=1, le=50, description="tries of one request, the first included")
    backoff_initial: float = Field(0.5, gt=0, description="seconds before the first retry; doubled each time")
    backoff_max: float = Field(30.0, gt=0, description="seconds between two tries at most")
    deadline: float | None = Field(
        300.0, gt=0, description="seconds per window (or request), all requests and attempts together"
    )
    retry_after_max: float = Field(
        120.0, gt=0, description="seconds of a server's Retry-After honoured at most"
    )
    # An hourly schedule's next run finds the lock free: what a stopped run still writes and commits
    # after its deadline fits in the quarter of an hour left.
    run_deadline: float | None = Field(
        2700.0,
        gt=0,
        description="seconds a run may take; then it stops as on SIGTERM and what is done is checkpointed "
        "(null: no limit, for a long backfill)",
    )


def http_url(value: str, problem: str) -> str:
    """An http(s) URL that names a host, without a trailing slash (ValueError saying `problem`, if not)."""
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(problem)
    return value.rstrip("/")


def source_name(value: str) -> str:
    """A source's name as it may be written: it names files and folders (ValueError saying how, if not)."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", value) or value in (".", ".."):
        raise ValueError(
            "use letters, digits, '.', '_' and '-', not '.' or '..' alone (it names files and folders)"
        )
    return value


def _not_a_shard(name: str, what: str) -> str:
    """A source name that no shard's label can be read into: source x's shard 0/2 writes
    part-x-s0of2-... files and commits as etl-x-s0of2, so a source named x-s0of2 would share them, and
    its rows, checkpoints and recovery would mix with that shard's."""
    if re.search(r"-s\d+of\d+$", name):
        raise ValueError(f"{what} ends like a shard's label (-sIofN): give source.name another name")
    return name


class SourceConfig(Strict):
    """The platform's instance and the login."""

    base_url: str = Field(description="host and base path, e.g. https://HOST/sem-restservices")
    name: str = Field(
        "",
        description="labels this instance: the source column, its own checkpoints; letters, digits, "
        "'.', '_' and '-', not ending like a shard's -sIofN",
        json_schema_extra={"default_written": "the host of `base_url`"},
    )
    username: str = Field(description="the login")
    # SecretStr: shown as ****** wherever the config is printed
    password: SecretStr | None = Field(
        None, description="${ETL_PASSWORD} (a password written in the file is warned about)"
    )
    password_file: Path | None = Field(None, description="a file holding the password, instead of password")
    sign_in: Literal["query", "form"] = Field(
        "query", description="credentials as query parameters (as the document shows) or a form body"
    )
    verify_tls: bool = Field(True, description="verify the server's TLS certificate")
    ca_bundle: Path | None = Field(None, description="a private CA's PEM file to verify the server with")
    connect_timeout: float = Field(10.0, gt=0, description="seconds to connect")
    read_timeout: float = Field(60.0, gt=0, description="seconds between two reads of an answer")
    request_timeout: float = Field(
        120.0, gt=0, description="seconds for a whole answer, however it trickles in"
    )
    max_answer_mb: float = Field(
        32.0, gt=0, description="MiB an answer may hold, on the wire or decompressed (a raw day is ~5 MB)"
    )
    proxy: str | None = Field(
        None,
        description="the forward proxy of every request, http://[user:password@]host:port (https:// too); "
        "default: HTTPS_PROXY, HTTP_PROXY, ALL_PROXY of the environment; NO_PROXY is honoured either way",
    )
    transport: Literal["etl", "httpx"] = Field(
        "etl", description="etl's own HTTP/1.1 transport, or httpx's (httpcore): the same limits and errors"
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value, "must start with http:// or https:// and name a host")

    @field_validator("proxy")
    @classmethod
    def _proxy(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+/?$", value.strip()):
            raise ValueError("give the proxy's URL, http://[user:password@]host:port (or https://)")
        return value.strip() if value is not None else None

    @model_validator(mode="after")
    def _one_password(self) -> SourceConfig:
        if self.password is None and self.password_file is None:
            raise ValueError("give password (e.g. ${ETL_PASSWORD}) or password_file")
        if self.password is not None and self.password_file is not None:
            raise ValueError("give password or password_file, not both")
        if self.ca_bundle is not None and not self.verify_tls:
            raise ValueError("give ca_bundle or verify_tls: false, not both")
        return self

    @model_validator(mode="after")
    def _default_name(self) -> SourceConfig:
        """The host of base_url names the instance unless `name` does."""
        if not self.name:
            # Frozen, but still being built: the one place a default is made from another field.
            object.__setattr__(self, "name", _not_a_shard(self.default_name, "the host of base_url"))
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _not_a_shard(source_name(value), repr(value))

    @property
    def name_given(self) -> bool:
        """Whether the config names the instance itself (else the name is base_url's host)."""
        return "name" in self.model_fields_set

    @property
    def default_name(self) -> str:
        """The name the instance gets when `name` is not given: base_url's host."""
        return slug(urlsplit(self.base_url).hostname or "source")

    @property
    def platform(self) -> str:
        """The instance base_url names, without credentials, query or fragment (it is recorded with the
        output): scheme, host, port and base path."""
        parts = urlsplit(self.base_url)
        host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        return f"{parts.scheme}://{host}{parts.path.rstrip('/')}"


class ParameterSelect(Strict):
    """Which parameters of the selected objects are exported."""

    kinds: list[ParamKind] = Field(
        list(ParamKind),
        description="parameter kinds to export (signal: physical parameters whose values are 0 or 1; "
        "a list of physical without signal is warned about)",
    )
    ids: list[int] | None = Field(None, description="only these parameter ids (one not found is an error)")
    exclude_ids: list[int] = Field([], description="never these parameter ids")
    tags: list[str] | None = Field(None, description="keep parameters with any of these tags")


class SelectConfig(Strict):
    """Which objects are exported."""

    objects: Literal["all"] | list[int] = Field(
        "all", description="all objects the login sees, or their ids (one not visible is an error)"
    )
    object_states: list[int] | None = Field(None, description="only objects in these state ids")
    parameters: ParameterSelect = ParameterSelect()
    refresh: Duration = Field(
        DAY_MS,
        ge=0,
        description="the parameters of every object are listed again within this long; in between a run "
        "lists new objects and a rolling share of the others, and keeps the rest from the catalog beside "
        "the checkpoints (0: every object every run)",
    )


class WindowConfig(Strict):
    """The span a run keeps exported, half-open: [start, end)."""

    start: datetime = Field(description="the first instant exported, with a UTC offset")
    end: datetime | Literal["now"] = Field(
        "now", description="the instant the export ends (excluded); now: the server's clock less a minute"
    )
    overlap: Duration = Field(
        0,
        description="re-read this much before each high-water mark, for a server that inserts points out of order",
    )
    late_max: Duration = Field(
        7 * DAY_MS,
        description="a parameter's points that reach the platform late are read again from its newest "
        "point back to this far (off: never)",
    )
    revisions: Duration = Field(
        6 * 3_600_000,
        description="calculated parameters: values revised this long after a run read them are fetched "
        "again (off: never)",
    )

    @field_validator("start", "end", mode="before")
    @classmethod
    def _aware(cls, value: object) -> object:
        if isinstance(value, datetime) and value.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2026-11-01T00:00:00Z")
        if isinstance(value, date) and not isinstance(value, datetime):  # YAML reads 2026-11-25 as a date
            raise ValueError(f"needs a time and a UTC offset, e.g. {value.isoformat()}T00:00:00Z")
        if isinstance(value, str) and value != "now":
            iso_text(value, offset=True)  # a format problem is named as one, before a missing offset
        return value

    @field_validator("late_max", "revisions", mode="before")
    @classmethod
    def _or_off(cls, value: object) -> object:
        return 0 if value in ("off", False, None) else value

    @model_validator(mode="after")
    def _ordered(self) -> WindowConfig:
        if self.end != "now" and to_ms(self.start) >= to_ms(self.end):
            raise ValueError("start must be before end")
        if self.late_max and self.revisions > self.late_max:
            raise ValueError("revisions cannot reach further back than late_max")
        return self

    @property
    def start_ms(self) -> int:
        return to_ms(self.start)

    def end_ms(self, now: int) -> int:
        return now if self.end == "now" else to_ms(self.end)


class CadenceConfig(Strict):
    """How often each parameter's new data is asked for: every run, but for quiet parameters and series
    given a cadence of their own. Nothing is lost by waiting: what a parameter sent meanwhile is fetched
    when it is next polled, late points and backlogs included."""

    quiet_after: Duration = Field(
        6 * 3_600_000,
        description="a parameter whose newest point is this old (or whose object has no controller, or all "
        "its controllers offline) is quiet: polled by one small request, at its own cadence",
    )
    quiet_max: Duration = Field(
        6 * 3_600_000,
        description="a quiet parameter is polled at least this often: its cadence is a quarter of its "
        "silence, up to this (off: every run)",
    )
    series: dict[Series, Duration] = Field(
        {}, description="a series' new data asked for at most this often, e.g. {average: 6h, candles: 6h}"
    )

    @field_validator("quiet_max", mode="before")
    @classmethod
    def _or_off(cls, value: object) -> object:
        return 0 if value in ("off", False, None) else value


class ExtractConfig(Strict):
    """How the series are fetched."""

    concurrency: int | Literal["auto"] = Field(
        "auto",
        description="requests in flight, whole run: auto (learned from the server's answers, up to "
        "max_concurrency) or a number",
    )
    max_concurrency: int = Field(64, ge=1, le=256, description="the most requests in flight auto may reach")
    max_rps: float | None = Field(
        None, gt=0, description="requests a second at most, whole run (none: no cap)"
    )
    max_points: int = Field(10_000, ge=2, description="count sent with each request; a full answer is split")
    raw_window: Duration = Field(DAY_MS, description="raw windows; at most 24h, aligned to UTC midnight")
    aggregate_window: Duration = Field(7 * DAY_MS, description="average and candle windows")
    slabs_in_flight: int = Field(2, ge=1, le=16, description="slabs worked on at once")
    batch_windows: int = Field(64, ge=1, le=100_000, description="windows handed to the writer at a time")

    @field_validator("concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: object) -> object:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 256):
            return value
        raise ValueError(f"auto or a whole number of requests from 1 to 256, not {value!r}")

    @property
    def most_in_flight(self) -> int:
        """The most requests the run has in flight: the fixed number, or what auto may reach."""
        return self.max_concurrency if self.concurrency == "auto" else self.concurrency

    @model_validator(mode="after")
    def _limits(self) -> ExtractConfig:
        if not 0 < self.raw_window <= DAY_MS or DAY_MS % self.raw_window:
            raise ValueError("raw_window must divide 24h (e.g. 24h, 12h, 6h, 1h)")
        if self.aggregate_window < DAY_MS or self.aggregate_window % DAY_MS:
            raise ValueError("aggregate_window must be a whole number of days")
        return self


LAKE_FORMATS = ("delta", "iceberg")
# Formats whose tables commit each group of slabs with its checkpoint (docs/lake.md, docs/postgres.md).
TABLE_FORMATS = (*LAKE_FORMATS, "postgres")
# A PostgreSQL identifier etl makes (schema names are spliced into its SQL, quoted).
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(value: object) -> int:
    """Bytes: a number, or '128MB', '1GiB'..."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size like 64MB or 1GiB")
    return int(float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()])


# Bytes, written as 64MB, 1GiB (or a number of bytes); the config reference names it.
Size = Annotated[int, BeforeValidator(parse_size)]


class CommitConfig(Strict):
    """Lake tables: the slabs of a run are committed to each table in groups, each group one commit
    carrying every slab's checkpoint. A group is committed when it reaches `slabs` or `size`, when its
    first slab has waited `interval`, and when the run ends or is stopped."""

    slabs: int = Field(64, ge=1, le=100_000, description="slabs in one table commit at most")
    size: Size = Field(128 * 2**20, ge=1, description="spooled rows in one table commit at most")
    interval: Duration = Field(60_000, description="a group waits this long at most for more slabs")


class SinkConfig(Strict):
    """Where and how the data is written."""

    format: Literal["parquet", "csv", "delta", "iceberg", "postgres"] = Field(
        "parquet",
        description="files (Parquet, CSV), lake tables (Delta, Iceberg: pip install 'etl[lake]') or "
        "PostgreSQL tables (pip install 'etl[postgres]')",
    )
    path: str = Field(
        description="a folder, or an fsspec URL: s3://bucket/prefix, gs://, az://; postgres: the folder of "
        "the checkpoints and run summaries"
    )
    dsn: str | None = Field(
        None,
        description="postgres: the database's URL, postgresql://user:${PASSWORD}@host:5432/db[?sslmode=...]",
    )
    db_schema: str = Field(
        "etl", alias="schema", description="postgres: the schema of the tables (made when missing)"
    )
    password_file: Path | None = Field(
        None, description="postgres: a file holding the database's password, instead of one in dsn"
    )
    catalog: str | None = Field(
        None,
        description="iceberg: a REST catalog URI or a SQL database URL",
        json_schema_extra={"default_written": "SQLite at `{sink.path}/catalog.db` (local paths)"},
    )
    partition_by: list[Literal["source", "date", "object_id"]] = Field(
        ["date"], description="folders of the files: date (UTC day), and source or object_id"
    )
    buckets: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="files per partition, or auto: 1 for a new Parquet/CSV dataset of fewer than 800 "
        "parameters, else 4, decided at its first run and kept",
        json_schema_extra={"default_written": "`auto`"},
    )
    compression: Literal["zstd", "snappy", "gzip", "none"] = Field("zstd", description="Parquet's codec")
    storage_options: dict[str, Any] = Field(
        {}, description="passed to fsspec, e.g. {endpoint_url: http://127.0.0.1:9000}"
    )
    # Lake tables only (docs/lake.md): grouped commits, and the upkeep each run does.
    commit: CommitConfig = CommitConfig()
    retention: Duration | None = Field(
        7 * DAY_MS, description="lake tables: old versions' files are deleted after this long; off: kept"
    )
    versions: int = Field(
        50, ge=2, le=10_000, description="lake tables: versions kept for time travel at most"
    )
    compact: int = Field(
        4, ge=0, le=10_000, description="lake tables: day partitions compacted per table and run at most"
    )

    @field_validator("retention", mode="before")
    @classmethod
    def _retention(cls, value: object) -> object:  # what the field's own validation then reads
        if value is None or value is False or (isinstance(value, str) and value.strip().lower() == "off"):
            return None
        return value

    @field_validator("buckets", mode="before")
    @classmethod
    def _auto(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip().isdigit():
            if value.strip().lower() != "auto":
                raise ValueError(f"give a number of files per partition (1-4096) or auto, not {value!r}")
            return None
        return value

    @field_validator("partition_by")
    @classmethod
    def _has_date(cls, value: list[str]) -> list[str]:
        if "date" not in value or len(set(value)) != len(value):
            raise ValueError("must contain 'date' once (and may add 'source' and 'object_id')")
        return value

    @field_validator("db_schema")
    @classmethod
    def _schema(cls, value: str) -> str:
        if not _IDENTIFIER.match(value):
            raise ValueError("a PostgreSQL schema name: lower-case letters, digits and _, 63 at most")
        return value

    @model_validator(mode="after")
    def _postgres(self) -> SinkConfig:
        if self.format != "postgres":
            if self.dsn is not None or self.password_file is not None:
                raise ValueError("dsn, password_file: only sink.format postgres has a database")
            return self
        if self.dsn is None:
            raise ValueError("dsn: sink.format postgres needs the database's URL, postgresql://user@host/db")
        if not re.match(r"^postgres(ql)?://", self.dsn):
            raise ValueError("dsn: give a PostgreSQL URL, postgresql://user:${PASSWORD}@host:5432/db")
        if self.password_file is not None and redact.url_passwords(self.dsn):
            raise ValueError("password_file: the dsn holds a password already; give one or the other")
        return self

    @model_validator(mode="after")
    def _catalog(self) -> SinkConfig:
        if self.catalog is not None and self.format != "iceberg":
            raise ValueError("catalog: only sink.format iceberg has a catalog")
        if self.catalog is not None and not re.match(r"^(https?|sqlite|postgresql|mysql)[+:]", self.catalog):
            raise ValueError(
                "catalog: give a REST catalog URI (http[s]://...) or a SQL database URL "
                "(sqlite:///..., postgresql://...)"
            )
        remote = "://" in self.path and not self.path.startswith("file://")
        if (
            self.format == "iceberg"
            and remote
            and (self.catalog is None or self.catalog.startswith("sqlite"))
        ):
            # A SQLite file lives on one machine: other writers and readers of the bucket would not see
            # the tables' current metadata.
            raise ValueError(
                "catalog: iceberg on an object store needs sink.catalog, a SQL database URL "
                "(postgresql://user:${PASSWORD}@host/db) or a REST catalog URI (https://...), not SQLite"
            )
        return self

    @property
    def lake(self) -> bool:
        """Tables whose commits carry their slabs' checkpoints: Delta, Iceberg and PostgreSQL."""
        return self.format in TABLE_FORMATS


class StateConfig(Strict):
    """The checkpoints and the run lock."""

    path: str | None = Field(
        None,
        description="where the checkpoints live",
        json_schema_extra={"default_written": "`{sink.path}/_state`"},
    )
    lease: Duration = Field(
        120_000, description="object stores: a dead run's lock may be taken after this long (1s at least)"
    )

    @field_validator("lease")
    @classmethod
    def _lease(cls, value: int) -> int:
        if value < 1000:
            raise ValueError("must be at least 1s")
        return value


class ExecutorConfig(Strict):
    """Where slabs run."""

    kind: Literal["local", "dask"] = Field("local", description="here, or on a Dask cluster")
    address: str | None = Field(None, description="dask scheduler, e.g. tcp://10.0.0.5:8786")
    worker_wait: Duration = Field(
        120_000,
        description="dask: a cluster without a worker for this long ends the run (exit 4), at its start as "
        "when every worker has left",
    )

    @model_validator(mode="after")
    def _address(self) -> ExecutorConfig:
        if self.kind == "dask" and not self.address:
            raise ValueError("kind dask needs address, e.g. tcp://127.0.0.1:8786")
        return self


class DimensionsConfig(Strict):
    """The reference tables (objects, parameters, units, zones, rooms...) written beside the series;
    `dimensions: false` is short for enabled: false."""

    enabled: bool = Field(True, description="snapshot objects, parameters and the reference tables")
    refresh: Duration = Field(
        86_400_000,
        description="units, commands and lookups are fetched again when their snapshot is older; 0: every "
        "run (objects and parameters are written every run, from discovery)",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        return {"enabled": value} if isinstance(value, bool) else value


class LineageTransport(Strict):
    """Where the OpenLineage events go (the client's http, file and console transports). Without this
    section, the client's own configuration: OPENLINEAGE_URL, OPENLINEAGE_CONFIG, openlineage.yml."""

    type: Literal["http", "file", "console"] = Field(
        description="http: POST each event to a lineage server (Marquez...); file: append them to a "
        "file, one JSON a line; console: log them"
    )
    url: str | None = Field(None, description="http: the server, e.g. http://marquez:5000")
    endpoint: str = Field("api/v1/lineage", description="http: the path events are posted to")
    api_key: SecretStr | None = Field(None, description="http: a bearer token, e.g. ${OPENLINEAGE_API_KEY}")
    timeout: float = Field(5.0, gt=0, description="http: seconds an event may take to be sent")
    path: str | None = Field(None, description="file: the file events are appended to")

    @model_validator(mode="after")
    def _needs(self) -> LineageTransport:
        if self.type == "http":
            http_url(self.url or "", "type http needs url, http(s)://host[:port]")
        if self.type == "file" and not self.path:
            raise ValueError("type file needs path")
        given = self.model_fields_set - {"type"}
        foreign = given - ({"url", "endpoint", "api_key", "timeout"} if self.type == "http" else {"path"})
        if foreign:
            raise ValueError(f"{', '.join(sorted(foreign))}: not a key of type {self.type}")
        return self


class LineageConfig(Strict):
    """OpenLineage events (pip install 'etl[lineage]'): START when a run starts, then COMPLETE, FAIL or
    ABORT (interrupted). Without this section, runs emit them only when the environment configures the
    OpenLineage client (OPENLINEAGE_URL or OPENLINEAGE_CONFIG); `lineage: true` is this section with its
    defaults, `lineage: false` emits none even then."""

    enabled: bool = Field(True, description="false: no events, whatever the environment says")
    namespace: str | None = Field(
        None,
        description="the job's namespace",
        json_schema_extra={"default_written": "`$OPENLINEAGE_NAMESPACE`, else `etl`"},
    )
    job: str | None = Field(
        None, description="the job's name", json_schema_extra={"default_written": "`etl.{source.name}`"}
    )
    transport: LineageTransport | None = None


class TelemetryConfig(Strict):
    """OpenTelemetry traces of each run (pip install 'etl[otel]'): a span for the run, discovery, each
    slab and each commit, with their request and point counts, sent over OTLP/HTTP."""

    otlp_endpoint: str = Field(
        description="the collector's OTLP/HTTP endpoint, e.g. http://collector:4318 (traces go to /v1/traces)"
    )
    service_name: str = Field("etl", description="the traces' service.name")
    headers: dict[str, SecretStr] = Field(
        {}, description="sent with each export, e.g. {Authorization: 'Bearer ${OTLP_TOKEN}'}"
    )
    timeout: float = Field(10.0, gt=0, description="seconds an export may take")

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return http_url(value, "give the collector's URL, http(s)://host:port")


def section_of(annotation: object) -> type[BaseModel] | None:
    """The section model a field holds (`X` or an optional `X | None`), or None for a plain key."""
    for each in (annotation, *typing.get_args(annotation)):
        if isinstance(each, type) and issubclass(each, BaseModel):
            return each
    return None


class Config(Strict):
    source: SourceConfig
    select: SelectConfig = SelectConfig()
    series: list[Series] = Field(list(Series), description="the series exported, each at most once")
    window: WindowConfig
    cadence: CadenceConfig = CadenceConfig()
    extract: ExtractConfig = ExtractConfig()
    retry: RetryConfig = RetryConfig()
    sink: SinkConfig
    state: StateConfig = StateConfig()
    executor: ExecutorConfig = ExecutorConfig()
    dimensions: DimensionsConfig = DimensionsConfig()
    lineage: LineageConfig | None = None
    telemetry: TelemetryConfig | None = None

    @field_validator("lineage", mode="before")
    @classmethod
    def _lineage(cls, value: object) -> object:
        """`lineage: true`: the section with its defaults; `false`: none, whatever the environment says."""
        if value is True:
            return {}
        return {"enabled": False} if value is False else value

    @field_validator("series")
    @classmethod
    def _series(cls, value: list[str]) -> list[str]:
        if not value or len(set(value)) != len(value):
            raise ValueError("list each of raw, average, candles at most once, and at least one")
        return value

    @property
    def state_root(self) -> str:
        """The state folder of every source of the output: a folder per source."""
        return (self.state.path or self.sink.path.rstrip("/") + "/_state").rstrip("/")

    @property
    def state_path(self) -> str:
        """This source's checkpoints (each instance of the platform keeps its own)."""
        return f"{self.state_root}/{self.source.name}"


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _substitute(node: Any, where: str, offline: bool) -> Any:
    if isinstance(node, dict):
        return {k: _substitute(v, f"{where}.{k}" if where else str(k), offline) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, f"{where}[{i}]", offline) for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        if offline and where.startswith("source."):
            return ""  # commands that never contact the platform need no credentials
        raise ConfigError(f"config error: {where}: environment variable {name} is not set")

    return _ENV.sub(value, node)


def _location(error: ErrorDetails) -> str:
    parts = [
        str(p) for p in error["loc"] if not (isinstance(p, str) and ("[" in p or p in {"function-after"}))
    ]
    return ".".join(parts) or "(top level)"


def _message(error: ErrorDetails) -> str:
    if error["type"] == "missing":
        return "required key is missing"
    return error["msg"].removeprefix("Value error, ")


def _model_at(path: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The section model that holds the keys at `path` (() is the top level)."""
    model: type[BaseModel] = Config
    for part in path:
        field = model.model_fields.get(str(part))
        inner = section_of(field.annotation) if field else None
        if inner is None:
            return None
        model = inner
    return model


def _keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key of a section and the sections below it, dotted."""
    for name, field in model.model_fields.items():
        yield prefix + (field.alias or name)
        if (inner := section_of(field.annotation)) is not None:
            yield from _keys(inner, f"{prefix}{name}.")


def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """A key close to an unknown one: in its own section, else anywhere (a key put in the wrong section)."""
    key, section = str(loc[-1]), _model_at(loc[:-1])
    keys = [f.alias or name for name, f in section.model_fields.items()] if section is not None else []
    if close := difflib.get_close_matches(key, keys, 1, 0.6):
        return f" (did you mean {close[0]}?)"
    everywhere = {dotted.rsplit(".", 1)[-1]: dotted for dotted in _keys(Config) if "." in dotted}
    if close := difflib.get_close_matches(key, list(everywhere), 1, 0.8):
        return f" (did you mean {everywhere[close[0]]}?)"
    return ""


def _problems(exc: ValidationError) -> list[str]:
    """One phrase per problem: unknown keys first (a typo in a required key also makes it "missing"),
    then each key's problems, the alternatives a value could have taken in one phrase."""
    unknown: list[str] = []
    problems: dict[str, list[str]] = {}
    for error in exc.errors():
        if error["type"] == "extra_forbidden":
            unknown.append(f"{_location(error)}: unknown key{_did_you_mean(error['loc'])}")
        else:
            problems.setdefault(_location(error), []).append(_message(error))
    phrased = []
    for where, messages in problems.items():
        messages = list(dict.fromkeys(messages))
        if len(messages) > 1 and all(m.startswith("Input should be ") for m in messages):
            messages = [
                messages[0] + "".join(" or " + m.removeprefix("Input should be ") for m in messages[1:])
            ]
        phrased.append(f"{where}: {'; '.join(messages)}")
    return unknown + phrased


def parse_config(data: Any, origin: str = "config", *, offline: bool = False) -> Config:
    """Validate a config mapping. `offline`: for commands that only read the output (no sign-in)."""
    if not isinstance(data, dict):
        raise ConfigError(f"config error: {origin}: the top level must be a mapping of keys")
    raw_password = (
        (data.get("source") or {}).get("password") if isinstance(data.get("source"), dict) else None
    )
    raw_sink = data.get("sink")
    data = _substitute(data, "", offline)
    proxy = (data.get("source") or {}).get("proxy") if isinstance(data.get("source"), dict) else None
    if isinstance(proxy, str):  # before validation: no message may show its password
        redact.register(*redact.url_passwords(proxy))
    sink = data.get("sink") if isinstance(data.get("sink"), dict) else {}
    raw_sink = raw_sink if isinstance(raw_sink, dict) else {}
    for key in ("catalog", "dsn"):  # database URLs: before validation, so that no message shows them
        url = sink.get(key)
        if isinstance(url, str):
            redact.register(*redact.url_passwords(url), *parse_qs(urlsplit(url).query).get("password", []))
            raw = raw_sink.get(key)
            written = redact.url_passwords(raw) if isinstance(raw, str) else []
            if written and not _ENV.search(written[0]):
                log.warning(
                    "sink.%s holds a password written in the config file; prefer ${VARIABLE} there", key
                )
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc)
        count = f"{len(problems)} problems: " if len(problems) > 1 else ""
        raise ConfigError(f"config error: {count}{'; '.join(problems)}") from None
    kinds = config.select.parameters.kinds
    if not offline and ParamKind.PHYSICAL in kinds and ParamKind.SIGNAL not in kinds:
        # Signal parameters are physical ones to the platform: a list that names physical likely means them.
        log.warning(
            "select.parameters.kinds leaves out signal: signal parameters (physical ones whose values are 0 "
            "or 1, a kind of their own now) are not exported; add signal to the list to keep them"
        )
    redact.register_public(config.source.username)
    if config.telemetry is not None:
        redact.register(*redact.url_passwords(config.telemetry.otlp_endpoint))
        redact.register(*(value.get_secret_value() for value in config.telemetry.headers.values()))
    if config.lineage is not None and (transport := config.lineage.transport) is not None:
        redact.register(*redact.url_passwords(transport.url or ""))
        if transport.api_key is not None:
            redact.register(transport.api_key.get_secret_value())
    if config.source.password:
        redact.register(config.source.password.get_secret_value())
        if isinstance(raw_password, str) and not _ENV.search(raw_password):
            log.warning(
                "source.password is written in the config file; prefer ${ETL_PASSWORD} or password_file"
            )
    return config


class _Loader(yaml.SafeLoader):
    """safe_load's YAML, with timestamps left as text: the config's validation reads them and names the
    key of an impossible one (an unquoted 2026-13-01T00:00:00Z), where the YAML parser would just fail."""


def _timestamp_text(loader: _Loader, node: yaml.Node) -> str:
    return loader.construct_yaml_str(node)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_text)


def _local_relative(path: str) -> bool:
    return "://" not in path and not os.path.isabs(os.path.expanduser(path))


def _held(path: str) -> bool:
    """Whether a local path holds something: a file, or a folder with anything in it."""
    if os.path.isfile(path):
        return True
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is not None
    except OSError:
        return False


def _from_folder(config: Config, folder: str) -> Config:
    """The config's relative local paths (sink.path and password_file, state.path, source.password_file and
    ca_bundle, lineage.transport.path) read from `folder`, the config file's, as a .gitignore or a dbt
    project reads its paths: a scheduler that starts `etl` from another working directory gets the same
    output. A path that holds nothing there but does from the working directory (where etl read it before)
    is a ConfigError naming both."""
    source, sink, state = config.source, config.sink, config.state
    lineage = config.lineage.transport if config.lineage is not None else None
    given = {
        "sink.path": sink.path,
        "state.path": state.path,
        "source.password_file": source.password_file,
        "source.ca_bundle": source.ca_bundle,
        "lineage.transport.path": lineage.path if lineage is not None else None,
        "sink.password_file": sink.password_file,
    }
    found: dict[str, str] = {}
    for key, value in given.items():
        if value is None or not _local_relative(str(value)):
            continue
        here = os.path.normpath(os.path.join(folder, os.path.expanduser(str(value))))
        before = os.path.abspath(os.path.expanduser(str(value)))
        if here != before and not _held(here) and _held(before):
            raise ConfigError(
                f"config error: {key}: {str(value)!r} is read from the config file's folder: {here} holds "
                f"nothing, but {before} (from the working directory) does: move it to {here}, or set "
                f"{key}: {before}"
            )
        found[key] = here
    if not found:
        return config
    source = source.model_copy(
        update={
            name: Path(found[f"source.{name}"])
            for name in ("password_file", "ca_bundle")
            if f"source.{name}" in found
        }
    )
    sink = sink.model_copy(
        update={
            name: found[f"sink.{name}"] if name == "path" else Path(found[f"sink.{name}"])
            for name in ("path", "password_file")
            if f"sink.{name}" in found
        }
    )
    state = state.model_copy(update={"path": found["state.path"]} if "state.path" in found else {})
    update: dict[str, object] = {"source": source, "sink": sink, "state": state}
    if lineage is not None and config.lineage is not None and "lineage.transport.path" in found:
        moved = lineage.model_copy(update={"path": found["lineage.transport.path"]})
        update["lineage"] = config.lineage.model_copy(update={"transport": moved})
    return config.model_copy(update=update)


def load_config(path: str | PathLike[str], *, offline: bool = False) -> Config:
    """The config in a YAML file; its relative paths are read from the file's folder (`_from_folder`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config error: {path}: no such file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config error: {path}: not a text file (a config is YAML, in UTF-8)") from None
    except OSError as exc:
        raise ConfigError(f"config error: {path}: {exc.strerror}") from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise ConfigError(f"config error: {path}:{where}: {problem}") from None
    return _from_folder(parse_config(data, str(path), offline=offline), os.path.abspath(path.parent))
