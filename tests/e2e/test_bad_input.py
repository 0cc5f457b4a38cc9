"""Bad input through the real CLI: one clear line, the documented exit code, nothing existing touched."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.cli import connection_env, etl, etl_process
from tests.support.configs import config_dict, make_config, write_config
from tests.support.network import free_port
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
    # A lock file records its last holder (a refused run may have taken one); not output, not a checkpoint.
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not (p.name == "lock" and p.parent.parent.name == "_state")
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


def not_a_dir(tmp_path: Path) -> str:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return str(blocker / "out")


@dataclass(frozen=True)
class Case:
    """One bad input: `etl ARGV` (default `run -c CONFIG`) against a copy of a good run's output, with the
    config changed by `mutate(data, folder)` and its YAML text by `text`; `code` and `words` are what the
    one error line must say."""

    name: str
    code: int
    words: list[str]
    mutate: Callable[[dict, Path], object] = lambda d, t: None
    argv: Callable[[Path, str], list[str]] | None = None  # (folder, config path) -> arguments
    text: Callable[[str], str] = lambda y: y


def unquoted_start(value: str) -> Callable[[str], str]:
    """The YAML with window.start written unquoted (yaml.safe_dump quotes what reads as a timestamp)."""
    return lambda y: y.replace("start: '2026-11-01T00:00:00Z'", f"start: {value}")


def binary(folder: Path) -> str:
    path = folder / "program.yaml"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(128, 256)))
    return str(path)


BUSY: dict[str, int] = {}  # the port of the emulator the table runs against: taken
PULL = ["pull", "1001", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z"]
PLOT = ["1001", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z", "-o"]

CASES = [
    # configs: the README's list
    Case("unknown key", 2, ["sink.colour: unknown key"], lambda d, t: d["sink"].update(colour="red")),
    Case("wrong type", 2, ["extract.concurrency"], lambda d, t: d["extract"].update(concurrency="many")),
    Case("wrong type (list)", 2, ["series"], lambda d, t: d.update(series="raw")),
    Case(
        "naive time",
        2,
        ["window.start", "UTC offset"],
        lambda d, t: d["window"].update(start="2026-11-01T00:00:00"),
    ),
    Case(
        "start after end",
        2,
        ["window", "start must be before end"],
        lambda d, t: d["window"].update(start="2026-11-05T00:00:00Z"),
    ),
    Case(
        "--from after --to",
        2,
        ["window start 2026-11-02", "is not before its end"],
        argv=lambda t, c: ["run", "-c", c, "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-01T00:00:00Z"],
    ),
    Case(
        "missing password file",
        2,
        ["source.password_file", "nope"],
        lambda d, t: d["source"].update(password=None, password_file=str(t / "nope")),
    ),
    Case(
        "unset variable",
        2,
        ["source.password", "ETL_NOT_SET_ANYWHERE"],
        lambda d, t: d["source"].update(password="${ETL_NOT_SET_ANYWHERE}"),
    ),
    Case(
        "unreachable host",
        4,
        ["gave up after 8 attempt(s)", "connection failed to http://127.0.0.1:"],
        lambda d, t: d["source"].update(base_url=f"http://127.0.0.1:{free_port()}/sem-restservices"),
    ),
    Case(
        "wrong password",
        3,
        ["sign-in refused for user 'demo'", "check the username and password"],
        lambda d, t: d["source"].update(password="${ETL_WRONG_PASSWORD}"),
    ),
    Case(
        "unknown object",
        2,
        ["select.objects", "99 not visible to login"],
        lambda d, t: d["select"].update(objects=[1, 99]),
    ),
    Case(
        "unwritable state",
        7,
        ["cannot create the state lock", "a-file/out"],
        lambda d, t: d.update(state={"path": not_a_dir(t)}),
    ),
    # issue 21: read wrongly without a word
    Case(
        "unknown parameter id",
        2,
        ["select.parameters.ids: parameter(s) 999999 not among"],
        lambda d, t: d["select"].update(parameters={"ids": [1001, 999999]}),
    ),
    Case(
        "tags no parameter has",
        2,
        ["select.parameters.tags: no", "'temprature'"],
        lambda d, t: d["select"].update(parameters={"tags": ["temprature"]}),
    ),
    Case(
        "the same server under another host name",
        2,
        ["source.name: the output already holds source '127.0.0.1'", "as source 'localhost'"],
        lambda d, t: d["source"].update(base_url=d["source"]["base_url"].replace("127.0.0.1", "localhost")),
    ),
    Case(
        "an epoch number of no clear unit",
        2,
        ["--from", "cannot tell the unit of the epoch number 86400000"],
        argv=lambda t, c: [
            "pull",
            "1001",
            "--from",
            "86400000",
            "--to",
            "1793577600",
            "-o",
            str(t / "x.csv"),
        ],
    ),
    Case(
        "query to an unknown format",
        2,
        ["output", "x.xlsx: name it FILE.csv or FILE.parquet"],
        argv=lambda t, c: ["query", "-c", c, "select 1", "-o", str(t / "x.xlsx")],
    ),
    Case(
        "pull to an unknown format",
        2,
        ["x.txt: name it FILE.csv or FILE.parquet"],
        argv=lambda t, c: [*PULL, "-o", str(t / "x.txt")],
    ),
    Case(
        "plot to an unknown format",
        2,
        ["x.jpg: name it FILE.png or FILE.svg"],
        argv=lambda t, c: ["plot", "-c", c, *PLOT, str(t / "x.jpg")],
    ),
    # issue 21: a typo in a required key hides itself
    Case(
        "typo in a required key",
        2,
        ["2 problems: sorce: unknown key (did you mean source?); source: required key is missing"],
        lambda d, t: d.update(sorce=d.pop("source")),
    ),
    Case(
        "typo in a nested key",
        2,
        ["sink.pth: unknown key (did you mean path?); sink.path: required key is missing"],
        lambda d, t: d["sink"].update(pth=d["sink"].pop("path")),
    ),
    Case(
        "a key in the wrong section",
        2,
        ["objects: unknown key (did you mean select.objects?)"],
        lambda d, t: d.update(objects="none"),
    ),
    # issue 21: exit 70 for ordinary mistakes
    Case(
        "month 13, unquoted",
        2,
        ["window.start", "month value is outside"],
        text=unquoted_start("2026-13-01T00:00:00Z"),
    ),
    # issue 54: the first real problem, not the offset a date without a time also lacks
    Case(
        "month 13 without a time",
        2,
        ["window.start: '2026-13-01' is not a valid time: month must be in 1..12"],
        text=unquoted_start("2026-13-01"),
    ),
    Case(
        "February 30, unquoted",
        2,
        ["window.start", "day value is outside"],
        text=unquoted_start("2026-02-30T00:00:00Z"),
    ),
    Case(
        "pull into a missing folder",
        7,
        ["cannot write", "nodir/x.parquet: the folder", "does not exist"],
        argv=lambda t, c: [*PULL, "-o", str(t / "nodir" / "x.parquet")],
    ),
    Case(
        "query into a missing folder",
        7,
        ["nodir/x.csv: the folder", "does not exist"],
        argv=lambda t, c: ["query", "-c", c, "select 1", "-o", str(t / "nodir" / "x.csv")],
    ),
    Case(
        "plot into a missing folder",
        7,
        ["nodir/x.png: the folder", "does not exist"],
        argv=lambda t, c: ["plot", "-c", c, *PLOT, str(t / "nodir" / "x.png")],
    ),
    Case(
        "report into a missing folder",
        7,
        ["nodir/r.html: the folder", "does not exist"],
        argv=lambda t, c: ["report", "-c", c, "-o", str(t / "nodir" / "r.html")],
    ),
    Case("a binary config", 2, ["program.yaml: not a text file"], argv=lambda t, c: ["run", "-c", binary(t)]),
    Case("a folder as the config", 2, ["is a directory"], argv=lambda t, c: ["run", "-c", str(t)]),
    Case(
        "an https URL to an http server",
        4,
        ["TLS: no TLS handshake with https://127.0.0.1:", "not https://"],
        lambda d, t: d["source"].update(base_url=d["source"]["base_url"].replace("http://", "https://")),
    ),
    # issue 43: the first hour
    Case(
        "an output written relative to the working directory",
        2,
        [
            "sink.path:",
            "is read from the config file's folder:",
            "(from the working directory) does: move it",
        ],
        lambda d, t: d["sink"].update(path=os.path.relpath(t / "out")),
    ),
    Case(
        "source.name added to an existing output",
        2,
        [
            "source.name: the output already holds source '127.0.0.1' with checkpoints of 8 of the 8",
            "etl state rename-source -c CONFIG --from 127.0.0.1; to keep it: set source.name: 127.0.0.1",
        ],
        lambda d, t: d["source"].update(name="plant"),
    ),
    Case(
        "another sink.format under an existing output",
        2,
        [
            "sink.format:",
            "holds source '127.0.0.1' as parquet",
            "set sink.format: parquet, or give delta a new",
        ],
        lambda d, t: d["sink"].update(format="delta"),
    ),
    Case(
        "another sink.partition_by under an existing output",
        2,
        [
            "sink.partition_by:",
            "partitioned by [date]",
            "set sink.partition_by: [date], or use a new sink.path",
        ],
        lambda d, t: d["sink"].update(partition_by=["date", "object_id"]),
    ),
    Case(
        "rename-source from a name the output lacks",
        2,
        ["--from: the output holds no source 'plant-a'"],
        lambda d, t: d["source"].update(name="plant"),
        argv=lambda t, c: ["state", "rename-source", "-c", c, "--from", "plant-a"],
    ),
    Case(
        "rename-source of lake tables",
        2,
        ["renaming a lake table's source is not supported (sink.format delta)"],
        lambda d, t: d["sink"].update(format="delta") or d["source"].update(name="plant"),
        argv=lambda t, c: ["state", "rename-source", "-c", c, "--from", "127.0.0.1"],
    ),
    # issue 21: rough edges
    Case(
        "the emulator on a busy port",
        2,
        ["--port: cannot listen on 127.0.0.1:", "Address already in use"],
        argv=lambda t, c: ["emulator", "serve", "--port", str(BUSY["port"])],
    ),
    Case(
        "api: an object that is not there",
        2,
        ["object 99 does not exist or is not visible to this login"],
        argv=lambda t, c: ["api", "object", "99"],
    ),
    # issue 43: the first hour
    Case(
        "query before any run",
        2,
        ["query failed: no output yet in", "empty: etl run -c"],
        lambda d, t: d["sink"].update(path=str(t / "empty")),
        argv=lambda t, c: ["query", "-c", c, "select count(*) from raw"],
    ),
    # issue 54: one class for "nothing to read yet", whichever reader
    Case(
        "query's views before any run",
        2,
        ["query failed: no output yet in", "empty: etl run -c"],
        lambda d, t: d["sink"].update(path=str(t / "empty")),
        argv=lambda t, c: ["query", "-c", c],
    ),
    Case(
        "report before any run",
        2,
        ["no output yet in", "empty: 'etl run' writes it"],
        lambda d, t: d["sink"].update(path=str(t / "empty")),
        argv=lambda t, c: ["report", "-c", c],
    ),
    Case(
        "plot before any run",
        2,
        ["no raw series in", "empty yet: 'etl run' writes it"],
        lambda d, t: d["sink"].update(path=str(t / "empty")),
        argv=lambda t, c: ["plot", "-c", c, *PLOT, str(t / "x.png")],
    ),
    Case(
        "a date in another format",
        2,
        ["window.start: '25.11.2026' is not an ISO 8601 time"],
        lambda d, t: d["window"].update(start="25.11.2026"),
    ),
    Case(
        "--from in another format",
        2,
        ["--from", "'25.11.2026' is not a time: write ISO 8601"],
        argv=lambda t, c: ["run", "-c", c, "--from", "25.11.2026"],
    ),
    Case(
        "state reset without a terminal",
        2,
        ["state reset asks for confirmation and there is no terminal: add --yes"],
        argv=lambda t, c: ["state", "reset", "-c", c],
    ),
]


@pytest.fixture(scope="module")
def launched(emulator, golden, tmp_path_factory) -> dict[str, tuple[subprocess.Popen, Path, dict]]:
    """Every case, started at once: CLI start-up dominates, and two cores share it out."""
    runs = {}
    BUSY["port"] = emulator.port
    for case in CASES:
        folder = tmp_path_factory.mktemp("case")
        out = folder / "out"
        shutil.copytree(golden, out)
        data = config_dict(emulator.base_url, out)
        data["source"]["password"] = "${ETL_PASSWORD}"
        case.mutate(data, folder)
        config = folder / "c.yaml"
        config.write_text(case.text(yaml.safe_dump(data)))
        argv = case.argv(folder, str(config)) if case.argv else ["run", "-c", str(config)]
        env = {"ETL_WRONG_PASSWORD": "not-the-password-123", **connection_env(emulator.base_url)}
        runs[case.name] = (etl_process(*argv, env=env, stdin=subprocess.DEVNULL), out, snapshot(out))
    yield runs
    for proc, _, _ in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize(
    "name, code, words", [(c.name, c.code, c.words) for c in CASES], ids=[c.name for c in CASES]
)
def test_bad_input_gives_one_line_and_touches_nothing(launched, name, code, words):
    proc, out, before = launched[name]
    stdout, stderr = proc.communicate(timeout=120)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_error_line(result, code, *words)
    assert "internal error" not in stderr and "not-the-password-123" not in stderr
    assert_untouched(out, before)


def test_reading_an_output_no_run_wrote_is_the_same_class_from_python(emulator, tmp_path):
    """etl.read as `etl query`, `report` and `plot` (the table above): nothing to read yet is exit 2, not an
    empty frame that a sink.path pointing elsewhere would hide behind."""
    import etl

    config = make_config(emulator.base_url, tmp_path / "empty")
    with pytest.raises(etl.ConfigError, match="no output yet in .*empty: etl.run writes it") as error:
        etl.read(config, "raw")
    assert error.value.exit_code == 2 and not (tmp_path / "empty").exists()


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
    assert_one_error_line(result, 7, "cannot write", "a-file/out: Not a directory")
    assert ".probe" not in result.stderr  # the user's path, not the name of our test file in it
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


def test_json_summary_is_on_stdout_whatever_the_outcome(emulator, existing, tmp_path):
    """--json: a failed run prints its summary too, its status, error and exit code in it."""
    data = config_dict(emulator.base_url, existing, select={"objects": [99]})
    data["source"]["password"] = "${ETL_PASSWORD}"
    result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)), "--json")
    assert result.returncode == 2
    summary = json.loads(result.stdout)
    assert (
        summary["status"] == "failed" and summary["exit_code"] == 2 and "select.objects" in summary["error"]
    )
    assert summary["window"] and summary["run_id"]  # the run's own summary, as in _runs/
    result = etl("run", "-c", str(tmp_path / "missing.yaml"), "--json")  # before any run began
    assert json.loads(result.stdout) == {
        "status": "failed",
        "error": f"config error: {tmp_path / 'missing.yaml'}: no such file",
        "exit_code": 2,
    }
