"""Topic schemas over the broker's `SchemaRegistry`, with Pulsar's v2 paths and JSON shapes.

Paths (under ``/admin/v2/schemas/{tenant}/{namespace}/{topic}``, as Pulsar's SchemasResource):

* ``GET  .../schema``            latest version: ``{"version", "type", "timestamp", "data", "properties"}``
  (``type`` is the SchemaType name, ``data`` the schema definition as text; a KEY_VALUE schema's
  as ``{"key": ..., "value": ...}``, a primitive side ``""``, as Pulsar shows it); 404 when none.
* ``GET  .../schema/{version}``  that version; 404 when it does not exist.
* ``GET  .../schemas``           every version: ``{"getSchemaResponses": [...]}``.
* ``POST .../schema``            upload ``{"type", "schema", "properties"}`` (KEY_VALUE in the form
  GET shows, stored in the binary form clients register); 202 with
  ``{"version": {"version": N}}`` (a schema equal to an existing version answers that version);
  409 when the namespace's compatibility strategy refuses it; 422 when an AVRO/JSON definition
  is not JSON.
* ``POST .../compatibility``     ``{"compatibility", "schemaCompatibilityStrategy"}`` (the names
  Jackson gives Pulsar's IsCompatibilityResponse: its ``isCompatibility()`` getter is property
  ``compatibility``).
* ``POST .../version``           ``{"version": N}`` of an equal schema; 404 when there is none.
* ``DELETE .../schema``          remove every version: ``{"version": N}`` with N the number of
  versions removed (the version a Pulsar delete marker would get), -1 when there were none.

A partition's name addresses the schema of its partitioned topic (the registry's rule). The
namespace must exist (404); the topic need not, as in Pulsar (a schema may be set up front).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import IncompatibleSchemaError
from ..schema._registry import InvalidSchemaError, SchemaInfo, check_compatible, key_value_parts
from ._common import (
    INT64_MAX,
    RestError,
    check_stored_size,
    endpoint,
    int_param,
    json_body,
    json_response,
    require_namespace,
    service_of,
    topic_of,
)

__all__ = ["routes", "SCHEMA_TYPES", "schema_type_name", "schema_type_value"]

SCHEMA_TYPES: dict[str, int] = {
    "NONE": 0,
    "STRING": 1,
    "JSON": 2,
    "PROTOBUF": 3,
    "AVRO": 4,
    "BOOLEAN": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FLOAT": 10,
    "DOUBLE": 11,
    "DATE": 12,
    "TIME": 13,
    "TIMESTAMP": 14,
    "KEY_VALUE": 15,
    "INSTANT": 16,
    "LOCAL_DATE": 17,
    "LOCAL_TIME": 18,
    "LOCAL_DATE_TIME": 19,
    "PROTOBUF_NATIVE": 20,
}
"""Pulsar's SchemaType names -> the wire ``Schema.Type`` values (BYTES is stored as NONE)."""

_NAMES = {v: k for k, v in SCHEMA_TYPES.items()}
_RECORD_TYPES = (SCHEMA_TYPES["AVRO"], SCHEMA_TYPES["JSON"], SCHEMA_TYPES["PROTOBUF"])


def schema_type_name(value: int) -> str:
    """The SchemaType name of a wire type value (``NONE`` for unknown ones)."""
    return _NAMES.get(value, "NONE")


def schema_type_value(name: str) -> int:
    """The wire value of a SchemaType name; ValueError for an unknown name."""
    key = name.upper()
    if key == "BYTES":
        return 0
    if key not in SCHEMA_TYPES:
        raise ValueError(f"unknown schema type {name!r}")
    return SCHEMA_TYPES[key]


def _kv_text(info: SchemaInfo) -> str | None:
    """A KEY_VALUE schema's binary data as Pulsar's REST shows it: ``{"key": ..., "value": ...}``
    with each side's definition as JSON, ``""`` for a primitive side; None when not in that form."""
    parts = key_value_parts(info)
    if parts is None:
        return None
    try:
        sides = [json.loads(part.data) if part.data else "" for _name, part in parts]
    except ValueError:
        return None
    return json.dumps({"key": sides[0], "value": sides[1]})


def _kv_data(text: str) -> bytes | None:
    """Pulsar's REST form of a KEY_VALUE schema (see `_kv_text`) as the binary form clients register
    (``[int32 length][key definition][int32 length][value definition]``, a primitive side empty);
    None when ``text`` is not in the REST form."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or "key" not in body or "value" not in body:
        return None
    out = b""
    for side in (body["key"], body["value"]):
        raw = b"" if side in ("", None) else json.dumps(side, separators=(",", ":")).encode()
        out += len(raw).to_bytes(4, "big") + raw
    return out


def _response(info: SchemaInfo, version: int) -> dict[str, Any]:
    data = _kv_text(info) if info.type == SCHEMA_TYPES["KEY_VALUE"] else None
    return {
        "version": version,
        "type": schema_type_name(info.type),
        "timestamp": info.timestamp,
        "data": data if data is not None else info.data.decode("utf-8", "replace"),
        "properties": dict(info.properties),
    }


async def _topic(request: Request):
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    return s, topic


async def _payload(request: Request) -> SchemaInfo:
    body = await json_body(request, what="schema payload")
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise RestError(400, 'schema payload must be {"type": ..., "schema": ..., "properties": {...}}')
    try:
        type_value = schema_type_value(body["type"])
    except ValueError as exc:
        raise RestError(400, str(exc)) from None
    data = body.get("schema") or ""
    if not isinstance(data, str):
        raise RestError(400, "schema must be a string (the schema definition)")
    if type_value in _RECORD_TYPES[:2]:
        try:
            json.loads(data)
        except ValueError:
            raise RestError(422, f"invalid {body['type'].upper()} schema definition: not JSON") from None
    raw = data.encode()
    if type_value == SCHEMA_TYPES["KEY_VALUE"]:
        raw = _kv_data(data) or raw  # stored as the clients register it
    props = body.get("properties") or {}
    if not isinstance(props, dict) or not all(isinstance(v, (str, int, float)) for v in props.values()):
        raise RestError(400, "properties must be an object of strings")
    return SchemaInfo(
        type=type_value,
        data=raw,
        name=topic_of(request).local_name,
        properties=tuple(sorted((str(k), str(v)) for k, v in props.items())),
    )


@endpoint
async def get_latest(request: Request) -> Response:
    s, topic = await _topic(request)
    found = await s.schemas.get(topic)
    if found is None:
        raise RestError(404, f"no schema for topic {topic}")
    return json_response(_response(*found))


@endpoint
async def get_version(request: Request) -> Response:
    s, topic = await _topic(request)
    version = int_param(request, "version", "schema version", minimum=-INT64_MAX - 1, maximum=INT64_MAX)
    found = await s.schemas.get(topic, version)
    if found is None:
        raise RestError(404, f"no schema version {version} for topic {topic}")
    return json_response(_response(*found))


@endpoint
async def get_all(request: Request) -> Response:
    s, topic = await _topic(request)
    versions = await s.schemas.versions(topic)
    return json_response({"getSchemaResponses": [_response(v, i) for i, v in enumerate(versions)]})


@endpoint
async def post_schema(request: Request) -> Response:
    s, topic = await _topic(request)
    info = await _payload(request)
    versions = await s.schemas.versions(topic)
    if not any(v.same_as(info) for v in versions):
        # every version of a topic's schema is kept in one metadata node
        stored = {"versions": [v.to_json() for v in [*versions, info]]}
        check_stored_size(request, stored, "the topic's schemas")
    strategy, _allow_new = await s.schema_strategy(topic.namespace_name)
    try:
        # an admin upload may add a version whatever is_allow_auto_update_schema says (as Pulsar)
        version = await s.schemas.get_or_create(topic, info, strategy, allow_new=True)
    except InvalidSchemaError as exc:
        raise RestError(422, str(exc)) from None
    except IncompatibleSchemaError as exc:
        raise RestError(409, str(exc)) from None
    return json_response({"version": {"version": version}}, status=202)


@endpoint
async def check_compatibility(request: Request) -> Response:
    s, topic = await _topic(request)
    info = await _payload(request)
    strategy, _ = await s.schema_strategy(topic.namespace_name)
    versions = await s.schemas.versions(topic)
    try:
        if not any(v.same_as(info) for v in versions):
            check_compatible(info, versions, strategy)
        ok = True
    except IncompatibleSchemaError:
        ok = False
    return json_response({"compatibility": ok, "schemaCompatibilityStrategy": strategy}, status=202)


@endpoint
async def version_of(request: Request) -> Response:
    s, topic = await _topic(request)
    info = await _payload(request)
    version = await s.schemas.find(topic, info)
    if version is None:
        raise RestError(404, f"no version of topic {topic}'s schema equals the one given")
    return json_response({"version": version}, status=202)


@endpoint
async def delete_schema(request: Request) -> Response:
    s, topic = await _topic(request)
    removed = await s.schemas.delete(topic)
    return json_response({"version": removed if removed else -1})


def routes() -> list[Route]:
    """The routes of this module."""
    base = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
    return [
        Route(f"{base}/schema", get_latest, methods=["GET"]),
        Route(f"{base}/schema", post_schema, methods=["POST"]),
        Route(f"{base}/schema", delete_schema, methods=["DELETE"]),
        Route(f"{base}/schema/{{version}}", get_version, methods=["GET"]),
        Route(f"{base}/schemas", get_all, methods=["GET"]),
        Route(f"{base}/compatibility", check_compatibility, methods=["POST"]),
        Route(f"{base}/version", version_of, methods=["POST"]),
    ]
