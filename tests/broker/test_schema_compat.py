"""Avro schema resolution (broker.schema._avro_compat) and the schema compatibility strategies
(broker.schema._registry) for producers and consumers, without a broker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker._errors import IncompatibleSchemaError
from broker.schema._avro_compat import PRIMITIVES, AvroSchemaError, default_error, parse_avro, read_error
from broker.schema._registry import (
    InvalidSchemaError,
    SchemaInfo,
    SchemaRegistry,
    check_compatible,
    check_consumer_compatible,
)
from metadata import open_metadata_store
from protocols.pulsar import TopicName

from .avro_cases import PARSES, READS

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

_PROMOTES = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
}


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


@pytest.mark.parametrize(("case", "reader", "writer", "expected"), READS, ids=[c[0] for c in READS])
def test_reads_as_avro_answers(case: str, reader: Any, writer: Any, expected: bool) -> None:
    """Each pair as Avro 1.11.4's Java implementation answers it (test_avro_oracle checks the table)."""
    assert _readable(reader, writer) is expected


@pytest.mark.parametrize(("case", "schema", "valid", "valid_defaults"), PARSES, ids=[c[0] for c in PARSES])
def test_parses_as_avro_does(case: str, schema: Any, valid: bool, valid_defaults: bool) -> None:
    try:
        node = parse_avro(json.dumps(schema))
    except AvroSchemaError:
        assert not valid
        return
    assert valid
    assert (default_error(node) is None) is valid_defaults


def test_a_record_that_holds_itself_is_refused() -> None:
    """Avro's parser takes it, but no value of it can be written and Avro's check of it overflows
    the stack: refused as a definition."""
    with pytest.raises(AvroSchemaError, match="holds itself"):
        parse_avro(json.dumps(_rec(_f("a", "int"), _f("next", "R"))))
    with pytest.raises(AvroSchemaError, match="holds itself"):
        parse_avro(json.dumps(_rec(_f("x", _rec(_f("back", "R"), name="In")))))
    parse_avro(json.dumps(_rec(_f("next", ["null", "R"]), _f("all", {"type": "array", "items": "R"}))))


def test_error_names_the_field() -> None:
    reason = read_error(
        parse_avro(json.dumps(_rec(_f("inner", _rec(_f("n", "string"), name="In"))))),
        parse_avro(json.dumps(_rec(_f("inner", _rec(_f("n", "int"), name="In"))))),
    )
    assert reason is not None and "R.inner.n" in reason and "int" in reason


def test_nested_and_named_references() -> None:
    point = _rec(_f("x", "int"), _f("y", "int"), name="Point", namespace="geo")
    old = _rec(
        _f("a", point),
        _f("b", "geo.Point"),
        _f("c", {"type": "array", "items": "geo.Point"}),
        name="Line",
        namespace="geo",
    )
    wider = json.loads(json.dumps(old).replace('"int"', '"long"'))
    assert _readable(wider, old) and not _readable(old, wider)


def test_recursive_records() -> None:
    node = _rec(_f("value", "int"), _f("next", ["null", "Node"]), name="Node")
    longer = _rec(_f("value", "long"), _f("next", ["null", "Node"]), name="Node")
    assert _readable(node, node) and _readable(longer, node) and not _readable(node, longer)


@pytest.mark.parametrize(
    "bad",
    [
        b"not json",
        b"\xff",
        "nosuchtype",
        {"type": "record", "name": "R"},
        {"type": "record", "fields": []},
        _rec(_f("a", "int"), _f("a", "int")),
        {"type": "enum", "name": "E", "symbols": ["A", "A"]},
        {"type": "enum", "name": "E", "symbols": ["A"], "default": "B"},
        {"type": "fixed", "name": "F"},
        {"type": "array"},
        {"type": "map"},
        ["int", "int"],
        ["null", ["int"]],
        {"type": "record", "name": "1x", "fields": []},
        _rec(_f("a", _rec(name="R"))),
        17,
        {"type": "fixed", "name": "F", "size": -1},
    ],
)
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
    for new, strategy in (
        (added_required, "BACKWARD"),
        (dropped, "FORWARD"),
        (widened, "FORWARD"),
        (added_required, "FULL"),
        (dropped, "FULL"),
        (widened, "FULL"),
    ):
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


@pytest.mark.parametrize("type_", [_AVRO, _JSON])
def test_a_renamed_record_follows_under_every_strategy_that_pulsar_allows(type_: int) -> None:
    """The issue's case: a producer whose record is named B after one named A with the same
    fields. Pulsar's Avro check does not compare record names."""
    a = _info(_rec(_f("id", "string"), _f("n", "int"), name="A"), type_)
    b = _info(_rec(_f("id", "string"), _f("n", "int"), name="B", namespace="other"), type_)
    for strategy in ("BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"):
        check_compatible(b, [a], strategy)
        check_consumer_compatible(b, [a], strategy)
    # a renamed enum is still refused, as by Pulsar
    e1 = _info(_rec(_f("e", {"type": "enum", "name": "E", "symbols": ["X"]})), type_)
    e2 = _info(_rec(_f("e", {"type": "enum", "name": "F", "symbols": ["X"]})), type_)
    with pytest.raises(IncompatibleSchemaError, match="names differ"):
        check_compatible(e2, [e1], "FULL")


def test_required_field_with_default_and_nullable_unions() -> None:
    old = [_info(_V1)]
    # a field added with a default keeps FULL; a nullable one needs null as its first branch
    check_compatible(_info(_rec(_f("a", "int"), _f("b", ["null", "string"], default=None))), old, "FULL")
    with pytest.raises(IncompatibleSchemaError, match="default"):
        check_compatible(_info(_rec(_f("a", "int"), _f("b", ["string", "null"], default=None))), old, "FULL")
    # an int field made nullable: readable from the old data, but old readers cannot read a null
    nullable = _info(_rec(_f("a", ["null", "int"], default=None)))
    check_compatible(nullable, old, "BACKWARD")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(nullable, old, "FORWARD")
    # an enum that drops a symbol stays compatible for Avro's check
    abc = _info(_rec(_f("e", {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]})))
    check_compatible(_info(_rec(_f("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]}))), [abc], "FULL")


def test_types_without_an_avro_check() -> None:
    # PROTOBUF carries an Avro definition, which must be valid, but Pulsar checks nothing else
    proto_old = _info(_rec(_f("a", "int"), name="Msg"), 3)
    check_compatible(_info(_rec(_f("a", "string"), name="Other"), 3), [proto_old], "FULL")
    with pytest.raises(InvalidSchemaError):
        check_compatible(SchemaInfo(type=3, data=b"not avro"), [proto_old], "FULL")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(_info(_rec(name="Other"), 3), [proto_old], "ALWAYS_INCOMPATIBLE")

    # PROTOBUF_NATIVE: only the root message's name is checked
    def native(root: str, files: str) -> SchemaInfo:
        return SchemaInfo(
            type=20,
            data=json.dumps(
                {"fileDescriptorSet": files, "rootMessageTypeName": root, "rootFileDescriptorName": "m.proto"}
            ).encode(),
        )

    check_compatible(native("pkg.Msg", "AAAA"), [native("pkg.Msg", "BBBB")], "FULL_TRANSITIVE")
    with pytest.raises(IncompatibleSchemaError, match="root message"):
        check_compatible(native("pkg.Other", "AAAA"), [native("pkg.Msg", "BBBB")], "BACKWARD")
    with pytest.raises(InvalidSchemaError):
        check_compatible(SchemaInfo(type=20, data=b"{}"), [], "FULL")
    # STRING and the other types: any new version
    check_compatible(SchemaInfo(type=1, data=b"x"), [SchemaInfo(type=1, data=b"")], "FULL")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(SchemaInfo(type=1, data=b"x"), [SchemaInfo(type=1, data=b"")], "ALWAYS_INCOMPATIBLE")


def test_an_avro_schema_may_not_be_a_union() -> None:
    with pytest.raises(InvalidSchemaError, match="union"):
        check_compatible(_info(["null", "string"], _AVRO), [], "FULL")
    check_compatible(_info(["null", "string"], _JSON), [], "FULL")


@pytest.mark.trio
async def test_a_new_version_needs_valid_defaults_once_the_topic_has_versions() -> None:
    """Pulsar parses a producer's schema with Avro's default validation when the topic already has
    versions: a default that does not suit its type is refused then, not for the first version."""
    topic = TopicName.parse("persistent://public/default/defaults")
    bad_default = _info(_rec(_f("a", "int"), _f("b", ["string", "null"], default=None)))
    async with open_metadata_store("memory://schema-defaults") as store:
        registry = SchemaRegistry(store)
        assert await registry.get_or_create(topic, bad_default, "FULL") == 0
        assert await registry.get_or_create(topic, bad_default, "FULL") == 0  # the same version
        with pytest.raises(InvalidSchemaError, match="default"):
            await registry.get_or_create(
                topic, _info(_rec(_f("a", "int"), _f("b", "string", default=1))), "ALWAYS_COMPATIBLE"
            )
        good = _info(_rec(_f("a", "int"), _f("b", ["null", "string"], default=None)))
        assert await registry.get_or_create(topic, good, "FULL") == 1


# ------------------------------------------------------------------ properties

_PRIM = st.sampled_from(sorted(PRIMITIVES - {"null"}))


def _types(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return _PRIM
    inner = _types(depth - 1)
    return st.one_of(
        _PRIM,
        st.builds(lambda t: {"type": "array", "items": t}, inner),
        st.builds(lambda t: {"type": "map", "values": t}, inner),
        st.builds(lambda t: ["null", t], _PRIM),
    )


_RECORDS = st.lists(
    st.tuples(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), _types(2)), max_size=6, unique_by=lambda t: t[0]
).map(lambda fs: _rec(*(_f(n, t) for n, t in fs)))


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
    check_compatible(
        _kv(_rec(_f("k", "int"), name="K"), _rec(_f("a", "int"), _f("b", "string", default=""))), old, "FULL"
    )
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
