"""`etl run` and `etl init` through a real forward proxy (squid, tests/support/proxy.py), as users behind
one set it: HTTP_PROXY, HTTPS_PROXY and NO_PROXY, or source.proxy. A name only the proxy resolves
stands for a server only the proxy can reach; its access log tells that no request went around it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from etl.timeutil import to_ms
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.checks import assert_exact
from tests.support.cli import etl
from tests.support.configs import config_dict, write_config
from tests.support.debian import require
from tests.support.emulator import START, emulator_config
from tests.support.expected import SOURCE, expected_table
from tests.support.network import free_port
from tests.support.output import read
from tests.support.proxy import Missing, RunningProxy, binary, running_proxy
from tests.support.tls import self_signed

NAME = "platform.test"  # resolved by the proxy alone
DAY_END = "2026-11-02T00:00:00Z"  # one day of raw series from START keeps each run short
FIRST = "2026-11-19T00:00:00Z"  # where the config `etl init` writes starts: a day before the clock
NO_PROXY_ENV: dict[str, str | None] = {
    name: None
    for scheme in ("http", "https", "all", "no")
    for name in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY")
}


@pytest.fixture(scope="module")
def proxy() -> Iterator[RunningProxy]:
    require(binary, Missing, "squid", "proxy")
    with running_proxy({NAME: "127.0.0.1"}) as running:
        yield running


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with run_emulator(emulator_config()) as running:
        yield running


@pytest.fixture(scope="module")
def tls_emulator(tmp_path_factory) -> Iterator[tuple[RunningEmulator, Path]]:
    cert, key = self_signed(tmp_path_factory.mktemp("tls"), names=(NAME,))
    with run_emulator(emulator_config(tls_cert=cert, tls_key=key)) as running:
        yield running, cert


def proxied(**variables: str) -> dict[str, str | None]:
    """The environment of an `etl` process: no proxy variable of this machine's, `variables` instead."""
    return {**NO_PROXY_ENV, **variables}


def run_config(base_url: str, tmp_path: Path, **source: str) -> Path:
    """One day of raw series from `base_url` into tmp_path/out (the source named as the tests expect)."""
    data = config_dict(base_url, tmp_path / "out", series=["raw"], window={"end": DAY_END, "overlap": "0s"})
    data["source"].update(password="${ETL_PASSWORD}", name=SOURCE, **source)
    return write_config(tmp_path / "c.yaml", data)


def carried(proxy: RunningProxy, method: str) -> list[str]:
    return [line for line in proxy.requests() if f" {method} " in line]


def the_one_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("etl: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("transport", ["etl", "httpx"])
def test_with_a_proxy_set_no_request_goes_around_it(proxy, emulator, tmp_path, transport):
    """The server is reachable without the proxy too: every request still goes through it (the emulator
    logged as many as the proxy carried), with either transport."""
    emulator.clear_requests()
    before = len(proxy.requests())
    config = run_config(emulator.base_url, tmp_path, transport=transport)
    result = etl("run", "-c", str(config), "--no-progress", env=proxied(HTTP_PROXY=proxy.url))
    assert result.returncode == 0, result.stderr
    assert_exact(tmp_path / "out", START, DAY_END, series=["raw"])
    went = proxy.requests()[before:]
    assert len(went) == len(emulator.requests()) > 8  # the sign-in, the listings, every series request
    assert all(f"{emulator.base_url}/" in line for line in went)


def test_init_and_run_reach_a_host_only_the_proxy_can_reach(proxy, emulator, tmp_path):
    """http_proxy (lower case) to a name this machine cannot resolve: `etl init` finds the server through
    the proxy, and the config it writes runs exactly."""
    port = emulator.url.rsplit(":", 1)[1]
    env = proxied(http_proxy=proxy.url)
    assert etl("run", "-c", str(run_config(f"http://{NAME}:{port}", tmp_path)), env=proxied()).returncode == 4
    init_then_run(f"http://{NAME}:{port}", emulator.config, tmp_path, env)
    assert carried(proxy, "GET") and not carried(proxy, "CONNECT")


def test_https_goes_through_the_proxy_s_tunnel(proxy, tls_emulator, tmp_path):
    """HTTPS_PROXY: a CONNECT tunnel to the server only the proxy can reach, TLS verified end to end
    against the server's own CA (--ca-bundle, written into the config as source.ca_bundle)."""
    server, cert = tls_emulator
    port = server.url.rsplit(":", 1)[1]
    tunnels = len(carried(proxy, "CONNECT"))
    init_then_run(f"https://{NAME}:{port}", server.config, tmp_path, proxied(HTTPS_PROXY=proxy.url), cert)
    assert len(carried(proxy, "CONNECT")) > tunnels


def init_then_run(
    base: str, settings, tmp_path: Path, env: dict[str, str | None], ca: Path | None = None
) -> None:
    path, out = tmp_path / "etl.yaml", tmp_path / "out"
    args = ["init", "--base-url", base, "--username", "demo", "--json", "-o", str(path)]
    args += ["--start", FIRST, "--sink-path", str(out), *(["--ca-bundle", str(ca)] if ca else [])]
    result = etl(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["base_url"] == f"{base}/sem-restservices"
    result = etl("run", "-c", str(path), "--json", "--no-progress", env=env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "ok"
    for series in ("raw", "average", "candles"):
        want = expected_table(settings, series, to_ms(FIRST), to_ms(summary["window"]["end"]), source=NAME)
        got = read(out, series)
        assert got.num_rows == want.num_rows > 0, series
        assert got.select(want.column_names).equals(want), series


def test_no_proxy_is_honoured(emulator, tmp_path):
    """A dead proxy set, and NO_PROXY naming the server: straight to it, exactly."""
    dead = f"http://127.0.0.1:{free_port()}"
    config = run_config(emulator.base_url, tmp_path)
    env = proxied(HTTP_PROXY=dead, HTTPS_PROXY=dead, NO_PROXY="example.com,127.0.0.1")
    result = etl("run", "-c", str(config), "--no-progress", env=env)
    assert result.returncode == 0, result.stderr
    assert_exact(tmp_path / "out", START, DAY_END, series=["raw"])


@pytest.mark.parametrize("where", ["environment", "config"])
def test_a_dead_proxy_fails_the_run_in_one_line_naming_it_and_no_password(emulator, tmp_path, where):
    """Not ignored: nothing reaches the server. One line, exit 4 (a network failure), the proxy named
    with its password masked, here and in the run's record."""
    secret = "Pr0xy-s3cret"
    dead = f"http://me:{secret}@127.0.0.1:{free_port()}"
    emulator.clear_requests()
    if where == "config":
        config, env = run_config(emulator.base_url, tmp_path, proxy=dead), proxied()
    else:
        config, env = run_config(emulator.base_url, tmp_path), proxied(HTTP_PROXY=dead)
    result = etl("run", "-c", str(config), "--no-progress", "--json", env=env)
    assert result.returncode == 4, result.stderr
    line = the_one_error(result.stderr)
    assert "through the proxy http://me:***@127.0.0.1:" in line, line
    assert emulator.requests() == []
    written = [p.read_text() for p in (tmp_path / "out").rglob("*.json")]
    assert all(secret not in text for text in [result.stdout, result.stderr, *written])
