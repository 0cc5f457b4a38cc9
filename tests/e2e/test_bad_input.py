"""Bad input through the real CLI: one clear line, the documented exit code, nothing existing touched."""

from __future__ import annotations

import json
import resource
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import etl, etl_process
from tests.support.configs import config_dict, make_config, write_config
from tests.support.pipeline import run


@pytest.fixture(scope="module")
def golden(emulator, tmp_path_factory) -> Path:
    """The output of one good run, copied for each test."""
    out = tmp_path_factory.mktemp("golden") / "out"
    run(make_config(emulator.base_url, out))
    return out


@pytest.fixture
def existing(golden, tmp_path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(golden, out)
    return out


def snapshot(out: Path) -> dict[str, bytes]:
    # The lock file records its last holder; it is not output and not a checkpoint.
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.relative_to(out).as_posix() != "_state/127.0.0.1/lock"
    }


def assert_untouched(out: Path, before: dict[str, bytes]) -> None:
    after = snapshot(out)
    added = set(after) - set(before)
    for rel in added:  # a failed run may leave its own summary, saying it failed; nothing else
        assert rel.startswith("_runs/") and json.loads(after[rel])["status"] == "failed", rel
    assert {k: v for k, v in after.items() if k not in added} == before


def assert_one_error_line(result: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("etl: error: "), result.stderr
    assert all(w in lines[0] for w in words), (words, lines[0])
    assert result.stdout == ""


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def not_a_dir(tmp_path: Path) -> str:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return str(blocker / "out")


# (name, change to the config dict, extra CLI args, exit code, words the error line must hold)
CASES = [
    ("unknown key", lambda d, t: d["sink"].update(colour="red"), [], 2, ["sink.colour: unknown key"]),
    ("wrong type", lambda d, t: d["extract"].update(concurrency="many"), [], 2, ["extract.concurrency"]),
    ("wrong type (list)", lambda d, t: d.update(series="raw"), [], 2, ["series"]),
    (
        "naive time",
        lambda d, t: d["window"].update(start="2026-11-01T00:00:00"),
        [],
        2,
        ["window.start", "UTC offset"],
    ),
    (
        "start after end",
        lambda d, t: d["window"].update(start="2026-11-05T00:00:00Z"),
        [],
        2,
        ["window", "start must be before end"],
    ),
    (
        "--from after --to",
        lambda d, t: None,
        ["--from", "2026-11-02T00:00:00Z", "--to", "2026-11-01T00:00:00Z"],
        2,
        ["window start 2026-11-02", "is not before its end"],
    ),
    (
        "missing password file",
        lambda d, t: d["source"].update(password=None, password_file=str(t / "nope")),
        [],
        2,
        ["source.password_file", "nope"],
    ),
    (
        "unset variable",
        lambda d, t: d["source"].update(password="${ETL_NOT_SET_ANYWHERE}"),
        [],
        2,
        ["source.password", "ETL_NOT_SET_ANYWHERE"],
    ),
    (
        "unreachable host",
        lambda d, t: d["source"].update(base_url=f"http://127.0.0.1:{closed_port()}/sem-restservices"),
        [],
        4,
        ["gave up after 8 attempt(s)", "connection failed to http://127.0.0.1:"],
    ),
    (
        "wrong password",
        lambda d, t: d["source"].update(password="${ETL_WRONG_PASSWORD}"),
        [],
        3,
        ["sign-in refused for user 'demo'", "check the username and password"],
    ),
    (
        "unknown object",
        lambda d, t: d["select"].update(objects=[1, 99]),
        [],
        2,
        ["select.objects", "99 not visible to login"],
    ),
    (
        "unwritable state",
        lambda d, t: d.update(state={"path": not_a_dir(t)}),
        [],
        7,
        ["cannot create the state lock", "a-file/out"],
    ),
]


@pytest.fixture(scope="module")
def launched(emulator, golden, tmp_path_factory) -> dict[str, tuple[subprocess.Popen, Path, dict]]:
    """Every case's run, started at once: CLI start-up dominates, and two cores share it out."""
    runs = {}
    for name, mutate, args, _, _ in CASES:
        folder = tmp_path_factory.mktemp("case")
        out = folder / "out"
        shutil.copytree(golden, out)
        data = config_dict(emulator.base_url, out)
        data["source"]["password"] = "${ETL_PASSWORD}"
        mutate(data, folder)
        proc = etl_process(
            "run",
            "-c",
            str(write_config(folder / "c.yaml", data)),
            *args,
            env={"ETL_WRONG_PASSWORD": "not-the-password-123"},
        )
        runs[name] = (proc, out, snapshot(out))
    yield runs
    for proc, _, _ in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("name, code, words", [(c[0], c[3], c[4]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_and_touches_nothing(launched, name, code, words):
    proc, out, before = launched[name]
    stdout, stderr = proc.communicate(timeout=120)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_error_line(result, code, *words)
    assert "not-the-password-123" not in stderr
    assert_untouched(out, before)


def test_malformed_yaml_names_file_and_line(existing, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("source:\n  base_url: http://x/sem-restservices\n  username: [demo\nwindow: {}\n")
    before = snapshot(existing)
    assert_one_error_line(etl("run", "-c", str(path)), 2, "config error", "bad.yaml", "line 4")
    assert_untouched(existing, before)


def test_unwritable_output_path(emulator, tmp_path):
    data = config_dict(emulator.base_url, Path(not_a_dir(tmp_path)))
    data["source"]["password"] = "${ETL_PASSWORD}"
    result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)))
    assert_one_error_line(result, 7, "cannot write", "a-file/out", "Not a directory")
    assert (tmp_path / "a-file").read_text() == "not a folder"


def file_size_limit(limit: int) -> Callable[[], None]:
    """A child whose writes past `limit` bytes fail with EFBIG, as on a full disk."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write() instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("dimensions", [True, False], ids=["dimension tables", "series files"])
def test_full_disk_on_write_keeps_existing_output_and_checkpoints(emulator, existing, tmp_path, dimensions):
    data = config_dict(emulator.base_url, existing, dimensions=dimensions)
    data["source"]["password"] = "${ETL_PASSWORD}"
    before = snapshot(existing)
    # Rewriting every file: the first one over 1 KB fails; the small lock and probe still fit.
    result = etl(
        "run",
        "-c",
        str(write_config(tmp_path / "c.yaml", data)),
        "--full-refresh",
        preexec_fn=file_size_limit(1024),
    )
    assert result.returncode == 7, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("etl: error")]
    assert len(errors) == 1 and "cannot write" in errors[0] and "File too large" in errors[0], result.stderr
    folder = "dimensions/" if dimensions else "/date="
    assert folder in errors[0]
    assert "Traceback" not in result.stderr
    assert_untouched(existing, before)
    assert not [p for p in existing.rglob("*") if p.name.endswith(".tmp")]


def test_debug_shows_the_traceback(emulator, existing, tmp_path):
    data = config_dict(emulator.base_url, existing, select={"objects": [99]})
    data["source"]["password"] = "${ETL_PASSWORD}"
    result = etl("--debug", "run", "-c", str(write_config(tmp_path / "c.yaml", data)))
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("etl: error: config error: select.objects")


def test_usage_errors_exit_2(tmp_path):
    result = etl("run", "--no-such-option")
    assert result.returncode == 2 and "No such option" in result.stderr and "Traceback" not in result.stderr
    result = etl("run", "-c", str(tmp_path / "missing.yaml"))
    assert_one_error_line(result, 2, "missing.yaml: no such file")
