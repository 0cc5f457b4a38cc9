"""The `etl` command line: in a child process as a user runs it (etl, etl_process), or its entry point in
this process (etl_main), and the ETL_* variables that give `etl api` / `etl pull` a connection."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Mapping

import pytest

from etl.cli import main

ETL_COMMAND = [sys.executable, "-m", "etl"]


def environment(password: str | None = "demo", env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment with ETL_PASSWORD=password (left as it is when None), then `env` over
    it: a variable given None is removed."""
    result = dict(os.environ)
    if password is not None:
        result["ETL_PASSWORD"] = password
    for name, value in (env or {}).items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


def etl(
    *args: str,
    password: str | None = "demo",
    env: Mapping[str, str | None] | None = None,
    input: str | None = None,
    timeout: float = 120,
    **kwargs,
) -> subprocess.CompletedProcess:
    """`etl ARGS` in a child process, waited for, stdout and stderr captured as text. The environment is
    environment(password, env); `input` is its stdin; other keywords go to subprocess.run (cwd,
    preexec_fn...)."""
    return subprocess.run(
        [*ETL_COMMAND, *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        env=environment(password, env),
        **kwargs,
    )


def etl_process(
    *args: str, password: str | None = "demo", env: Mapping[str, str | None] | None = None, **kwargs
) -> subprocess.Popen:
    """`etl ARGS` started in a child process and not waited for (to kill, signal or read it as it runs).
    stdout and stderr are text pipes unless given; the environment is as for etl()."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([*ETL_COMMAND, *args], text=True, env=environment(password, env), **kwargs)


def etl_main(capsys, *args: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """etl's entry point called in this process (fixtures and monkeypatches apply): (exit code, stdout,
    stderr). `stdin` needs the monkeypatch fixture."""
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def connection_env(base_url: str, username: str = "demo", password: str = "demo") -> dict[str, str]:
    """The ETL_* variables that give `etl api` and `etl pull` their connection."""
    return {"ETL_BASE_URL": base_url, "ETL_USERNAME": username, "ETL_PASSWORD": password}


def sign_in_env(monkeypatch, emulator):
    """The ETL_* variables that point the explorer at an emulator as the demo login, set in this process."""
    for name, value in connection_env(emulator.base_url).items():
        monkeypatch.setenv(name, value)
    return emulator
