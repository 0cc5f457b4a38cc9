"""An import-linter contract: no import cycle between modules (pyproject.toml `[tool.importlinter]`).

Every import counts, those inside functions too (a lazy import that only hides a cycle is a cycle), and
those under `if TYPE_CHECKING:` too, whatever the configuration says of them (a reader follows a type's
import as any other; a session that leaves them out gets a graph of its own here). import-linter's own
`acyclic_siblings` compares packages, not modules, and so misses a package whose `__init__` imports a
child that imports the package back. A broken contract prints each cycle with the line of every import
in it.
"""

from __future__ import annotations

import copy
import itertools
from graphlib import CycleError, TopologicalSorter

import grimp
from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain.contract import Contract, ContractCheck
from rich.markup import escape


def find_cycles(graph: ImportGraph) -> list[list[str]]:
    """Import cycles, each as its modules in import order and the first again at the end: one, then one
    more once an import of it is taken out of `graph`, until none is left."""
    found: list[list[str]] = []
    while True:
        # A module's predecessors are the modules it imports.
        sorter = TopologicalSorter(
            {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
        )
        try:
            sorter.prepare()
        except CycleError as exc:
            cycle = list(reversed(exc.args[1]))  # graphlib lists each module before its importer
            found.append(cycle)
            graph.remove_import(importer=cycle[0], imported=cycle[1])
            continue
        return found


class AcyclicContract(Contract):
    """Kept when no module of the root packages takes part in an import cycle, type-only imports included."""

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        if self._option("exclude_type_checking_imports"):
            graph = grimp.build_graph(
                *self.session_options["root_packages"],
                include_external_packages=self._option("include_external_packages"),
                exclude_type_checking_imports=False,
                cache_dir=None,
            )
        cycles = [
            [
                (importer, imported, graph.get_import_details(importer=importer, imported=imported))
                for importer, imported in itertools.pairwise(cycle)
            ]
            for cycle in find_cycles(copy.deepcopy(graph))
        ]
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def _option(self, name: str) -> bool:
        return str(self.session_options.get(name)) in ("True", "true")  # as import-linter reads its own

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(escape(" -> ".join([cycle[0][0], *(imported for _, imported, _ in cycle)])))
            for importer, _, details in cycle:
                for detail in details:
                    where = f"{importer}:{detail['line_number']}"
                    output.print_error(escape(f"    {where}  {detail['line_contents']}"))
            output.new_line()
