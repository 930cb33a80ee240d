"""The import rules of DESIGN.md, checked on the source tree.

Imports flow one way: protocol modules are leaves (protobuf, crc32c and the standard library
only); metadata may use kazoo; bookie and bk_client sit on bookie.protocol and metadata;
managed_ledger on bk_client; retention on managed_ledger; broker on managed_ledger and retention.
``magnetar.config`` (and ``magnetar`` itself, for the version) are dependency-free leaves
every package may use; ``magnetar.cli`` composes
everything. No package reaches into another package's private (``_x``) modules.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"broker", "managed_ledger", "bookie", "bk_client", "retention", "sinks", "metadata", "magnetar"}
PROTOCOLS = {"broker.protocol", "bookie.protocol", "managed_ledger.protocol"}
LEAF_THIRD_PARTY = {"google", "crc32c"}

# Which project packages each package may import (besides itself and magnetar.config).
ALLOWED = {
    "metadata": set(),
    "bookie": {"bookie.protocol", "metadata"},
    "bk_client": {"bookie.protocol", "metadata"},
    "managed_ledger": {"managed_ledger.protocol", "bk_client", "bookie.protocol", "metadata"},
    "retention": {"managed_ledger", "managed_ledger.protocol", "metadata"},
    "broker": {"broker.protocol", "managed_ledger", "managed_ledger.protocol", "retention", "metadata"},
    "sinks.spark": {"broker.protocol", "bk_client", "managed_ledger", "managed_ledger.protocol",
                    "bookie.protocol", "metadata"},
    "sinks": set(),
}


def _owner(module: str) -> str | None:
    """The unit a module belongs to: a protocol package, sinks.spark, or a top-level package."""
    parts = module.split(".")
    if parts[0] not in PROJECT:
        return None
    two = ".".join(parts[:2])
    if two in PROTOCOLS or two == "sinks.spark" or two == "magnetar.config" or two == "magnetar.cli":
        return two
    return parts[0]


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
        if me in PROTOCOLS or me == "magnetar.config":
            if them is None and top not in LEAF_THIRD_PARTY and top not in sys.stdlib_module_names:
                problems.append(f"{target}: a leaf module may use only protobuf, crc32c and the stdlib")
            if them is not None and them != me and them not in PROTOCOLS:
                problems.append(f"{target}: a leaf module may not import other Magnetar packages")
            continue
        if them is None or them == me or them in ("magnetar", "magnetar.config"):
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


PACKAGES = ["broker", "managed_ledger", "bookie", "bk_client", "retention", "sinks.spark", "metadata",
            "broker.protocol", "bookie.protocol", "managed_ledger.protocol", "magnetar"]


@pytest.mark.parametrize("name", PACKAGES)
def test_public_exports_resolve(name: str) -> None:
    module = importlib.import_module(name)
    for export in getattr(module, "__all__", []):
        assert hasattr(module, export), f"{name}.__all__ names {export!r} but it is not defined"
