"""Avro schema definitions and Avro's schema resolution rules, for schema compatibility checks.

`parse_avro` turns an Avro schema definition (JSON text, as the AVRO and JSON schema types of
Pulsar carry it) into a graph of nodes: named types (records, enums, fixed) are defined once and
every reference to them is the same node, so recursive records are cycles. Bad definitions raise
`AvroSchemaError` naming what is wrong and where.

`read_error(reader, writer)` answers whether data written with ``writer`` can be read with
``reader`` under the resolution rules of the Avro specification ("Schema Resolution"):

* primitives of the same type match, and the promotions int -> long/float/double,
  long -> float/double, float -> double, string <-> bytes;
* records match when their unqualified names match (or the writer's name is one of the reader's
  aliases); each reader field is read from the writer field of the same name (or one of the
  field's aliases), recursively, or else must have a default;
* enums match by name; every writer symbol must be a reader symbol unless the reader has a
  default symbol;
* fixed match by name and size; arrays by item type; maps by value type;
* a writer union is readable when every branch is; a reader union reads a writer type when one
  of its branches does.

Logical types are read as their underlying type (as Avro's own compatibility check does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AvroSchemaError", "AvroNode", "parse_avro", "read_error"]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# writer type -> reader types it may be promoted to
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}
_MAX_DEPTH = 200  # nesting bound: a hostile definition must not exhaust the stack


class AvroSchemaError(ValueError):
    """An Avro schema definition that is not valid (the message says what and where)."""


@dataclass(eq=False)
class AvroNode:
    """One type of a parsed schema. ``kind`` is a primitive name or record/enum/fixed/array/map/
    union; named kinds have ``name`` (full) and ``aliases`` (full names); records have ``fields``,
    enums ``symbols`` (and ``enum_default``), fixed ``size``, arrays ``items``, maps ``values``,
    unions ``branches``."""

    kind: str
    name: str = ""
    aliases: frozenset[str] = frozenset()
    fields: list[AvroField] = field(default_factory=list)
    symbols: tuple[str, ...] = ()
    enum_default: str | None = None
    size: int = 0
    items: AvroNode | None = None
    values: AvroNode | None = None
    branches: list[AvroNode] = field(default_factory=list)

    @property
    def short_name(self) -> str:
        """The name without its namespace."""
        return self.name.rsplit(".", 1)[-1]

    def describe(self) -> str:
        """A short human-readable form for error messages."""
        if self.kind in ("record", "enum", "fixed"):
            return f"{self.kind} {self.name}"
        if self.kind == "array" and self.items is not None:
            return f"array<{self.items.describe()}>"
        if self.kind == "map" and self.values is not None:
            return f"map<{self.values.describe()}>"
        if self.kind == "union":
            return "[" + ", ".join(b.describe() for b in self.branches) + "]"
        return self.kind


@dataclass(eq=False)
class AvroField:
    """A record field: name, type, whether it has a default, aliases."""

    name: str
    type: AvroNode
    has_default: bool
    aliases: frozenset[str] = frozenset()


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, AvroNode] = {}

    @staticmethod
    def _full_name(name: Any, namespace: str, where: str) -> str:
        if not isinstance(name, str) or not name:
            raise AvroSchemaError(f"{where}: a named type needs a non-empty string 'name'")
        full = name if "." in name else (f"{namespace}.{name}" if namespace else name)
        for part in full.split("."):
            if not (part and (part[0].isalpha() or part[0] == "_")
                    and all(c.isalnum() or c == "_" for c in part)):
                raise AvroSchemaError(f"{where}: invalid name {name!r}")
        return full

    def _aliases(self, obj: dict[str, Any], namespace: str, where: str) -> frozenset[str]:
        raw = obj.get("aliases", [])
        if not isinstance(raw, list):
            raise AvroSchemaError(f"{where}: 'aliases' must be a list of names")
        return frozenset(self._full_name(a, namespace, where) for a in raw)

    def _define(self, node: AvroNode, where: str) -> None:
        if node.name in PRIMITIVES or node.short_name in PRIMITIVES:
            raise AvroSchemaError(f"{where}: {node.name!r} is a primitive type name")
        if node.name in self.named:
            raise AvroSchemaError(f"{where}: type {node.name!r} is defined twice")
        self.named[node.name] = node

    def parse(self, obj: Any, namespace: str, where: str, depth: int) -> AvroNode:
        if depth > _MAX_DEPTH:
            raise AvroSchemaError(f"{where}: nested deeper than {_MAX_DEPTH} levels")
        if isinstance(obj, str):
            if obj in PRIMITIVES:
                return AvroNode(obj)
            full = obj if "." in obj else (f"{namespace}.{obj}" if namespace else obj)
            found = self.named.get(full) or self.named.get(obj)
            if found is None:
                raise AvroSchemaError(f"{where}: unknown type {obj!r}")
            return found
        if isinstance(obj, list):
            return self._union(obj, namespace, where, depth)
        if not isinstance(obj, dict):
            raise AvroSchemaError(f"{where}: expected a type name, a union or an object, not {obj!r}")
        kind = obj.get("type")
        if isinstance(kind, (dict, list)):
            return self.parse(kind, namespace, where, depth + 1)
        if not isinstance(kind, str):
            raise AvroSchemaError(f"{where}: missing or invalid 'type'")
        if kind in PRIMITIVES:
            return AvroNode(kind)  # with attributes such as logicalType: read as the underlying type
        if kind in ("record", "error"):
            return self._record(obj, namespace, where, depth)
        if kind == "enum":
            return self._enum(obj, namespace, where)
        if kind == "fixed":
            full = self._full_name(obj.get("name"), obj.get("namespace") or namespace, where)
            size = obj.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise AvroSchemaError(f"{where}: fixed {full!r} needs a non-negative integer 'size'")
            node = AvroNode("fixed", name=full, size=size, aliases=self._aliases(obj, namespace, where))
            self._define(node, where)
            return node
        if kind == "array":
            if "items" not in obj:
                raise AvroSchemaError(f"{where}: array without 'items'")
            return AvroNode("array", items=self.parse(obj["items"], namespace, f"{where}[items]", depth + 1))
        if kind == "map":
            if "values" not in obj:
                raise AvroSchemaError(f"{where}: map without 'values'")
            return AvroNode("map", values=self.parse(obj["values"], namespace, f"{where}[values]", depth + 1))
        return self.parse(kind, namespace, where, depth + 1)  # {"type": "SomeNamedType"}

    def _union(self, obj: list[Any], namespace: str, where: str, depth: int) -> AvroNode:
        branches = [self.parse(b, namespace, f"{where}[{i}]", depth + 1) for i, b in enumerate(obj)]
        seen: set[str] = set()
        for b in branches:
            if b.kind == "union":
                raise AvroSchemaError(f"{where}: a union may not contain a union")
            key = b.name if b.kind in ("record", "enum", "fixed") else b.kind
            if key in seen:
                raise AvroSchemaError(f"{where}: the union holds {key!r} twice")
            seen.add(key)
        return AvroNode("union", branches=branches)

    def _record(self, obj: dict[str, Any], namespace: str, where: str, depth: int) -> AvroNode:
        full = self._full_name(obj.get("name"), obj.get("namespace") or namespace, where)
        inner_ns = full.rsplit(".", 1)[0] if "." in full else ""
        node = AvroNode("record", name=full, aliases=self._aliases(obj, inner_ns, where))
        self._define(node, where)  # before the fields: they may refer to the record itself
        raw_fields = obj.get("fields")
        if not isinstance(raw_fields, list):
            raise AvroSchemaError(f"{where}: record {full!r} needs a list of 'fields'")
        names: set[str] = set()
        for i, f in enumerate(raw_fields):
            fwhere = f"{full}.{f.get('name', i) if isinstance(f, dict) else i}"
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
                raise AvroSchemaError(f"{fwhere}: a field needs a string 'name' and a 'type'")
            if f["name"] in names:
                raise AvroSchemaError(f"{fwhere}: field defined twice")
            names.add(f["name"])
            aliases = f.get("aliases", [])
            if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
                raise AvroSchemaError(f"{fwhere}: 'aliases' must be a list of names")
            ftype = self.parse(f["type"], inner_ns, fwhere, depth + 1)
            node.fields.append(AvroField(f["name"], ftype, "default" in f, frozenset(aliases)))
        return node

    def _enum(self, obj: dict[str, Any], namespace: str, where: str) -> AvroNode:
        full = self._full_name(obj.get("name"), obj.get("namespace") or namespace, where)
        symbols = obj.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise AvroSchemaError(f"{where}: enum {full!r} needs a list of string 'symbols'")
        if len(set(symbols)) != len(symbols):
            raise AvroSchemaError(f"{where}: enum {full!r} repeats a symbol")
        default = obj.get("default")
        if default is not None and default not in symbols:
            raise AvroSchemaError(f"{where}: enum {full!r} default {default!r} is not one of its symbols")
        node = AvroNode("enum", name=full, symbols=tuple(symbols), enum_default=default,
                        aliases=self._aliases(obj, namespace, where))
        self._define(node, where)
        return node


def parse_avro(definition: bytes | str | Any) -> AvroNode:
    """Parse an Avro schema definition (JSON bytes/text, or the decoded JSON value).

    Raises `AvroSchemaError` for text that is not JSON or not a valid Avro schema."""
    if isinstance(definition, (bytes, bytearray)):
        try:
            definition = bytes(definition).decode()
        except UnicodeDecodeError:
            raise AvroSchemaError("the schema definition is not UTF-8 text") from None
    if isinstance(definition, str):
        try:
            definition = json.loads(definition)
        except ValueError as exc:
            raise AvroSchemaError(f"the schema definition is not JSON: {exc}") from None
        except RecursionError:
            raise AvroSchemaError("the schema definition is nested too deep") from None
    return _Parser().parse(definition, "", "schema", 0)


def _names_match(reader: AvroNode, writer: AvroNode) -> bool:
    if reader.short_name == writer.short_name:
        return True
    return writer.name in reader.aliases or writer.short_name in {a.rsplit(".", 1)[-1] for a in reader.aliases}


class _Resolver:
    def __init__(self) -> None:
        # (id(reader), id(writer)) -> reason or None; None while in progress, so that a recursive
        # record is assumed readable inside itself (as Avro's own checker does)
        self.memo: dict[tuple[int, int], str | None] = {}

    def check(self, r: AvroNode, w: AvroNode, path: str) -> str | None:
        if w.kind == "union":
            for i, b in enumerate(w.branches):
                reason = self.check(r, b, path)
                if reason:
                    return reason if r.kind == "union" or len(w.branches) == 1 else \
                        f"{path}: the written union's branch {i} ({b.describe()}) is not readable: {reason}"
            return None
        if r.kind == "union":
            for b in r.branches:
                if self.check(b, w, path) is None:
                    return None
            return f"{path}: written type {w.describe()} matches no branch of the reader's union {r.describe()}"
        if r.kind in PRIMITIVES or w.kind in PRIMITIVES:
            if r.kind == w.kind or r.kind in _PROMOTIONS.get(w.kind, ()):
                return None
            return f"{path}: written type {w.describe()} cannot be read as {r.describe()}"
        if r.kind != w.kind:
            return f"{path}: written type {w.describe()} cannot be read as {r.describe()}"
        if r.kind == "array":
            assert r.items is not None and w.items is not None
            return self.check(r.items, w.items, f"{path}[]")
        if r.kind == "map":
            assert r.values is not None and w.values is not None
            return self.check(r.values, w.values, f"{path}{{}}")
        if not _names_match(r, w):
            return f"{path}: {w.describe()} cannot be read as {r.describe()} (names differ)"
        if r.kind == "fixed":
            if r.size != w.size:
                return f"{path}: fixed {w.name} has size {w.size}, the reader's {r.size}"
            return None
        if r.kind == "enum":
            missing = [s for s in w.symbols if s not in r.symbols]
            if missing and r.enum_default is None:
                return f"{path}: enum {r.name} lacks the written symbols {missing} and has no default"
            return None
        key = (id(r), id(w))
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = None
        reason = self._record(r, w, path)
        self.memo[key] = reason
        return reason

    def _record(self, r: AvroNode, w: AvroNode, path: str) -> str | None:
        by_name = {f.name: f for f in w.fields}
        for f in r.fields:
            wf = by_name.get(f.name) or next((by_name[a] for a in sorted(f.aliases) if a in by_name), None)
            if wf is None:
                if not f.has_default:
                    return f"{path}.{f.name}: field missing from the written data and without a default"
                continue
            reason = self.check(f.type, wf.type, f"{path}.{f.name}")
            if reason:
                return reason
        return None


def read_error(reader: AvroNode, writer: AvroNode) -> str | None:
    """None when data written with ``writer`` is readable with ``reader``; else why not."""
    return _Resolver().check(reader, writer, reader.name or reader.describe())
