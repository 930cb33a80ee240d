"""Every config key is read by the code it configures: no key is accepted and then ignored.

The check is over the source (no import of the packages, so every package is covered, Spark's
too): each config dataclass is found by its ``config_field(...)`` fields, and each field must be
read somewhere in the product code outside validation, where "read" is:

* ``<receiver>.<field>`` whose receiver names a config (``config``, ``cfg``, ``self.config``,
  ``broker``, ``bookie``, ``client``, ...), or is a local name bound to one in the same function
  (``c = self.config``, or a parameter annotated with a config class), so that a same-named
  attribute of an unrelated object (``port``, ``password``) does not count;
* ``self.<field>`` inside a config class's method or property, counted only when that method or
  property is itself read elsewhere (a derived value nobody uses reads nothing);
* the field's name as a string in a function that calls ``getattr`` (``getattr(config, name)``
  over a tuple of names).

A class's ``validate`` and ``__post_init__`` do not count: checking a value is not using it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "protocols",
    "bookie",
    "bk_client",
    "autorecovery",
    "managed_ledger",
    "broker",
    "retention",
    "metadata",
    "magnetar",
    "sinks",
    "tiered_storage",
)
NOT_USE = frozenset({"validate", "__post_init__"})
CONFIG_RECEIVER = re.compile(
    r"(^|[._])(config|configs|conf|cfg|settings|base|template|broker|bookie|client|ml|cluster|standalone|"
    r"journal|gc|retention|ar_config|client_config)$",
    re.IGNORECASE,
)
EXPECTED = {
    "BrokerConfig",
    "RetentionConfig",
    "BookieConfig",
    "GcConfig",
    "JournalConfig",
    "ClientConfig",
    "ManagedLedgerConfig",
    "AutoRecoveryConfig",
    "StandaloneConfig",
    "ClusterConfig",
    "TieredStorageConfig",
}


@dataclass
class ConfigClass:
    name: str
    path: Path
    fields: list[str]
    methods: dict[str, ast.FunctionDef] = field(default_factory=dict)


def _sources() -> dict[Path, ast.Module]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "examples" not in path.parts and not path.name.endswith("_pb2.py"):  # generated
                out[path] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return out


def _config_classes(trees: dict[Path, ast.Module]) -> dict[str, ConfigClass]:
    found = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            fields = [
                st.target.id
                for st in node.body
                if isinstance(st, ast.AnnAssign)
                and isinstance(st.target, ast.Name)
                and isinstance(st.value, ast.Call)
                and isinstance(st.value.func, ast.Name)
                and st.value.func.id == "config_field"
            ]
            if fields:
                methods = {st.name: st for st in node.body if isinstance(st, ast.FunctionDef)}
                found[node.name] = ConfigClass(node.name, path, fields, methods)
    return found


def _functions(
    body: list[ast.stmt], cls: ast.ClassDef | None = None
) -> list[tuple[ast.ClassDef | None, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The module's functions and the methods of its classes (nested classes too), each with its
    class; functions nested in functions are part of their outer function."""
    out: list[tuple[ast.ClassDef | None, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((cls, node))
        elif isinstance(node, ast.ClassDef):
            out.extend(_functions(node.body, node))
    return out


def _aliases(function: ast.FunctionDef | ast.AsyncFunctionDef, configs: dict[str, ConfigClass]) -> set[str]:
    """Local names of ``function`` bound to a config: parameters annotated with a config class, and
    names assigned a config-named expression."""
    out = set()
    args = function.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        if arg.annotation is not None and any(n in ast.unparse(arg.annotation) for n in configs):
            out.add(arg.arg)
    for node in ast.walk(function):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = (
                zip(target.elts, node.value.elts, strict=False)
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                else [(target, node.value)]
            )
            out.update(t.id for t, v in pairs if isinstance(t, ast.Name) and CONFIG_RECEIVER.search(ast.unparse(v)))
    return out


def _reads(trees: dict[Path, ast.Module], configs: dict[str, ConfigClass]) -> dict[str, set[str]]:
    """Field name -> where it is read (class.method or path), per the module docstring."""
    attribute_loads: set[str] = set()  # every attribute name read anywhere (methods used elsewhere)
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                attribute_loads.add(node.attr)
    fields = {f for c in configs.values() for f in c.fields}
    reads: dict[str, set[str]] = {}
    for path, tree in trees.items():
        for cls, function in _functions(tree.body):
            in_config = cls is not None and cls.name in configs
            if in_config and function.name in NOT_USE:
                continue
            where = f"{cls.name}.{function.name}" if cls is not None else f"{path.name}:{function.name}"
            nodes = list(ast.walk(function))
            if not any(
                (isinstance(n, ast.Attribute) and n.attr in fields)
                or (isinstance(n, ast.Constant) and n.value in fields)
                for n in nodes
            ):
                continue
            aliases = _aliases(function, configs)
            calls_getattr = any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" for n in nodes
            )
            for node in nodes:
                if calls_getattr and isinstance(node, ast.Constant) and node.value in fields:
                    reads.setdefault(str(node.value), set()).add(where)
                if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in fields):
                    continue
                receiver = ast.unparse(node.value)
                if receiver == "self":
                    if not (in_config and function.name in attribute_loads):
                        continue
                elif receiver not in aliases and not CONFIG_RECEIVER.search(receiver):
                    continue
                reads.setdefault(node.attr, set()).add(where)
    return reads


def test_every_config_key_is_read() -> None:
    trees = _sources()
    configs = _config_classes(trees)
    assert set(configs) >= EXPECTED, f"config classes not found: {EXPECTED - set(configs)}"
    reads = _reads(trees, configs)
    unread = {name: [f for f in c.fields if f not in reads] for name, c in configs.items()}
    unread = {name: fields for name, fields in unread.items() if fields}
    assert not unread, f"config keys that nothing reads (implement them or remove them): {unread}"


def test_the_check_finds_an_unread_key(tmp_path: Path) -> None:
    source = """
from magnetar.common.config import config_field

class SampleConfig:
    used: int = config_field(1)
    validated_only: int = config_field(2)
    derived_unused: int = config_field(3)
    self_named: int = config_field(4)

    def validate(self) -> None:
        assert self.validated_only > 0

    @property
    def nobody_asks(self) -> int:
        return self.derived_unused

    @property
    def someone_asks(self) -> int:
        return self.self_named

def use(config: SampleConfig, other: object) -> int:
    return config.used + config.someone_asks + other.validated_only
"""
    tree = ast.parse(source)
    configs = _config_classes({tmp_path / "sample.py": tree})
    reads = _reads({tmp_path / "sample.py": tree}, configs)
    assert [f for f in configs["SampleConfig"].fields if f not in reads] == ["validated_only", "derived_unused"]
