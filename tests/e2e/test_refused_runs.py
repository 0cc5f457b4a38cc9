"""A run refused before it starts (issue 54): a window with nothing in it, a wrong password, a host that does
not answer. It exits with its class's code and leaves nothing a later command misreads: no output folder,
no state lock; in an output that exists, every file byte for byte as it was, and the record of a run the
server refused, saying why. `etl doctor` after each finds no run killed and no lock held, and names the
last run as it was: ok, or failed with its cause."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import etl_main, etl_process
from tests.support.configs import config_dict, make_config, write_config
from tests.support.network import free_port
from tests.support.pipeline import run

REFUSED = {  # name: (exit code, what the config changes, the run's arguments, its error)
    "--from after --to": (2, {}, ["--from", "2026-11-02T00:00:00Z", "--to", "2026-11-01T00:00:00Z"], ""),
    "wrong password": (3, {"password": "${ETL_WRONG_PASSWORD}"}, [], "sign-in refused"),
    "unreachable host": (4, {"base_url": "closed"}, [], "connection failed"),
}


WRONG = {"ETL_WRONG_PASSWORD": "not-the-password"}


def files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def existing(emulator, tmp_path_factory) -> Path:
    """The output of one good run."""
    out = tmp_path_factory.mktemp("existing") / "out"
    run(make_config(emulator.base_url, out))
    return out


def config(emulator, folder: Path, out: Path, source: dict) -> Path:
    data = config_dict(emulator.base_url, out, retry={"attempts": 2, "backoff_initial": 0.01})
    if source.get("base_url") == "closed":
        source = {"base_url": f"http://127.0.0.1:{free_port()}/sem-restservices"}
    data["source"].update({"password": "${ETL_PASSWORD}", **source})
    return write_config(folder / "c.yaml", data)


def test_a_refused_run_leaves_nothing_misread_and_doctor_reads_the_output_right(
    emulator, existing, tmp_path, capsys
):
    cases = {}
    for where in ("new", "existing"):  # each case its own output; the runs all started at once
        for name, (code, source, argv, _) in REFUSED.items():
            folder = tmp_path / where / name.replace(" ", "-")
            folder.mkdir(parents=True)
            out = folder / "out"
            if where == "existing":
                shutil.copytree(existing, out)
            path = config(emulator, folder, out, source)
            proc = etl_process("run", "-c", str(path), *argv, env=WRONG)
            cases[where, name] = (code, out, path, files(out), proc)
    for (where, name), (code, out, path, before, proc) in cases.items():
        error = REFUSED[name][3]
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == code and len(stderr.strip().splitlines()) == 1, (name, stderr)
        if where == "new":
            assert not out.exists(), (name, files(out.parent))
        else:  # the lock file too: the refused run never took it
            after = files(out)
            added = {rel: json.loads(after.pop(rel)) for rel in set(after) - set(before)}
            assert after == before, (name, set(after) ^ set(before))
            assert [(r["status"], error in r["error"]) for r in added.values()] == (
                [("failed", True)] if error else []
            )

        status, report, _ = etl_main(capsys, "doctor", "-c", str(path), "--offline", "--json")
        findings = {f["check"]: f for f in json.loads(report)["findings"]}
        assert findings["locks"]["status"] == "ok" and "no run holds" in findings["locks"]["message"], name
        last = findings["runs.last"]
        assert "killed" not in last["message"], (where, name, last)
        if where == "new":
            assert status == 0 and last["status"] == "warn", (name, last)
            assert last["message"].startswith("no run recorded") and not out.exists(), (name, last)
        elif error:  # the record of the refused run: the last run failed, and why
            assert status == 10 and last["status"] == "fail" and error in last["message"], (name, last)
        else:
            assert status == 0 and last["status"] == "ok" and "was ok (1 run(s) read)" in last["message"], (
                last
            )
