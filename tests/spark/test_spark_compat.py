"""What a pulsar-spark user meets, in Spark local mode against standalone: the workers' Python set
or checked by register(), errors instead of silence (misspelt options, pulsar.* keys, a missing
topic, topics with different schemas), topicsPattern with schemas, and pulsar-spark's offsets
(serialized MessageIds), endingTime and per-topic startingTime."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import _pulsar
import pulsar
import pytest
from pulsar.schema import Schema

from protocols.pulsar import MessageIdData
from sinks.spark import register
from tests.spark.spark_harness import SparkEnv, produce, unique, values_of
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


class Encoded(Schema):
    """A producer schema for values the test encodes itself."""

    def __init__(self, type_name: str, definition: Any = None) -> None:
        super().__init__(bytes, getattr(_pulsar.SchemaType, type_name), definition, type_name)

    def encode(self, obj: bytes) -> bytes:
        return obj

    def decode(self, data: bytes) -> bytes:
        return data


RECORD = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}


def _produce_json(env: SparkEnv, topic: str, values: list[int]) -> None:
    client = pulsar.Client(env.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(topic, schema=Encoded("JSON", RECORD), batching_enabled=False)
        for v in values:
            producer.send(json.dumps({"n": v}).encode())
    finally:
        client.close()


def _error_of(action: Any) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def test_register_sets_or_checks_the_workers_python(spark_env: SparkEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    sc = spark_env.spark.sparkContext
    saved = sc.pythonExec
    try:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
        sc.pythonExec = "python3"  # what PySpark uses when PYSPARK_PYTHON is not set
        register(spark_env.spark)
        assert sc.pythonExec == sys.executable
        monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")  # a Python without the spark extra
        sc.pythonExec = "/usr/bin/python3"
        error = _error_of(lambda: register(spark_env.spark))
        assert "PYSPARK_PYTHON" in error and "pulsar" in error and sys.executable in error
    finally:
        monkeypatch.setenv("PYSPARK_PYTHON", saved)
        sc.pythonExec = saved
        register(spark_env.spark)
    topic = unique("py")
    produce(spark_env.service_url, topic, [b"a", b"b"])
    assert spark_env.source(spark_env.spark.read, topic=topic).load().count() == 2


def test_errors_instead_of_silence(spark_env: SparkEnv) -> None:
    topic = unique("err")
    produce(spark_env.service_url, topic, [b"x"])
    assert "maxEntriesPerTrigger" in _error_of(
        lambda: spark_env.source(spark_env.spark.readStream, topic=topic, maxEntriesPerTriger=5).load()
    )
    assert "not a key of Pulsar's client configuration" in _error_of(
        lambda: spark_env.source(spark_env.spark.read, topic=topic, **{"pulsar.client.operationTimeout": "1000"}).load()
    )
    assert "cannot apply" in _error_of(
        lambda: spark_env.source(spark_env.spark.read, topic=topic, **{"pulsar.client.maxLookupRedirects": "3"}).load()
    )
    # keys the client applies pass through
    ok = spark_env.source(
        spark_env.spark.read,
        topic=topic,
        **{"pulsar.client.operationTimeoutMs": "20000", "pulsar.reader.receiverQueueSize": "10"},
    ).load()
    assert values_of(ok.collect()) == [b"x"]
    missing = unique("missing")
    assert "does not exist" in _error_of(lambda: spark_env.source(spark_env.spark.read, topic=missing).load())
    assert "does not exist" in _error_of(
        lambda: spark_env.source(spark_env.spark.readStream, topics=f"{topic},{missing}").load()
    )
    sink = spark_env.spark.createDataFrame([(b"v",)], "value BINARY")
    assert "producerNamePrefix" in _error_of(
        lambda: (
            sink.write.format("magnetar")
            .option("service.url", spark_env.service_url)
            .option("topic", topic)
            .option("producerNamePrefx", "p")
            .mode("append")
            .save()
        )
    )
    # Python data sources take append (or overwrite, refused here), not Spark's default errorifexists
    assert "Append" in _error_of(
        lambda: sink.write.format("magnetar").option("service.url", spark_env.service_url).option("topic", topic).save()
    )


@pytest.mark.timeout(600)
def test_waiting_for_a_topic_that_does_not_exist_yet(spark_env: SparkEnv) -> None:
    topic = unique("later")
    name = topic.replace("-", "_")

    def start() -> Any:
        df = spark_env.source(
            spark_env.spark.readStream, topic=topic, startingOffsets="earliest", waitingForNonExistedTopic="true"
        ).load()
        return (
            df.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", spark_env.checkpoint())
            .trigger(processingTime="300 milliseconds")
            .start()
        )

    q = start()
    try:
        # a few triggers on a topic that is not there (the query runs, reading nothing)
        wait_until(lambda: len(q.recentProgress) >= 2 or q.exception() is not None, "two triggers", timeout_s=60.0)
        if q.exception() is not None and "connect back" in str(q.exception()):
            # PySpark gives a planner process 10 s to start (no setting); a loaded machine misses it
            q = start()
            wait_until(lambda: len(q.recentProgress) >= 2 or q.exception() is not None, "two triggers", timeout_s=60.0)
        assert q.exception() is None
        produce(spark_env.service_url, topic, [b"first", b"second"])
        wait_until(
            lambda: spark_env.spark.sql(f"select count(*) from {name}").collect()[0][0] == 2,
            "the rows of the topic created after the query started",
            timeout_s=60.0,
        )
    finally:
        q.stop()
    # a batch read waits for the topic, as pulsar-spark's does
    late = unique("late")
    timer = threading.Timer(2.0, produce, (spark_env.service_url, late, [b"z"]))
    timer.start()
    try:
        rows = spark_env.source(spark_env.spark.read, topic=late, waitingForNonExistedTopic="true").load().collect()
    finally:
        timer.join()
    assert values_of(rows) == [b"z"]


def test_topics_with_different_schemas_and_patterns(spark_env: SparkEnv) -> None:
    prefix = unique("sch")
    a, b, c = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    _produce_json(spark_env, a, [1, 2])
    _produce_json(spark_env, b, [3])
    produce(spark_env.service_url, c, [b"raw"])
    error = _error_of(lambda: spark_env.source(spark_env.spark.read, topics=f"{a},{c}").load())
    assert "different schemas" in error and "allowDifferentTopicSchemas" in error
    raw = spark_env.source(spark_env.spark.read, topics=f"{a},{c}", allowDifferentTopicSchemas="true").load()
    assert dict(raw.dtypes)["value"] == "binary" and raw.count() == 3
    # a pattern decodes with the schema its topics share, and refuses topics that differ
    same = spark_env.source(spark_env.spark.read, topicsPattern=f"persistent://public/default/{prefix}-[ab]").load()
    assert sorted(r["n"] for r in same.collect()) == [1, 2, 3]
    error = _error_of(lambda: spark_env.source(spark_env.spark.read, topicsPattern=f"{prefix}-.*").load())
    assert "different schemas" in error


def _mid_json(mid: pulsar.MessageId, batch: int = -1) -> list[int]:
    raw = MessageIdData(
        ledgerId=mid.ledger_id(), entryId=mid.entry_id(), partition=-1, batch_index=batch
    ).SerializeToString()
    return [x - 256 if x > 127 else x for x in raw]


def test_pulsar_spark_offsets_and_times(spark_env: SparkEnv) -> None:
    a, b = f"persistent://public/default/{unique('off-a')}", f"persistent://public/default/{unique('off-b')}"
    client = pulsar.Client(spark_env.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    ids = []
    try:
        producer = client.create_producer(a, batching_enabled=False)
        for i in range(10):
            ids.append(producer.send(f"a{i}".encode()))
            time.sleep(0.01)  # distinct publish times
        other = client.create_producer(b, batching_enabled=False)
        for i in range(4):
            other.send(f"b{i}".encode())
    finally:
        client.close()
    # offsets as pulsar-spark writes them (JsonUtils.topicOffsets): start inclusive, end exclusive
    start, end = json.dumps({a: _mid_json(ids[2])}), json.dumps({a: _mid_json(ids[6])})
    got = spark_env.source(spark_env.spark.read, topic=a, startingOffsets=start, endingOffsets=end).load().collect()
    assert sorted(values_of(got)) == [f"a{i}".encode() for i in range(2, 6)]
    published = {
        bytes(r["value"]): int(r["__publishTime"].timestamp() * 1000)
        for r in spark_env.source(spark_env.spark.read, topic=a).load().collect()
    }
    # endingTime: the messages published before it
    got = spark_env.source(spark_env.spark.read, topic=a, endingTime=str(published[b"a5"])).load().collect()
    assert sorted(values_of(got)) == [f"a{i}".encode() for i in range(5)]
    # a startingTime per topic (topics not named start at the default, earliest for a batch read)
    got = (
        spark_env.source(spark_env.spark.read, topics=f"{a},{b}", startingTime=json.dumps({a: published[b"a7"]}))
        .load()
        .collect()
    )
    assert sorted(values_of(got)) == [b"a7", b"a8", b"a9", b"b0", b"b1", b"b2", b"b3"]
