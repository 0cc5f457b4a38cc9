"""The cron example in docs/ acts on the exit codes etl/errors.py defines, run through the shell with a stub
`etl`. The Airflow example, run by Airflow: tests/orchestrators/test_airflow.py (make test-orchestrators)."""

from __future__ import annotations

import re
import subprocess

import pytest

from etl.errors import ExitCode
from tests.support import ROOT

DOCS = ROOT / "docs"


def cron_command() -> str:
    block = re.search(r"```cron\n(.+?)\n```", (DOCS / "orchestration.md").read_text(), re.S).group(1)
    assert len(block.splitlines()) == 1
    return block.split(None, 5)[5]  # after the five schedule fields


@pytest.mark.parametrize(
    "codes, calls, mailed",
    [
        ([0], 1, False),
        ([ExitCode.LOCKED], 1, False),  # skipped quietly
        ([ExitCode.SERVER, ExitCode.NETWORK, ExitCode.OK], 3, False),  # retried until it worked
        ([ExitCode.INTERRUPTED, ExitCode.OK], 2, False),
        ([ExitCode.NETWORK] * 3, 3, True),  # still failing after the retries
        ([ExitCode.CONFIG], 1, True),  # not retried
        ([ExitCode.AUTH], 1, True),
        ([ExitCode.DATA], 1, True),
        ([ExitCode.OUTPUT], 1, True),
        ([ExitCode.INTERNAL], 1, True),
    ],
)
def test_cron_line_retries_skips_and_alerts_by_exit_code(tmp_path, codes, calls, mailed):
    home, stubs = tmp_path / "srv", tmp_path / "bin"
    (home / ".venv/bin").mkdir(parents=True)
    stubs.mkdir()
    (tmp_path / "codes").write_text("\n".join(map(str, codes)) + "\n")
    stub = home / ".venv/bin/etl"
    stub.write_text(
        f"#!/bin/sh\necho call >> {tmp_path}/calls\n"
        f"code=$(head -n1 {tmp_path}/codes); sed -i 1d {tmp_path}/codes; exit $code\n"
    )
    (stubs / "mail").write_text(f"#!/bin/sh\ncat > {tmp_path}/mail\n")
    (stubs / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for script in (stub, stubs / "mail", stubs / "sleep"):
        script.chmod(0o755)
    command = (
        cron_command().replace("/srv/etl", str(home)).replace("/var/log/etl/run.log", str(tmp_path / "log"))
    )
    subprocess.run(["/bin/sh", "-c", command], check=True, timeout=30, env={"PATH": f"{stubs}:/usr/bin:/bin"})
    assert len((tmp_path / "calls").read_text().splitlines()) == calls
    assert (tmp_path / "mail").exists() == mailed
