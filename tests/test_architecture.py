"""The import rules of docs/architecture.md, checked on the source tree and at run time.

Imports flow one way: protocol modules are leaves (protobuf, crc32c and the standard library
only); metadata may use kazoo; bookie and bk_client sit on protocols.bookkeeper and metadata;
autorecovery on bk_client (its public API), protocols.bookkeeper and metadata; managed_ledger on
bk_client; retention on managed_ledger; broker on managed_ledger and retention. The leaves of
``magnetar.common`` (config, tls, histograms, backoff, durations, the HTTP server set-up, the
admin REST client) may be used by every package; the rest of ``magnetar`` is the application
(command line and composer), which may use everything and which nothing else may import.
No package reaches into another package's private (``_x``) modules, no module takes part in an
import cycle (deferred imports inside functions count), and no function outside tests and
benchmarks is longer than `MAX_FUNCTION_LINES`.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {
    "protocols",
    "broker",
    "managed_ledger",
    "bookie",
    "bk_client",
    "autorecovery",
    "retention",
    "sinks",
    "metadata",
    "magnetar",
    "tiered_storage",
}
PROTOCOLS = {"protocols.pulsar", "protocols.bookkeeper", "protocols.managed_ledger"}
LEAF_THIRD_PARTY = {"google", "crc32c"}

# The leaves of magnetar.common: the third-party packages and the other common leaves each may use.
COMMON: dict[str, tuple[set[str], set[str]]] = {
    "magnetar.common.config": (set(), set()),
    "magnetar.common.version": (set(), set()),
    "magnetar.common.batch_histogram": ({"prometheus_client"}, set()),
    "magnetar.common.tls": ({"trio"}, {"magnetar.common.config"}),
    "magnetar.common.backoff": (set(), set()),
    "magnetar.common.durations": (set(), set()),
    "magnetar.common.http_server": ({"hypercorn", "trio"}, set()),
    "magnetar.common.admin_client": ({"httpx"}, set()),
}
APP = "magnetar (application)"
"""The unit of every `magnetar` module outside magnetar.common: the CLI (magnetar.cli), the
composer (magnetar.stack), ``python -m magnetar``."""
NAMESPACES = {"magnetar", "magnetar.common"}
"""Package roots that hold no code of their own (the version re-export, a docstring): loaded as
parents of the leaves, imported by nobody but the application."""

# Which project packages each package may import (besides itself, the magnetar.common leaves and
# the shared `protocols` root, whose only module is the UTF-8 check every wire format uses).
ALLOWED = {
    "metadata": set(),
    "bookie": {"protocols.bookkeeper", "metadata"},
    "bk_client": {"protocols.bookkeeper", "metadata"},
    "autorecovery": {"bk_client", "protocols.bookkeeper", "metadata"},
    # tiered storage knows nothing of ledgers' owners: it stores and reads back what it is handed
    "tiered_storage": set(),
    "managed_ledger": {"protocols.managed_ledger", "bk_client", "protocols.bookkeeper", "metadata", "tiered_storage"},
    "retention": {"managed_ledger", "protocols.managed_ledger", "protocols.pulsar", "metadata"},
    "broker": {
        "protocols.pulsar",
        "managed_ledger",
        "protocols.managed_ledger",
        "retention",
        "metadata",
        "tiered_storage",
    },
    "sinks.spark": {
        "protocols.pulsar",
        "bk_client",
        "managed_ledger",
        "protocols.managed_ledger",
        "protocols.bookkeeper",
        "metadata",
        "tiered_storage",
    },
    "sinks": set(),
}

MAX_FUNCTION_LINES = 120
# Functions allowed over MAX_FUNCTION_LINES, by "module:qualified name", each with why. Empty: keep it so.
LONG_FUNCTIONS: dict[str, str] = {}


def _owner(module: str) -> str | None:
    """The unit a module belongs to: a protocol package, sinks.spark, a magnetar.common leaf, the
    application, or a top-level package; None for anything outside the project."""
    parts = module.split(".")
    if parts[0] not in PROJECT:
        return None
    if parts[0] == "magnetar":
        if module in NAMESPACES:
            return module
        three = ".".join(parts[:3])
        if three in COMMON:
            return three
        if parts[:2] == ["magnetar", "common"]:
            return "magnetar.common.?"  # a common module the rules above do not know: refused
        return APP
    two = ".".join(parts[:2])
    if two in PROTOCOLS or two == "sinks.spark":
        return two
    return parts[0]  # "protocols" itself: the shared root of the wire formats


def _source_modules() -> dict[str, Path]:
    found = {}
    for top in sorted(PROJECT):
        for path in (ROOT / top).rglob("*.py"):
            if "examples" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


ALL_MODULES = _source_modules()
MODULES = sorted((m, p) for m, p in ALL_MODULES.items() if not p.name.endswith("_pb2.py"))


def _type_checking(node: ast.If) -> bool:
    return ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node`` that runs at some point: function bodies included (deferred
    imports), ``if TYPE_CHECKING:`` blocks left out."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            for other in child.orelse:
                yield other
                yield from _runtime_nodes(other)
            continue
        yield child
        yield from _runtime_nodes(child)


def _imports(module: str, path: Path, *, runtime_only: bool = False) -> list[str]:
    """What ``module`` imports, resolved: ``from pkg import sub`` is ``pkg.sub`` when ``sub`` is a
    module of the project, ``pkg`` otherwise; ``from pkg import _private`` also counts as reaching
    into ``pkg._private``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes = _runtime_nodes(tree) if runtime_only else ast.walk(tree)
    is_pkg = path.name == "__init__.py"
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_pkg:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{alias.name}" for alias in node.names]
            submodules = [n for n in names if n in ALL_MODULES]
            out.extend(submodules)
            if len(submodules) < len(names):
                out.append(target)
            out.extend(n for n in names if n not in ALL_MODULES and n.rsplit(".", 1)[1].startswith("_"))
    return out


def test_there_are_modules_to_check() -> None:
    assert len(MODULES) > 5


def _leaf_problems(me: str, target: str) -> list[str]:
    top, them = target.split(".")[0], _owner(target)
    if me in COMMON:
        third_party, common = COMMON[me]
        allowed_units = {me} | common
    else:  # a wire format
        third_party, allowed_units = LEAF_THIRD_PARTY, {me, "protocols"}
    if them is None and top not in third_party and top not in sys.stdlib_module_names:
        return [f"{target}: {me} may use only {sorted(third_party)} and the stdlib"]
    if them is not None and them not in allowed_units:
        return [f"{target}: the leaf {me} may not import {them}"]
    return []


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_import_rules(module: str, path: Path) -> None:
    me = _owner(module)
    assert me is not None and me != "magnetar.common.?", f"{module}: add it to COMMON with what it may use"
    problems = []
    for target in _imports(module, path):
        them = _owner(target)
        if me in PROTOCOLS or me == "protocols" or me in COMMON:
            problems += _leaf_problems(me, target)
            continue
        if me == "magnetar":  # the package root: it re-exports the version, nothing else
            if them not in (None, "magnetar.common.version"):
                problems.append(f"{target}: the magnetar package root may import only magnetar.common.version")
            continue
        if them is None or them == me or them in ("protocols", "magnetar.common") or them in COMMON:
            continue
        if me == APP:
            continue  # the command line and the composer use every package
        if them in (APP, "magnetar"):
            problems.append(f"{target}: {me} may not import the application (magnetar outside magnetar.common)")
            continue
        if them not in ALLOWED.get(me, set()):
            problems.append(f"{target}: {me} may not import {them}")
            continue
        private = [p for p in target.split(".")[1:] if p.startswith("_") and p != "__init__"]
        if private:
            problems.append(f"{target}: {me} reaches into a private module of {them}")
    assert not problems, f"{module} breaks the import rules:\n  " + "\n  ".join(problems)


def test_a_lower_layer_importing_the_application_is_refused() -> None:
    """The rule above closes the old loophole: ``magnetar`` as a whole was a leaf, so a bookie
    module importing the composer passed."""

    def problems(module: str, target: str) -> str:
        me, them = _owner(module), _owner(target)
        return "refused" if them in (APP, "magnetar") and me not in (APP, None) else "allowed"

    assert problems("bookie.server._process", "magnetar.stack") == "refused"
    assert problems("broker.protocol._connection", "magnetar.cli.cmd_admin") == "refused"
    assert problems("broker.protocol._connection", "magnetar") == "refused"
    assert problems("broker.protocol._connection", "magnetar.common.version") == "allowed"
    assert _owner("magnetar.common.tls") == "magnetar.common.tls"
    assert _owner("magnetar.common.new_thing") == "magnetar.common.?"


# ------------------------------------------------------------------ inside the broker

BROKER_CORE = {"broker._config", "broker._errors"}
"""Top-level broker modules every part of the broker may use: the config and the errors."""

# The broker's parts (subpackages, and the top-level modules as units of their own) and the other
# parts each may import, for types or at run time. protocol and admin are the outer edges (the
# binary protocol and the REST API): no other part imports them. `_service` (BrokerService) is
# the composer that holds the parts together; the parts name it for types only, except those in
# SERVICE_AT_RUN_TIME.
BROKER_PARTS: dict[str, set[str]] = {
    "broker._config": set(),
    "broker._errors": set(),
    "broker.schema": set(),
    "broker.resources": set(),
    "broker.auth": {"broker.resources"},
    # topics read retention's hooks (publish times) and housekeeping sees topics' stored state
    "broker.topics": {"broker.housekeeping", "broker.transactions", "broker._service"},
    "broker.housekeeping": {"broker.topics", "broker.resources", "broker._service"},
    "broker.cluster": {"broker.topics", "broker.resources", "broker.auth", "broker._service"},
    "broker.protocol": {"broker.topics", "broker.schema", "broker.auth", "broker.transactions", "broker._service"},
    # the coordinator reaches participant topics here or on their owners; the topic side wraps topics
    "broker.transactions": {"broker.topics", "broker.resources", "broker.cluster", "broker._service"},
    # replicators run in topics' nurseries and read cluster records and schemas; their producer
    # speaks the binary protocol through the cluster's broker-to-broker client
    "broker.replication": {"broker.topics", "broker.resources", "broker.schema", "broker.cluster", "broker._service"},
    "broker.admin": {
        "broker.topics",
        "broker.replication",
        "broker.transactions",
        "broker.schema",
        "broker.auth",
        "broker.resources",
        "broker.housekeeping",
        "broker._service",
        "broker._dynamic_config",
    },
    "broker._service": {
        "broker.topics",
        "broker.transactions",
        "broker.replication",
        "broker.schema",
        "broker.auth",
        "broker.resources",
        "broker.housekeeping",
        "broker.cluster",
        "broker.metrics",
        "broker._dynamic_config",
    },
    "broker._dynamic_config": {"broker._service"},
    "broker.metrics": {"broker.topics", "broker.transactions", "broker._service"},
}
SERVICE_AT_RUN_TIME = {"broker.protocol", "broker.cluster", "broker._dynamic_config", "broker.metrics"}
"""Parts that import `broker._service` at run time: the server runs a BrokerService, membership
takes the broker id from `broker_id_of`; the others see BrokerService only as a type."""
MAX_BROKER_TOP_MODULES = 12


def _broker_part(module: str) -> str | None:
    """The broker part a module belongs to ("broker" for the package root), None outside the broker."""
    parts = module.split(".")
    if parts[0] != "broker":
        return None
    return ".".join(parts[:2])


BROKER_MODULES = [(m, p) for m, p in MODULES if m != "broker" and _broker_part(m) is not None]


@pytest.mark.parametrize(("module", "path"), BROKER_MODULES, ids=[m for m, _ in BROKER_MODULES])
def test_broker_part_import_rules(module: str, path: Path) -> None:
    me = _broker_part(module)
    assert me in BROKER_PARTS, f"{module}: add its part to BROKER_PARTS with what it may import"
    allowed = BROKER_PARTS[me] | BROKER_CORE | {me}
    at_run_time = set(_imports(module, path, runtime_only=True))
    problems = []
    for target in _imports(module, path):
        them = _broker_part(target)
        if them is None or them == me:
            continue
        if them not in allowed:
            problems.append(f"{target}: {me} may not import {them}")
        elif them == "broker._service" and target in at_run_time and me not in SERVICE_AT_RUN_TIME:
            problems.append(f"{target}: {me} may name BrokerService for types only (under TYPE_CHECKING)")
    assert not problems, f"{module} breaks the broker's import rules:\n  " + "\n  ".join(problems)


def test_the_broker_keeps_few_modules_at_its_top() -> None:
    top = sorted(p.name for p in (ROOT / "broker").glob("*.py"))
    assert len(top) <= MAX_BROKER_TOP_MODULES, f"broker/ has {len(top)} modules at its top: {top}"
    parts = {_broker_part(m) for m, _ in BROKER_MODULES}
    assert parts <= set(BROKER_PARTS), f"unknown broker parts: {sorted(parts - set(BROKER_PARTS))}"


# ------------------------------------------------------------------ what is really loaded

PACKAGES = [
    "broker",
    "managed_ledger",
    "bookie",
    "bk_client",
    "autorecovery",
    "retention",
    "sinks.spark",
    "metadata",
    "tiered_storage",
    "protocols.pulsar",
    "protocols.bookkeeper",
    "protocols.managed_ledger",
    "magnetar",
    "magnetar.common",
]


def _closure(unit: str) -> set[str]:
    """The units ``unit`` may load at run time: what it may import, transitively, plus the leaves
    every package may use and the package roots they sit in."""
    if unit in COMMON:
        seen = {unit} | COMMON[unit][1]
        for other in COMMON[unit][1]:
            seen |= _closure(other)
        return seen | NAMESPACES | {"magnetar.common.version"}  # the package root re-exports it
    seen, todo = {unit}, [unit]
    while todo:
        for other in ALLOWED.get(todo.pop(), set()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen | {"protocols"} | set(COMMON) | NAMESPACES


# Third-party packages that only servers need: a client or a Spark worker must not load them.
SERVER_ONLY = {"starlette", "hypercorn"}
# Third-party packages a common leaf loads only when COMMON says it may use them.
HEAVY = {"trio", "hypercorn", "starlette", "httpx", "prometheus_client", "kazoo", "google"}

_LOADER = """
import importlib, json, pkgutil, sys
unit, others = sys.argv[1], sys.argv[2:]

def load(name):
    mod = importlib.import_module(name)
    for info in pkgutil.iter_modules(getattr(mod, "__path__", [])):
        child = f"{name}.{info.name}"
        if info.name in ("__main__", "examples") or child in others:
            continue
        load(child)

load(unit)
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(unit: str) -> list[str]:
    """Every module loaded by importing ``unit`` and each of its modules (not those of the units
    inside it, such as sinks.spark inside sinks), in a fresh interpreter."""
    inner = [u for u in [*ALLOWED, *PROTOCOLS] if u.startswith(unit + ".")]
    out = subprocess.run(
        [sys.executable, "-c", _LOADER, unit, *inner], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("unit", sorted(ALLOWED) + sorted(PROTOCOLS) + sorted(COMMON))
def test_what_a_package_loads_at_run_time(unit: str) -> None:
    """Import the package and every module in it in a fresh interpreter and check every module it
    really loaded (not only its import statements) against the rules, e.g. ``import bk_client``
    loads no bookie module and no HTTP server, ``magnetar.common.config`` loads no trio."""
    loaded = _loaded(unit)
    units = {_owner(m) for m in loaded} - {None}
    # a package loads its own parent (`sinks` for `sinks.spark`, `protocols` for the wire formats)
    allowed = _closure(unit) | {unit.split(".")[0]}
    assert units <= allowed, f"import {unit} loads {sorted(units - allowed)}"
    tops = {m.split(".")[0] for m in loaded}
    if unit in COMMON:
        extra = (tops & HEAVY) - COMMON[unit][0]
        assert not extra, f"import {unit} loads {sorted(extra)}"
    elif unit not in ("bookie", "broker"):
        assert not SERVER_ONLY & tops, f"import {unit} loads a server framework"


@pytest.mark.parametrize("name", PACKAGES)
def test_public_exports_resolve(name: str) -> None:
    module = importlib.import_module(name)
    for export in getattr(module, "__all__", []):
        assert hasattr(module, export), f"{name}.__all__ names {export!r} but it is not defined"


# ------------------------------------------------------------------ import cycles


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports when it runs (deferred imports included)."""
    graph = {}
    for module, path in ALL_MODULES.items():
        targets = {t for t in _imports(module, path, runtime_only=True) if t in ALL_MODULES}
        graph[module] = targets - {module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_modules() -> None:
    """Modules that import each other (at module level or inside a function) are one module in
    two files: each cycle found is listed with its members."""
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n  " + "\n  ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_deferred_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n")
    names = [n.names[0].name for n in _runtime_nodes(tree) if isinstance(n, ast.Import)]
    assert names == ["y"]  # the deferred import counts, the type-only one does not


# ------------------------------------------------------------------ function length


def _long_functions() -> dict[str, int]:
    found = {}
    for module, path in MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        todo: list[tuple[str, ast.AST]] = [("", tree)]
        while todo:
            prefix, node = todo.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        length = (child.end_lineno or child.lineno) - child.lineno + 1
                        if length > MAX_FUNCTION_LINES:
                            found[f"{module}:{name}"] = length
                    todo.append((f"{name}.", child))
                else:
                    todo.append((prefix, child))
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    """A function over MAX_FUNCTION_LINES (from ``def`` to its end) hides several
    responsibilities; split it, or name it in LONG_FUNCTIONS with the reason."""
    long = {name: n for name, n in _long_functions().items() if name not in LONG_FUNCTIONS}
    assert not long, "functions over the limit:\n  " + "\n  ".join(f"{k} ({v} lines)" for k, v in sorted(long.items()))
    stale = set(LONG_FUNCTIONS) - set(_long_functions())
    assert not stale, f"LONG_FUNCTIONS names functions that are short now (or gone): {sorted(stale)}"
