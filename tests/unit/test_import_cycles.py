"""The import-cycle contract of `make lint` (tools/import_cycles.py, registered in pyproject.toml): it
fails on a cycle between modules, a lazy import inside a function or one under `if TYPE_CHECKING:`
included (even where the session leaves those out), and names each import with its line."""

from __future__ import annotations

import itertools
import json
import logging
import sys
import tomllib
from pathlib import Path

import pytest
from grimp import ImportGraph
from importlinter.cli import lint_imports

from tools.import_cycles import find_cycles

REPO = Path(__file__).resolve().parents[2]
PACKAGE = {
    "__init__.py": "",
    "a.py": "import cycle_demo.b\n",
    "b.py": "def later():\n    from cycle_demo import a\n\n    return a\n",
    # A cycle only a type checker sees: a reader follows it as any other.
    "c.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from cycle_demo import d\n",
    "d.py": "import cycle_demo.c\n",
}
WITHOUT_CYCLES = {**PACKAGE, "b.py": "def later():\n    return None\n", "d.py": ""}


def _lint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], exclude_type_checking: bool = True
) -> int:
    """lint-imports over a package made of `files`, with this repository's contract, in a session that
    leaves type-only imports out or not."""
    package = tmp_path / "cycle_demo"
    package.mkdir()
    for name, text in files.items():
        (package / name).write_text(text)
    ours = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in ours["contracts"] if c["type"] == "acyclic")
    (tmp_path / "pyproject.toml").write_text(
        "[tool.importlinter]\n"
        'root_packages = ["cycle_demo"]\n'
        f"exclude_type_checking_imports = {json.dumps(exclude_type_checking)}\n"
        f"contract_types = {json.dumps(ours['contract_types'])}\n\n"
        "[[tool.importlinter.contracts]]\n"
        f"name = {json.dumps(contract['name'])}\n"
        'type = "acyclic"\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(REPO), *sys.path])  # lint-imports adds the folder it runs in
    # lint-imports configures logging as a program does, which disables every logger made before it: the
    # later tests' loggers (etl's) are put back as they were.
    loggers = [
        logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    disabled = [logger.disabled for logger in loggers]
    try:
        return lint_imports(config_filename=str(tmp_path / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        for logger, was in zip(loggers, disabled, strict=True):
            logger.disabled = was


def test_a_lazy_import_that_closes_a_loop_fails_lint_and_is_named_with_its_lines(
    tmp_path, monkeypatch, capsys
):
    assert _lint(tmp_path, monkeypatch, {**PACKAGE, "d.py": ""}) == 1
    out = capsys.readouterr().out
    assert "cycle_demo.a:1  import cycle_demo.b" in out
    assert "cycle_demo.b:2  from cycle_demo import a" in out
    assert "cycle_demo.c" not in out


@pytest.mark.parametrize("exclude_type_checking", [True, False])
def test_a_type_only_import_that_closes_a_loop_fails_lint_whatever_the_session_leaves_out(
    tmp_path, monkeypatch, capsys, exclude_type_checking
):
    files = {**WITHOUT_CYCLES, "d.py": PACKAGE["d.py"]}
    assert _lint(tmp_path, monkeypatch, files, exclude_type_checking) == 1
    out = capsys.readouterr().out
    assert "cycle_demo.c:4  from cycle_demo import d" in out
    assert "cycle_demo.d:1  import cycle_demo.c" in out
    assert "cycle_demo.a" not in out


def test_without_the_lazy_and_the_type_only_import_lint_passes(tmp_path, monkeypatch, capsys):
    assert _lint(tmp_path, monkeypatch, WITHOUT_CYCLES) == 0
    assert "KEPT" in capsys.readouterr().out


def test_each_cycle_is_found_whole_in_import_order():
    graph = ImportGraph()
    imports = [("p.a", "p.b"), ("p.b", "p.a"), ("p.c", "p.d"), ("p.d", "p.e"), ("p.e", "p.c"), ("p.e", "p.a")]
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    cycles = find_cycles(graph)
    assert {frozenset(cycle) for cycle in cycles} == {
        frozenset({"p.a", "p.b"}),
        frozenset({"p.c", "p.d", "p.e"}),
    }
    for cycle in cycles:
        assert cycle[0] == cycle[-1]
        assert all(pair in imports for pair in itertools.pairwise(cycle))
    assert find_cycles(graph) == []  # each cycle lost one import
