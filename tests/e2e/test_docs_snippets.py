"""Every example in README.md and docs/*.md runs, as a reader would run it (issue 21).

The runner takes each fenced block labelled ```python, ```sh, ```console or ```bash, in document order:
- python: executed in one namespace per document, with the document's own line numbers in tracebacks;
- sh (console, bash): each command whose program is `etl` or `.venv/bin/etl` (after `VAR=value`
  assignments; a `$ ` prompt, `\\` continuations and quotes spanning lines are understood) runs in bash and
  must exit 0, or N when its line's comment says `exit N`; other commands (make, export, loops) are left
  to the reader.
They run in a scratch folder holding a copy of configs/, `.venv` (a link to this one) and the demo's
output, against a fresh emulator (`make emulator`'s settings) whose port replaces 8765 (`ETL_DEMO_PORT`
for the configs). Unlabelled blocks (synopses, folder trees, output) are not run, nor a block right
after the line `<!-- no-test -->` (for what needs a cluster or a real server).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from etl_emulator.config import EmulatorConfig
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NO_TEST = "<!-- no-test -->"
SHELL = {"sh", "console", "bash", "shell"}
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the block's first line of code
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The runnable blocks of a document, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, before, at = [], "", 0
    while at < len(lines):
        opening = FENCE.match(lines[at])
        if not opening:
            before = lines[at].strip() or before
            at += 1
            continue
        end = next(i for i in range(at + 1, len(lines)) if lines[i].startswith("```"))
        lang = opening.group(1).lower()
        if (lang == "python" or lang in SHELL) and before != NO_TEST:
            found.append(Block(path, at + 2, lang, "\n".join(lines[at + 1 : end])))
        before, at = "", end + 1
    return found


def commands(block: Block) -> Iterator[tuple[int, str]]:
    """(line, command) of each etl command of a shell block, continuations and quoted newlines joined."""
    pending, first, joint = "", 0, "\n"
    for number, line in enumerate(block.code.splitlines(), block.line):
        line = line.removeprefix("$ ")
        if not pending:
            first = number
        pending = f"{pending}{joint}{line}" if pending else line
        joint = "\n"  # inside quotes a newline is part of the word
        if pending.endswith("\\"):
            pending, joint = pending[:-1], " "  # a continuation: the next line goes on this one
            continue
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        command, pending = pending, ""
        program = next((w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)), "")
        if program in ("etl", ".venv/bin/etl"):
            yield first, command


def expected_codes(command: str) -> set[int]:
    """0, and N when the command's comment says `exit N` (etl report --fail-under, say)."""
    comment = command.rsplit("#", 1)[1] if "#" in command else ""
    return {0, *(int(n) for n in re.findall(r"\bexit (\d+)", comment))}


@pytest.fixture(scope="module")
def demo() -> Iterator[RunningEmulator]:
    with run_emulator(EmulatorConfig()) as emulator:  # `make emulator`'s: seed 42, the real clock
        yield emulator


@pytest.fixture(scope="module")
def scratch(demo, tmp_path_factory) -> Path:
    """configs/, .venv and the demo's output, as after `make run`."""
    folder = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "configs", folder / "configs")
    (folder / "output").mkdir()
    (folder / ".venv").symlink_to(ROOT / ".venv")
    env = environment(demo)
    result = subprocess.run(
        [".venv/bin/etl", "run", "-c", "configs/demo.yaml", "--no-progress"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return folder


def environment(demo: RunningEmulator) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "ETL_DEMO_PORT": str(demo.port),
        "ETL_PASSWORD": "demo",
    }


def test_the_runner_finds_blocks_and_skips_what_it_must(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n\n<!-- no-test -->\n\n```python\nspark.stop()\n```\n```\netl run -c FILE\n```\n"
        '```sh\n$ make run\nETL_PASSWORD=demo .venv/bin/etl query -c c.yaml "select 1\n  as n"  # fine\n'
        "etl report -c c.yaml --fail-under 0.9 \\\n  --json   # exit 9 below 90%\n```\n"
    )
    found = blocks(page)
    assert [(b.lang, b.line) for b in found] == [("python", 2), ("sh", 14)]
    assert [(line, cmd.split()[1]) for line, cmd in commands(found[1])] == [
        (15, ".venv/bin/etl"),
        (17, "report"),
    ]
    assert [expected_codes(cmd) for _, cmd in commands(found[1])] == [{0}, {0, 9}]


RUNNABLE = [path for path in DOCUMENTS if blocks(path)]


@pytest.mark.parametrize("path", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_every_example_of_the_document_runs(path, demo, scratch, monkeypatch):
    found = blocks(path)
    env = environment(demo)
    monkeypatch.chdir(scratch)
    for name in ("ETL_DEMO_PORT", "ETL_PASSWORD"):
        monkeypatch.setenv(name, env[name])
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in found:
        if block.lang == "python":
            code = compile("\n" * (block.line - 1) + block.code, str(block.path), "exec")
            try:
                exec(code, namespace)
            except Exception as exc:  # noqa: BLE001 - any failure is the block's
                pytest.fail(f"{block.where}: the python block fails: {type(exc).__name__}: {exc}")
            continue
        for line, command in commands(block):
            command = command.replace("127.0.0.1:8765", f"127.0.0.1:{demo.port}")
            result = subprocess.run(
                ["bash", "-c", command], cwd=scratch, env=env, capture_output=True, text=True, timeout=300
            )
            if result.returncode not in expected_codes(command):
                pytest.fail(
                    f"{block.path.relative_to(ROOT)}:{line}: `{command.strip()}` exited {result.returncode}: "
                    f"{result.stderr.strip()[-800:]}"
                )
