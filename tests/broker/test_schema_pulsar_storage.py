"""Schemas Apache Pulsar's broker stored: a binary SchemaLocator at ``/schemas/...`` and each
version as a SchemaEntry in a BookKeeper ledger. Magnetar serves those versions and never
rewrites the node; a new version is refused."""

from __future__ import annotations

import hashlib
import json

import pytest

from broker._errors import IncompatibleSchemaError
from broker.schema._registry import (
    PulsarStoredSchemaError,
    SchemaInfo,
    SchemaRegistry,
    decode_pulsar_locator,
    decode_pulsar_schema_entry,
)
from metadata import open_metadata_store
from protocols.pulsar import TopicName
from protocols.pulsar import schema_storage_pb2 as stored

TOPIC = TopicName.parse("persistent://public/default/from-pulsar")
PATH = "/schemas/public/default/from-pulsar"
_STRING, _JSON = 1, 2  # wire Schema.Type values; Pulsar stores each plus one


def _entry(wire_type: int, data: bytes, *, deleted: bool = False, props: dict[str, str] | None = None) -> bytes:
    info = stored.StoredSchemaInfo(
        schema_id="public/default/from-pulsar",
        user="",
        type=wire_type + 1,
        schema=data,
        timestamp=1234,
        deleted=deleted,
    )
    for k, v in (props or {}).items():
        info.props.add(key=k, value=v)
    return stored.SchemaEntry(schema_data=info.SerializeToString()).SerializeToString()


def _locator(positions: list[tuple[int, int]]) -> bytes:
    index = [
        stored.IndexEntry(
            version=v,
            position=stored.StoredPosition(ledgerId=lid, entryId=eid),
            hash=hashlib.sha256(b"%d" % v).digest(),
        )
        for v, (lid, eid) in enumerate(positions)
    ]
    return stored.SchemaLocator(info=index[-1], index=index).SerializeToString()


class _Ledgers:
    def __init__(self, entries: dict[tuple[int, int], bytes]) -> None:
        self.entries = entries

    async def read(self, ledger_id: int, entry_id: int) -> bytes:
        return self.entries[(ledger_id, entry_id)]


def test_locator_and_entry_decode() -> None:
    assert decode_pulsar_locator(_locator([(7, 0), (9, 0)])) == [(0, 7, 0), (1, 9, 0)]
    schema, deleted = decode_pulsar_schema_entry(_entry(_JSON, b'{"type":"record"}', props={"k": "v"}))
    assert schema == SchemaInfo(_JSON, b'{"type":"record"}', "", (("k", "v"),), 1234) and not deleted
    with pytest.raises(PulsarStoredSchemaError):
        decode_pulsar_locator(b"\xff\xff")
    with pytest.raises(PulsarStoredSchemaError, match="no wire value"):
        decode_pulsar_schema_entry(_entry(21, b""))  # stored 22: EXTERNAL


@pytest.mark.trio
async def test_pulsars_versions_are_served_and_never_rewritten() -> None:
    ledgers = _Ledgers({(7, 0): _entry(_STRING, b""), (9, 0): _entry(_STRING, b"", props={"v": "2"})})
    async with open_metadata_store("memory://pulsar-schemas") as store:
        await store.create(PATH, _locator([(7, 0), (9, 0)]), make_parents=True)
        registry = SchemaRegistry(store, ledgers.read)
        versions = await registry.versions(TOPIC)
        assert [(v.type, v.data) for v in versions] == [(_STRING, b""), (_STRING, b"")]
        assert await registry.get_or_create(TOPIC, SchemaInfo(_STRING, b""), "FULL") == 0
        with pytest.raises(IncompatibleSchemaError, match="Apache Pulsar"):
            await registry.get_or_create(TOPIC, SchemaInfo(_STRING, b"other"), "ALWAYS_COMPATIBLE")
        data, _ = await store.get(PATH)
        assert bytes(data) == _locator([(7, 0), (9, 0)])


@pytest.mark.trio
async def test_a_deletion_marker_leaves_no_schema_and_magnetars_own_form_still_reads() -> None:
    ledgers = _Ledgers({(7, 0): _entry(_STRING, b""), (8, 0): _entry(_STRING, b"", deleted=True)})
    async with open_metadata_store("memory://pulsar-schemas-deleted") as store:
        await store.create(PATH, _locator([(7, 0), (8, 0)]), make_parents=True)
        assert await SchemaRegistry(store, ledgers.read).versions(TOPIC) == []
        with pytest.raises(PulsarStoredSchemaError):
            await SchemaRegistry(store).versions(TOPIC)  # no way to read the ledgers
        await store.delete(PATH)
        await store.create(PATH, json.dumps({"versions": [SchemaInfo(_JSON, b"{}").to_json()]}).encode())
        assert [v.type for v in await SchemaRegistry(store, ledgers.read).versions(TOPIC)] == [_JSON]
