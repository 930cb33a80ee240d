"""Schema pairs and definitions with the answers of Avro 1.11.4's Java implementation, the version
and calls that Pulsar 4.0's broker uses (tests/broker/test_avro_oracle.py checks every answer here
against that implementation; tests/broker/test_schema_compat.py checks Magnetar against them).

``READS``: (case id, reader, writer, whether the reader reads data written with the writer).
``PARSES``: (case id, definition, valid as Pulsar parses it (defaults not checked), valid with
defaults checked as Pulsar parses a producer's schema on a topic that has versions).
"""

from __future__ import annotations

from typing import Any


def rec(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A record definition."""
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def fld(name: str, ftype: Any, **extra: Any) -> dict[str, Any]:
    """A record field."""
    return {"name": name, "type": ftype, **extra}


def enum(name: str, *symbols: str, **extra: Any) -> dict[str, Any]:
    """An enum definition."""
    return {"type": "enum", "name": name, "symbols": list(symbols), **extra}


def fixed(name: str, size: int, **extra: Any) -> dict[str, Any]:
    """A fixed definition."""
    return {"type": "fixed", "name": name, "size": size, **extra}


def array(items: Any) -> dict[str, Any]:
    """An array type."""
    return {"type": "array", "items": items}


def amap(values: Any) -> dict[str, Any]:
    """A map type."""
    return {"type": "map", "values": values}


_A_INT = fld("a", "int")
_LIST_INT = rec("Node", fld("value", "int"), fld("next", ["null", "Node"]))
_LIST_LONG = rec("Node", fld("value", "long"), fld("next", ["null", "Node"]))

READS: list[tuple[str, Any, Any, bool]] = [
    # records: names are not compared, at the top or nested
    ("record-renamed", rec("B", _A_INT), rec("A", _A_INT), True),
    ("record-renamed-namespace", rec("B", _A_INT, namespace="x"), rec("A", _A_INT, namespace="y"), True),
    ("record-namespace-only", rec("R", _A_INT, namespace="x"), rec("R", _A_INT, namespace="y"), True),
    (
        "nested-record-renamed",
        rec("R", fld("x", rec("In2", fld("n", "int")))),
        rec("R", fld("x", rec("In", fld("n", "int")))),
        True,
    ),
    (
        "nested-record-renamed-in-nullable-union",
        rec("R", fld("x", ["null", rec("In2", fld("n", "int"))])),
        rec("R", fld("x", ["null", rec("In", fld("n", "int"))])),
        True,
    ),
    (
        "nested-record-renamed-retyped",
        rec("R", fld("x", rec("In2", fld("n", "string")))),
        rec("R", fld("x", rec("In", fld("n", "int")))),
        False,
    ),
    ("record-read-as-int", "int", rec("A", _A_INT), False),
    ("int-read-as-record", rec("A", _A_INT), "int", False),
    # fields: order, skipping, defaults
    ("fields-reordered", rec("R", fld("b", "string"), _A_INT), rec("R", _A_INT, fld("b", "string")), True),
    ("writer-field-skipped", rec("R", _A_INT), rec("R", _A_INT, fld("b", "string")), True),
    ("reader-field-without-default", rec("R", _A_INT, fld("c", "string")), rec("R", _A_INT), False),
    ("reader-field-with-default", rec("R", _A_INT, fld("c", "string", default="")), rec("R", _A_INT), True),
    (
        "reader-field-with-null-default",
        rec("R", _A_INT, fld("c", ["null", "string"], default=None)),
        rec("R", _A_INT),
        True,
    ),
    (
        "reader-field-null-default-second-branch",
        rec("R", _A_INT, fld("c", ["string", "null"], default=None)),
        rec("R", _A_INT),
        False,
    ),
    ("reader-field-bad-default", rec("R", _A_INT, fld("c", "int", default="x")), rec("R", _A_INT), False),
    ("reader-field-float-default-for-int", rec("R", _A_INT, fld("c", "int", default=1.5)), rec("R", _A_INT), True),
    (
        "reader-field-record-default-from-field-defaults",
        rec("R", _A_INT, fld("c", rec("C", fld("x", "int", default=1)), default={})),
        rec("R", _A_INT),
        True,
    ),
    (
        "reader-field-record-default-missing-field",
        rec("R", _A_INT, fld("c", rec("C", fld("x", "int")), default={})),
        rec("R", _A_INT),
        False,
    ),
    (
        "reader-field-enum-default-not-a-symbol",
        rec("R", _A_INT, fld("c", enum("E", "A"), default="B")),
        rec("R", _A_INT),
        False,
    ),
    ("reader-field-array-default", rec("R", _A_INT, fld("c", array("int"), default=[1, 2])), rec("R", _A_INT), True),
    (
        "reader-field-array-default-bad-item",
        rec("R", _A_INT, fld("c", array("int"), default=["x"])),
        rec("R", _A_INT),
        False,
    ),
    ("bad-default-of-a-field-the-writer-has", rec("R", fld("a", "int", default="x")), rec("R", _A_INT), True),
    # aliases
    ("field-alias", rec("R", fld("z", "int", aliases=["a"])), rec("R", _A_INT), True),
    ("field-alias-record-renamed", rec("B", fld("z", "int", aliases=["a"])), rec("A", _A_INT), False),
    ("field-alias-record-aliased", rec("B", fld("z", "int", aliases=["a"]), aliases=["A"]), rec("A", _A_INT), True),
    (
        "record-alias-other-namespace",
        rec("B", fld("z", "int", aliases=["a"]), namespace="n", aliases=["A"]),
        rec("A", _A_INT),
        False,
    ),
    (
        "record-alias-full-name",
        rec("B", fld("z", "int", aliases=["a"]), namespace="n", aliases=[".A"]),
        rec("A", _A_INT),
        True,
    ),
    # enums: unqualified names must match; symbols are not compared
    ("enum-symbol-added", enum("E", "A", "B", "C"), enum("E", "A", "B"), True),
    ("enum-symbol-removed", enum("E", "A"), enum("E", "A", "B"), True),
    ("enum-symbol-removed-with-default", enum("E", "A", default="A"), enum("E", "A", "B"), True),
    ("enum-renamed", enum("F", "A"), enum("E", "A"), False),
    ("enum-renamed-aliased", enum("F", "A", aliases=["E"]), enum("E", "A"), True),
    ("enum-namespace-changed", enum("E", "A", namespace="x"), enum("E", "A", namespace="y"), True),
    ("enum-field-renamed", rec("R", fld("e", enum("F", "A"))), rec("R", fld("e", enum("E", "A"))), False),
    (
        "enum-namespace-changed-into-union",
        ["null", enum("E", "A", namespace="x")],
        enum("E", "A", namespace="y"),
        False,
    ),
    (
        "nullable-enum-namespace-changed",
        ["null", enum("E", "A", namespace="x")],
        ["null", enum("E", "A", namespace="y")],
        True,
    ),
    (
        "nullable-enum-namespace-and-symbols-changed",
        ["null", enum("E", "A", "B", namespace="x")],
        ["null", enum("E", "A", namespace="y")],
        False,
    ),
    ("nullable-enum-symbols-changed", ["null", enum("E", "A", "B")], ["null", enum("E", "A")], True),
    # fixed
    ("fixed-same", fixed("F", 4), fixed("F", 4), True),
    ("fixed-resized", fixed("F", 8), fixed("F", 4), False),
    ("fixed-renamed", fixed("G", 4), fixed("F", 4), False),
    ("fixed-namespace-changed", fixed("F", 4, namespace="x"), fixed("F", 4, namespace="y"), True),
    ("fixed-read-as-bytes", "bytes", fixed("F", 4), False),
    # promotions
    ("int-as-long", "long", "int", True),
    ("int-as-float", "float", "int", True),
    ("int-as-double", "double", "int", True),
    ("long-as-float", "float", "long", True),
    ("long-as-int", "int", "long", False),
    ("float-as-double", "double", "float", True),
    ("double-as-float", "float", "double", False),
    ("string-as-bytes", "bytes", "string", True),
    ("bytes-as-string", "string", "bytes", True),
    ("int-as-string", "string", "int", False),
    ("boolean-as-int", "int", "boolean", False),
    ("array-items-promoted", array("long"), array("int"), True),
    ("map-values-not-promotable", amap("int"), amap("string"), False),
    ("array-as-map", amap("int"), array("int"), False),
    # unions
    ("value-into-nullable", ["null", "int"], "int", True),
    ("nullable-into-value", "int", ["null", "int"], False),
    ("promoted-into-union", ["null", "long"], "int", True),
    ("nullable-promoted", ["null", "long", "string"], ["null", "int"], True),
    ("nullable-not-promotable", ["null", "string"], ["null", "int"], False),
    ("union-every-branch-readable", "long", ["int", "long"], True),
    ("union-branches-reordered", ["string", "int"], ["int", "string"], True),
    ("union-branch-dropped", ["null", "int"], ["null", "int", "string"], False),
    ("null-into-union-without-null", ["int", "string"], "null", False),
    (
        "record-into-union-by-structure",
        [rec("A", _A_INT), rec("B", fld("b", "string"))],
        rec("C", fld("b", "string")),
        True,
    ),
    (
        "record-into-union-first-structural-match-wins",
        [rec("A", fld("x", array("string"))), rec("B", fld("x", array("int")))],
        rec("C", fld("x", array("int"))),
        False,
    ),
    (
        "record-into-union-same-short-name-preferred",
        [rec("A", fld("x", array("string"))), rec("B", fld("x", array("int")), namespace="n")],
        rec("B", fld("x", array("int"))),
        True,
    ),
    ("record-into-union-no-structural-match", ["null", rec("A", _A_INT, fld("c", "string"))], rec("B", _A_INT), False),
    # recursion
    ("recursive-same", _LIST_INT, _LIST_INT, True),
    ("recursive-widened", _LIST_LONG, _LIST_INT, True),
    ("recursive-narrowed", _LIST_INT, _LIST_LONG, False),
    ("recursive-renamed", rec("Link", fld("value", "long"), fld("next", ["null", "Link"])), _LIST_INT, True),
]


PARSES: list[tuple[str, Any, bool, bool]] = [
    ("plain-record", rec("R", _A_INT), True, True),
    ("record-named-like-a-primitive", rec("int", _A_INT), False, False),
    ("namespace-with-a-bad-part", rec("R", _A_INT, namespace="1x.y"), True, True),
    ("bad-record-name", rec("1R", _A_INT), False, False),
    ("bad-field-name", rec("R", fld("a-b", "int")), False, False),
    ("bad-enum-symbol", enum("E", "1A"), False, False),
    ("enum-default-not-text", enum("E", "A", default=5), True, True),
    ("enum-default-not-a-symbol", enum("E", "A", default="B"), False, False),
    ("type-object-in-type-object", {"type": {"type": "int"}}, False, False),
    ("bad-field-order", rec("R", fld("a", "int", order="sideways")), False, False),
    ("field-order", rec("R", fld("a", "int", order="descending")), True, True),
    ("fixed-negative-size", fixed("F", -1), False, False),
    ("fixed-fractional-size", {"type": "fixed", "name": "F", "size": 1.5}, False, False),
    ("double-default-as-text", rec("R", fld("d", "double", default="NaN")), True, True),
    ("double-default-bad-text", rec("R", fld("d", "double", default="abc")), False, False),
    ("int-default-as-text", rec("R", fld("a", "int", default="x")), True, False),
    ("int-default-too-large", rec("R", fld("a", "int", default=2**31)), True, False),
    ("int-default-fractional", rec("R", fld("a", "int", default=1.5)), True, False),
    ("long-default", rec("R", fld("a", "long", default=2**40)), True, True),
    ("null-default-second-branch", rec("R", fld("a", ["string", "null"], default=None)), True, False),
    ("null-default-first-branch", rec("R", fld("a", ["null", "string"], default=None)), True, True),
    ("enum-field-default-any-text", rec("R", fld("e", enum("E", "A"), default="Z")), True, True),
    ("record-default-missing-field", rec("R", fld("c", rec("C", fld("x", "int")), default={})), True, False),
    (
        "record-default-from-field-default",
        rec("R", fld("c", rec("C", fld("x", "int", default=1)), default={})),
        True,
        True,
    ),
    ("aliases-not-a-list", rec("R", _A_INT, aliases="A"), False, False),
    ("alias-bad-name", rec("R", _A_INT, aliases=["1A"]), False, False),
    ("union-with-a-union", ["null", ["int"]], False, False),
    ("union-duplicate", ["int", "int"], False, False),
    ("record-without-fields", {"type": "record", "name": "R"}, False, False),
    ("type-redefined", rec("R", fld("a", rec("R", _A_INT))), False, False),
]
