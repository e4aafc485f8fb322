"""The package's layers: no module cycle, and no import against the data-flow order.

Every ``import`` of a pathweave module counts, at module level, inside a function or under
``TYPE_CHECKING``: a function-level import hides a cycle from Python, not from the design.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pathweave

PACKAGE = Path(pathweave.__file__).parent

#: lowest first; a unit (top-level module or subpackage) imports only units of earlier layers. Units in
#: one layer do not import each other (the strategies tiles and streams are leaves).
ORDER: list[set[str]] = [
    {"errors"},
    {"meta", "compare", "machine"},
    {"frontend"},
    {"analysis"},
    {"passes"},
    {"report"},
    {"strategy"},
    {"sequential"},
    {"stacks"},
    {"lanes"},
    {"tiles", "streams"},
    {"auto", "zoo"},
    {"dynamic"},
    {"api", "saved"},
    {"bench", "backend", "serve"},
    {"cli"},
    {"__main__", "__init__"},
]
LAYER = {unit: i for i, units in enumerate(ORDER) for unit in units}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """The pathweave modules ``path`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "pathweave"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "pathweave":
                continue
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(MODULES)
            out |= subs or {node.module}
    return out


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_unit_has_a_layer() -> None:
    units = {_unit(m) for m in MODULES}
    assert units - set(LAYER) == set(), "add new packages to ORDER"
    assert set(LAYER) - units == set(), "ORDER names a unit that no longer exists"


def test_every_import_names_a_module_that_exists() -> None:
    missing = {(m, d) for m, deps in GRAPH.items() for d in deps if d not in MODULES}
    assert missing == set()


def test_no_import_against_the_order() -> None:
    against = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        for d in deps
        if _unit(m) != _unit(d) and _unit(d) != "__init__" and LAYER[_unit(d)] >= LAYER[_unit(m)]
    )
    assert against == []


def test_no_module_cycle() -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(GRAPH.get(m, ())):
            if state.get(d) == 1:
                cycles.append([*path[path.index(d) :], d])
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def _closure(module: str) -> set[str]:
    """``module``, what it imports directly or not, and the packages that hold them."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += GRAPH.get(m, ())
    return seen | {".".join(m.split(".")[:k]) for m in seen for k in range(1, m.count(".") + 1)}


@pytest.mark.parametrize("name", ["pathweave.tiles.ranges", "pathweave.frontend.graph", "pathweave.strategy"])
def test_importing_a_module_loads_only_what_it_imports(name: str) -> None:
    """No package ``__init__`` re-exports: importing one module loads its own imports, nothing else."""
    code = f"import sys, {name}; print(' '.join(m for m in sys.modules if m.startswith('pathweave')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert set(done.stdout.split()) - _closure(name) == set()


def test_the_cycle_check_catches_a_cycle(monkeypatch) -> None:
    monkeypatch.setitem(GRAPH, "pathweave.errors", GRAPH["pathweave.errors"] | {"pathweave.meta"})
    monkeypatch.setitem(GRAPH, "pathweave.meta", GRAPH["pathweave.meta"] | {"pathweave.errors"})
    with pytest.raises(AssertionError):
        test_no_module_cycle()
    with pytest.raises(AssertionError):
        test_no_import_against_the_order()
