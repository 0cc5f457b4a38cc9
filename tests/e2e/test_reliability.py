"""Server faults during whole pipeline runs, over a real socket: the output is still exactly the source's."""

from __future__ import annotations

import json
import time

import pytest

from etl.timeutil import to_ms
from etl_emulator.server import run_emulator
from tests.support.checks import assert_exact, assert_output_matches_state
from tests.support.cli import etl, etl_process
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SOURCE
from tests.support.output import checkpoints
from tests.support.pipeline import run

# Each fault alone, then all together. Rates are per request, drawn independently: with the run's retry
# policy (tests/support/configs.py: 8 attempts, 10-200 ms backoff) a request gives up with a probability of
# 0.2 ** 8 = 2.6e-6, a run of a few hundred requests about once in a thousand; RETRY's 12 attempts make
# that 4e-9 and 1e-6.
RETRY = {"attempts": 12}
FAULTS = {
    "server_errors": dict(error_rate=0.2),
    "429_storms": dict(rate_limit_rate=0.2, retry_after=0.1),
    "latency_spikes": dict(latency_spike_rate=0.15, latency_spike=0.8),
    "expiring_sessions": dict(session_max_requests=5),
    "truncated_bodies": dict(truncate_rate=0.2),
    "dropped_connections": dict(drop_rate=0.2),
}
# Together at lower rates (errors stay at 20%), else 429 pauses alone make the run last 15 s.
ALL_TOGETHER = dict(
    error_rate=0.2,
    rate_limit_rate=0.1,
    retry_after=0.1,
    latency_spike_rate=0.05,
    latency_spike=0.8,
    session_max_requests=10,
    truncate_rate=0.1,
    drop_rate=0.1,
)
# What the summary must count for each fault (retries_by_reason keys, or re-sign-ins).
COUNTED = {
    "server_errors": ["http_500", "http_502", "http_503"],
    "429_storms": ["http_429"],
    "latency_spikes": ["timeout"],
    "expiring_sessions": ["relogins"],
    "truncated_bodies": ["invalid_body"],
    "dropped_connections": ["connection"],
}


def counted(summary: dict, key: str) -> int:
    return summary["relogins"] if key == "relogins" else summary["retries_by_reason"].get(key, 0)


# Every fault into Parquet; into the lake tables the faults that cut slabs short or redo requests mid-slab
# (the others differ from these only before the writer), to keep the suite's time.
LAKE_FAULTS = ["server_errors", "expiring_sessions", "truncated_bodies", "dropped_connections"]


@pytest.mark.parametrize(
    "name, fmt",
    [(name, "parquet") for name in FAULTS]
    + [(name, fmt) for fmt in ("delta", "iceberg") for name in LAKE_FAULTS],
)
def test_faulty_server_run_equals_the_source(fresh_emulator, tmp_path, name, fmt):
    fresh_emulator.set_faults(seed=11, **FAULTS[name])
    config = make_config(
        fresh_emulator.base_url, tmp_path, source={"read_timeout": 0.4}, sink={"format": fmt}, retry=RETRY
    )
    summary = run(config).as_dict()
    assert_exact(tmp_path)
    assert summary["status"] == "ok" and summary["failed_window_count"] == 0
    # Every kind of fault was seen, retried and counted.
    missing = [key for key in COUNTED[name] if counted(summary, key) == 0]
    # A 20% rate over ~60 requests hits each status of 500/502/503 with near certainty, but not surely.
    assert not missing or set(missing) < {"http_500", "http_502", "http_503"}, (missing, summary)
    assert summary["retries"] == sum(summary["retries_by_reason"].values())


def test_all_faults_through_the_cli_summary(fresh_emulator, tmp_path):
    """The user's view: `etl run --json` under every fault prints counts that match the server's log."""
    fresh_emulator.set_faults(seed=5, **ALL_TOGETHER)
    # All faults at once fail ~45% of attempts: more attempts keep a failed run out of the question.
    data = config_dict(
        fresh_emulator.base_url, tmp_path / "out", source={"read_timeout": 0.4}, retry={"attempts": 25}
    )
    data["source"]["password"] = "${ETL_PASSWORD}"
    result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert_exact(tmp_path / "out")
    # A request the client gave up on (a spike past its read timeout) is logged once the server is done
    # with it: wait for the log to hold every request the run made (a guard against a hang only).
    deadline = time.monotonic() + 60
    while len(log := fresh_emulator.requests()) < summary["requests"] and time.monotonic() < deadline:
        time.sleep(0.05)
    faults = [r["fault"] for r in log if r.get("fault")]
    # Every injected fault cost one retry (a spike shorter than the read timeout costs none, a 401
    # of an expired session a re-sign-in, not a retry).
    assert summary["retries"] >= sum(1 for f in faults if not f.startswith("hostile"))
    logins = [i for i, r in enumerate(log) if r["path"].endswith("/auth/login")]
    first_ok = next(i for i in logins if log[i]["status"] == 200)
    assert summary["relogins"] == sum(1 for i in logins if i > first_ok) > 0  # one sign-in per expiry
    assert summary["requests"] == len(log)


def starts_ms(log: list[dict]) -> list[int]:
    return sorted(r["ts"] for r in log)


def test_requests_in_flight_never_exceed_the_cap(fresh_emulator, tmp_path):
    """extract.concurrency caps the whole run. With a fixed server latency L, at most `cap` answers
    are in progress at once, so any cap+1 consecutive request starts span at least L."""
    cap, latency_ms = 3, 50
    fresh_emulator.set_faults(latency=latency_ms / 1000)
    run(make_config(fresh_emulator.base_url, tmp_path, extract={"concurrency": cap}))
    ts = starts_ms(fresh_emulator.requests())
    spans = [b - a for a, b in zip(ts, ts[cap:], strict=False)]
    assert min(spans) >= latency_ms - 2  # the server clock has ms resolution
    # ...and the cap is used: some `cap` consecutive starts lie within one latency.
    assert min(b - a for a, b in zip(ts, ts[cap - 1 :], strict=False)) < latency_ms


def test_a_429_pauses_every_request_of_the_run(fresh_emulator, tmp_path):
    """After a 429 with Retry-After R, no request of the run starts during R: not the throttled one,
    nor those queued for a connection slot. Requests already on the wire when the 429 arrived may
    still land during a short grace (the 429's own latency, plus scheduling on a busy machine)."""
    retry_after, grace = 0.6, 0.2
    # Two slots and 50 ms answers keep a queue of requests waiting for a slot when a 429 comes.
    fresh_emulator.set_faults(rate_limit_rate=0.05, retry_after=retry_after, latency=0.05, seed=3)
    summary = run(make_config(fresh_emulator.base_url, tmp_path, extract={"concurrency": 2})).as_dict()
    assert_exact(tmp_path)
    log = fresh_emulator.requests()
    throttled = [r["ts"] for r in log if r.get("fault") == "rate_limit"]
    assert throttled and summary["retries_by_reason"]["http_429"] == len(throttled)
    for t in throttled:
        quiet = [r for r in log if t + grace * 1000 <= r["ts"] < t + retry_after * 1000]
        assert not quiet, f"{len(quiet)} request(s) started while the run should wait after the 429 at {t}"
    # The pause is counted as wall-clock time, once, however many requests it held back.
    paused = sum(
        min(b - a, retry_after * 1000) for a, b in zip(throttled, throttled[1:] + [10**15], strict=True)
    )
    assert abs(summary["throttled_seconds"] - paused / 1000) < 0.1 * len(throttled) + 0.05


def test_retries_back_off_with_jitter(fresh_emulator):
    """A failing request waits 'equal jitter' backoff: attempt k after a random delay in
    [b*2^(k-1)/2, b*2^(k-1)]; two requests failing together do not retry in lockstep."""
    from etl.client import RetryPolicy, SyncMonitoringClient
    from etl.errors import RetriesExhausted

    policy = RetryPolicy(attempts=4, backoff_initial=0.2, backoff_max=10, deadline=30)
    with SyncMonitoringClient(fresh_emulator.base_url, "demo", "demo", retry=policy) as client:
        client.sign_in()
        fresh_emulator.set_faults(error_rate=1.0)

        async def both():
            import asyncio

            inner = client._client
            return await asyncio.gather(inner.object(1), inner.units(1), return_exceptions=True)

        results = client._run(both())
    assert all(isinstance(r, RetriesExhausted) and r.exit_code == 5 for r in results)
    gaps = {}
    for path in ("/sem-restservices/db/object/1", "/sem-restservices/db/object/1/unit"):
        ts = [r["ts"] for r in fresh_emulator.requests() if r["path"] == path]
        assert len(ts) == 4
        gaps[path] = [(b - a) / 1000 for a, b in zip(ts, ts[1:], strict=False)]
        for k, gap in enumerate(gaps[path], start=1):
            cap = 0.2 * 2 ** (k - 1)
            assert cap / 2 - 0.01 <= gap <= cap + 0.3, (path, k, gap)  # + answer time on a busy machine
    first, second = gaps.values()
    assert any(abs(a - b) > 0.005 for a, b in zip(first, second, strict=True))  # jitter, not lockstep


# -- retries exhausted: the server goes away for good part-way --------------------------------------


def series_of(entry: dict) -> tuple[int, str, int, int]:
    """(param id, series, start, end) of a series request in the emulator's log."""
    parts = entry["path"].split("/")
    series = "average" if "average" in parts else "candles" if "candles" in parts else "raw"
    return int(parts[-3]), series, int(parts[-2]), int(parts[-1])


@pytest.mark.parametrize("outage, code", [("errors", 5), ("down", 4)])
def test_server_gone_for_good_keeps_finished_work_and_the_next_run_resumes(tmp_path, outage, code):
    settings = emulator_config()
    retry = {"attempts": 3, "backoff_initial": 0.01, "backoff_max": 0.05, "deadline": 5}
    data = config_dict(
        "http://placeholder/api",
        tmp_path / "out",
        retry=retry,
        window={"overlap": "0s"},
        extract={"concurrency": 2, "slabs_in_flight": 1},
    )
    data["source"]["password"] = "${ETL_PASSWORD}"
    log_folder = tmp_path / "out" / "_state" / SOURCE / "log"
    with run_emulator(settings) as emu:
        port = emu.port
        data["source"]["base_url"] = emu.base_url
        path = write_config(tmp_path / "c.yaml", data)
        emu.set_faults(latency=0.03)  # a run of about a second, to fail part-way
        proc = etl_process("run", "-c", str(path))
        deadline = time.monotonic() + 60
        while not list(log_folder.glob("*.json")):  # the first slab is written and checkpointed
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.005)
        if outage == "errors":
            emu.set_faults(error_rate=1.0)
        else:
            emu.stop()
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("etl: error")]
    assert len(errors) == 1 and "gave up after 3 attempt(s)" in errors[0], stderr
    assert "Traceback" not in stderr
    state = checkpoints(tmp_path / "out")
    done = int((state.end - state.start).sum())
    assert 0 < done < 8 * 3 * (to_ms(END) - to_ms(START))  # some, not all, of 8 parameters x 3 series
    assert_output_matches_state(tmp_path / "out", state)
    assert not [p for p in (tmp_path / "out").rglob("*") if p.name.endswith(".tmp")]

    with run_emulator(settings, port=port) as emu:  # the server is back
        result = etl("run", "-c", str(path))
        assert result.returncode == 0, result.stderr
        again = [series_of(r) for r in emu.requests() if "param_id" in r and "interval_ms" in r]
    assert again
    for param_id, series, start, end in again:  # only what was not checkpointed is fetched again
        assert not any(s < end and start < e for s, e in state.intervals(param_id, series)), (
            param_id,
            series,
        )
    assert_exact(tmp_path / "out")
