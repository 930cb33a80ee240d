"""Topics with a schema are read as typed columns, mapped as pulsar-spark maps them: primitive schemas
as a typed value, JSON and Avro records as their fields (nested records, arrays, maps, logical types),
KeyValue as key and value columns."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct
from typing import Any

import _pulsar
import fastavro
import pulsar
import pytest
from pulsar.schema import AvroSchema, Boolean, Double, Integer, JsonSchema, Long, Record, String

from tests.spark.spark_harness import SparkEnv, unique

pytestmark = pytest.mark.slow


class Reading(Record):
    sensor = String()
    count = Integer()
    total = Long()
    level = Double()
    ok = Boolean()


def _produce(env: SparkEnv, topic: str, schema, n: int) -> None:
    client = pulsar.Client(env.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(
            topic, schema=schema, batching_enabled=True, batching_max_messages=4, batching_max_publish_delay_ms=10
        )
        for i in range(n):
            producer.send_async(
                Reading(sensor=f"s{i % 2}", count=i, total=i * 10**10, level=i / 2, ok=i % 2 == 0),
                None,
                partition_key=f"k{i}",
            )
        producer.flush()
        producer.close()
    finally:
        client.close()


@pytest.mark.parametrize("kind", ["json", "avro"])
def test_schema_topic_reads_as_typed_columns(spark_env: SparkEnv, kind: str) -> None:
    topic = f"persistent://public/default/{unique('schema-' + kind)}"
    schema = JsonSchema(Reading) if kind == "json" else AvroSchema(Reading)
    _produce(spark_env, topic, schema, 10)

    df = spark_env.source(spark_env.spark.read, topic=topic).load()
    types = dict(df.dtypes)
    assert "value" not in types
    assert (types["sensor"], types["count"], types["total"], types["level"], types["ok"]) == (
        "string",
        "int",
        "bigint",
        "double",
        "boolean",
    )
    assert types["__key"] == "string" and "__messageId" in types
    rows = sorted(df.collect(), key=lambda r: r["count"])
    assert [r["count"] for r in rows] == list(range(10))
    assert rows[3]["sensor"] == "s1" and rows[3]["total"] == 3 * 10**10 and rows[3]["level"] == 1.5
    assert rows[4]["ok"] is True and rows[4]["__key"] == "k4"

    # streaming gives the same columns; decodeSchema=false keeps the raw value
    name = f"schema_{kind}_{unique('q').replace('-', '_')}"
    q = (
        spark_env.source(spark_env.spark.readStream, topic=topic, startingOffsets="earliest")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", spark_env.checkpoint())
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    streamed = spark_env.spark.sql(f"select sensor, count from {name}").collect()
    assert sorted(r["count"] for r in streamed) == list(range(10))
    raw = spark_env.source(spark_env.spark.read, topic=topic, decodeSchema="false").load()
    assert "value" in dict(raw.dtypes) and raw.count() == 10


def test_dedup_cursor_name_is_refused_as_subscription(spark_env: SparkEnv) -> None:
    with pytest.raises(Exception, match="deduplication"):
        spark_env.source(spark_env.spark.readStream, topic=unique("t"), subscriptionName="pulsar.dedup").load()


class _Encoded(pulsar.schema.Schema):
    """A producer schema for values the test encodes itself."""

    def __init__(self, type_name: str, definition: Any = None) -> None:
        super().__init__(bytes, getattr(_pulsar.SchemaType, type_name), definition, type_name)

    def encode(self, obj: bytes) -> bytes:
        return obj

    def decode(self, data: bytes) -> bytes:
        return data


def _send(env: SparkEnv, topic: str, values: list[bytes], schema: Any = None) -> None:
    client = pulsar.Client(env.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        kwargs = {"schema": schema} if schema is not None else {}
        producer = client.create_producer(topic, batching_enabled=False, **kwargs)
        for v in values:
            producer.send(v)
    finally:
        client.close()


def _upload(env: SparkEnv, topic: str, type_name: str, definition: str = "", **props: str) -> None:
    env.admin(
        "POST",
        f"/admin/v2/schemas/public/default/{topic}/schema",
        {"type": type_name, "schema": definition, "properties": props},
    )


def test_primitive_schemas_read_as_typed_values(spark_env: SparkEnv) -> None:
    # the Python client registers STRING itself; the other primitive types are uploaded through
    # the admin REST (its C++ core sends no schema for them), then the values sent as bytes
    topic = unique("string")
    _send(spark_env, topic, ["héllo".encode(), b"x"], _Encoded("STRING"))
    df = spark_env.source(spark_env.spark.read, topic=topic).load()
    assert dict(df.dtypes)["value"] == "string" and sorted(r["value"] for r in df.collect()) == ["héllo", "x"]
    cases: list[tuple[str, str, list[bytes], list[Any]]] = [
        ("INT64", "bigint", [struct.pack(">q", v) for v in (-3, 2**40)], [-3, 2**40]),
        ("DOUBLE", "double", [struct.pack(">d", v) for v in (1.5, -0.25)], [-0.25, 1.5]),
        ("INT16", "smallint", [struct.pack(">h", -7)], [-7]),
        ("BOOLEAN", "boolean", [b"\x01"], [True]),
        (
            "TIMESTAMP",
            "timestamp",
            [struct.pack(">q", 1_709_254_800_000)],
            [dt.datetime(2024, 3, 1, 1, 0, tzinfo=dt.UTC)],
        ),
        ("DATE", "date", [struct.pack(">q", 1_709_251_200_000)], [dt.date(2024, 3, 1)]),
    ]
    for type_name, spark_type, payloads, expected in cases:
        topic = unique(type_name.lower())
        _upload(spark_env, topic, type_name)
        _send(spark_env, topic, payloads)
        df = spark_env.source(spark_env.spark.read, topic=topic).load()
        assert dict(df.dtypes)["value"] == spark_type, type_name
        values = sorted(r["value"] for r in df.collect())
        values = [v.astimezone(dt.UTC) if isinstance(v, dt.datetime) else v for v in values]
        assert values == expected, type_name


ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
                },
            },
        },
        {"name": "attrs", "type": {"type": "map", "values": "string"}},
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
            "default": None,
        },
    ],
}


def test_nested_avro_and_json_records_and_logical_types(spark_env: SparkEnv) -> None:
    at = dt.datetime(2024, 3, 1, 1, 0, tzinfo=dt.UTC)
    record = {
        "id": "5b7c6d2e-0000-4000-8000-000000000001",
        "price": decimal.Decimal("12.34"),
        "day": dt.date(2024, 3, 1),
        "at": at,
        "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}],
        "attrs": {"gift": "yes"},
        "buyer": {"name": "ann", "vip": True},
    }
    topic = unique("avro-nested")
    client = pulsar.Client(spark_env.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(topic, schema=AvroSchema(None, schema_definition=ORDER))
        producer.send(record)
    finally:
        client.close()
    json_topic = unique("json-nested")
    as_json = {**record, "price": "12.34", "day": 19783, "at": 1_709_254_800_000}
    _send(spark_env, json_topic, [json.dumps(as_json).encode()], _Encoded("JSON", ORDER))
    for t in (topic, json_topic):
        df = spark_env.source(spark_env.spark.read, topic=t).load()
        types = dict(df.dtypes)
        assert types["price"] == "decimal(10,2)" and types["day"] == "date" and types["at"] == "timestamp"
        assert types["lines"] == "array<struct<sku:string,qty:int>>" and types["attrs"] == "map<string,string>"
        assert types["buyer"] == "struct<name:string,vip:boolean>" and types["id"] == "string"
        row = df.collect()[0]
        assert row["price"] == decimal.Decimal("12.34") and row["day"] == dt.date(2024, 3, 1), t
        assert row["at"].astimezone(dt.UTC) == at and row["id"] == record["id"], t
        assert [(x["sku"], x["qty"]) for x in row["lines"]] == [("a", 2), ("b", 1)], t
        assert row["attrs"] == {"gift": "yes"} and row["buyer"]["vip"] is True, t


def test_key_value_schema_reads_as_key_and_value_columns(spark_env: SparkEnv) -> None:
    buyer = ORDER["fields"][6]["type"][1]  # type: ignore[index]
    topic = unique("kv")
    _upload(
        spark_env,
        topic,
        "KEY_VALUE",
        json.dumps({"key": "", "value": buyer}),
        **{"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "INLINE"},
    )
    value = io.BytesIO()
    fastavro.schemaless_writer(value, fastavro.parse_schema(buyer), {"name": "bo", "vip": False})
    payload = struct.pack(">i", 3) + b"k-1" + struct.pack(">i", len(value.getvalue())) + value.getvalue()
    _send(spark_env, topic, [payload])
    df = spark_env.source(spark_env.spark.read, topic=topic).load()
    types = dict(df.dtypes)
    assert types["key"] == "string" and types["value"] == "struct<name:string,vip:boolean>"
    row = df.collect()[0]
    assert row["key"] == "k-1" and row["value"]["name"] == "bo" and row["value"]["vip"] is False
