"""Avro schema resolution (broker._avro_compat) and the schema compatibility strategies
(broker._schemas) for producers and consumers, without a broker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker._avro_compat import PRIMITIVES, AvroSchemaError, parse_avro, read_error
from broker._errors import IncompatibleSchemaError
from broker._schemas import InvalidSchemaError, SchemaInfo, check_compatible, check_consumer_compatible

_AVRO, _JSON = 4, 2


def _rec(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def _f(name: str, ftype: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": ftype, **extra}


def _readable(reader: Any, writer: Any) -> bool:
    return read_error(parse_avro(json.dumps(reader)), parse_avro(json.dumps(writer))) is None


def _info(schema: Any, type_: int = _JSON) -> SchemaInfo:
    return SchemaInfo(type=type_, data=json.dumps(schema).encode())


# ------------------------------------------------------------------ resolution rules

_PROMOTES = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
             ("float", "double"), ("string", "bytes"), ("bytes", "string")}


@pytest.mark.parametrize("writer", sorted(PRIMITIVES))
@pytest.mark.parametrize("reader", sorted(PRIMITIVES))
def test_primitive_promotions(reader: str, writer: str) -> None:
    expected = reader == writer or (writer, reader) in _PROMOTES
    assert _readable(reader, writer) is expected
    # the same inside a record field, a nullable union, an array and a map
    assert _readable(_rec(_f("x", reader)), _rec(_f("x", writer))) is expected
    if "null" not in (reader, writer):
        assert _readable(["null", reader], ["null", writer]) is expected
    assert _readable({"type": "array", "items": reader}, {"type": "array", "items": writer}) is expected
    assert _readable({"type": "map", "values": reader}, {"type": "map", "values": writer}) is expected


def test_records_match_fields_by_name_with_defaults() -> None:
    old = _rec(_f("a", "int"), _f("b", "string"))
    assert _readable(_rec(_f("b", "string"), _f("a", "int")), old)           # order does not matter
    assert _readable(_rec(_f("a", "int")), old)                               # reader ignores b
    assert not _readable(_rec(_f("a", "int"), _f("c", "string")), old)        # c: no data, no default
    assert _readable(_rec(_f("a", "int"), _f("c", "string", default="")), old)
    assert _readable(_rec(_f("z", "int", aliases=["a"]), _f("b", "string")), old)  # field alias
    assert not _readable(_rec(_f("a", "string"), _f("b", "string")), old)     # int read as string
    assert not _readable(_rec(_f("a", "int"), name="Other"), old)              # record names differ
    assert _readable(_rec(_f("a", "int"), name="Other", aliases=["R"]), old)   # ... unless aliased
    assert _readable(_rec(_f("a", "int"), name="ns.R"), _rec(_f("a", "int"), name="other.R"))  # unqualified


def test_error_names_the_field() -> None:
    reason = read_error(parse_avro(json.dumps(_rec(_f("inner", _rec(_f("n", "string"), name="In"))))),
                        parse_avro(json.dumps(_rec(_f("inner", _rec(_f("n", "int"), name="In"))))))
    assert reason is not None and "R.inner.n" in reason and "int" in reason


def test_enums() -> None:
    ab = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
    abc = {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}
    assert _readable(abc, ab)
    assert not _readable(ab, abc)                                             # C unknown to the reader
    assert _readable({**ab, "default": "A"}, abc)                             # ... unless it has a default
    assert not _readable({**abc, "name": "F"}, ab)


def test_fixed() -> None:
    f4 = {"type": "fixed", "name": "F", "size": 4}
    assert _readable(f4, f4)
    assert not _readable({**f4, "size": 8}, f4)
    assert not _readable({**f4, "name": "G"}, f4)
    assert not _readable("bytes", f4)


def test_unions() -> None:
    assert _readable(["null", "int"], "int")                                  # reader union takes a branch
    assert not _readable("int", ["null", "int"])                              # writer's null has nowhere to go
    assert _readable(["null", "long", "string"], ["null", "int"])
    assert not _readable(["null", "string"], ["null", "int"])
    assert _readable("long", ["int", "long"])                                 # every writer branch readable


def test_nested_and_named_references() -> None:
    point = _rec(_f("x", "int"), _f("y", "int"), name="Point", namespace="geo")
    old = _rec(_f("a", point), _f("b", "geo.Point"), _f("c", {"type": "array", "items": "geo.Point"}), name="Line",
               namespace="geo")
    wider = json.loads(json.dumps(old).replace('"int"', '"long"'))
    assert _readable(wider, old) and not _readable(old, wider)


def test_recursive_records() -> None:
    node = _rec(_f("value", "int"), _f("next", ["null", "Node"]), name="Node")
    longer = _rec(_f("value", "long"), _f("next", ["null", "Node"]), name="Node")
    assert _readable(node, node) and _readable(longer, node) and not _readable(node, longer)


@pytest.mark.parametrize("bad", [
    b"not json", b"\xff", "nosuchtype", {"type": "record", "name": "R"}, {"type": "record", "fields": []},
    _rec(_f("a", "int"), _f("a", "int")), {"type": "enum", "name": "E", "symbols": ["A", "A"]},
    {"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}, {"type": "fixed", "name": "F"},
    {"type": "array"}, {"type": "map"}, ["int", "int"], ["null", ["int"]],
    {"type": "record", "name": "1x", "fields": []},
    _rec(_f("a", _rec(name="R"))), 17, {"type": "fixed", "name": "F", "size": -1}])
def test_invalid_definitions_are_refused(bad: Any) -> None:
    data = bad if isinstance(bad, bytes) else json.dumps(bad).encode()
    with pytest.raises(AvroSchemaError):
        parse_avro(data)
    with pytest.raises(InvalidSchemaError):
        check_compatible(SchemaInfo(type=_AVRO, data=data), [], "FULL")


@pytest.mark.parametrize("depth", [300, 100_000])
def test_deep_nesting_is_bounded(depth: int) -> None:
    text = '{"type": "array", "items": ' * depth + '"int"' + "}" * depth
    with pytest.raises(AvroSchemaError, match="deep"):
        parse_avro(text.encode())


# ------------------------------------------------------------------ strategies

_V1 = _rec(_f("a", "int"))


def test_strategies_against_latest() -> None:
    added_default = _info(_rec(_f("a", "int"), _f("b", "string", default="")))
    added_required = _info(_rec(_f("a", "int"), _f("b", "string")))
    dropped = _info(_rec())
    retyped = _info(_rec(_f("a", "string")))
    widened = _info(_rec(_f("a", "long")))
    old = [_info(_V1)]
    for strategy in ("BACKWARD", "FORWARD", "FULL"):
        check_compatible(added_default, old, strategy)
        with pytest.raises(IncompatibleSchemaError):
            check_compatible(retyped, old, strategy)
    check_compatible(dropped, old, "BACKWARD")
    check_compatible(widened, old, "BACKWARD")
    check_compatible(added_required, old, "FORWARD")
    for new, strategy in ((added_required, "BACKWARD"), (dropped, "FORWARD"), (widened, "FORWARD"),
                          (added_required, "FULL"), (dropped, "FULL"), (widened, "FULL")):
        with pytest.raises(IncompatibleSchemaError):
            check_compatible(new, old, strategy)
    check_compatible(retyped, old, "ALWAYS_COMPATIBLE")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(added_default, old, "ALWAYS_INCOMPATIBLE")
    with pytest.raises(IncompatibleSchemaError, match="type"):
        check_compatible(_info(_V1, _AVRO), old, "FULL")


def test_transitive_strategies_check_every_version() -> None:
    # BACKWARD: v3 reads v2 (b present) but not v1 (b missing, no default)
    v1, v2, v3 = _info(_rec()), _info(_rec(_f("b", "string", default="x"))), _info(_rec(_f("b", "string")))
    check_compatible(v3, [v1, v2], "BACKWARD")
    with pytest.raises(IncompatibleSchemaError, match="version 0"):
        check_compatible(v3, [v1, v2], "BACKWARD_TRANSITIVE")
    # FORWARD: v2 reads v3's data (a has a default there) but v1 does not
    f1, f2, f3 = _info(_rec(_f("a", "string"))), _info(_rec(_f("a", "string", default=""))), _info(_rec())
    check_compatible(f3, [f1, f2], "FORWARD")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(f3, [f1, f2], "FORWARD_TRANSITIVE")
    check_compatible(f3, [f1, f2], "FULL")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(f3, [f1, f2], "FULL_TRANSITIVE")


def test_consumer_checks() -> None:
    old = [_info(_V1)]
    # the case: an int field declared as a string
    for strategy in ("BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"):
        with pytest.raises(IncompatibleSchemaError):
            check_consumer_compatible(_info(_rec(_f("a", "string"))), old, strategy)
        check_consumer_compatible(_info(_V1), old, strategy)
    # under FORWARD a consumer must still read the latest data: a field it needs without a default is refused
    with pytest.raises(IncompatibleSchemaError):
        check_consumer_compatible(_info(_rec(_f("a", "int"), _f("b", "string"))), old, "FORWARD")
    # a reader that drops a field reads the data
    check_consumer_compatible(_info(_rec()), old, "FULL")
    # ALWAYS_INCOMPATIBLE: only an existing version
    check_consumer_compatible(_info(_V1), old, "ALWAYS_INCOMPATIBLE")
    with pytest.raises(IncompatibleSchemaError):
        check_consumer_compatible(_info(_rec()), old, "ALWAYS_INCOMPATIBLE")
    check_consumer_compatible(_info(_rec(_f("a", "string"))), old, "ALWAYS_COMPATIBLE")


# ------------------------------------------------------------------ properties

_PRIM = st.sampled_from(sorted(PRIMITIVES - {"null"}))


def _types(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return _PRIM
    inner = _types(depth - 1)
    return st.one_of(_PRIM, st.builds(lambda t: {"type": "array", "items": t}, inner),
                     st.builds(lambda t: {"type": "map", "values": t}, inner),
                     st.builds(lambda t: ["null", t], _PRIM))


_RECORDS = st.lists(st.tuples(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), _types(2)),
                    max_size=6, unique_by=lambda t: t[0]).map(
    lambda fs: _rec(*(_f(n, t) for n, t in fs)))


@settings(max_examples=150, deadline=None)
@given(_RECORDS)
def test_every_schema_reads_itself_and_widening_is_backward(schema: dict[str, Any]) -> None:
    assert _readable(schema, schema)
    text = json.dumps(schema)
    widened = json.loads(text.replace('"int"', '"long"').replace('"float"', '"double"'))
    assert _readable(widened, schema)
    if text != json.dumps(widened):
        assert not _readable(schema, widened)
    # a field added with a default keeps FULL compatibility
    extended = _rec(*schema["fields"], _f("zz_added", ["null", "string"], default=None))
    check_compatible(_info(extended), [_info(schema)], "FULL")


def _kv(key: Any, value: Any, key_type: str = "AVRO", value_type: str = "JSON") -> SchemaInfo:
    k, v = json.dumps(key).encode(), json.dumps(value).encode()
    data = len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v
    return SchemaInfo(type=15, data=data, properties=(("key.schema.type", key_type), ("value.schema.type", value_type)))


def test_key_value_schemas_check_each_side() -> None:
    old = [_kv(_rec(_f("k", "int"), name="K"), _V1)]
    check_compatible(_kv(_rec(_f("k", "int"), name="K"), _rec(_f("a", "int"), _f("b", "string", default=""))),
                     old, "FULL")
    with pytest.raises(IncompatibleSchemaError, match="key schema"):
        check_compatible(_kv(_rec(_f("k", "string"), name="K"), _V1), old, "FULL")
    with pytest.raises(IncompatibleSchemaError, match="value schema"):
        check_compatible(_kv(_rec(_f("k", "int"), name="K"), _rec(_f("a", "string"))), old, "FULL")
    with pytest.raises(IncompatibleSchemaError, match="value schema type"):
        check_compatible(_kv(_rec(_f("k", "int"), name="K"), _V1, value_type="AVRO"), old, "FULL")
    check_compatible(_kv(_rec(_f("k", "long"), name="K"), _V1), old, "BACKWARD")
    with pytest.raises(InvalidSchemaError):
        check_compatible(_kv("nosuchtype", _V1), [], "FULL")


@settings(max_examples=150, deadline=None)
@given(_RECORDS, _RECORDS)
def test_any_two_records_get_an_answer_and_full_is_symmetric(a: dict[str, Any], b: dict[str, Any]) -> None:
    ab, ba = _readable(a, b), _readable(b, a)  # never raises, whatever the pair
    full = ab and ba
    for new, old in ((a, b), (b, a)):
        try:
            check_compatible(_info(new), [_info(old)], "FULL")
            assert full
        except IncompatibleSchemaError:
            assert not full
