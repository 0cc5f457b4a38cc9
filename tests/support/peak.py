"""`python -m tests.support.peak REPORT COMMAND...`: run COMMAND, then write its peak RSS (MiB) to REPORT and
exit with its code.

Linux adds to a process's high-water mark (`ru_maxrss`) the peak of the address space it had before
`exec`: a child started straight from a large test process (forked or spawned, it runs in that process's
memory until it execs) reports at least the test process's own peak. Started from this small process
instead, the command's figure is its own."""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> None:
    report, command = sys.argv[1], sys.argv[2:]
    child = subprocess.Popen(command)  # stdin, stdout and stderr are this process's
    _, status, usage = os.wait4(child.pid, 0)
    with open(report, "w") as out:
        out.write(f"{usage.ru_maxrss / 1024}\n")
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
