"""Topics with a JSON or Avro schema are read as typed columns (the record's fields)."""

from __future__ import annotations

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
        producer = client.create_producer(topic, schema=schema, batching_enabled=True,
                                          batching_max_messages=4, batching_max_publish_delay_ms=10)
        for i in range(n):
            producer.send_async(Reading(sensor=f"s{i % 2}", count=i, total=i * 10**10, level=i / 2, ok=i % 2 == 0),
                                None, partition_key=f"k{i}")
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
    assert (types["sensor"], types["count"], types["total"], types["level"], types["ok"]) == \
        ("string", "int", "bigint", "double", "boolean")
    assert types["__key"] == "string" and "__messageId" in types
    rows = sorted(df.collect(), key=lambda r: r["count"])
    assert [r["count"] for r in rows] == list(range(10))
    assert rows[3]["sensor"] == "s1" and rows[3]["total"] == 3 * 10**10 and rows[3]["level"] == 1.5
    assert rows[4]["ok"] is True and rows[4]["__key"] == "k4"

    # streaming gives the same columns; decodeSchema=false keeps the raw value
    name = f"schema_{kind}_{unique('q').replace('-', '_')}"
    q = (spark_env.source(spark_env.spark.readStream, topic=topic, startingOffsets="earliest").load()
         .writeStream.format("memory").queryName(name).option("checkpointLocation", spark_env.checkpoint())
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    streamed = spark_env.spark.sql(f"select sensor, count from {name}").collect()
    assert sorted(r["count"] for r in streamed) == list(range(10))
    raw = spark_env.source(spark_env.spark.read, topic=topic, decodeSchema="false").load()
    assert "value" in dict(raw.dtypes) and raw.count() == 10


def test_dedup_cursor_name_is_refused_as_subscription(spark_env: SparkEnv) -> None:
    with pytest.raises(Exception, match="deduplication"):
        spark_env.source(spark_env.spark.readStream, topic=unique("t"), subscriptionName="pulsar.dedup").load()
