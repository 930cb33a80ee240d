"""Decoded columns for topics with a JSON or Avro schema.

When the (first) topic a source reads has a JSON or AVRO schema whose definition is an Avro
record (Pulsar's JSON schemas are described as Avro records too), the rows carry the record's
fields as columns instead of ``value``, followed by the usual ``__key``, ``__topic``, ... columns
(as the Pulsar Spark connector does). The driver fetches the schema once, through the admin REST
(``GET /admin/v2/schemas/.../schema``); executors get it as a plain picklable `ValueSchema`.

Rules:

* Rule 1 (types): Avro ``boolean``, ``int``, ``long``, ``float``, ``double``, ``string``,
  ``bytes`` map to BOOLEAN, INT, BIGINT, FLOAT, DOUBLE, STRING, BINARY; ``enum`` to STRING, ``fixed``
  to BINARY; a union with ``null`` is its other branch (columns are always nullable); logical types
  keep their base type. Anything else (records, arrays, maps, other unions) becomes a STRING
  column holding the value as JSON.
* Rule 2 (decoding): JSON values are parsed as JSON objects; Avro values are Avro binary without a
  header (what Pulsar clients write), read with the latest schema version. A value that does not
  decode (empty, corrupt, another shape) gives a row whose field columns are all null; it never
  fails the query.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["META_DDL", "ValueSchema", "value_schema_from_info", "decoder", "arrow_type"]

META_DDL = ("__key STRING, __topic STRING, __messageId BINARY, __publishTime TIMESTAMP, "
            "__eventTime TIMESTAMP, __messageProperties MAP<STRING, STRING>")
"""The columns every row has besides the value (or the decoded fields)."""

_PRIMITIVES = {"boolean": "BOOLEAN", "int": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
               "string": "STRING", "bytes": "BINARY", "enum": "STRING", "fixed": "BINARY"}


@dataclass(frozen=True)
class ValueSchema:
    """A topic's value schema as the source uses it: ``kind`` (``json`` or ``avro``), the Avro
    definition text, and ``fields`` as ``(name, Spark type)`` pairs in definition order."""

    kind: str
    definition: str
    fields: tuple[tuple[str, str], ...]

    def ddl(self) -> str:
        """The row schema as Spark DDL: the fields, then `META_DDL`."""
        cols = ", ".join(f"`{name.replace('`', '``')}` {kind}" for name, kind in self.fields)
        return f"{cols}, {META_DDL}"


def _spark_type(avro_type: Any) -> str:
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        return _spark_type(branches[0]) if len(branches) == 1 else "STRING"
    if isinstance(avro_type, dict):
        inner = avro_type.get("type")
        if inner in ("enum", "fixed"):
            return _PRIMITIVES[inner]
        if isinstance(inner, str) and inner in _PRIMITIVES:
            return _PRIMITIVES[inner]  # a primitive with a logical type or properties
        return "STRING"
    return _PRIMITIVES.get(avro_type, "STRING")


def value_schema_from_info(info: dict[str, Any] | None) -> ValueSchema | None:
    """The `ValueSchema` of an admin ``GetSchemaResponse`` JSON; None when the topic has no schema,
    or one that is not JSON/AVRO over an Avro record (the rows then keep ``value``)."""
    if not info or str(info.get("type", "")).upper() not in ("JSON", "AVRO"):
        return None
    try:
        definition = json.loads(info.get("data") or "")
    except ValueError:
        return None
    if not isinstance(definition, dict) or definition.get("type") != "record":
        return None
    fields = tuple((str(f["name"]), _spark_type(f.get("type"))) for f in definition.get("fields", [])
                   if isinstance(f, dict) and "name" in f)
    if not fields:
        return None
    return ValueSchema(str(info["type"]).lower(), json.dumps(definition), fields)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def decoder(schema: ValueSchema) -> Callable[[bytes], tuple[Any, ...]]:
    """A function from a message value to its field values (Rule 2), in ``schema.fields`` order."""
    names = [n for n, _ in schema.fields]
    as_json = {n for n, kind in schema.fields if kind == "STRING"}
    empty = tuple(None for _ in names)

    def shape(record: Any) -> tuple[Any, ...]:
        if not isinstance(record, dict):
            return empty
        out = []
        for n in names:
            v = record.get(n)
            if v is not None and n in as_json and not isinstance(v, str):
                v = json.dumps(v, default=_jsonable)
            out.append(v)
        return tuple(out)

    if schema.kind == "json":
        def decode_json(value: bytes) -> tuple[Any, ...]:
            try:
                return shape(json.loads(value))
            except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
                return empty
        return decode_json

    import fastavro

    parsed = fastavro.parse_schema(json.loads(schema.definition))

    def decode_avro(value: bytes) -> tuple[Any, ...]:
        if not value:
            return empty
        try:
            return shape(fastavro.schemaless_reader(io.BytesIO(value), parsed))
        except Exception:
            return empty
    return decode_avro


def arrow_type(spark_type: str) -> Any:
    """The pyarrow type of a column type that Rule 1 produces."""
    import pyarrow as pa
    return {"BOOLEAN": pa.bool_(), "INT": pa.int32(), "BIGINT": pa.int64(), "FLOAT": pa.float32(),
            "DOUBLE": pa.float64(), "STRING": pa.string(), "BINARY": pa.binary()}[spark_type]
