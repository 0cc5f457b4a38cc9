"""A hostile or broken server, whole `etl run` processes: every run ends with its one line and the exit
code of its class, within the bounds its config sets (time, answer size), with peak memory within
the configured bound, and with the windows it could not fetch left open. Bounds are asserted from the
run's own figures (its summary, `getrusage` of the process); a wall-clock guard only turns a hang into
a failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pytest

from etl.config import RetryConfig
from etl.pipeline.slab import STOP_GRACE
from etl.timeutil import DAY_MS, iso, to_ms
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.checks import assert_exact
from tests.support.cli import ETL_COMMAND, environment, etl_process
from tests.support.configs import config_dict, write_config
from tests.support.emulator import START, emulator_config, series_requests
from tests.support.expected import SERIES, expected_table
from tests.support.output import checkpoints, read

DAY_END = iso(to_ms(START) + DAY_MS)  # one day of raw series keeps each run short
SIX_DAYS_END = iso(to_ms(START) + 6 * DAY_MS)  # 48 raw windows: 8 parameters x 6 days
GUARD = 90.0  # seconds: only a hang comes near it
ROOT = Path(__file__).resolve().parents[2]  # where `python -m tests.support.peak` is found


@pytest.fixture(scope="module")
def server() -> Iterator[RunningEmulator]:
    with run_emulator(emulator_config()) as running:
        yield running


@pytest.fixture
def hostile(server: RunningEmulator) -> Iterator[RunningEmulator]:
    server.set_faults(reset=True)
    server.clear_requests()
    yield server
    server.set_faults(reset=True)


@dataclass
class Outcome:
    code: int
    stderr: str
    summary: dict  # the run's own record, _runs/*.json
    peak_rss_mb: (
        float  # the run's high-water mark, from its own accounting (getrusage, tests/support/peak.py)
    )

    @property
    def errors(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("etl: ")]


def config(emulator: RunningEmulator, out: Path, **sections) -> dict:
    data = config_dict(
        emulator.base_url,
        out,
        series=["raw"],
        window={"end": DAY_END, "overlap": "0s"},
        extract={"concurrency": 4},
        retry={"attempts": 3, "backoff_initial": 0.01, "backoff_max": 0.1, "deadline": 30},
    )
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    data["source"]["password"] = "${ETL_PASSWORD}"
    return data


def start(data: dict, tmp_path: Path, measured: bool = False) -> subprocess.Popen:
    """`etl run` of `data`; `measured`: under tests/support/peak.py, which writes the run's own peak RSS
    to tmp_path/peak (in a session of its own, so that a hang kills both)."""
    path = write_config(tmp_path / "c.yaml", data)
    args = ("run", "-c", str(path), "--no-progress")
    with open(tmp_path / "stderr", "wb") as stderr:  # the child keeps its own descriptor
        if not measured:
            return etl_process(*args, stdout=subprocess.DEVNULL, stderr=stderr)
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.peak", str(tmp_path / "peak"), *ETL_COMMAND, *args],
            env=environment(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=ROOT,
            start_new_session=True,
        )


def finish(proc: subprocess.Popen, tmp_path: Path, out: Path, guard: float = GUARD) -> Outcome:
    """Wait for the process (a hang past `guard` fails the test) and read what it left."""
    deadline = time.monotonic() + guard
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            if os.getpgid(proc.pid) == proc.pid:  # a measured run: its launcher and the run itself
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
            proc.wait()
            pytest.fail(f"etl run still running after {guard:.0f}s:\n{(tmp_path / 'stderr').read_text()}")
        time.sleep(0.02)
    summaries = [json.loads(p.read_bytes()) for p in (out / "_runs").glob("*.json")]
    peak = tmp_path / "peak"
    return Outcome(
        proc.returncode,
        (tmp_path / "stderr").read_text(),
        summaries[0] if summaries else {},
        float(peak.read_text()) if peak.exists() else usage.ru_maxrss / 1024,
    )


def etl_run(data: dict, tmp_path: Path, guard: float = GUARD) -> Outcome:
    return finish(start(data, tmp_path, measured=True), tmp_path, Path(data["sink"]["path"]), guard)


def assert_one_line(outcome: Outcome, code: int, *phrases: str) -> None:
    assert outcome.code == code, outcome.stderr
    assert len(outcome.errors) == 1, outcome.stderr
    assert all(p in outcome.errors[0] for p in phrases), outcome.errors[0]
    assert "Traceback" not in outcome.stderr


# -- bounded time ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "retry_after", ["600", "inf", "soon", "Wed, 21 Oct 2099 07:28:00 GMT"], ids=["600", "inf", "soon", "2099"]
)
def test_retry_after_is_capped_everywhere_and_unreadable_values_wait_a_default(
    hostile, tmp_path, retry_after
):
    hostile.set_faults(rate_limit_rate=0.15, retry_after_text=retry_after, seed=3)
    out = tmp_path / "out"
    outcome = etl_run(config(hostile, out, retry={"attempts": 10, "retry_after_max": 0.2}), tmp_path)
    assert outcome.code == 0, outcome.stderr
    assert_exact(out, START, DAY_END, series=["raw"])
    throttled = sum(r.get("fault") == "rate_limit" for r in hostile.requests())
    assert throttled and outcome.summary["retries_by_reason"]["http_429"] == throttled
    # Each 429 closed the client's gate for at most retry_after_max (they may overlap).
    assert outcome.summary["throttled_seconds"] <= 0.2 * throttled + 0.01


THROTTLED = 1001  # 2 of the fleet's 8 parameters per route: the others' answers get past the gate


def throttled_run(hostile: RunningEmulator, tmp_path: Path, retry: dict, guard: float = GUARD) -> None:
    """Every request of one parameter answers 429 with Retry-After: 600. Each 429 pauses every request of
    the run (retry.retry_after_max), but that parameter's windows fail alone once their retries run out
    (other requests got through meanwhile): the run ends within its deadline with one line (exit 5, the
    class of a 429), the other parameters' windows are written and checkpointed, that one's stay open
    and the next run fetches them."""
    hostile.set_faults(throttled_params=[THROTTLED], retry_after_text="600")
    out = tmp_path / "out"
    data = config(hostile, out)
    data["retry"], data["series"] = retry, SERIES
    outcome = etl_run(data, tmp_path, guard)
    assert_one_line(outcome, 5, f"{len(SERIES)} window(s) failed", f"param {THROTTLED}", "HTTP 429")
    summary = outcome.summary
    assert summary["windows_not_done"] == 0 and summary["stopped"] is None  # every window was tried
    assert summary["seconds"] < RetryConfig(**retry).run_deadline
    covered = checkpoints(out)
    for series in SERIES:
        assert not covered.intervals(THROTTLED, series)
        want = expected_table(emulator_config(), series, to_ms(START), to_ms(DAY_END))
        want = want.filter(pc.not_equal(want["param_id"], THROTTLED))
        for pid in set(want["param_id"].to_pylist()):
            assert covered.intervals(pid, series) == [(to_ms(START), to_ms(DAY_END))], (pid, series)
        assert read(out, series).select(want.column_names).equals(want), series
    hostile.set_faults(reset=True)
    assert etl_run(data, tmp_path).code == 0
    assert_exact(out, START, DAY_END, series=SERIES)


def test_a_parameter_throttled_for_good_fails_alone_and_the_others_are_checkpointed(hostile, tmp_path):
    throttled_run(hostile, tmp_path, {"retry_after_max": 0.5, "deadline": 2})


@pytest.mark.slow
@pytest.mark.timeout(RetryConfig().run_deadline + 600)  # the run's own bound, and the rerun
def test_with_the_default_retry_settings_a_parameter_throttled_for_good_ends_the_run_in_time(
    hostile, tmp_path
):
    """The same with the defaults: each 429 honoured for 120 s, a window given 300 s, the run 45 min.
    Minutes long: `make soak`."""
    throttled_run(hostile, tmp_path, {}, guard=RetryConfig().run_deadline + 300)


def test_a_run_stops_at_its_deadline_saying_what_it_left_open(hostile, tmp_path):
    """retry.run_deadline: the run stops as on SIGTERM (windows in flight get STOP_GRACE), writes and
    checkpoints what it fetched, and says what it left; the next run fetches the rest."""
    hostile.set_faults(latency=0.3)  # sign-in and listings take about 3 s, the 24 windows 8 or more
    out = tmp_path / "out"
    data = config(hostile, out, extract={"concurrency": 1}, retry={"run_deadline": 6})
    data["series"] = SERIES
    outcome = etl_run(data, tmp_path)
    assert_one_line(outcome, 4, "reached its deadline (retry.run_deadline, 6s)", "window(s) not fetched")
    summary = outcome.summary
    assert summary["status"] == "interrupted" and summary["stopped"] == "run_deadline"
    planned = sum(p["windows"] for p in summary["planned"].values())
    done = sum(s["windows"] for s in summary["series"].values())
    assert summary["windows_not_done"] == planned - done > 0
    assert f"{summary['windows_not_done']} window(s) not fetched" in outcome.errors[0]
    # The deadline, the grace of the windows in flight, and the writing of what was fetched.
    assert summary["seconds"] < 6 + STOP_GRACE + 5
    assert_covered_exact(out, checkpoints(out), SERIES)
    hostile.set_faults(reset=True)
    assert etl_run(data, tmp_path).code == 0
    assert_exact(out, START, DAY_END, series=SERIES)


def test_a_throttle_past_the_run_deadline_stops_the_run_without_waiting(hostile, tmp_path):
    """Every series request answers 429 with Retry-After: 600, honoured for 60 s, and the run may take 30:
    waiting would only end in the deadline, so the run stops at the first 429 (windows left open)."""
    hostile.set_faults(throttled_params=list(range(1001, 1004)) + [1501, 2001, 2002, 2003, 2501])
    hostile.set_faults(retry_after_text="600")
    out = tmp_path / "out"
    data = config(hostile, out, retry={"retry_after_max": 60, "deadline": 300, "run_deadline": 30})
    outcome = etl_run(data, tmp_path)
    assert_one_line(
        outcome, 5, "a 429 holds every request until past the run's deadline (retry.run_deadline, 30s)"
    )
    summary = outcome.summary
    assert summary["stopped"] == "throttled" and summary["seconds"] < 30  # it did not wait
    assert summary["windows_not_done"] == sum(p["windows"] for p in summary["planned"].values())
    assert not len(checkpoints(out))


def test_a_dripping_answer_ends_at_the_request_timeout_with_its_windows_open(hostile, tmp_path):
    hostile.set_faults(hostile=["drip"])  # 1 byte a second: no read ever waits long enough to time out
    out = tmp_path / "out"
    data = config(hostile, out, source={"request_timeout": 1}, retry={"attempts": 2, "deadline": 10})
    outcome = etl_run(data, tmp_path)
    assert_one_line(outcome, 4, "no complete answer within 1s (source.request_timeout)")
    assert outcome.summary["status"] == "failed"
    assert outcome.summary["seconds"] < 10 + 1 + 5  # retry.deadline + one request_timeout + start-up
    assert not len(checkpoints(out))  # every window stays open: the next run fetches it


def test_a_window_takes_at_most_retry_deadline_however_many_requests_it_needs(hostile, tmp_path):
    hostile.set_faults(latency=0.3)  # each answer is quick enough; a window needs dozens of them
    out = tmp_path / "out"
    data = config(
        hostile, out, extract={"concurrency": 2, "max_points": 50}, retry={"deadline": 2, "attempts": 2}
    )
    outcome = etl_run(data, tmp_path)
    assert_one_line(outcome, 4, "not fetched within retry.deadline (2s)")
    assert outcome.summary["seconds"] < 2 * 2 + 10  # two windows at once, each its deadline, and start-up
    assert_covered_exact(out, checkpoints(out))  # a short window may finish first: kept exactly


def test_a_continuation_that_does_not_advance_fails_its_window_after_a_few_requests(hostile, tmp_path):
    hostile.set_faults(hostile=["stuck"])  # every answer starts at midnight, whatever start is asked
    out = tmp_path / "out"
    outcome = etl_run(config(hostile, out, extract={"max_points": 50}), tmp_path)
    assert_one_line(outcome, 6, "window(s) failed", "do not advance in time")
    failed = outcome.summary["failed_windows"]
    assert failed and all("do not advance in time" in f for f in failed)
    # The first answer, the pieces of the rest asked at once (at most 64), and a few stalls: no storm.
    assert len(series_requests(hostile)) <= 8 * (1 + 64 + 4)
    # A window whose first answer held it all (the signal parameter: /db/signal takes no count) is kept,
    # exactly; the others stay open.
    assert_covered_exact(out, checkpoints(out))


def assert_covered_exact(out: Path, covered, series=("raw",)) -> None:
    """The output holds exactly the source's points of the windows the checkpoints cover (one a day)."""
    for name in series:
        want = expected_table(emulator_config(), name, to_ms(START), to_ms(DAY_END))
        keep = [bool(covered.intervals(p, name)) for p in want["param_id"].to_pylist()]
        want = want.filter(keep)
        got = read(out, name) if (out / name).exists() else want.schema.empty_table()
        assert got.select(want.column_names).equals(want), name


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_a_stuck_run_within_seconds_keeping_what_finished(hostile, tmp_path, signum):
    hostile.set_faults(hostile=["drip"], hostile_rate=0.5, seed=1)  # half the answers never end
    out = tmp_path / "out"
    proc = start(config(hostile, out), tmp_path)
    deadline = time.monotonic() + GUARD
    while sum(r.get("fault") == "hostile_drip" for r in hostile.requests()) < 4:  # all slots stuck
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()
        time.sleep(0.02)
    proc.send_signal(signum)
    outcome = finish(proc, tmp_path, out, guard=30)  # a run that waits for its stuck answers hangs
    assert_one_line(outcome, 130, "etl: interrupted")
    assert outcome.summary["status"] == "interrupted"
    # The stuck windows were cancelled once the grace period (2 s) ran out: none failed, as one would at
    # retry.deadline (30 s) or source.request_timeout.
    assert outcome.summary["failed_window_count"] == 0, outcome.summary["failed_windows"]
    dripping = {r["param_id"] for r in hostile.requests() if r.get("fault") == "hostile_drip"}
    covered = checkpoints(out)
    assert not any(covered.intervals(p, "raw") for p in dripping)  # stuck windows stay open...
    assert_covered_exact(out, covered)  # ...those that finished are written and checkpointed
    hostile.set_faults(reset=True)
    again = etl_run(config(hostile, out), tmp_path)  # ...and the next run fetches them
    assert again.code == 0, again.stderr
    assert_exact(out, START, DAY_END, series=["raw"])


# -- bounded memory -------------------------------------------------------------------------------

LIMIT_MB = 16


@pytest.fixture(scope="module")
def healthy_rss_mb(server: RunningEmulator, tmp_path_factory) -> Callable[[int], float]:
    """Peak RSS of the same one-day run against a well-behaved server, at a concurrency (measured once)."""
    measured: dict[int, float] = {}

    def at(concurrency: int) -> float:
        if concurrency not in measured:
            server.set_faults(reset=True)
            tmp = tmp_path_factory.mktemp("baseline")
            outcome = etl_run(config(server, tmp / "out", extract={"concurrency": concurrency}), tmp)
            assert outcome.code == 0, outcome.stderr
            measured[concurrency] = outcome.peak_rss_mb
        return measured[concurrency]

    return at


@pytest.fixture(scope="module")
def baseline_rss_mb(healthy_rss_mb: Callable[[int], float]) -> float:
    return healthy_rss_mb(2)


@pytest.mark.parametrize("kind", ["gzip_bomb", "endless", "huge"])
def test_an_answer_over_the_size_limit_fails_its_window_within_the_memory_bound(
    baseline_rss_mb, hostile, tmp_path, kind
):
    """A 1 MB gzip body that expands to 1 GiB, a body that never ends, a 4 MB one: each is read up to
    source.max_answer_mb (decompressed as it comes), then its window fails; nothing is retried."""
    hostile.set_faults(hostile=[kind], bomb_mb=1024)
    out = tmp_path / "out"
    limit = 1 if kind == "huge" else LIMIT_MB  # the 4 MB answer is over 1 MiB
    data = config(hostile, out, source={"max_answer_mb": limit}, extract={"concurrency": 2})
    outcome = etl_run(data, tmp_path)
    assert_one_line(outcome, 6, "window(s) failed", f"answer over {limit} MiB (source.max_answer_mb)")
    assert outcome.summary["retries"] == 0 and not len(checkpoints(out))
    # Two answers at once, each held up to the limit (and once more while it is joined), over what the
    # same run takes from a well-behaved server.
    assert outcome.peak_rss_mb < baseline_rss_mb + 2 * 2 * limit + 64, (outcome.peak_rss_mb, baseline_rss_mb)


@pytest.mark.parametrize(
    "concurrency, transport", [(4, "etl"), (16, "etl"), (16, "httpx")], ids=["4", "16", "16-httpx"]
)
def test_every_answer_a_gzip_bomb_stays_within_concurrency_times_the_answer_limit(
    hostile, tmp_path, concurrency, transport
):
    """48 answers, every one a bomb: each is read up to source.max_answer_mb and freed as it fails (a
    failed window keeps its error, not its data), so memory follows the answers in flight, not the
    failed ones."""
    hostile.set_faults(hostile=["gzip_bomb"], hostile_rate=1, bomb_mb=1024)
    out = tmp_path / "out"
    data = config(
        hostile,
        out,
        window={"end": SIX_DAYS_END},
        extract={"concurrency": concurrency},
        source={"transport": transport},
    )
    outcome = etl_run(data, tmp_path)
    assert_one_line(outcome, 6, "48 window(s) failed", "answer over 32 MiB (source.max_answer_mb)")
    assert sum(r.get("fault") == "hostile_gzip_bomb" for r in hostile.requests()) == 48
    assert outcome.peak_rss_mb <= concurrency * 32 + 150, outcome.peak_rss_mb


@pytest.mark.parametrize("transport", ["etl", "httpx"])
def test_20_mib_of_headers_at_16_in_flight_are_refused_within_the_answer_limit(
    healthy_rss_mb, hostile, tmp_path, transport
):
    """Every series answer with 20 MiB of headers: each refused at 100 KiB of head (httpx's cap, counted
    against the answer limit as well), not retried; memory as a healthy run's plus what 16 answers may
    hold."""
    hostile.set_faults(hostile=["huge_headers"], hostile_rate=1)
    out = tmp_path / "out"
    limit = 8
    data = config(
        hostile, out, extract={"concurrency": 16}, source={"max_answer_mb": limit, "transport": transport}
    )
    outcome = etl_run(data, tmp_path)
    assert_one_line(outcome, 6, "window(s) failed", "answer headers over 100 KiB")
    assert outcome.summary["retries"] == 0 and not len(checkpoints(out))
    assert outcome.peak_rss_mb <= healthy_rss_mb(16) + limit * 16, (outcome.peak_rss_mb, healthy_rss_mb(16))
