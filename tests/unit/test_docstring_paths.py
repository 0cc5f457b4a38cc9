"""The comments and docstrings of etl/ and etl_emulator/ stay true after the next move (issue 44): every path
they name exists, and none quotes a benchmark figure (the figures live in docs/performance.md).

A path is a token such as `etl/pipeline/slab.py`, `docs/lake.md`, `tests/unit`, `benchmarks/late.py`
(from the repository's root), or `client/classify.py`, `doctor/`, `lateness.py` (from the module's own
folder or one above it, as a package's modules name each other).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGES = ("etl", "etl_emulator")
# Folders of the repository a comment may name from its root.
TOP = ("etl", "etl_emulator", "docs", "tests", "benchmarks", "tools", "configs", ".ci")

_TOP = "|".join(re.escape(name) for name in TOP)
# A path from the root (`etl/...`, `docs/...`), or a relative one naming a .py or .md file; not the tail
# of a longer path, URL or template (`_state/{source}/layout.json`, `https://host/x.md`).
PATH = re.compile(rf"(?<![\w./{{}}$-])(?:(?:{_TOP})/[\w./*-]*|(?:[\w-]+/)*[\w-]+\.(?:py|md))")

# Figures that only a measurement gives: CPU time, microseconds, a decimal with a unit, a range of a
# unit, a ratio of speed or size, a before -> after. A limit or a default (`24 h`, `100 KiB`, `8 MiB`)
# is none of these.
FIGURE = re.compile(
    r"\d+(?:\.\d+)?\s*(?:CPU-s|CPU s|CPU seconds)\b"
    r"|\d+(?:\.\d+)?\s*(?:us|µs)\b"
    r"|\d+\.\d+\s*(?:ms|MB|kB|%)"
    r"|\d+(?:\.\d+)?\s*-\s*\d+(?:\.\d+)?\s*(?:ms|MB|kB|%|x)(?!\w)"
    r"|\d+(?:\.\d+)?\s*%\s+(?:less|more|faster|slower|of (?:its|the|a) (?:CPU|run|time))"
    r"|\d+(?:\.\d+)?x\s+(?:faster|slower|cheaper|larger|smaller|less|more)"
    r"|\d+(?:\.\d+)?\s*->\s*\d+(?:\.\d+)?"
)


def modules() -> list[Path]:
    return [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module (a class's, a function's, an attribute's)."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)  # a lambda's is an expression
        for statement in body if isinstance(body, list) else []:
            if (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            ):
                for offset, line in enumerate(statement.value.value.splitlines()):
                    yield statement.lineno + offset, line


def exists(token: str, module: Path) -> bool:
    token = token.rstrip(".")
    if token.split("/", 1)[0] in TOP and "/" in token:
        return any(ROOT.glob(token)) if "*" in token else (ROOT / token).exists()
    folders = [folder for folder in module.parents if folder.is_relative_to(ROOT)]
    if token.endswith(".md"):
        folders.append(ROOT / "docs")
    return any((folder / token).exists() for folder in folders)


def where(path: Path, line: int, text: str) -> str:
    return f"{path.relative_to(ROOT)}:{line}: {text.strip()}"


def test_the_paths_that_comments_and_docstrings_name_exist() -> None:
    missing = [
        where(path, line, token)
        for path in modules()
        for line, text in prose(path)
        for token in PATH.findall(text)
        if not exists(token, path)
    ]
    assert missing == []


def test_no_comment_or_docstring_quotes_a_benchmark_figure() -> None:
    figures = [
        where(path, line, text) for path in modules() for line, text in prose(path) if FIGURE.search(text)
    ]
    assert figures == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("the quality dataset (etl/quality.py)", ["etl/quality.py"]),
        ("see docs/lake.md.", ["docs/lake.md."]),
        ("a sibling: client/classify.py, and doctor.py", ["client/classify.py", "doctor.py"]),
        ("{store}/layout.json and _state/{source}/x.py and https://host/docs/x.md", []),
        ("etl.pipeline.slab, not a path", []),
    ],
)
def test_path_tokens(text: str, found: list[str]) -> None:
    assert PATH.findall(text) == found


def test_a_moved_path_is_missing() -> None:
    module = ROOT / "etl" / "ops" / "__init__.py"
    assert exists("doctor/", module) and exists("probe.py", module) and exists("client/classify.py", module)
    assert not exists("doctor.py", module)
    assert not exists("etl/slab.py", module) and exists("etl/pipeline/slab.py", module)
    assert exists("lake.md", module) and exists("configs/demo.yaml.", module)


@pytest.mark.parametrize(
    ("text", "figure"),
    [
        ("12% less CPU and 15% less time", True),
        ("(0.13 ms for 23,000 rows, against 8 us)", True),
        ("loading the CA bundle costs a plain-http run 0.05 CPU-s", True),
        ("a 150k-row slab: 2.5x slower, 1.6x larger", True),
        ("(0.15-0.2 ms)", True),
        ("wall 1.13 -> 0.98", True),
        ("a raw window over 24 h; an answer's head at most 100 KiB", False),
        ("4 on a local network, 16 at 40 ms, 32 at most", False),
        ("'90s', '30m', '3h', '7d' -> ms", False),
    ],
)
def test_figures(text: str, figure: bool) -> None:
    assert bool(FIGURE.search(text)) is figure
