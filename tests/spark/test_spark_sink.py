"""The exactly-once sink (streaming and batch) with the columns pulsar-spark writes, and the
source's durable subscription."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from sinks.spark._sink import java_string_hash
from tests.spark.spark_harness import SINK_NAMESPACE, SparkEnv, produce, trigger_limit, unique, values_of

pytestmark = pytest.mark.slow


def _msgs(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def test_sink_exactly_once_with_task_failure_and_rerun(spark_env: SparkEnv) -> None:
    src = unique("sink-in")
    dst = f"persistent://{SINK_NAMESPACE}/{unique('sink-out')}"
    produce(spark_env.service_url, src, _msgs("s", 40), keys=lambda i: f"k{i % 3}")
    ck = spark_env.checkpoint()

    def run() -> None:
        df = spark_env.source(
            spark_env.spark.readStream, topic=src, startingOffsets="earliest", **trigger_limit(maxEntriesPerTrigger=20)
        ).load()
        q = (
            df.select("value", "__key", "__messageProperties")
            .writeStream.format("magnetar")
            .option("service.url", spark_env.service_url)
            .option("admin.url", spark_env.admin_url)
            .option("topic", dst)
            .option("failOnceAfterRows", "7")  # the first attempt of every task dies after 7 sent rows
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None

    def written() -> list:
        return spark_env.source(spark_env.spark.read, topic=dst).load().collect()

    run()
    rows = written()
    assert sorted(values_of(rows)) == _msgs("s", 40), "retried tasks duplicated or lost messages"
    assert {r["__key"] for r in rows} == {"k0", "k1", "k2"}
    assert all(r["__messageProperties"].get("i") is not None for r in rows)

    # Forget that the last batch was committed: the restarted query runs it again, re-sending
    # every message of that batch; deduplication drops them all.
    commits = sorted(Path(ck, "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    Path(ck, "commits", f".{last.name}.crc").unlink(missing_ok=True)
    run()
    assert sorted(values_of(written())) == _msgs("s", 40), "the re-run batch was written twice"


def test_durable_subscription_follows_commits(spark_env: SparkEnv) -> None:
    topic = unique("sub")
    produce(spark_env.service_url, topic, _msgs("d", 30))
    df = spark_env.source(
        spark_env.spark.readStream,
        topic=topic,
        startingOffsets="earliest",
        subscriptionName="spark-sub",
        **trigger_limit(maxEntriesPerTrigger=10),
    ).load()
    name = topic.replace("-", "_")
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", spark_env.checkpoint())
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()
        # commit(end) of a batch runs when the next one is planned: let one more trigger pass
        produce(spark_env.service_url, topic, _msgs("e", 1))
        q.processAllAvailable()
    finally:
        q.stop()
    stats = spark_env.admin("GET", f"/admin/v2/persistent/public/default/{topic}/internalStats")
    cursor = stats["cursors"]["spark-sub"]
    ledger, entry = (int(x) for x in cursor["markDeletePosition"].split(":"))
    # everything up to the 30th entry (ledger 1, entry 9 with 20-entry ledgers) is acknowledged
    assert (ledger, entry) >= (stats["ledgers"][1]["ledgerId"], 9), cursor


@pytest.mark.pyspark_oldest
def test_batch_write_with_metadata_topic_column_and_registered_schemas(spark_env: SparkEnv) -> None:
    a = f"persistent://{SINK_NAMESPACE}/{unique('route-a')}"
    b = f"persistent://{SINK_NAMESPACE}/{unique('route-b')}"
    at = dt.datetime(2024, 3, 1, 1, 0, tzinfo=dt.UTC)
    rows = [(a if i % 2 else b, f"k{i}", at + dt.timedelta(seconds=i), {"p": str(i)}, i, f"n{i}") for i in range(10)]
    df = spark_env.spark.createDataFrame(
        rows,
        "__topic STRING, __key STRING, __eventTime TIMESTAMP, "
        "__messageProperties MAP<STRING, STRING>, id BIGINT, name STRING",
    )
    (
        df.write.format("magnetar")
        .option("service.url", spark_env.service_url)
        .option("admin.url", spark_env.admin_url)
        .mode("append")
        .save()
    )
    schema = spark_env.admin("GET", f"/admin/v2/schemas/{SINK_NAMESPACE}/{a.rsplit('/', 1)[1]}/schema")
    assert schema["type"] == "AVRO" and json.loads(schema["data"])["name"] == "topLevelRecord"
    got = spark_env.source(spark_env.spark.read, topic=a).load().collect()
    assert sorted(r["id"] for r in got) == [1, 3, 5, 7, 9]
    row = next(r for r in got if r["id"] == 3)
    assert row["name"] == "n3" and row["__key"] == "k3" and row["__messageProperties"] == {"p": "3"}
    assert row["__eventTime"].astimezone(dt.UTC) == at + dt.timedelta(seconds=3)
    assert spark_env.source(spark_env.spark.read, topic=b).load().count() == 5
    for t in (a, b):  # deduplication is a policy of each topic written
        assert spark_env.admin("GET", f"/admin/v2/persistent/{t.split('://')[1]}/deduplicationEnabled") is True

    # a struct value as JSON, and a string value with Pulsar's STRING schema
    c = f"persistent://{SINK_NAMESPACE}/{unique('json')}"
    structs = spark_env.spark.createDataFrame(
        [((i, [f"t{i}"]),) for i in range(3)], "value STRUCT<n: INT, tags: ARRAY<STRING>>"
    )
    (
        structs.write.format("magnetar")
        .option("service.url", spark_env.service_url)
        .option("admin.url", spark_env.admin_url)
        .option("topic", c)
        .option("valueSchema", "json")
        .mode("append")
        .save()
    )
    assert spark_env.admin("GET", f"/admin/v2/schemas/{SINK_NAMESPACE}/{c.rsplit('/', 1)[1]}/schema")["type"] == "JSON"
    back = spark_env.source(spark_env.spark.read, topic=c).load()
    assert sorted((r["n"], list(r["tags"])) for r in back.collect()) == [(i, [f"t{i}"]) for i in range(3)]
    d = f"persistent://{SINK_NAMESPACE}/{unique('str')}"
    (
        spark_env.spark.createDataFrame([("hi",)], "value STRING")
        .write.format("magnetar")
        .option("service.url", spark_env.service_url)
        .option("admin.url", spark_env.admin_url)
        .option("topic", d)
        .mode("append")
        .save()
    )
    back = spark_env.source(spark_env.spark.read, topic=d).load()
    assert dict(back.dtypes)["value"] == "string" and back.collect()[0]["value"] == "hi"


def test_keyed_rows_go_to_the_partition_the_java_client_picks(spark_env: SparkEnv) -> None:
    name = unique("keys")
    topic = f"persistent://{SINK_NAMESPACE}/{name}"
    spark_env.admin("PUT", f"/admin/v2/persistent/{SINK_NAMESPACE}/{name}/partitions", 4)
    df = spark_env.spark.createDataFrame(
        [(f"key-{i}", f"v{i}".encode()) for i in range(32)], "__key STRING, value BINARY"
    )
    (
        df.write.format("magnetar")
        .option("service.url", spark_env.service_url)
        .option("admin.url", spark_env.admin_url)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    rows = spark_env.source(spark_env.spark.read, topic=topic).load().collect()
    assert len(rows) == 32
    placed = {r["__key"]: int(r["__topic"].rsplit("-partition-", 1)[1]) for r in rows}
    assert placed == {f"key-{i}": java_string_hash(f"key-{i}") % 4 for i in range(32)}
    assert len(set(placed.values())) > 1
