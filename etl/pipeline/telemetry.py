"""OpenTelemetry traces of a run (`telemetry:` in the config): a span for the run, and under it one for
discovery, each slab and each commit (etl/support/trace.py), with their request and point counts,
exported over OTLP/HTTP in batches as the run goes (a bounded queue) and the rest when it ends. The tracer provider is the run's own: a program's global
OpenTelemetry setup is left as it is."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from etl.config import Config, TelemetryConfig
from etl.support import redact
from etl.support.optional import require
from etl.support.trace import Span, Trace, Value
from etl.support.version import __version__

require("opentelemetry.sdk", "telemetry")
require("opentelemetry.exporter.otlp.proto.http", "telemetry")

from opentelemetry import trace as otel  # noqa: E402 - after the checks that name the extra
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter  # noqa: E402

if TYPE_CHECKING:
    from etl.pipeline.coordinator import RunOptions
    from etl.pipeline.summary import RunSummary

log = logging.getLogger("etl")


class _Span:
    def __init__(self, span: otel.Span) -> None:
        self.span = span

    def set(self, **attributes: Value) -> None:
        self.span.set_attributes({f"etl.{k}": v for k, v in attributes.items()})


class Telemetry:
    """The run's spans (a `RunObserver` whose `trace` the stages use)."""

    def __init__(self, config: Config, exporter: SpanExporter | None = None) -> None:
        section = config.telemetry
        assert section is not None
        self.provider = TracerProvider(
            resource=Resource.create(
                {
                    "service.name": section.service_name,
                    "service.version": __version__,
                    "etl.source": config.source.name,
                }
            )
        )
        self.provider.add_span_processor(BatchSpanProcessor(exporter or _exporter(section)))
        self.tracer = self.provider.get_tracer("etl", __version__)
        self.run: otel.Span | None = None
        self.trace: Trace | None = self

    def started(self, summary: RunSummary, options: RunOptions) -> None:
        self.run = self.tracer.start_span(
            "etl.run", attributes={"etl.run_id": summary.run_id, "etl.shard": str(summary.shard or "")}
        )

    def span(self, name: str, **attributes: Value) -> AbstractContextManager[Span]:
        return self._span(name, attributes)

    @contextmanager
    def _span(self, name: str, attributes: dict[str, Value]) -> Iterator[Span]:
        parent = otel.set_span_in_context(self.run) if self.run is not None else None
        with self.tracer.start_as_current_span(
            name, context=parent, attributes={f"etl.{k}": v for k, v in attributes.items()}
        ) as span:
            yield _Span(span)

    def ended(self, summary: RunSummary, error: BaseException | None) -> None:
        try:
            self._ended(summary, error)
        except Exception as exc:  # noqa: BLE001 - traces are a side channel: a warning, not the run's failure
            log.warning("telemetry: could not export the run's spans: %s", redact.redact(str(exc)))

    def _ended(self, summary: RunSummary, error: BaseException | None) -> None:
        if self.run is not None:
            record = summary.as_dict()
            _Span(self.run).set(
                status=summary.status,
                points=record["points"],
                requests=record["requests"],
                retries=record["retries"],
                failed_windows=record["failed_window_count"],
            )
            if error is not None:
                self.run.set_status(otel.Status(otel.StatusCode.ERROR, summary.error or type(error).__name__))
            self.run.end()
        self.provider.shutdown()  # exports what is left


def _exporter(section: TelemetryConfig) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=f"{section.otlp_endpoint}/v1/traces",
        headers={name: value.get_secret_value() for name, value in section.headers.items()},
        timeout=section.timeout,
    )
