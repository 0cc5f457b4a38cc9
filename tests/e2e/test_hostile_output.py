"""What a hostile server's text does to what etl prints, and odd user paths to its SQL: secrets masked in
every encoding they travel in, names stripped of control characters before they reach a terminal (files
keep them as sent), a quote in the output path, matplotlib's mathtext in a name; and the emulator's
control API, which answers only requests addressed to it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pyarrow.parquet as pq
import pytest

import etl
from etl.timeutil import DAY_MS, iso, to_ms
from etl_emulator.hostile import CONTROL_NAME
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.cli import connection_env, etl_main
from tests.support.cli import etl as etl_cli
from tests.support.configs import config_dict, make_config, write_config
from tests.support.credentials import PASSWORD, USERS, leaks
from tests.support.emulator import START, emulator_config
from tests.support.expected import SOURCE

DAY_END = iso(to_ms(START) + DAY_MS)
# What must not reach a terminal: ESC (screen clear, title, OSC-8 link), BEL, CR, a right-to-left override.
STEERING = ("\x1b", "\x07", "\r", "\u202e")


@pytest.fixture(scope="module")
def odd() -> Iterator[RunningEmulator]:
    users = [*USERS, {"login": "demo", "password": "demo", "objects": "all"}]
    with run_emulator(emulator_config(users=users)) as running:
        yield running


def one_day(emulator: RunningEmulator, out: Path) -> dict:
    return config_dict(emulator.base_url, out, series=["raw"], window={"end": DAY_END, "overlap": "0s"})


# -- secrets ------------------------------------------------------------------------------------------


def encoded(secret: str) -> set[str]:
    """The password as typed, percent-encoded both ways (either hex case), and the start of each (an
    error excerpt may cut it)."""
    forms = {secret, quote(secret, safe=""), quote_plus(secret), quote(secret, safe="").lower()}
    return forms | {f[:12] for f in forms}


def test_a_password_an_error_body_echoes_back_encoded_is_masked(odd, tmp_path):
    odd.set_faults(reset=True, error_rate=1.0, echo_params="query")  # 500s that repeat the query as received
    data = config_dict(odd.base_url, tmp_path / "out", retry={"attempts": 2})
    data["source"].update(username="etl-user", password="${ETL_PASSWORD}")
    (tmp_path / "out").mkdir()  # the output's folder exists: a run the server refused records it there
    result = etl_cli("run", "-c", str(write_config(tmp_path / "c.yaml", data)), password=PASSWORD)
    odd.set_faults(reset=True)
    assert result.returncode == 5, result.stderr
    assert "HTTP 50" in result.stderr and '"password":"***' in result.stderr  # the echo, masked
    runs = b"".join(p.read_bytes() for p in (tmp_path / "out" / "_runs").glob("*.json"))
    assert runs and leaks(result.stderr, encoded(PASSWORD)) == [] and leaks(runs, encoded(PASSWORD)) == []


def test_the_user_info_of_a_base_url_is_never_printed(tmp_path):
    data = config_dict("http://etl-user:url-s3cret@127.0.0.1:9/sem-restservices", tmp_path / "out")
    data["retry"] = {"attempts": 1}
    result = etl_cli("run", "-c", str(write_config(tmp_path / "c.yaml", data)))
    assert result.returncode == 4, result.stderr
    runs = b"".join(p.read_bytes() for p in (tmp_path / "out" / "_runs").glob("*.json"))
    assert "url-s3cret" not in result.stderr and b"url-s3cret" not in runs


# -- terminals ----------------------------------------------------------------------------------------


def test_names_reach_the_terminal_without_control_characters_and_files_as_sent(odd, tmp_path, capsys):
    odd.set_faults(reset=True, odd_records=["control_names"])
    out = tmp_path / "out"
    config = write_config(tmp_path / "c.yaml", one_day(odd, out))
    etl.run(config)
    names = pq.read_table(out / "dimensions" / "objects" / f"{SOURCE}.parquet")["shortname"].to_pylist()
    assert CONTROL_NAME in names  # the file keeps the name as the server sent it
    printed = {
        "query": etl_main(capsys, "query", "-c", str(config), "select shortname from objects order by id"),
        "query named": etl_main(
            capsys, "query", "-c", str(config), "select distinct object_name from raw_named order by 1"
        ),
        "report": etl_main(capsys, "report", "-c", str(config), "--from", START, "--to", DAY_END),
    }
    env = connection_env(odd.base_url)
    for name, args in {"api table": ("api", "objects"), "api json": ("api", "objects", "--json")}.items():
        result = etl_cli(*args, env=env)
        printed[name] = (result.returncode, result.stdout, result.stderr)
    odd.set_faults(reset=True)
    for name, (code, stdout, stderr) in printed.items():
        assert code == 0, (name, stderr)
        assert "obj" in stdout and "pwned" in stdout, (name, stdout)  # the name is there, readable
        assert not [c for c in STEERING if c in stdout + stderr], (name, stdout)
    shown = json.loads(printed["api json"][1])
    assert shown[0]["shortname"] == CONTROL_NAME  # JSON escapes them: the same text once parsed


def test_a_quote_in_the_output_path_is_data_to_query_and_report(odd, tmp_path, capsys):
    odd.set_faults(reset=True)
    out = tmp_path / "it's here"
    config = write_config(tmp_path / "c.yaml", one_day(odd, out))
    etl.run(config)
    code, stdout, stderr = etl_main(capsys, "query", "-c", str(config), "select count(*) as n from raw_named")
    assert code == 0 and int(stdout.splitlines()[1]) > 0 and stdout.splitlines()[-1] == "(1 row)", stderr
    code, stdout, stderr = etl_main(capsys, "report", "-c", str(config), "--from", START, "--to", DAY_END)
    assert code == 0 and "complete" in stdout, stderr


def test_mathtext_in_a_name_is_plotted_as_text(odd, tmp_path, capsys):
    odd.set_faults(reset=True, odd_records=["mathtext_names"])  # "$x^2$ and $\frac{$"
    config = write_config(tmp_path / "c.yaml", one_day(odd, tmp_path / "out"))
    etl.run(config)
    odd.set_faults(reset=True)
    png = tmp_path / "p.png"
    code, stdout, stderr = etl_main(
        capsys, "plot", "-c", str(config), "1001", "--from", START, "--to", DAY_END, "-o", str(png)
    )
    assert code == 0, stderr
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_source_name_of_dot_or_dot_dot_is_refused(odd, tmp_path):
    for name in (".", ".."):
        with pytest.raises(etl.ConfigError, match="source.name"):
            make_config(odd.base_url, tmp_path, source={"name": name})


# -- the emulator's control API -------------------------------------------------------------------------


def test_the_control_api_answers_only_requests_addressed_to_the_emulator(odd):
    url = f"{odd.url}/_emulator/faults"
    assert httpx.get(url).status_code == 200
    for host in ("localhost", "127.0.0.1", f"127.0.0.1:{odd.port}", "[::1]"):
        assert httpx.get(url, headers={"Host": host}).status_code == 200, host
    # a page on a domain of its own that resolves to 127.0.0.1 (DNS rebinding)
    refused = httpx.put(url, headers={"Host": f"evil.example:{odd.port}"}, json={"error_rate": 1.0})
    assert refused.status_code == 403 and odd.faults()["error_rate"] == 0.0


def test_the_gaps_of_the_control_api_take_a_bounded_window(odd):
    years = 8000 * 365 * DAY_MS
    answer = httpx.get(f"{odd.url}/_emulator/gaps", params={"param": 1001, "start": 0, "end": years})
    assert answer.status_code == 400 and "days" in answer.json()["message"]
    assert len(odd.gaps(1001, to_ms(START), to_ms(START) + 10 * DAY_MS)) >= 10
