"""Run a command and write its wall time, peak RSS and CPU time as JSON.

    python benchmarks/measure.py RESULT_FILE COMMAND...

Contenders are started through this small process rather than straight from run.py: Linux carries
the high-water RSS of the process that forks across exec into the child's ru_maxrss, so a child of
the (large) orchestrator would report at least the orchestrator's size. Standard library only.
"""

import json
import os
import subprocess
import sys
import time


def main() -> int:
    result_file, command = sys.argv[1], sys.argv[2:]
    started = time.perf_counter()
    proc = subprocess.Popen(command)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    with open(result_file, "w") as f:
        json.dump(
            {
                "returncode": proc.returncode,
                "wall": time.perf_counter() - started,
                "peak_rss_mb": usage.ru_maxrss / 1024,
                "cpu_seconds": usage.ru_utime + usage.ru_stime,
            },
            f,
        )
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
