"""Avro schema definitions and the schema resolution check that Pulsar's broker makes with Avro.

`parse_avro` turns an Avro schema definition (JSON text, as the AVRO, JSON and PROTOBUF schema types
of Pulsar carry it) into a graph of nodes: named types (records, enums, fixed) are defined once and
every reference to them is the same node, so recursive records are cycles. Definitions that Avro's
parser refuses (as Pulsar parses them: names checked, field defaults not) raise `AvroSchemaError`
naming what is wrong and where. `default_error` then says whether every field default suits its
type, the stricter parse that Pulsar applies where it looks a schema up among a topic's versions.

`read_error(reader, writer)` answers whether data written with ``writer`` can be read with
``reader`` as Pulsar 4.0 decides it: its compatibility strategies are Avro 1.11's schema validators,
which build Avro's resolving grammar for the pair and refuse it when the grammar holds an error.
That is looser than the letter of the Avro specification:

* The writer is first renamed by the reader's aliases: a writer type whose full name is an alias
  of a reader type takes that type's name; a writer field whose name is a field alias in the
  reader's record of the writer record's (renamed) full name takes that field's name.
* Records match whatever their names. Each reader field is read from the writer field of the same
  name, or else needs a default, which must encode as the field's type; writer fields that the
  reader lacks are skipped.
* Enums match when their unqualified names do; their symbols are not compared (a symbol that the
  reader lacks fails when such data is read, not in the check). Fixed match by unqualified name and
  size; arrays by item type; maps by value type.
* Primitives match themselves and the promotions int -> long/float/double, long -> float/double,
  float -> double, string <-> bytes.
* A writer union equivalent to the reader (same branches in the same order, records with the same
  field names) matches; otherwise every branch must be readable.
* A reader union reads a non-union writer type with one branch, chosen as Avro chooses it: the
  first branch of the same kind (for named kinds: of the same full name, else for records the
  first whose fields resolve directly, preferring one of the same unqualified name), else the
  first branch that the writer type promotes to. That branch must then read the writer.

Logical types are read as their underlying type, as Avro's check does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AvroSchemaError", "AvroNode", "default_error", "parse_avro", "read_error"]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "enum", "fixed"})
# writer type -> reader types it may be promoted to
_PROMOTIONS = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}
_MAX_DEPTH = 200  # nesting bound: a hostile definition must not exhaust the stack
_INT32 = (-(2**31), 2**31 - 1)
# attributes that are not properties of a type or a field (Avro's reserved names)
_TYPE_RESERVED = frozenset(
    {"doc", "fields", "items", "name", "namespace", "size", "symbols", "values", "type", "aliases"}
)
_FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})


def _props(obj: dict[str, Any], reserved: frozenset[str]) -> str:
    extra = {k: v for k, v in obj.items() if k not in reserved}
    return json.dumps(extra, sort_keys=True) if extra else ""


_INT64 = (-(2**63), 2**63 - 1)


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
    props: str = ""  # the definition's other attributes (logicalType, ...) as canonical JSON

    @property
    def short_name(self) -> str:
        """The name without its namespace."""
        return self.name.rsplit(".", 1)[-1]

    def describe(self) -> str:
        """A short human-readable form for error messages."""
        if self.kind in NAMED:
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
    """A record field: name, type, whether it has a default and the default (a decoded JSON value,
    None for JSON null), aliases."""

    name: str
    type: AvroNode
    has_default: bool
    aliases: frozenset[str] = frozenset()
    default: Any = None
    order: str = "ASCENDING"
    props: str = ""


def _check_name(name: str, where: str) -> str:
    """Avro's name rule: a letter or '_', then letters, digits or '_' (only the unqualified part
    of a full name is checked, as Avro 1.11 does)."""
    if not name:
        raise AvroSchemaError(f"{where}: empty name")
    if not ((name[0].isalpha() or name[0] == "_") and all(c.isalnum() or c == "_" for c in name[1:])):
        raise AvroSchemaError(f"{where}: invalid name {name!r}")
    return name


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, AvroNode] = {}

    @staticmethod
    def _full_name(name: Any, namespace: str, where: str) -> str:
        if not isinstance(name, str):
            raise AvroSchemaError(f"{where}: a named type needs a string 'name'")
        if "." in name:
            namespace, name = name.rsplit(".", 1)
        _check_name(name, where)
        return f"{namespace}.{name}" if namespace else name

    def _aliases(self, obj: dict[str, Any], namespace: str, where: str) -> frozenset[str]:
        raw = obj.get("aliases", [])
        if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
            raise AvroSchemaError(f"{where}: 'aliases' must be a list of names")
        return frozenset(self._full_name(a, namespace, where) for a in raw)

    def _named(self, kind: str, obj: dict[str, Any], namespace: str, where: str) -> AvroNode:
        ns = obj.get("namespace")
        full = self._full_name(obj.get("name"), ns if isinstance(ns, str) else namespace, where)
        if full in PRIMITIVES:
            raise AvroSchemaError(f"{where}: {full!r} is a primitive type name")
        if full in self.named:
            raise AvroSchemaError(f"{where}: type {full!r} is defined twice")
        own_ns = full.rsplit(".", 1)[0] if "." in full else ""
        node = AvroNode(kind, name=full, aliases=self._aliases(obj, own_ns, where))
        self.named[full] = node  # before a record's fields: they may refer to the record itself
        return node

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
        if not isinstance(kind, str):
            raise AvroSchemaError(f"{where}: missing or invalid 'type'")
        if kind in PRIMITIVES:
            # with attributes such as logicalType: read as the underlying type
            return AvroNode(kind, props=_props(obj, _TYPE_RESERVED))
        if kind in ("record", "error"):
            node = self._record(obj, namespace, where, depth)
        elif kind == "enum":
            node = self._enum(obj, namespace, where)
        elif kind in ("fixed", "array", "map"):
            node = self._other(kind, obj, namespace, where, depth)
        else:
            return self.parse(kind, namespace, where, depth + 1)  # {"type": "SomeNamedType"}
        node.props = _props(obj, _TYPE_RESERVED | ({"default"} if kind == "enum" else set()))
        return node

    def _other(self, kind: str, obj: dict[str, Any], namespace: str, where: str, depth: int) -> AvroNode:
        if kind == "fixed":
            size = obj.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= _INT32[1]:
                raise AvroSchemaError(f"{where}: fixed needs a non-negative integer 'size'")
            node = self._named("fixed", obj, namespace, where)
            node.size = size
            return node
        if kind == "array":
            if "items" not in obj:
                raise AvroSchemaError(f"{where}: array without 'items'")
            return AvroNode("array", items=self.parse(obj["items"], namespace, f"{where}[items]", depth + 1))
        if "values" not in obj:
            raise AvroSchemaError(f"{where}: map without 'values'")
        return AvroNode("map", values=self.parse(obj["values"], namespace, f"{where}[values]", depth + 1))

    def _union(self, obj: list[Any], namespace: str, where: str, depth: int) -> AvroNode:
        branches = [self.parse(b, namespace, f"{where}[{i}]", depth + 1) for i, b in enumerate(obj)]
        seen: set[str] = set()
        for b in branches:
            if b.kind == "union":
                raise AvroSchemaError(f"{where}: a union may not contain a union")
            key = b.name if b.kind in NAMED else b.kind
            if key in seen:
                raise AvroSchemaError(f"{where}: the union holds {key!r} twice")
            seen.add(key)
        return AvroNode("union", branches=branches)

    def _record(self, obj: dict[str, Any], namespace: str, where: str, depth: int) -> AvroNode:
        node = self._named("record", obj, namespace, where)
        inner_ns = node.name.rsplit(".", 1)[0] if "." in node.name else ""
        raw_fields = obj.get("fields")
        if not isinstance(raw_fields, list):
            raise AvroSchemaError(f"{where}: record {node.name!r} needs a list of 'fields'")
        names: set[str] = set()
        for i, f in enumerate(raw_fields):
            fwhere = f"{node.name}.{f.get('name', i) if isinstance(f, dict) else i}"
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
                raise AvroSchemaError(f"{fwhere}: a field needs a string 'name' and a 'type'")
            _check_name(f["name"], fwhere)
            if f["name"] in names:
                raise AvroSchemaError(f"{fwhere}: field defined twice")
            names.add(f["name"])
            aliases = f.get("aliases", [])
            if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
                raise AvroSchemaError(f"{fwhere}: 'aliases' must be a list of names")
            ftype = self.parse(f["type"], inner_ns, fwhere, depth + 1)
            if "order" in f and (
                not isinstance(f["order"], str) or f["order"].upper() not in ("ASCENDING", "DESCENDING", "IGNORE")
            ):
                raise AvroSchemaError(f"{fwhere}: 'order' must be ascending, descending or ignore")
            default = f.get("default")
            if isinstance(default, str) and ftype.kind in ("float", "double"):
                # Avro reads a text default of a float or double field as a number ("NaN", "1e3")
                try:
                    default = float(default)
                except ValueError:
                    raise AvroSchemaError(f"{fwhere}: default {default!r} is not a number") from None
            node.fields.append(
                AvroField(
                    f["name"],
                    ftype,
                    "default" in f,
                    frozenset(aliases),
                    default,
                    f.get("order", "ascending").upper(),
                    _props(f, _FIELD_RESERVED),
                )
            )
        return node

    def _enum(self, obj: dict[str, Any], namespace: str, where: str) -> AvroNode:
        symbols = obj.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise AvroSchemaError(f"{where}: an enum needs a list of string 'symbols'")
        node = self._named("enum", obj, namespace, where)
        for s in symbols:
            _check_name(s, f"{where}: enum {node.name!r} symbol")
        if len(set(symbols)) != len(symbols):
            raise AvroSchemaError(f"{where}: enum {node.name!r} repeats a symbol")
        default = obj.get("default")
        if not isinstance(default, str):
            default = None  # Avro takes only a text default
        if default is not None and default not in symbols:
            raise AvroSchemaError(f"{where}: enum {node.name!r} default {default!r} is not one of its symbols")
        node.symbols, node.enum_default = tuple(symbols), default
        return node


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


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
            definition = json.loads(definition, parse_constant=_no_constant)
        except ValueError as exc:
            raise AvroSchemaError(f"the schema definition is not JSON: {exc}") from None
        except RecursionError:
            raise AvroSchemaError("the schema definition is nested too deep") from None
    parser = _Parser()
    node = parser.parse(definition, "", "schema", 0)
    for record in parser.named.values():
        if record.kind == "record" and _holds_itself(record):
            # no value of such a type can be written; Avro's parser takes it, and its resolving
            # grammar then overflows the stack in every check that reaches it
            raise AvroSchemaError(f"record {record.name!r} holds itself outside any union, array or map")
    return node


def _holds_itself(record: AvroNode) -> bool:
    """Whether ``record`` contains itself through record fields alone."""
    stack, seen = [f.type for f in record.fields], set()
    while stack:
        node = stack.pop()
        if node is record:
            return True
        if node.kind == "record" and id(node) not in seen:
            seen.add(id(node))
            stack.extend(f.type for f in node.fields)
    return False


# ------------------------------------------------------------------ defaults


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _valid_default(node: AvroNode, value: Any, has_value: bool = True) -> bool:
    """Avro's default validation (its parser's, when it validates defaults): a union's default
    belongs to its first branch; a record's is an object whose missing fields have defaults."""
    if not has_value:
        return False
    kind = node.kind
    if kind in ("string", "bytes", "enum", "fixed"):
        return isinstance(value, str)
    if kind in ("int", "long"):
        low, high = _INT32 if kind == "int" else _INT64
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if kind in ("float", "double"):
        return _is_number(value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "array":
        assert node.items is not None
        return isinstance(value, list) and all(_valid_default(node.items, v) for v in value)
    if kind == "map":
        assert node.values is not None
        return isinstance(value, dict) and all(_valid_default(node.values, v) for v in value.values())
    if kind == "union":
        return _valid_default(node.branches[0], value)
    if kind == "record":
        return isinstance(value, dict) and all(
            _valid_default(f.type, value[f.name])
            if f.name in value
            else _valid_default(f.type, f.default, f.has_default)
            for f in node.fields
        )
    return False


def default_error(schema: AvroNode) -> str | None:
    """None when every field default of ``schema`` suits its field's type as Avro's validating
    parser requires; else which default does not."""
    seen: set[int] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for f in node.fields:
            if f.has_default and not _valid_default(f.type, f.default):
                return f"field {node.name}.{f.name}: default {json.dumps(f.default)} is not a {f.type.describe()}"
            stack.append(f.type)
        stack.extend(b for b in (node.items, node.values, *node.branches) if b is not None)
    return None


def _encode_error(node: AvroNode, value: Any, depth: int = 0) -> str | None:
    """Why Avro cannot encode ``value`` (a reader field's default) as ``node``, as its resolving
    grammar does for a field the writer lacks; None when it can. Laxer than `default_error`:
    containers take whatever JSON iterates, and missing record fields take their own defaults."""
    if depth > _MAX_DEPTH:
        return "default nested too deep"
    kind = node.kind
    if kind == "record":
        for f in node.fields:
            if isinstance(value, dict) and f.name in value:
                reason = _encode_error(f.type, value[f.name], depth + 1)
            elif f.has_default:
                reason = _encode_error(f.type, f.default, depth + 1)
            else:
                reason = f"no default value for {node.name}.{f.name}"
            if reason:
                return reason
        return None
    if kind == "enum":
        return None if isinstance(value, str) and value in node.symbols else f"{value!r} is not a symbol of {node.name}"
    if kind in ("array", "map"):
        child = node.items if kind == "array" else node.values
        assert child is not None
        # as Jackson iterates a JSON value: an array's items, an object's values, nothing else;
        # a map takes only an object's values
        elements = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
        if kind == "map" and not isinstance(value, dict):
            elements = []
        return next((r for r in (_encode_error(child, v, depth + 1) for v in elements) if r), None)
    if kind == "union":
        return _encode_error(node.branches[0], value, depth + 1)
    ok = {
        "fixed": isinstance(value, str),
        "string": isinstance(value, str),
        "bytes": isinstance(value, str),
        "int": _is_number(value),
        "long": _is_number(value),
        "float": _is_number(value),
        "double": _is_number(value),
        "boolean": isinstance(value, bool),
        "null": value is None,
    }[kind]
    return None if ok else f"default {json.dumps(value)} is not a {kind}"


# ------------------------------------------------------------------ resolution


class _Abort(Exception):
    """A pair that Avro's check does not answer but fails on (an exception in Java): Pulsar
    refuses the schema."""


@dataclass
class _RecordResult:
    reason: str | None = None
    direct: bool = False  # the pair itself is an error (a reader field without data or default)
    field_direct: bool = False  # some field pair resolved so far is itself an error


class _Resolver:
    def __init__(self, reader: AvroNode) -> None:
        # the reader's aliases, applied to the writer: writer full name -> reader full name, and
        # reader record full name (or one of its aliases) -> {field alias: field name}
        self.renames: dict[str, str] = {}
        self.field_renames: dict[str, dict[str, str]] = {}
        self._collect_aliases(reader, set())
        self.records: dict[tuple[int, int], _RecordResult] = {}
        self.writer_fields_memo: dict[int, list[tuple[str, AvroField]]] = {}

    def _collect_aliases(self, node: AvroNode, seen: set[int]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        for alias in node.aliases:
            self.renames[alias] = node.name
        if node.kind == "record":
            for f in node.fields:
                for alias in f.aliases:
                    self.field_renames.setdefault(node.name, {})[alias] = f.name
                self._collect_aliases(f.type, seen)
            if node.name in self.field_renames:
                for alias in node.aliases:
                    self.field_renames[alias] = self.field_renames[node.name]
        for child in (node.items, node.values, *node.branches):
            if child is not None:
                self._collect_aliases(child, seen)

    def wname(self, w: AvroNode) -> str:
        """The writer type's full name after the reader's aliases."""
        return self.renames.get(w.name, w.name)

    def wshort(self, w: AvroNode) -> str:
        return self.wname(w).rsplit(".", 1)[-1]

    def writer_fields(self, w: AvroNode) -> list[tuple[str, AvroField]]:
        """The writer record's fields with their names after the reader's field aliases."""
        found = self.writer_fields_memo.get(id(w))
        if found is None:
            renames = self.field_renames.get(self.wname(w), {})
            found = [(renames.get(f.name, f.name), f) for f in w.fields]
            if len({n for n, _ in found}) != len(found):
                raise _Abort(f"the reader's field aliases give record {w.name} two fields of one name")
            self.writer_fields_memo[id(w)] = found
        return found

    def resolve(self, w: AvroNode, r: AvroNode, path: str) -> tuple[str | None, bool]:
        """(why ``r`` cannot read ``w``, or None; whether the pair is itself an error rather than
        one found inside it)."""
        if w.kind == "union":
            if self.union_equiv(w, r, {}):
                return None, False
            reasons = [self.resolve(b, r, path)[0] for b in w.branches]
            for i, reason in enumerate(reasons):
                if reason:
                    return f"branch {i} ({w.branches[i].describe()}) of the written union: {reason}", False
            return None, False
        if w.kind == r.kind:
            if w.kind in PRIMITIVES:
                return None, False
            if w.kind in ("array", "map"):
                if w.kind == "array":
                    assert w.items is not None and r.items is not None
                    return self.resolve(w.items, r.items, f"{path}[]")[0], False
                assert w.values is not None and r.values is not None
                return self.resolve(w.values, r.values, f"{path}{{}}")[0], False
            if w.kind == "record":
                result = self.record(w, r, path)
                return result.reason, result.direct
            if self.wshort(w) != r.short_name:
                return f"{path}: written {w.describe()} cannot be read as {r.describe()} (names differ)", True
            if w.kind == "fixed" and w.size != r.size:
                return f"{path}: fixed {w.name} has size {w.size}, the reader's {r.size}", True
            return None, False
        if r.kind == "union":
            i = self.first_matching_branch(w, r, path)
            if i < 0:
                return (
                    f"{path}: written type {w.describe()} matches no branch of the reader's union {r.describe()}"
                ), True
            return self.resolve(w, r.branches[i], path)[0], False
        if r.kind in _PROMOTIONS.get(w.kind, ()):
            return None, False
        return f"{path}: written type {w.describe()} cannot be read as {r.describe()}", True

    def record(self, w: AvroNode, r: AvroNode, path: str) -> _RecordResult:
        key = (id(w), id(r))
        result = self.records.get(key)
        if result is not None:
            return result  # done, or in progress (a recursive record): readable so far
        result = self.records[key] = _RecordResult()
        written = self.writer_fields(w)
        readers = {f.name: f for f in r.fields}
        for name, wf in written:
            rf = readers.get(name)
            if rf is None:
                continue  # the reader skips it
            reason, direct = self.resolve(wf.type, rf.type, f"{path}.{name}")
            result.field_direct = result.field_direct or direct
            result.reason = result.reason or reason
        written_names = {name for name, _ in written}
        for rf in r.fields:
            if rf.name in written_names:
                continue
            if not rf.has_default:
                result.reason = f"{path}.{rf.name}: field missing from the written data and without a default"
                result.direct = True
                return result
            problem = _encode_error(rf.type, rf.default)
            if problem:
                raise _Abort(f"{path}.{rf.name}: the reader's default cannot be used: {problem}")
        return result

    def first_matching_branch(self, w: AvroNode, r: AvroNode, path: str) -> int:
        structure_match = -1
        for j, b in enumerate(r.branches):
            if b.kind != w.kind:
                continue
            if w.kind not in NAMED:
                return j
            if self.wname(w) == b.name:
                return j
            if w.kind == "record":
                probe = self.record(w, b, path)
                if not (probe.direct or probe.field_direct) and (structure_match < 0 or self.wshort(w) == b.short_name):
                    structure_match = j
        if structure_match >= 0:
            return structure_match
        for j, b in enumerate(r.branches):
            if b.kind in _PROMOTIONS.get(w.kind, ()):
                return j
        return -1

    def union_equiv(self, w: AvroNode, r: AvroNode, seen: dict[tuple[int, int], bool]) -> bool:
        """Avro's test for a writer union the reader reads as it is: same kinds, same unqualified
        names, records with the same field names in the same order, enums with the same symbols."""
        if w.kind != r.kind:
            return False
        if w.kind in NAMED and self.wshort(w) != r.short_name:
            return False
        if w.kind in PRIMITIVES:
            return True
        if w.kind == "array":
            assert w.items is not None and r.items is not None
            return self.union_equiv(w.items, r.items, seen)
        if w.kind == "map":
            assert w.values is not None and r.values is not None
            return self.union_equiv(w.values, r.values, seen)
        if w.kind == "fixed":
            return w.size == r.size
        if w.kind == "enum":
            return w.symbols == r.symbols
        if w.kind == "union":
            return len(w.branches) == len(r.branches) and all(
                self.union_equiv(a, b, seen) for a, b in zip(w.branches, r.branches, strict=True)
            )
        key = (id(w), id(r))
        if key not in seen:
            seen[key] = True  # optimistic inside itself
            written = self.writer_fields(w)
            seen[key] = len(written) == len(r.fields) and all(
                name == rf.name and self.union_equiv(wf.type, rf.type, seen)
                for (name, wf), rf in zip(written, r.fields, strict=True)
            )
        return seen[key]


def _same_default(a: AvroField, b: AvroField) -> bool:
    if a.has_default != b.has_default:
        return False
    if isinstance(a.default, float) and isinstance(b.default, float) and a.default != a.default:
        return b.default != b.default  # NaN equals NaN here, as in Avro
    return json.dumps(a.default, sort_keys=True) == json.dumps(b.default, sort_keys=True)


def _same(a: AvroNode, b: AvroNode, seen: set[tuple[int, int]]) -> bool:
    """Avro's schema equality: kinds, full names, properties, symbols, sizes, and fields with
    their names, types, defaults, order and properties (docs and aliases do not count)."""
    if a.kind != b.kind or a.props != b.props or a.name != b.name:
        return False
    if a.kind == "enum":
        return a.symbols == b.symbols
    if a.kind == "fixed":
        return a.size == b.size
    if a.kind in ("array", "map"):
        x, y = (a.items, b.items) if a.kind == "array" else (a.values, b.values)
        assert x is not None and y is not None
        return _same(x, y, seen)
    if a.kind == "union":
        return len(a.branches) == len(b.branches) and all(
            _same(x, y, seen) for x, y in zip(a.branches, b.branches, strict=True)
        )
    if a.kind == "record" and (id(a), id(b)) not in seen:
        seen.add((id(a), id(b)))
        return len(a.fields) == len(b.fields) and all(
            f.name == g.name
            and f.order == g.order
            and f.props == g.props
            and _same_default(f, g)
            and _same(f.type, g.type, seen)
            for f, g in zip(a.fields, b.fields, strict=True)
        )
    return True


def read_error(reader: AvroNode, writer: AvroNode) -> str | None:
    """None when Pulsar's Avro check finds data written with ``writer`` readable with ``reader``;
    else why not."""
    resolver = _Resolver(reader)
    if (resolver.renames or resolver.field_renames) and not _same(writer, reader, set()):
        # Avro rebuilds the writer under the reader's aliases, checking its field defaults as it goes
        problem = default_error(writer)
        if problem:
            return f"written schema: {problem}"
    else:
        resolver.renames, resolver.field_renames = {}, {}
    try:
        return resolver.resolve(writer, reader, reader.name or reader.describe())[0]
    except _Abort as exc:
        return str(exc)
