"""Temp files on a local folder: only those of dead writers are removed (a child process that has exited
gives a dead writer's pid). The rest of Storage on a local folder: tests/unit/storage/test_storage.py."""

from __future__ import annotations

import os
import subprocess
import sys

from etl.storage.atomic import TMP_SUFFIX, Storage


def test_only_temp_files_of_dead_writers_are_removed(tmp_path):
    storage = Storage(str(tmp_path))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    host = os.uname().nodename
    names = {
        "live": f"raw/.part-0.parquet.{os.getpid()}@{host}.aaaa{TMP_SUFFIX}",  # a concurrent writer, this process
        "dead": f"raw/.part-0.parquet.{int(dead.stdout)}@{host}.bbbb{TMP_SUFFIX}",  # killed before its rename
        "elsewhere": f"raw/.part-1.parquet.123@some-other-host.cccc{TMP_SUFFIX}",  # young, another machine
        "old": f"raw/.part-2.parquet.dddd{TMP_SUFFIX}",  # named by an older version: no writer recorded
    }
    for rel in names.values():
        storage.write_atomic(rel, b"x")
    assert storage.remove_temp_files() == 2
    assert sorted(storage.find()) == sorted([names["live"], names["elsewhere"]])
