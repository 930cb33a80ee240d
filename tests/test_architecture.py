"""The import rules of docs/architecture.md, checked on the source tree.

Imports flow one way: protocol modules are leaves (protobuf, crc32c and the standard library
only); metadata may use kazoo; bookie and bk_client sit on protocols.bookkeeper and metadata;
autorecovery on bk_client (its public API), protocols.bookkeeper and metadata; managed_ledger on
bk_client; retention on managed_ledger; broker on managed_ledger and retention.
``magnetar.config`` (and ``magnetar`` itself, for the version) are dependency-free leaves
every package may use, as is ``magnetar.batch_histogram`` (prometheus-client only);
``magnetar.cli`` composes everything. No package reaches into another package's private (``_x``) modules.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"protocols", "broker", "managed_ledger", "bookie", "bk_client", "autorecovery", "retention", "sinks",
           "metadata", "magnetar", "tiered_storage"}
PROTOCOLS = {"protocols.pulsar", "protocols.bookkeeper", "protocols.managed_ledger"}
LEAF_THIRD_PARTY = {"google", "crc32c"}
# leaves of the `magnetar` package every package may use, and the third-party packages each may use
SHARED_LEAVES = {"magnetar.config": set(), "magnetar.batch_histogram": {"prometheus_client"}}

# Which project packages each package may import (besides itself, magnetar.config and the shared
# `protocols` root, whose only module is the UTF-8 check every wire format uses).
ALLOWED = {
    "metadata": set(),
    "bookie": {"protocols.bookkeeper", "metadata"},
    "bk_client": {"protocols.bookkeeper", "metadata"},
    "autorecovery": {"bk_client", "protocols.bookkeeper", "metadata"},
    # tiered storage knows nothing of ledgers' owners: it stores and reads back what it is handed
    "tiered_storage": set(),
    "managed_ledger": {"protocols.managed_ledger", "bk_client", "protocols.bookkeeper", "metadata", "tiered_storage"},
    "retention": {"managed_ledger", "protocols.managed_ledger", "protocols.pulsar", "metadata"},
    "broker": {"protocols.pulsar", "managed_ledger", "protocols.managed_ledger", "retention", "metadata",
               "tiered_storage"},
    "sinks.spark": {"protocols.pulsar", "bk_client", "managed_ledger", "protocols.managed_ledger",
                    "protocols.bookkeeper", "metadata", "tiered_storage"},
    "sinks": set(),
}


def _owner(module: str) -> str | None:
    """The unit a module belongs to: a protocol package, sinks.spark, or a top-level package."""
    parts = module.split(".")
    if parts[0] not in PROJECT:
        return None
    two = ".".join(parts[:2])
    if two in PROTOCOLS or two == "sinks.spark" or two in SHARED_LEAVES or two == "magnetar.cli":
        return two
    return parts[0]  # "protocols" itself: the shared root of the wire formats


def _source_modules() -> list[tuple[str, Path]]:
    found = []
    for top in sorted(PROJECT):
        for path in (ROOT / top).rglob("*.py"):
            if path.name.endswith("_pb2.py") or "examples" in path.parts:
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.append((".".join(parts), path))
    return found


def _imports(module: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
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
            out.append(target)
            # `from pkg import _private` reaches into a private module too
            out.extend(f"{target}.{alias.name}" for alias in node.names if alias.name.startswith("_"))
    return out


MODULES = _source_modules()


def test_there_are_modules_to_check() -> None:
    assert len(MODULES) > 5


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_import_rules(module: str, path: Path) -> None:
    me = _owner(module)
    assert me is not None
    problems = []
    for target in _imports(module, path):
        top = target.split(".")[0]
        them = _owner(target)
        if me in PROTOCOLS or me == "protocols" or me in SHARED_LEAVES:
            third_party = SHARED_LEAVES.get(me, LEAF_THIRD_PARTY)
            if them is None and top not in third_party and top not in sys.stdlib_module_names:
                problems.append(f"{target}: a leaf module may use only {sorted(third_party)} and the stdlib")
            if them is not None and them not in (me, "protocols"):
                problems.append(f"{target}: a wire format (leaf) may not import another Magnetar package")
            continue
        if them is None or them == me or them in ("magnetar", "protocols") or them in SHARED_LEAVES:
            continue  # the version and the config loader are leaves every package may use
        if me in ("magnetar.cli", "magnetar"):
            continue  # the command line composes every package
        if them not in ALLOWED.get(me, set()):
            problems.append(f"{target}: {me} may not import {them}")
            continue
        private = [p for p in target.split(".")[1:] if p.startswith("_") and p != "__init__"]
        if private:
            problems.append(f"{target}: {me} reaches into a private module of {them}")
    assert not problems, f"{module} breaks the import rules:\n  " + "\n  ".join(problems)


PACKAGES = ["broker", "managed_ledger", "bookie", "bk_client", "autorecovery", "retention", "sinks.spark",
            "metadata", "tiered_storage", "protocols.pulsar", "protocols.bookkeeper", "protocols.managed_ledger",
            "magnetar"]


def _closure(unit: str) -> set[str]:
    """The units ``unit`` may load at run time: what it may import, transitively, plus the leaves
    every package may use."""
    seen, todo = {unit}, [unit]
    while todo:
        for other in ALLOWED.get(todo.pop(), set()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen | {"protocols", "magnetar"} | set(SHARED_LEAVES)


# Third-party packages that only servers need: a client or a Spark worker must not load them.
SERVER_ONLY = {"starlette", "hypercorn"}


@pytest.mark.parametrize("unit", sorted(ALLOWED) + sorted(PROTOCOLS))
def test_what_a_package_loads_at_run_time(unit: str) -> None:
    """Import the package in a fresh interpreter and check every module it really loaded (not only
    its import statements) against the rules, e.g. ``import bk_client`` loads no bookie module."""
    code = ("import importlib, json, sys; importlib.import_module(sys.argv[1]); "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code, unit], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    units = {_owner(m) for m in loaded} - {None}
    # a package loads its own parent (`sinks` for `sinks.spark`, `protocols` for the wire formats)
    allowed = _closure(unit) | {unit.split(".")[0]}
    assert units <= allowed, f"import {unit} loads {sorted(units - allowed)}"
    if unit not in ("bookie", "broker"):
        assert not SERVER_ONLY & {m.split(".")[0] for m in loaded}, f"import {unit} loads a server framework"


@pytest.mark.parametrize("name", PACKAGES)
def test_public_exports_resolve(name: str) -> None:
    module = importlib.import_module(name)
    for export in getattr(module, "__all__", []):
        assert hasattr(module, export), f"{name}.__all__ names {export!r} but it is not defined"
