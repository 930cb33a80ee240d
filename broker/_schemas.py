"""Per-topic versioned schemas in the metadata store, with a basic compatibility check.

Layout: ``/schemas/{tenant}/{namespace}/{encoded-topic}`` holds JSON ``{"versions": [...]}``, one
item per version (``type``, ``name``, ``data`` base64, ``properties``, ``timestamp`` ms of its
registration, 0 for versions stored before it was kept); version ``n`` is the item
at index ``n`` and travels on the wire as 8 bytes big-endian (Pulsar's LongSchemaVersion). A
partitioned topic's partitions share the schema of the partitioned topic. Updates are
compare-and-set.

Compatibility (what is checked, by strategy; ``*_TRANSITIVE`` checks every version, the others
only the latest):

* ALWAYS_COMPATIBLE: anything goes. ALWAYS_INCOMPATIBLE: no new version once one exists.
* A schema equal to an existing version (type and data) is that version, whatever the strategy.
* Different types are incompatible.
* JSON and Avro record schemas compare field sets (``fields[].name`` of the schema JSON):
  BACKWARD (new readers read old data): each field added by the new schema has a ``default``;
  FORWARD (old readers read new data): each field the new schema drops had a ``default``;
  FULL: both.
* Other types: compatible only when the schema data is identical.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from metadata import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from protocols.pulsar import TopicName

from ._errors import IncompatibleSchemaError

__all__ = ["SchemaInfo", "SchemaRegistry", "check_compatible", "version_bytes", "version_from_bytes"]

SCHEMAS_ROOT = "/schemas"
_JSON = 2
_AVRO = 4
_NONE = 0


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
        return {"type": self.type, "name": self.name, "data": base64.b64encode(self.data).decode(),
                "properties": dict(self.properties), "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SchemaInfo:
        """Inverse of `to_json`."""
        return cls(int(obj["type"]), base64.b64decode(obj["data"]), obj.get("name", ""),
                   tuple(sorted(obj.get("properties", {}).items())), int(obj.get("timestamp", 0)))


def version_bytes(version: int) -> bytes:
    """A schema version as sent on the wire (8 bytes, big-endian)."""
    return version.to_bytes(8, "big", signed=True)


def version_from_bytes(data: bytes) -> int:
    """Inverse of `version_bytes`; raises ValueError for anything but 8 bytes."""
    if len(data) != 8:
        raise ValueError(f"a schema version is 8 bytes, got {len(data)}")
    return int.from_bytes(data, "big", signed=True)


def _fields(info: SchemaInfo) -> dict[str, bool] | None:
    """``{field name: has default}`` of a JSON/Avro record schema, None if it is not one."""
    try:
        obj = json.loads(info.data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("fields"), list):
        return None
    return {f["name"]: "default" in f for f in obj["fields"] if isinstance(f, dict) and "name" in f}


def _pair_compatible(new: SchemaInfo, old: SchemaInfo, strategy: str) -> str | None:
    """None when ``new`` may follow ``old``; else the reason it may not."""
    if new.type != old.type:
        return f"schema type {new.type} differs from the existing type {old.type}"
    if new.type in (_JSON, _AVRO):
        new_fields, old_fields = _fields(new), _fields(old)
        if new_fields is not None and old_fields is not None:
            base = strategy.replace("_TRANSITIVE", "")
            if base in ("BACKWARD", "FULL"):
                added = [n for n, has_default in new_fields.items() if n not in old_fields and not has_default]
                if added:
                    return f"fields {added} were added without a default ({strategy})"
            if base in ("FORWARD", "FULL"):
                dropped = [n for n, has_default in old_fields.items() if n not in new_fields and not has_default]
                if dropped:
                    return f"fields {dropped} were removed but had no default ({strategy})"
            return None
    if new.data != old.data:
        return "schema data differs and the type has no field-level compatibility check"
    return None


def check_compatible(new: SchemaInfo, existing: list[SchemaInfo], strategy: str) -> None:
    """Raise `IncompatibleSchemaError` unless ``new`` may be added after ``existing``."""
    strategy = strategy.upper()
    if not existing or strategy == "ALWAYS_COMPATIBLE":
        return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError("the namespace's schema strategy is ALWAYS_INCOMPATIBLE")
    against = existing if strategy.endswith("_TRANSITIVE") else existing[-1:]
    for old in against:
        reason = _pair_compatible(new, old, strategy)
        if reason:
            raise IncompatibleSchemaError(f"incompatible schema: {reason}")


class SchemaRegistry:
    """Stores and checks topic schemas; see the module header for layout and rules."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @staticmethod
    def _path(topic: TopicName) -> str:
        base = topic.partitioned_topic
        return f"{SCHEMAS_ROOT}/{base.tenant}/{base.namespace}/{base.encoded_local_name}"

    async def _load(self, topic: TopicName) -> tuple[list[SchemaInfo], int | None]:
        try:
            data, stat = await self.store.get(self._path(topic))
        except NoNodeError:
            return [], None
        return [SchemaInfo.from_json(v) for v in json.loads(data)["versions"]], stat.version

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

    async def check(self, topic: TopicName, schema: SchemaInfo, strategy: str) -> int | None:
        """Check without registering: the matching version, or None if new but compatible.

        Raises `IncompatibleSchemaError`.
        """
        versions = await self.versions(topic)
        for i, v in enumerate(versions):
            if v.same_as(schema):
                return i
        check_compatible(schema, versions, strategy)
        return None

    async def get_or_create(self, topic: TopicName, schema: SchemaInfo, strategy: str, *,
                            allow_new: bool = True) -> int:
        """The version of ``schema``, adding it as a new version if compatible.

        Raises `IncompatibleSchemaError` when it is incompatible, or when it is new and
        ``allow_new`` is false (while the topic already has versions).
        """
        while True:
            versions, stat_version = await self._load(topic)
            for i, v in enumerate(versions):
                if v.same_as(schema):
                    return i
            if versions and not allow_new:
                raise IncompatibleSchemaError("the namespace does not allow producers to add schema versions")
            check_compatible(schema, versions, strategy)
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
