"""OpenTelemetry traces of a real run, exported over OTLP/HTTP to a receiver on a loopback port and
decoded from their protobuf: a span for the run, discovery, each slab and each commit, children of the
run's, with their request and point counts."""

from __future__ import annotations

from collections import Counter

import pytest

import etl
from tests.support.configs import make_config
from tests.support.receiver import receiver

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")


def spans_of(posts: list[tuple[str, bytes]]) -> list[dict]:
    found = []
    for path, body in posts:
        assert path == "/v1/traces"
        request = trace_service.ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {
                        a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes
                    }
                    found.append(
                        {
                            "name": span.name,
                            "id": span.span_id,
                            "parent": span.parent_span_id,
                            "trace": span.trace_id,
                            "service": service["service.name"],
                            "error": span.status.code == 2,
                            **attributes,
                        }
                    )
    return found


def test_a_run_exports_its_spans(emulator, tmp_path):
    with receiver() as collector:
        telemetry = {"otlp_endpoint": collector.url, "service_name": "plant-etl"}
        window = {"end": "2026-11-02T00:00:00Z"}
        config = make_config(
            emulator.base_url, tmp_path / "out", series=["raw", "average"], window=window, telemetry=telemetry
        )
        summary = etl.run(config)
    spans = spans_of(collector.posts)
    [run] = [s for s in spans if s["name"] == "etl.run"]
    assert (run["etl.run_id"], run["etl.status"], run["service"]) == (summary.run_id, "ok", "plant-etl")
    record = summary.as_dict()
    assert (run["etl.points"], run["etl.requests"]) == (record["points"], record["requests"]) and run[
        "etl.requests"
    ] > 0
    children = [s for s in spans if s is not run]
    assert all(s["parent"] == run["id"] and s["trace"] == run["trace"] for s in children)
    names = Counter(s["name"] for s in children)
    slabs = sum(s["slabs"] for s in record["series"].values())
    assert names == {"etl.discovery": 1, "etl.slab": slabs, "etl.commit": slabs}
    [discovery] = [s for s in children if s["name"] == "etl.discovery"]
    assert (discovery["etl.objects"], discovery["etl.parameters"]) == (2, 8) and discovery["etl.requests"] > 0
    by_series = Counter()
    for span in children:
        if span["name"] == "etl.slab":
            by_series[span["etl.series"]] += span["etl.points"]
    assert by_series == {name: s["points"] for name, s in record["series"].items()}


def test_a_failed_run_marks_its_span(emulator, tmp_path):
    config = make_config(emulator.base_url, tmp_path / "out", series=["raw"])
    with receiver() as collector:
        config = config.model_copy(
            update={
                "source": config.source.model_copy(
                    update={"password": __import__("pydantic").SecretStr("wrong")}
                ),
                "telemetry": etl.config.TelemetryConfig(otlp_endpoint=collector.url),
            }
        )
        with pytest.raises(etl.AuthError):
            etl.run(config)
    [run] = [s for s in spans_of(collector.posts) if s["name"] == "etl.run"]
    assert run["error"] and run["etl.status"] == "failed"
