"""The bookie package's layers, checked on its source (as ``tests/test_architecture.py`` checks the
packages): imports only go down, a subpackage is used through its ``__init__``, and no module-level
import cycle exists.

    bookie (the public API)  ->  bookie.server  ->  bookie.gc  ->  bookie.storage  ->  shared leaves
                                                ->  bookie.journal               ->  shared leaves
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOKIE = ROOT / "bookie"
LEAVES = {"bookie._errors", "bookie._space", "bookie.metrics", "bookie._io_priority"}
SUBPACKAGES = {"bookie.journal", "bookie.storage", "bookie.gc", "bookie.server"}
# which units each unit may import (besides itself); the leaves import no bookie module
ALLOWED = {
    "leaf": set(),
    "bookie.journal": {"leaf"},
    "bookie.storage": {"leaf"},
    "bookie.gc": {"bookie.storage", "leaf"},
    "bookie.server": {"bookie.journal", "bookie.storage", "bookie.gc", "leaf"},
    "bookie": {"bookie.journal", "bookie.storage", "bookie.gc", "bookie.server", "leaf"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(BOOKIE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _unit(module: str) -> str:
    if module in LEAVES:
        return "leaf"
    two = ".".join(module.split(".")[:2])
    return two if two in SUBPACKAGES else "bookie"


def _module_level_imports(module: str, path: Path) -> list[str]:
    """The bookie modules ``module`` imports at module level (function-level imports are lazy)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names if a.name.split(".")[0] == "bookie")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "bookie":
                continue
            for alias in node.names:  # `from . import metrics` imports a module, not a name
                sub = f"{target}.{alias.name}"
                out.append(sub if sub in MODULES else target)
    return out


def test_the_layers_are_there() -> None:
    assert set(MODULES) >= SUBPACKAGES | LEAVES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_through_each_subpackage_init(module: str) -> None:
    me = _unit(module)
    problems = []
    for target in _module_level_imports(module, MODULES[module]):
        them = _unit(target)
        if them == me:
            continue
        if them not in ALLOWED[me]:
            problems.append(f"{target}: {me} may not import {them}")
        elif them in SUBPACKAGES and target != them:
            problems.append(f"{target}: use {them} (its __init__ names what other layers may use)")
    assert not problems, f"{module}:\n  " + "\n  ".join(problems)


def test_no_module_level_import_cycle() -> None:
    graph = {m: set(_module_level_imports(m, p)) - {m} for m, p in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                cycle = [*path[path.index(n) :], n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
