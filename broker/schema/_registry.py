"""Per-topic versioned schemas in the metadata store, with a basic compatibility check.

Layout: ``/schemas/{tenant}/{namespace}/{encoded-topic}`` holds JSON ``{"versions": [...]}``, one
item per version (``type``, ``name``, ``data`` base64, ``properties``, ``timestamp`` ms of its
registration, 0 for versions stored before it was kept); version ``n`` is the item
at index ``n`` and travels on the wire as 8 bytes big-endian (Pulsar's LongSchemaVersion). A
partitioned topic's partitions share the schema of the partitioned topic. Updates are
compare-and-set.

Apache Pulsar's broker stores a binary ``SchemaLocator`` at the same path instead, each version
in an entry of a BookKeeper ledger (``protocols/pulsar/schema_storage.proto``). Such a topic's
versions are read (through ``read_entry``) and served as they are: a schema equal to one of
them gets its version, but a new version, which Magnetar would have to write in Pulsar's form,
is refused (`IncompatibleSchemaError`), and so the node is never rewritten. When Pulsar's latest
version is a deletion marker the topic has no schema.

Compatibility (``*_TRANSITIVE`` checks every version, the others only the latest), as Pulsar 4.0
with its default ``schemaRegistryCompatibilityCheckers``:

* A schema equal to an existing version (type and data) is that version, whatever the strategy.
* ALWAYS_COMPATIBLE: anything goes. ALWAYS_INCOMPATIBLE: no new version once one exists.
* Different types are incompatible.
* AVRO and JSON schemas (Pulsar's JSON schemas carry Avro definitions too) are checked as Pulsar
  checks them, with Avro's schema resolution as its Java implementation does it (`_avro_compat`):
  BACKWARD = the new schema reads data written with the old, FORWARD = the old reads data written
  with the new, FULL = both. Record names do not have to match.
* PROTOBUF schemas carry Avro definitions as well, which must be valid, but Pulsar has no checker
  for the type by default, so any new PROTOBUF version is compatible.
* PROTOBUF_NATIVE schemas: the root message's full name may not change.
* KEY_VALUE schemas: the key and value types must stay, and each side is checked by its own
  type's rules.
* Other types (STRING, BYTES, the primitives...): any new version is compatible.
* A new AVRO, JSON or PROTOBUF definition that is not valid Avro is refused (an AVRO one may not be
  a union at its top, as Pulsar's validator says). When the topic already has versions, a
  producer's (or an upload's) definition must also have field defaults that suit their types:
  Pulsar parses it then with Avro's default validation to look it up among the versions.
* A consumer's schema (`check_consumer_compatible`): under BACKWARD, FORWARD, FORWARD_TRANSITIVE
  and FULL it must read data written with the latest version; under BACKWARD_TRANSITIVE,
  FULL_TRANSITIVE and ALWAYS_INCOMPATIBLE it is checked against every version with the strategy.
  On a topic without a schema it is registered when the topic is idle and empty, and refused
  otherwise unless the strategy is ALWAYS_COMPATIBLE (see `_handlers_consumer`).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from google.protobuf.message import DecodeError

from metadata import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from protocols.pulsar import TopicName
from protocols.pulsar import schema_storage_pb2 as pulsar_storage

from .._errors import BrokerServiceError, IncompatibleSchemaError
from ._avro_compat import AvroNode, AvroSchemaError, default_error, parse_avro, read_error

__all__ = [
    "InvalidSchemaError",
    "PulsarStoredSchemaError",
    "ReadEntry",
    "SchemaInfo",
    "SchemaRegistry",
    "check_compatible",
    "check_consumer_compatible",
    "decode_pulsar_locator",
    "decode_pulsar_schema_entry",
    "key_value_parts",
    "validate_schema",
    "version_bytes",
    "version_from_bytes",
]

SCHEMAS_ROOT = "/schemas"
_JSON = 2
_AVRO = 4
_PROTOBUF = 3  # an Avro definition too (generated from the descriptor)
_PROTOBUF_NATIVE = 20
_NONE = 0
_TYPE_NAMES = {_JSON: "JSON", _AVRO: "AVRO", _PROTOBUF: "PROTOBUF", _PROTOBUF_NATIVE: "PROTOBUF_NATIVE"}
_AVRO_BASED = (_JSON, _AVRO, _PROTOBUF)
_AVRO_CHECKED = (_JSON, _AVRO)  # the types whose versions Pulsar checks with Avro's resolution
_KEY_VALUE = 15
_AVRO_BASED_NAMES = {"JSON": _JSON, "AVRO": _AVRO, "PROTOBUF": _PROTOBUF}


@dataclass(frozen=True)
class SchemaInfo:
    """One schema: Pulsar ``Schema.Type`` value, name, data bytes, properties and the time (ms)
    its version was registered (0: not registered yet, or not known)."""

    type: int
    data: bytes
    name: str = ""
    properties: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    timestamp: int = 0

    def same_as(self, other: SchemaInfo) -> bool:
        """Equal type and data (names and properties do not make a new version)."""
        return self.type == other.type and self.data == other.data

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "type": self.type,
            "name": self.name,
            "data": base64.b64encode(self.data).decode(),
            "properties": dict(self.properties),
            "timestamp": self.timestamp,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SchemaInfo:
        """Inverse of `to_json`."""
        return cls(
            int(obj["type"]),
            base64.b64decode(obj["data"]),
            obj.get("name", ""),
            tuple(sorted(obj.get("properties", {}).items())),
            int(obj.get("timestamp", 0)),
        )


def version_bytes(version: int) -> bytes:
    """A schema version as sent on the wire (8 bytes, big-endian)."""
    return version.to_bytes(8, "big", signed=True)


def version_from_bytes(data: bytes) -> int:
    """Inverse of `version_bytes`; raises ValueError for anything but 8 bytes."""
    if len(data) != 8:
        raise ValueError(f"a schema version is 8 bytes, got {len(data)}")
    return int.from_bytes(data, "big", signed=True)


class InvalidSchemaError(IncompatibleSchemaError):
    """A schema whose definition is not valid for its type (the client sees IncompatibleSchema,
    the admin API answers 422 as Pulsar's InvalidSchemaDataException)."""


def _avro_of(info: SchemaInfo) -> AvroNode:
    try:
        return parse_avro(info.data)
    except AvroSchemaError as exc:
        raise InvalidSchemaError(f"invalid {_TYPE_NAMES.get(info.type, 'schema')} schema definition: {exc}") from None


def validate_schema(info: SchemaInfo) -> None:
    """Raise `InvalidSchemaError` when an AVRO, JSON or PROTOBUF schema's definition (also as the
    key or value of a KEY_VALUE schema) is not valid Avro, or an AVRO one is a union."""
    if info.type in _AVRO_BASED:
        node = _avro_of(info)
        if info.type == _AVRO and node.kind == "union":
            raise InvalidSchemaError("an AVRO schema may not be a union")
    elif info.type == _PROTOBUF_NATIVE:
        _root_message(info)
    elif info.type == _KEY_VALUE:
        parts = key_value_parts(info)
        for _name, part in parts or ():
            validate_schema(part)


def key_value_parts(info: SchemaInfo) -> tuple[tuple[str, SchemaInfo], tuple[str, SchemaInfo]] | None:
    """``((key type name, key schema), (value type name, value schema))`` of a KEY_VALUE schema:
    data ``[int32 key length][key definition][int32 value length][value definition]`` (big-endian,
    as Pulsar encodes it), types in the ``key.schema.type`` / ``value.schema.type`` properties;
    None when the data is not in that form."""
    data = info.data
    if len(data) < 8:
        return None
    key_len = int.from_bytes(data[:4], "big", signed=True)
    if key_len < 0 or 8 + key_len > len(data):
        return None
    value_len = int.from_bytes(data[4 + key_len : 8 + key_len], "big", signed=True)
    if value_len < 0 or 8 + key_len + value_len != len(data):
        return None
    props = dict(info.properties)
    parts = []
    for side, part in (("key", data[4 : 4 + key_len]), ("value", data[8 + key_len :])):
        name = props.get(f"{side}.schema.type", "BYTES").upper()
        parts.append((name, SchemaInfo(type=_AVRO_BASED_NAMES.get(name, -1), data=part)))
    return parts[0], parts[1]


def _root_message(info: SchemaInfo) -> str:
    """The root message's full name of a PROTOBUF_NATIVE schema (JSON with the descriptor set and
    ``rootMessageTypeName``); raises `InvalidSchemaError` when the data has none."""
    try:
        name = json.loads(info.data).get("rootMessageTypeName")
    except (ValueError, AttributeError):
        name = None
    if not isinstance(name, str) or not name:
        raise InvalidSchemaError("a PROTOBUF_NATIVE schema needs JSON data with a 'rootMessageTypeName'")
    return name


def new_version_error(new: SchemaInfo) -> str | None:
    """Why a producer's (or an upload's) schema cannot be added to a topic that already has
    versions although it is compatible, or None: an AVRO, JSON or PROTOBUF definition whose field
    defaults do not suit their types (Pulsar parses it then with default validation)."""
    if new.type not in _AVRO_BASED:
        return None
    problem = default_error(_avro_of(new))
    return f"invalid {_TYPE_NAMES[new.type]} schema definition: {problem}" if problem else None


def _pair_compatible(new: SchemaInfo, old: SchemaInfo, strategy: str) -> str | None:
    """None when ``new`` may follow ``old`` under ``strategy``; else the reason it may not."""
    if new.type != old.type:
        return (
            f"schema type {_TYPE_NAMES.get(new.type, new.type)} differs from the existing type "
            f"{_TYPE_NAMES.get(old.type, old.type)}"
        )
    if new.type == _KEY_VALUE:
        new_parts, old_parts = key_value_parts(new), key_value_parts(old)
        if new_parts is not None and old_parts is not None:
            # as Pulsar: the key and value types stay, and each side is checked by its own type's rules
            for side, (new_name, new_part), (old_name, old_part) in zip(
                ("key", "value"), new_parts, old_parts, strict=True
            ):
                if new_name != old_name:
                    return f"the {side} schema type {new_name} differs from the existing {old_name}"
                reason = _pair_compatible(new_part, old_part, strategy)
                if reason:
                    return f"{side} schema: {reason}"
            return None
    if new.type == _PROTOBUF_NATIVE:
        new_root, old_root = _root_message(new), _root_message(old)
        if new_root != old_root:
            return f"the root message changes from {old_root} to {new_root}"
        return None
    if new.type in _AVRO_CHECKED:
        new_node = _avro_of(new)
        try:
            old_node = parse_avro(old.data)
        except AvroSchemaError as exc:
            return f"an existing version is not a valid Avro definition ({exc})"  # as Pulsar's parse fails
        base = strategy.replace("_TRANSITIVE", "")
        if base in ("BACKWARD", "FULL"):
            reason = read_error(new_node, old_node)
            if reason:
                return f"the new schema cannot read data written with an existing version ({reason})"
        if base in ("FORWARD", "FULL"):
            reason = read_error(old_node, new_node)
            if reason:
                return f"an existing version cannot read data written with the new schema ({reason})"
        return None
    return None  # no checker for the type: compatible, as Pulsar's default check


def _check_against(new: SchemaInfo, against: list[SchemaInfo], strategy: str, first: int) -> None:
    for i, old in enumerate(against):
        reason = _pair_compatible(new, old, strategy)
        if reason:
            raise IncompatibleSchemaError(f"incompatible schema ({strategy}, version {first + i}): {reason}")


def check_compatible(new: SchemaInfo, existing: list[SchemaInfo], strategy: str) -> None:
    """Raise `IncompatibleSchemaError` unless ``new`` may be added as a version after ``existing``."""
    strategy = strategy.upper()
    validate_schema(new)
    if not existing or strategy == "ALWAYS_COMPATIBLE":
        return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError("the namespace's schema strategy is ALWAYS_INCOMPATIBLE")
    if strategy.endswith("_TRANSITIVE"):
        _check_against(new, existing, strategy, 0)
    else:
        _check_against(new, existing[-1:], strategy, len(existing) - 1)


def check_consumer_compatible(new: SchemaInfo, existing: list[SchemaInfo], strategy: str) -> None:
    """Raise `IncompatibleSchemaError` unless a consumer with schema ``new`` may read the topic
    (see the module header); a schema equal to an existing version is always accepted."""
    strategy = strategy.upper()
    validate_schema(new)
    if not existing or strategy == "ALWAYS_COMPATIBLE" or any(v.same_as(new) for v in existing):
        return
    if strategy in ("BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"):
        _check_against(new, existing[-1:], "BACKWARD", len(existing) - 1)
    elif strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError(
            "the namespace's schema strategy is ALWAYS_INCOMPATIBLE and the "
            "consumer's schema is none of the topic's versions"
        )
    else:
        _check_against(new, existing, strategy, 0)


ReadEntry = Callable[[int, int], Awaitable[bytes]]
"""Reads entry ``(ledger id, entry id)`` of a sealed BookKeeper ledger."""

# SchemaRegistryFormat's SchemaType is the wire's Schema.Type plus one, up to PROTOBUF_NATIVE.
_STORED_TYPE_OFFSET = 1
_STORED_TYPE_MAX = 21


class PulsarStoredSchemaError(BrokerServiceError):
    """A schema Apache Pulsar's broker stored cannot be read (unparsable, or its entry unreachable)."""


def decode_pulsar_locator(data: bytes) -> list[tuple[int, int, int]]:
    """``(version, ledger id, entry id)`` of each version of a Pulsar ``SchemaLocator``, by version.

    Raises `PulsarStoredSchemaError` when it does not parse or its versions are not 0, 1, 2 ...
    """
    locator = pulsar_storage.SchemaLocator()
    try:
        locator.ParseFromString(data)
    except DecodeError as exc:
        raise PulsarStoredSchemaError(f"unparsable SchemaLocator: {exc}") from exc
    index = sorted((e.version, e.position.ledgerId, e.position.entryId) for e in locator.index)
    if [v for v, _, _ in index] != list(range(len(index))):
        raise PulsarStoredSchemaError(f"SchemaLocator versions are not 0..n: {[v for v, _, _ in index]}")
    return index


def decode_pulsar_schema_entry(data: bytes) -> tuple[SchemaInfo, bool]:
    """(the version's schema, whether it is a deletion marker) from a Pulsar ``SchemaEntry``.

    Raises `PulsarStoredSchemaError` when it does not parse or its type has no wire value.
    """
    entry = pulsar_storage.SchemaEntry()
    info = pulsar_storage.StoredSchemaInfo()
    try:
        entry.ParseFromString(data)
        info.ParseFromString(entry.schema_data)
    except DecodeError as exc:
        raise PulsarStoredSchemaError(f"unparsable SchemaEntry: {exc}") from exc
    if not _STORED_TYPE_OFFSET <= info.type <= _STORED_TYPE_MAX:
        raise PulsarStoredSchemaError(f"stored schema type {info.type} has no wire value")
    props = tuple(sorted((p.key, p.value) for p in info.props))
    schema = SchemaInfo(info.type - _STORED_TYPE_OFFSET, info.schema, "", props, info.timestamp)
    return schema, info.deleted


class SchemaRegistry:
    """Stores and checks topic schemas; see the module header for layout and rules.

    ``read_entry`` reads the ledgers of schemas Apache Pulsar's broker stored; without it such a
    topic's schema is a `PulsarStoredSchemaError`.
    """

    def __init__(self, store: MetadataStore, read_entry: ReadEntry | None = None) -> None:
        self.store = store
        self._read_entry = read_entry

    @staticmethod
    def _path(topic: TopicName) -> str:
        base = topic.partitioned_topic
        return f"{SCHEMAS_ROOT}/{base.tenant}/{base.namespace}/{base.encoded_local_name}"

    async def _load(self, topic: TopicName) -> tuple[list[SchemaInfo], int | None, bool]:
        """(versions, the node's version or None, whether Apache Pulsar's broker stored them)."""
        try:
            data, stat = await self.store.get(self._path(topic))
        except NoNodeError:
            return [], None, False
        if data[:1] == b"{":
            return [SchemaInfo.from_json(v) for v in json.loads(data)["versions"]], stat.version, False
        return await self._load_pulsar(bytes(data)), stat.version, True

    async def _load_pulsar(self, data: bytes) -> list[SchemaInfo]:
        if self._read_entry is None:
            raise PulsarStoredSchemaError("a schema stored by Apache Pulsar's broker needs its ledgers read")
        versions: list[SchemaInfo] = []
        deleted = False
        for _version, ledger_id, entry_id in decode_pulsar_locator(data):
            try:
                raw = await self._read_entry(ledger_id, entry_id)
            except Exception as exc:
                raise PulsarStoredSchemaError(f"cannot read schema entry {ledger_id}:{entry_id}: {exc}") from exc
            schema, deleted = decode_pulsar_schema_entry(raw)
            versions.append(schema)
        return [] if deleted else versions

    async def versions(self, topic: TopicName) -> list[SchemaInfo]:
        """All versions, oldest first (empty when the topic has no schema)."""
        return (await self._load(topic))[0]

    async def get(self, topic: TopicName, version: int | None = None) -> tuple[SchemaInfo, int] | None:
        """``(schema, version)`` of the given or latest version; None when there is none."""
        versions = await self.versions(topic)
        if not versions:
            return None
        if version is None:
            return versions[-1], len(versions) - 1
        if 0 <= version < len(versions):
            return versions[version], version
        return None

    async def find(self, topic: TopicName, schema: SchemaInfo) -> int | None:
        """The version equal to ``schema``, or None."""
        for i, v in enumerate(await self.versions(topic)):
            if v.same_as(schema):
                return i
        return None

    async def check(self, topic: TopicName, schema: SchemaInfo, strategy: str, *, consumer: bool = False) -> int | None:
        """Check without registering: the matching version, or None if new but compatible
        (as a new version, or with ``consumer`` as a consumer's schema: `check_consumer_compatible`).

        Raises `IncompatibleSchemaError`.
        """
        versions = await self.versions(topic)
        for i, v in enumerate(versions):
            if v.same_as(schema):
                return i
        if consumer:
            check_consumer_compatible(schema, versions, strategy)
        else:
            check_compatible(schema, versions, strategy)
        return None

    async def get_or_create(
        self, topic: TopicName, schema: SchemaInfo, strategy: str, *, allow_new: bool = True
    ) -> int:
        """The version of ``schema``, adding it as a new version if compatible.

        Raises `IncompatibleSchemaError` when it is incompatible, or when it is new and
        ``allow_new`` is false (while the topic already has versions).
        """
        while True:
            versions, stat_version, pulsars = await self._load(topic)
            for i, v in enumerate(versions):
                if v.same_as(schema):
                    return i
            if pulsars:
                raise IncompatibleSchemaError(
                    "the topic's schema was stored by Apache Pulsar's broker: Magnetar "
                    "serves its versions but does not add to them"
                )
            if versions and not allow_new:
                raise IncompatibleSchemaError("the namespace does not allow producers to add schema versions")
            check_compatible(schema, versions, strategy)
            problem = new_version_error(schema) if versions else None
            if problem:
                raise InvalidSchemaError(problem)
            stamped = replace(schema, timestamp=int(time.time() * 1000))
            body = json.dumps({"versions": [v.to_json() for v in [*versions, stamped]]}).encode()
            try:
                if stat_version is None:
                    await self.store.create(self._path(topic), body, make_parents=True)
                else:
                    await self.store.set(self._path(topic), body, version=stat_version)
                return len(versions)
            except (BadVersionError, NodeExistsError):
                continue  # someone else added a version meanwhile: check again

    async def delete(self, topic: TopicName) -> int:
        """Remove every version of the topic's schema; the number of versions there were."""
        versions = await self.versions(topic)
        try:
            await self.store.delete(self._path(topic))
        except NoNodeError:
            pass
        return len(versions)
