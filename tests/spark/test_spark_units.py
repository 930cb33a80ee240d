"""Pure parts of the pulsar-spark compatibility (no Spark session, no broker): option checks,
pass-through keys, pulsar-spark's offsets, key hashes, schema mapping and the extra's contents."""

from __future__ import annotations

import datetime as dt
import decimal
import importlib.metadata
import io
import json
import re
import struct

import fastavro
import pytest

from protocols.pulsar import MessageIdData
from sinks.spark._decode import ValueSchema, avro_type, ddl_type, decoder, value_schema_from_info
from sinks.spark._offsets import EARLIEST, Position, message_id_position, parse_starting_offsets
from sinks.spark._options import SinkOptions, SourceOptions
from sinks.spark._pipelines import checkpoint_subscription, parse_duration
from sinks.spark._sink import java_string_hash, murmur3_hash

BASE = {"service.url": "pulsar://127.0.0.1:1", "admin.url": "http://127.0.0.1:1", "topic": "t"}


def test_the_spark_extra_brings_the_official_client_and_fastavro() -> None:
    reqs = importlib.metadata.requires("magnetar") or []
    spark = {re.split(r"[<>=\[;\s]", r, maxsplit=1)[0].lower() for r in reqs if 'extra == "spark"' in r}
    assert {"pulsar-client", "fastavro", "pyarrow", "pyspark"} <= spark


def test_misspelt_and_unknown_options_fail_naming_the_right_one() -> None:
    with pytest.raises(ValueError, match=r"maxEntriesPerTriger.*did you mean maxEntriesPerTrigger"):
        SourceOptions.parse({**BASE, "maxEntriesPerTriger": "5"})
    with pytest.raises(ValueError, match=r"producerNamePrefx.*producerNamePrefix"):
        SinkOptions.parse({"service.url": "pulsar://x:1", "topic": "t", "producerNamePrefx": "p"})
    with pytest.raises(ValueError, match="endingOffsets and endingTime apply to batch"):
        SourceOptions.parse({**BASE, "endingOffsets": "latest"})
    with pytest.raises(ValueError, match="startingOffsets or startingTime"):
        SourceOptions.parse({**BASE, "startingOffsets": "earliest", "startingTime": "5"}, batch=True)
    with pytest.raises(ValueError, match='use "topics"'):
        SourceOptions.parse({**BASE, "topic": "a,b"})


def test_pulsar_keys_are_applied_or_refused_never_dropped() -> None:
    opts = SourceOptions.parse(
        {
            **BASE,
            "pulsar.client.operationTimeoutMs": "15000",
            "pulsar.client.numIoThreads": "2",
            "pulsar.reader.receiverQueueSize": "50",
            "pulsar.admin.requestTimeoutMs": "9000",
        }
    )
    assert dict(opts.client_kwargs) == {"operation_timeout_seconds": 15, "io_threads": 2}
    assert dict(opts.reader_kwargs) == {"receiver_queue_size": 50}
    assert opts.admin_timeout_s == 9.0
    with pytest.raises(ValueError, match=r"not a key of Pulsar's client configuration.*operationTimeoutMs"):
        SourceOptions.parse({**BASE, "pulsar.client.operationTimeout": "1"})
    with pytest.raises(ValueError, match="cannot apply it"):
        SourceOptions.parse({**BASE, "pulsar.client.maxLookupRedirects": "3"})
    with pytest.raises(ValueError, match="compacted view"):
        SourceOptions.parse({**BASE, "pulsar.reader.readCompacted": "true"})
    with pytest.raises(ValueError, match="expected an integer"):
        SourceOptions.parse({**BASE, "pulsar.reader.receiverQueueSize": "many"})
    with pytest.raises(ValueError, match="apply to the sink"):
        SourceOptions.parse({**BASE, "pulsar.producer.sendTimeoutMs": "1"})
    sink = SinkOptions.parse(
        {
            "service.url": "pulsar://x:1",
            "topic": "t",
            "pulsar.producer.compressionType": "lz4",
            "pulsar.producer.hashingScheme": "Murmur3_32Hash",
        }
    )
    assert dict(sink.producer_kwargs) == {"compression_type": "LZ4"} and sink.hashing_scheme == "Murmur3_32Hash"
    with pytest.raises(ValueError, match="producerNamePrefix"):
        SinkOptions.parse({"service.url": "pulsar://x:1", "topic": "t", "pulsar.producer.producerName": "p"})
    with pytest.raises(ValueError, match="BoostHash"):
        SinkOptions.parse({"service.url": "pulsar://x:1", "topic": "t", "pulsar.producer.hashingScheme": "BoostHash"})


def test_subscription_options() -> None:
    assert SourceOptions.parse(BASE).subscription_mode == "auto"
    named = SourceOptions.parse({**BASE, "predefinedSubscription": "etl"})
    assert (named.subscription_mode, named.subscription_name) == ("named", "etl")
    assert SourceOptions.parse({**BASE, "durableSubscription": "false"}).subscription_mode == "off"
    assert SourceOptions.parse({**BASE, "subscriptionPrefix": "team-a"}).subscription_prefix == "team-a"
    with pytest.raises(ValueError, match="contradicts"):
        SourceOptions.parse({**BASE, "durableSubscription": "false", "subscriptionName": "x"})


def _mid_bytes(ledger: int, entry: int, partition: int = -1, batch: int = -1) -> list[int]:
    raw = MessageIdData(ledgerId=ledger, entryId=entry, partition=partition, batch_index=batch).SerializeToString()
    return [b - 256 if b > 127 else b for b in raw]  # as json4s writes Array[Byte]: signed


def test_pulsar_spark_offsets_and_times() -> None:
    # pulsar-spark's README example: ledger 11, entry 101, partition 1, batch 1
    assert message_id_position([8, 11, 16, 101, 24, 1, 32, 1]) == Position(11, 101, 1)
    earliest = _mid_bytes(2**64 - 1, 2**64 - 1)
    latest = _mid_bytes(2**63 - 1, 2**63 - 1)
    assert message_id_position(earliest) == EARLIEST and message_id_position(latest) == "latest"
    text = json.dumps({"persistent://public/default/a": _mid_bytes(300, 2**40), "b": {"ledger": 1, "entry": 2}})
    assert parse_starting_offsets(text) == {
        "persistent://public/default/a": Position(300, 2**40, 0),
        "b": Position(1, 2, 0),
    }
    with pytest.raises(ValueError, match="MessageId"):
        message_id_position([1, 2, 3, 4])
    opts = SourceOptions.parse({**BASE, "startingTime": '{"t": 1000}', "endingTime": "2000"}, batch=True)
    assert opts.starting_times == (("t", 1000),) and opts.ending_time == 2000


def test_key_hashes_match_the_java_client() -> None:
    # String.hashCode(): "hello" is 99162322; "polygenelubricants" overflows to Integer.MIN_VALUE
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == 0  # MIN_VALUE & MAX_VALUE
    assert java_string_hash("\U0001f600") == (0xD83D * 31 + 0xDE00) & 0x7FFFFFFF  # a surrogate pair
    # Murmur3 32 (seed 0) of "hello": 0x248bfa47
    assert murmur3_hash("hello") == 0x248BFA47 & 0x7FFFFFFF


def _avro(definition: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(definition), record)
    return buf.getvalue()


NESTED = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {
            "name": "buyer",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Buyer",
                    "fields": [{"name": "name", "type": "string"}, {"name": "vip", "type": "boolean"}],
                },
            ],
        },
        {"name": "n", "type": ["int", "long"]},
        {"name": "either", "type": ["null", "string", "long"]},
    ],
}


def test_avro_records_map_to_nested_spark_types_and_decode() -> None:
    vs = value_schema_from_info({"type": "AVRO", "data": json.dumps(NESTED), "properties": {}})
    assert isinstance(vs, ValueSchema)
    types = {n: ddl_type(t) for n, t in vs.columns}
    assert types == {
        "id": "STRING",
        "price": "DECIMAL(10, 2)",
        "day": "DATE",
        "at": "TIMESTAMP",
        "tags": "ARRAY<STRING>",
        "attrs": "MAP<STRING, BIGINT>",
        "buyer": "STRUCT<`name`: STRING, `vip`: BOOLEAN>",
        "n": "BIGINT",
        "either": "STRUCT<member0: STRING, member1: BIGINT>",
    }
    at = dt.datetime(2024, 3, 1, 1, 0, tzinfo=dt.UTC)
    record = {
        "id": "5b7c6d2e-0000-4000-8000-000000000001",
        "price": decimal.Decimal("12.34"),
        "day": dt.date(2024, 3, 1),
        "at": at,
        "tags": ["a", "b"],
        "attrs": {"x": 1},
        "buyer": {"name": "ann", "vip": True},
        "n": 7,
        "either": 5,
    }
    row = decoder(vs)(_avro(NESTED, record), None)
    got = dict(zip([n for n, _ in vs.columns], row, strict=True))
    assert got["id"] == record["id"] and got["price"] == decimal.Decimal("12.34")
    assert got["day"] == dt.date(2024, 3, 1) and got["at"] == at
    assert got["tags"] == ["a", "b"] and got["attrs"] == [("x", 1)]
    assert got["buyer"] == {"name": "ann", "vip": True} and got["n"] == 7
    assert got["either"] == {"member0": None, "member1": 5}
    assert decoder(vs)(b"\xff\xff", None) == tuple(None for _ in vs.columns)  # Rule 4: nulls, no failure


def test_primitive_key_value_and_refused_schemas() -> None:
    vs = value_schema_from_info({"type": "INT64", "data": "", "properties": {}})
    assert vs is not None and [ddl_type(t) for _, t in vs.columns] == ["BIGINT"]
    assert decoder(vs)(struct.pack(">q", -5), None) == (-5,)
    ts = value_schema_from_info({"type": "TIMESTAMP", "data": "", "properties": {}})
    assert ts is not None and decoder(ts)(struct.pack(">q", 1000), None)[0] == dt.datetime(
        1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC
    )
    assert value_schema_from_info({"type": "BYTES", "data": "", "properties": {}}) is None
    kv_info = {
        "type": "KEY_VALUE",
        "data": json.dumps({"key": "", "value": NESTED["fields"][6]["type"][1]}),
        "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "INLINE"},
    }
    kv = value_schema_from_info(kv_info)
    assert kv is not None and [n for n, _ in kv.columns] == ["key", "value"]
    buyer = _avro(NESTED["fields"][6]["type"][1], {"name": "bo", "vip": False})
    inline = struct.pack(">i", 2) + b"k1" + struct.pack(">i", len(buyer)) + buyer
    assert decoder(kv)(inline, None) == ("k1", {"name": "bo", "vip": False})
    with pytest.raises(ValueError, match="decodeSchema=false"):
        value_schema_from_info({"type": "PROTOBUF_NATIVE", "data": "x", "properties": {}})
    recursive = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(ValueError, match="contains itself"):
        avro_type(recursive)


def test_checkpoint_subscription_and_durations(tmp_path) -> None:
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    (offsets / "0").write_text(
        'v1\n{"batchWatermarkMs":0}\n{"t": {"ledger": 1, "entry": 0, "batch": 0}, '
        '"__subscription": "magnetar-spark-abc"}\n'
    )
    assert checkpoint_subscription(tmp_path) == "magnetar-spark-abc"
    with pytest.raises(ValueError, match="not a streaming checkpoint"):
        checkpoint_subscription(tmp_path / "nope")
    assert parse_duration("90s") == 90 and parse_duration("2h") == 7200 and parse_duration("7d") == 7 * 86400


def test_streaming_options_that_need_pyspark_4_2_are_refused_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    from sinks.spark import _compat
    from sinks.spark._source import MagnetarStreamReader, check_streaming_support

    limited = SourceOptions.parse({**BASE, "subscriptionName": "q1", "maxEntriesPerTrigger": "5"})
    auto = SourceOptions.parse(BASE)
    if _compat.ADMISSION_CONTROL:
        check_streaming_support(limited)
        check_streaming_support(auto)
        # PySpark's runner turns admission control on for a latestOffset that takes parameters
        assert len(inspect.signature(MagnetarStreamReader(auto).latestOffset).parameters) == 2
    monkeypatch.setattr(_compat, "ADMISSION_CONTROL", False)
    with pytest.raises(ValueError, match=r"maxEntriesPerTrigger needs PySpark 4\.2 or newer \(this is PySpark 4"):
        check_streaming_support(limited)
    with pytest.raises(ValueError, match=r"maxBytesPerTrigger needs PySpark 4\.2"):
        check_streaming_support(SourceOptions.parse({**BASE, "subscriptionName": "q1", "maxBytesPerTrigger": "9"}))
    with pytest.raises(ValueError, match=r"needs subscriptionName \(one name per query\) or durableSubscription=false"):
        MagnetarStreamReader(auto)
    check_streaming_support(SourceOptions.parse({**BASE, "subscriptionName": "q1"}))
    check_streaming_support(SourceOptions.parse({**BASE, "durableSubscription": "false"}))
