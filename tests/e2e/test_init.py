"""`etl init` against the emulator playing each choice a real server makes where the document is silent:
it reports each one, stays within its request budget, and the config it writes runs exactly."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from etl.cli import main
from etl.config import load_config
from etl.ops.init import Choices, render
from etl.ops.probe import Findings, base_candidates, probe, stamp_pattern, suggest_concurrency
from etl.timeutil import to_ms
from etl_emulator.faults import ERROR_BODIES, SESSION_ENDS
from etl_emulator.server import EmulatorConfig, RunningEmulator, run_emulator
from tests.support.emulator import NOW, series_requests
from tests.support.expected import SERIES, expected_table
from tests.support.output import read

FIRST = "2026-11-19T00:00:00Z"  # where the written config's first run starts: a day before the clock
KEYS = {
    "base_url",
    "sign_in",
    "objects",
    "parameters",
    "search_agrees_with_lists",
    "count_cap",
    "count_default",
    "stamp_format",
    "latency_ms",
    "requests_made",
}


def settings(**overrides) -> EmulatorConfig:
    """The emulator's default instance (3 objects of 4 physical and 2 calculated parameters), clock fixed."""
    return EmulatorConfig(now_ms=to_ms(NOW), **overrides)


@pytest.fixture(scope="module")
def emu() -> Iterator[RunningEmulator]:
    with run_emulator(settings()) as running:
        yield running


@pytest.fixture(autouse=True)
def clean(emu: RunningEmulator) -> Iterator[None]:
    emu.set_faults(reset=True)
    emu.clear_requests()
    yield
    emu.set_faults(reset=True)


def etl(capsys, monkeypatch, *args: str, password: str | None = "demo") -> tuple[int, str, str]:
    if password is None:
        monkeypatch.delenv("ETL_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("ETL_PASSWORD", password)
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def found_by(url: str, password: str = "demo") -> Findings:
    return asyncio.run(probe(url, "demo", password))


def init_then_run(emu, tmp_path, capsys, monkeypatch, *, search: bool = True) -> dict:
    """`etl init --json -o FILE` given the host alone, then `etl run` with FILE, checked point by point.
    The findings."""
    path, out = tmp_path / "etl.yaml", tmp_path / "out"
    code, printed, _ = etl(
        capsys,
        monkeypatch,
        *("init", "--base-url", emu.url, "--username", "demo", "--json", "-o", str(path)),
        *("--start", FIRST, "--sink-path", str(out)),
    )
    found = json.loads(printed)
    assert code == 0 and found.keys() >= KEYS
    assert found["base_url"] == emu.base_url and found["base_path_added"]
    assert found["objects"] == 3 and found["parameters"] == {"physical": 9, "calculated": 6, "signal": 3}
    assert found["search_agrees_with_lists"] is search and found["stamp_format"] == "YYYY-MM-DDThh:mm:ss.sssZ"
    # Polite and bounded, and it says how many it made: the emulator logged every one of them.
    assert found["requests_made"] == len(emu.requests()) <= 50

    code, printed, _ = etl(capsys, monkeypatch, "run", "-c", str(path), "--json", "--no-progress")
    summary = json.loads(printed)
    assert code == 0 and summary["status"] == "ok" and summary["objects"] == 3
    end = to_ms(summary["window"]["end"])
    for series in SERIES:
        want = expected_table(emu.config, series, to_ms(FIRST), end, objects=(1, 2, 3))
        got = read(out, series)
        assert got.num_rows == want.num_rows > 0, series
        assert got.select(want.column_names).equals(want), series
    return found


def test_init_finds_a_form_sign_in_and_a_silent_cap_and_its_config_runs_exactly(
    emu, tmp_path, capsys, monkeypatch
):
    emu.set_faults(max_count=3000, sign_in_via="form")
    found = init_then_run(emu, tmp_path, capsys, monkeypatch)
    assert found["count_cap"] == 3000 and found["sign_in"] == "form"
    assert found["count_default"] is None  # the default (10,000) is above the cap: it cannot show
    assert found["session_end"] == "401" and found["error_body"] == "json"
    config = load_config(tmp_path / "etl.yaml")
    assert config.source.sign_in == "form" and config.extract.max_points == 3000


@pytest.mark.parametrize("envelope, key", [("items", "items"), ("spring", "content")])
def test_a_search_in_an_envelope_is_read_and_doctor_passes_the_deployment(
    emu, tmp_path, capsys, monkeypatch, envelope, key
):
    """A search answered `{"total": N, "items": [...]}` or as Spring's Page: init completes (exit 0), finds
    the silent cap, its config runs exactly (listing parameters through the search's pages), and doctor
    calls the deployment healthy."""
    emu.set_faults(search_envelope=envelope, max_count=3000)
    found = init_then_run(emu, tmp_path, capsys, monkeypatch)
    assert found["count_cap"] == 3000 and found["search_envelope"] == key and not found["notes"]
    searched = [r for r in emu.requests() if r["path"].endswith("/search/params")]
    lists = [r for r in emu.requests() if r["path"].endswith(("/db/contrdeviceparam", "/db/contrcalcparam"))]
    assert searched and len(lists) == 2 * 3 + 2  # the probe's 3 sample objects, the run's check of one
    code, printed, _ = etl(capsys, monkeypatch, "doctor", "-c", str(tmp_path / "etl.yaml"))
    assert code == 0 and "FAIL" not in printed and "WARN" not in printed, printed


def test_types_written_as_objects_are_read_by_name_and_the_search_is_used(emu, tmp_path, capsys, monkeypatch):
    """A server whose records name their type as an object, `"type": {"id": 2, "name": "calculated"}`: init
    says so, the run trusts the search and lists no object's parameters but the check's, and every kind
    is read right (each route asked, each row's kind; init_then_run compares every point)."""
    emu.set_faults(type_shape="object")
    found = init_then_run(emu, tmp_path, capsys, monkeypatch)
    assert found["type_shape"] == "object"
    paths = [r["path"] for r in emu.requests()]
    lists = [p for p in paths if p.endswith(("/db/contrdeviceparam", "/db/contrcalcparam"))]
    assert any(p.endswith("/search/params") for p in paths) and len(lists) == 2 * 3 + 2
    routes = {(r["param_id"], r["path"].split("/db/")[1].split("/")[0]) for r in series_requests(emu)}
    assert {pid for pid, route in routes if route == "signal"} == {1004, 2004, 3004}
    assert {pid for pid, route in routes if route == "calcvalue"} == {1501, 1502, 2501, 2502, 3501, 3502}


def test_a_search_it_cannot_read_is_a_note_and_the_config_still_runs(emu, tmp_path, capsys, monkeypatch):
    """Any answer the probe cannot use is a note saying what etl does instead; the probe goes on."""
    from etl.client.api import MonitoringClient
    from etl.errors import InvalidResponse

    async def unreadable(self, *args, **kwargs):
        raise InvalidResponse("GET /search/params: expected a JSON array, or an object holding one; got str")

    monkeypatch.setattr(MonitoringClient, "search_page", unreadable)
    emu.set_faults(max_count=3000)
    found = init_then_run(emu, tmp_path, capsys, monkeypatch, search=False)
    assert found["count_cap"] == 3000 and found["search_agrees_with_lists"] is False
    assert found["notes"] == [
        "the parameter search cannot be used (GET /search/params: expected a JSON array, or an object holding "
        "one; got str): runs list parameters object by object (2 requests per object)"
    ]


def test_init_finds_a_small_default_count_and_its_config_runs_exactly(emu, tmp_path, capsys, monkeypatch):
    """A default below a day's points (the signal route takes no count: its answers are cut by it), ended
    sessions answered with a sign-in page, HTML error bodies."""
    emu.set_faults(count_default=500, session_end="html-login", error_body="html", session_max_requests=40)
    found = init_then_run(emu, tmp_path, capsys, monkeypatch)
    assert (found["count_default"], found["count_cap"], found["sign_in"]) == (500, None, "query")
    assert (found["session_end"], found["error_body"]) == ("html-login", "html")


# Each choice the emulator plays, with what the probe must say of it. Ended sessions and error bodies are
# paired so that every one of each is seen.
CHOICES = [
    ({"count_default": 500}, {"count_default": 500, "count_cap": None}),
    ({"max_count": 700}, {"count_cap": 700, "count_cap_series": "raw"}),
    ({"sign_in_via": "query"}, {"sign_in": "query", "sign_in_refused": []}),
    ({"sign_in_via": "form"}, {"sign_in": "form", "sign_in_refused": ["query"]}),
    ({"count_reject_over": 50_000}, {"count_refused_over": 100_000, "count_cap": None}),
    ({"type_shape": "object"}, {"type_shape": "object", "search_agrees_with_lists": True}),
    ({"type_shape": "text"}, {"type_shape": "text", "search_agrees_with_lists": True}),
    *(
        ({"session_end": end, "error_body": body}, {"session_end": end, "error_body": body})
        for end, body in zip(SESSION_ENDS, itertools.cycle(ERROR_BODIES))
    ),
]


@pytest.mark.parametrize("faults, expected", CHOICES, ids=[json.dumps(c[0]) for c in CHOICES])
def test_init_reports_each_silent_choice(emu, faults, expected):
    emu.set_faults(**faults)
    found = found_by(emu.base_url).as_dict()
    assert {k: found[k] for k in expected} == expected
    assert found["requests_made"] == len(emu.requests()) <= 50
    assert not found["base_path_added"] and found["sessions_ended"] == 0


def test_sessions_ended_during_the_probe_are_noted_and_change_nothing_else(emu):
    emu.set_faults(session_max_requests=4, session_end="302-login", max_count=700)
    found = found_by(emu.base_url)
    assert found.sessions_ended > 0 and any("ended" in note for note in found.notes)
    assert (found.session_end, found.count_cap, found.sign_in) == ("302-login", 700, "query")
    assert found.requests_made == len(emu.requests()) <= 50


def test_a_cap_above_every_raw_day_is_measured_on_a_dense_instance():
    with run_emulator(settings(period_range=(10, 20))) as dense:
        dense.set_faults(max_count=5000)
        found = found_by(dense.base_url)
    assert (found.count_cap, found.count_cap_series) == (5000, "raw")


def test_written_config_keeps_what_was_found_and_never_the_password(tmp_path):
    found = Findings("https://host.example/sem-restservices", "form", base_path_added=True, objects=2)
    found.count_cap, found.count_cap_series, found.latency_ms = 3000, "raw", 80.0
    found.suggested_concurrency = suggest_concurrency(found.latency_ms)
    text = render(found, Choices("ops user", to_ms(FIRST), str(tmp_path / "out")))
    data = yaml.safe_load(text)
    assert data["source"] == {
        "base_url": "https://host.example/sem-restservices",
        "username": "ops user",
        "password": "${ETL_PASSWORD}",
        "sign_in": "form",
    }
    assert data["extract"] == {"concurrency": "auto", "max_points": 3000}
    assert "a fixed number: 32" in text
    assert to_ms(data["window"]["start"]) == to_ms(FIRST)
    assert "cut at 3000" in text and "sem-restservices was added" in text


def test_small_helpers():
    assert base_candidates("https://h") == ["https://h", "https://h/sem-restservices"]
    assert base_candidates("https://h/sem-restservices/") == ["https://h/sem-restservices"]
    assert base_candidates("https://h/x") == [
        "https://h/x",
        "https://h/x/sem-restservices",
        "https://h/sem-restservices",
    ]
    assert stamp_pattern("2026-11-01T00:00:00.000Z") == "YYYY-MM-DDThh:mm:ss.sssZ"
    assert stamp_pattern("2026-11-01T03:00:00+03:00") == "YYYY-MM-DDThh:mm:ss+03:00"
    assert stamp_pattern(1793491200000) == "epoch milliseconds"
    assert (suggest_concurrency(None), suggest_concurrency(1), suggest_concurrency(40)) == (4, 4, 16)


def test_an_https_url_to_an_http_server_is_one_tls_line_at_once(emu, capsys, monkeypatch):
    """The probe's requests fail as a run's do: a TLS protocol mismatch says what to check, and is not
    retried (the probe once called it a failed connection)."""
    https = emu.url.replace("http://", "https://")
    code, _, err = etl(capsys, monkeypatch, "init", "--base-url", https, "--username", "demo")
    assert code == 4 and err.count("\n") == 1, err
    assert (
        err.startswith("etl: error: TLS: no TLS handshake with https://127.0.0.1:") and "not https://" in err
    )
    assert "gave up" not in err


def test_a_ca_bundle_without_certificates_is_one_line_exit_2(emu, tmp_path, capsys, monkeypatch):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not a certificate")
    argv = ("init", "--base-url", emu.url, "--username", "demo", "--ca-bundle", str(bundle))
    code, _, err = etl(capsys, monkeypatch, *argv)
    assert code == 2 and err.count("\n") == 1 and "--ca-bundle: cannot load CA certificates" in err, err
    assert emu.requests() == []


def test_wrong_password_wrong_base_path_and_no_password_are_one_line_each(emu, tmp_path, capsys, monkeypatch):
    code, _, err = etl(capsys, monkeypatch, "init", "--base-url", emu.url, "--username", "demo", password="x")
    assert code == 3 and "both as query parameters and as a form body" in err and err.count("\n") == 1
    with run_emulator(settings(base_path="/api")) as elsewhere:
        code, _, err = etl(capsys, monkeypatch, "init", "--base-url", elsewhere.url, "--username", "demo")
        assert code == 2 and "no sign-in endpoint found" in err and "/sem-restservices/auth/login" in err
        assert found_by(elsewhere.url + "/api").base_url == elsewhere.url + "/api"
    code, _, err = etl(
        capsys, monkeypatch, "init", "--base-url", emu.url, "--username", "demo", password=None
    )
    assert code == 2 and "ETL_PASSWORD" in err
    existing = Path(tmp_path / "etl.yaml")
    existing.write_text("keep me")
    code, _, err = etl(
        capsys, monkeypatch, "init", "--base-url", emu.url, "--username", "demo", "-o", str(existing)
    )
    assert code == 2 and "--force" in err and existing.read_text() == "keep me"
