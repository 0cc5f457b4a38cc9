"""OpenLineage events of a run, through the `openlineage-python` client and its transports: START when
the run starts, then COMPLETE, FAIL or ABORT (stopped by a signal or its deadline).

The job is `lineage.namespace` / `lineage.job`; the run's id is a UUID made from etl's run id (which
the `etl` run facet keeps). Inputs are the platform's series (namespace: base_url's scheme, host and
port, never its credentials); outputs are the series datasets or tables, the quality dataset and the
reference tables, with their schema, what the run wrote to them (rows, files, bytes) and the quality
rows' completeness. A parent run facet names the orchestrator's run that started this one
(etl/pipeline/observe.py). Events carry only what the summary already shows, its error line redacted;
a lineage server that cannot be reached is a warning, never the run's failure."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from etl.config import Config
from etl.errors import EtlError
from etl.model import QUALITY, QUALITY_SCHEMA, SCHEMAS, Series
from etl.support import redact
from etl.support.optional import require
from etl.support.version import __version__
from etl.timeutil import iso

require("openlineage.client", "lineage")

import attr  # noqa: E402 - after the check that names the extra
from openlineage.client import OpenLineageClient  # noqa: E402
from openlineage.client import __version__ as CLIENT_VERSION  # noqa: E402
from openlineage.client.event_v2 import (  # noqa: E402
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
)
from openlineage.client.facet_v2 import (  # noqa: E402
    RunFacet,
    data_quality_metrics_dataset,
    datasource_dataset,
    error_message_run,
    job_type_job,
    nominal_time_run,
    output_statistics_output_dataset,
    parent_run,
    processing_engine_run,
    schema_dataset,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from etl.pipeline.coordinator import RunOptions
    from etl.pipeline.parent import ParentRun
    from etl.pipeline.summary import RunSummary
    from etl.storage.atomic import Storage
    from etl.support.trace import Trace

log = logging.getLogger("etl")

PRODUCER = f"urn:etl:{__version__}"
DEFAULT_NAMESPACE = "etl"
# The `etl` run facet's JSON schema: docs/lineage/EtlRunFacet.json.
FACET_SCHEMA = "urn:etl:lineage:EtlRunFacet:1-0-0#/$defs/EtlRunFacet"


@attr.define
class EtlRunFacet(RunFacet):
    """etl's own view of the run: its id (the run record's name) and its figures."""

    runId: str  # noqa: N815 - OpenLineage's spelling
    status: str
    shard: str | None = attr.field(default=None)
    points: int = attr.field(default=0)
    windows: int = attr.field(default=0)
    requests: int = attr.field(default=0)
    failedWindows: int = attr.field(default=0)  # noqa: N815
    windowsNotDone: int = attr.field(default=0)  # noqa: N815
    seconds: float = attr.field(default=0.0)
    lowestCompleteness: float | None = attr.field(default=None)  # noqa: N815
    latePoints: int = attr.field(default=0)  # noqa: N815
    _additional_skip_redact: ClassVar[list[str]] = ["runId", "status", "shard"]

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA


def run_uuid(run_id: str, namespace: str, job: str) -> str:
    """The OpenLineage run id of an etl run: a UUIDv7 whose time is the run's start, read from its id,
    and whose other bits hash the job and the id; the same etl run always gets the same one."""
    digest = int.from_bytes(hashlib.sha256(f"{namespace}\n{job}\n{run_id}".encode()).digest()[:10], "big")
    stamp = re.match(r"(\d{8}T\d{6})Z-(\d{3})", run_id)
    if stamp is None:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{PRODUCER}/{namespace}/{job}/{run_id}"))
    ms = int(datetime.strptime(stamp.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=UTC).timestamp()) * 1000
    ms += int(stamp.group(2))
    value = (ms & (2**48 - 1)) << 80 | 0x7 << 76 | (digest >> 68) << 64 | 0b10 << 62 | digest & (2**62 - 1)
    return str(uuid.UUID(int=value))


def location(url: str) -> tuple[str, str]:
    """(namespace, name) of a dataset at a path or URL, as OpenLineage names files: `file` and the
    absolute path, or scheme://bucket and the path in it."""
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        return "file", os.path.abspath(parts.path if parts.scheme else url)
    return f"{parts.scheme}://{parts.hostname or ''}", parts.path.strip("/")


class Lineage:
    """The run's events, sent as the run starts and ends (a `RunObserver`)."""

    def __init__(self, config: Config, parent: ParentRun | None) -> None:
        self.config = config
        section = config.lineage
        self.namespace = (
            (section.namespace if section is not None else None)
            or os.environ.get("OPENLINEAGE_NAMESPACE")
            or DEFAULT_NAMESPACE
        )
        self.job = (section.job if section is not None else None) or f"etl.{config.source.name}"
        self.client = _client(config)
        self.run_id = ""
        self.parent = parent
        self.trace: Trace | None = None  # no spans of its own

    def started(self, summary: RunSummary, options: RunOptions) -> None:
        self.run_id = run_uuid(summary.run_id, self.namespace, self.job)
        with _quiet("send the run's OpenLineage START event"):
            self._started(summary, options)

    def ended(self, summary: RunSummary, error: BaseException | None) -> None:
        with _quiet("send the run's last OpenLineage event"):
            self._ended(summary, error)
        with _quiet("close the OpenLineage client"):
            self.client.close(timeout=10.0)

    def _started(self, summary: RunSummary, options: RunOptions) -> None:
        window = self.config.window
        start = options.start if options.start is not None else window.start_ms
        end = options.end if options.end is not None else None if window.end == "now" else window.end_ms(0)
        facets = self._run_facets(summary)
        facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(
            nominalStartTime=iso(start), nominalEndTime=iso(end) if end is not None else None
        )
        self._emit(RunState.START, summary, facets, self._outputs(summary, finished=False))

    def _ended(self, summary: RunSummary, error: BaseException | None) -> None:
        facets = self._run_facets(summary)
        if summary.window is not None:
            facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(
                nominalStartTime=iso(summary.window[0]), nominalEndTime=iso(summary.window[1])
            )
        state = RunState.COMPLETE
        if error is not None:
            state = RunState.ABORT if summary.status == "interrupted" else RunState.FAIL
            message = summary.error or redact.redact(
                str(error) if isinstance(error, EtlError) else type(error).__name__
            )
            facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=message, programmingLanguage="python"
            )
        self._emit(state, summary, facets, self._outputs(summary, finished=True))

    # -- the event ----------------------------------------------------------------------------------

    def _emit(
        self,
        state: RunState,
        summary: RunSummary,
        facets: dict[str, RunFacet],
        outputs: list[OutputDataset],
    ) -> None:
        event = RunEvent(
            eventType=state,
            eventTime=datetime.now(tz=UTC).isoformat(),
            run=Run(runId=self.run_id, facets=facets),
            job=Job(
                namespace=self.namespace,
                name=self.job,
                facets={
                    "jobType": job_type_job.JobTypeJobFacet(
                        processingType="BATCH", integration="ETL", jobType="JOB"
                    )
                },
            ),
            inputs=self._inputs(),
            outputs=outputs,
            producer=PRODUCER,
        )
        self.client.emit(event)

    def _run_facets(self, summary: RunSummary) -> dict[str, RunFacet]:
        record = summary.as_dict()
        facets: dict[str, RunFacet] = {
            "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
                version=__version__, name="etl", openlineageAdapterVersion=CLIENT_VERSION
            ),
            "etl": EtlRunFacet(
                runId=summary.run_id,
                status=summary.status,
                shard=record["shard"],
                points=record["points"],
                windows=sum(s["windows"] for s in record["series"].values()),
                requests=record["requests"],
                failedWindows=record["failed_window_count"],
                windowsNotDone=record["windows_not_done"],
                seconds=record["seconds"],
                lowestCompleteness=summary.lowest_completeness,
                latePoints=summary.late.points,
            ),
        }
        if self.parent is not None:
            facets["parent"] = _parent_facet(self.parent)
        return facets

    def _inputs(self) -> list[InputDataset]:
        """The platform's series the config selects, one dataset each."""
        platform = urlsplit(self.config.source.platform)
        namespace = f"{platform.scheme}://{platform.netloc}"
        source = datasource_dataset.DatasourceDatasetFacet(
            name=self.config.source.name, uri=self.config.source.platform
        )
        return [
            InputDataset(
                namespace=namespace,
                name="/".join(p for p in (platform.path.strip("/"), Series(s).value) if p),
                facets={"dataSource": source},
            )
            for s in self.config.series
        ]

    def _outputs(self, summary: RunSummary, finished: bool) -> list[OutputDataset]:
        """The series datasets, the quality dataset (with raw) and the reference tables the run wrote;
        once it is over, what it wrote to each."""
        storage = _storage(self.config)
        named: list[tuple[str, pa.Schema | None]] = [
            (Series(s).value, SCHEMAS[Series(s)]) for s in self.config.series
        ]
        if Series.RAW in self.config.series:
            named.append((QUALITY, QUALITY_SCHEMA))
        named += [(f"dimensions/{table}", None) for table in summary.dimensions]
        outputs = []
        for name, schema in named:
            namespace, path = location(storage.display(name))
            facets: dict[str, Any] = {}
            if schema is not None:
                facets["schema"] = _schema_facet(schema)
            output_facets: dict[str, Any] = {}
            if finished:
                output_facets = self._written(summary, name, storage)
                if name == QUALITY and summary.quality_rows:
                    facets["dataQualityMetrics"] = _quality_facet(summary)
            outputs.append(
                OutputDataset(namespace=namespace, name=path, facets=facets, outputFacets=output_facets)
            )
        return outputs

    def _written(self, summary: RunSummary, name: str, storage: Storage) -> dict[str, Any]:
        if name == QUALITY:
            rows, files = summary.quality_rows, None
        elif name in summary.series:
            totals = summary.series[name]
            rows, files = totals.points, sorted(totals.files)
        elif name.startswith("dimensions/"):
            return {}
        else:
            rows, files = 0, []
        return {
            "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                rowCount=rows,
                size=_bytes(storage, name, files) if files else 0 if files is not None else None,
                fileCount=len(files) if files is not None else None,
            )
        }


def _client(config: Config) -> OpenLineageClient:
    """The client of the config's transport, else of the client's own configuration (OPENLINEAGE_URL,
    OPENLINEAGE_CONFIG, openlineage.yml), which it reads without leaving a trace in the environment."""
    section = config.lineage
    transport = section.transport if section is not None else None
    if transport is None:
        with _environment_kept():
            return OpenLineageClient()
    given: dict[str, Any] = {"type": transport.type}
    if transport.type == "http":
        given.update(url=transport.url, endpoint=transport.endpoint, timeout=transport.timeout)
        if transport.api_key is not None:
            given["auth"] = {"type": "api_key", "apiKey": transport.api_key.get_secret_value()}
    elif transport.type == "file":
        given.update(log_file_path=transport.path, append=True)
    with _environment_kept():
        return OpenLineageClient(config={"transport": given})


@contextmanager
def _environment_kept() -> Iterator[None]:
    """The client copies OPENLINEAGE_URL into OPENLINEAGE__TRANSPORT__* variables of the process's
    environment as it starts: they are taken back out (a program's environment is its own)."""
    before = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}
    try:
        yield
    finally:
        for name in [k for k in os.environ if k.startswith("OPENLINEAGE") and k not in before]:
            del os.environ[name]
        os.environ.update(before)


@contextmanager
def _quiet(what: str) -> Iterator[None]:
    """Lineage is a side channel: a transport that fails, or anything else, is a warning, not the run's
    failure."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - whatever a transport raises
        log.warning("lineage: could not %s: %s", what, redact.redact(f"{type(exc).__name__}: {exc}"))


def _storage(config: Config) -> Storage:
    from etl.storage.atomic import Storage

    return Storage(config.sink.path, config.sink.storage_options)


def _bytes(storage: Storage, dataset: str, files: Sequence[str]) -> int | None:
    """The bytes of the files a run wrote to a dataset (paths relative to the output, to the dataset, or
    whole URLs); None when the store cannot say."""
    paths = []
    for file in files:
        if "://" in file or os.path.isabs(file):
            paths.append(file)
        else:
            inside = file if file.startswith(f"{dataset}/") else f"{dataset}/{file}"
            paths.append(storage.full(inside))
    try:
        return int(sum(storage.fs.sizes(paths)))
    except Exception as exc:  # noqa: BLE001 - any store's error: the figure is left out
        log.debug("lineage: the sizes of %s's files are unknown: %s", dataset, exc)
        return None


def _schema_facet(schema: pa.Schema) -> schema_dataset.SchemaDatasetFacet:
    return schema_dataset.SchemaDatasetFacet(
        fields=[
            schema_dataset.SchemaDatasetFacetFields(name=f.name, type=str(f.type), ordinal_position=i)
            for i, f in enumerate(schema, start=1)
        ]
    )


def _quality_facet(summary: RunSummary) -> data_quality_metrics_dataset.DataQualityMetricsDatasetFacet:
    """The quality rows the run wrote: how many, and the lowest completeness among them."""
    lowest = summary.lowest_completeness
    return data_quality_metrics_dataset.DataQualityMetricsDatasetFacet(
        rowCount=summary.quality_rows,
        columnMetrics={
            "completeness": data_quality_metrics_dataset.ColumnMetrics(
                count=summary.quality_rows, min=lowest, nullCount=None
            )
        },
    )


def _parent_facet(found: ParentRun) -> parent_run.ParentRunFacet:
    root = found.root or found
    return parent_run.ParentRunFacet(
        run=parent_run.Run(runId=found.run_id),
        job=parent_run.Job(namespace=found.namespace, name=found.name),
        root=parent_run.Root(
            run=parent_run.RootRun(runId=root.run_id),
            job=parent_run.RootJob(namespace=root.namespace, name=root.name),
        ),
    )
