"""The streaming and batch source against a real standalone, in Spark local mode."""

from __future__ import annotations

import pytest

from sinks.spark._compat import ADMISSION_CONTROL
from tests.spark.spark_harness import (
    LOSSY_NAMESPACE,
    SparkEnv,
    ledgers_of,
    produce,
    trigger_limit,
    unique,
    values_of,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def _msgs(prefix: str, n: int, size: int = 0) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode().ljust(size, b".") for i in range(n)]


@pytest.mark.parametrize("mode", [pytest.param("broker", marks=pytest.mark.pyspark_oldest), "bookies"])
def test_exactly_once_across_stop_and_restart(spark_env: SparkEnv, mode: str) -> None:
    topic = unique(f"eo-{mode}")
    first, second = _msgs("a", 45), _msgs("b", 25)
    produce(spark_env.service_url, topic, first)
    produce(spark_env.service_url, topic, _msgs("c", 12), batch=True)  # batched entries too
    out, ck = str(spark_env.tmp / unique("out")), spark_env.checkpoint()

    def start(trigger: dict) -> object:
        df = spark_env.source(
            spark_env.spark.readStream,
            topic=topic,
            startingOffsets="earliest",
            readMode=mode,
            **trigger_limit(maxEntriesPerTrigger=10),
        ).load()
        return (
            df.select("value", "__messageId")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ck)
            .trigger(**trigger)
            .start()
        )

    q = start({"processingTime": "200 milliseconds"})
    # without admission control (PySpark before 4.2) the first batch takes the whole backlog
    batches = 3 if ADMISSION_CONTROL else 1
    wait_until(
        lambda: q.exception() is not None or (q.lastProgress is not None and q.lastProgress["batchId"] >= batches - 1),
        f"{batches} micro-batch(es)",
        timeout_s=180.0,  # the first query of a run starts Python workers, slow on a loaded machine
    )
    assert q.exception() is None
    q.stop()  # mid-stream: most of the topic is still unread (with admission control)
    produce(spark_env.service_url, topic, second)
    q = start({"availableNow": True})
    q.awaitTermination(120)
    assert q.exception() is None

    rows = spark_env.spark.read.parquet(out).collect()
    got = values_of(rows)
    expected = first + _msgs("c", 12) + second
    assert sorted(got) == sorted(expected)
    assert len(got) == len(set(got)), "a message was written twice"


def test_both_read_modes_give_identical_rows(spark_env: SparkEnv) -> None:
    topic = unique("modes")
    produce(spark_env.service_url, topic, _msgs("x", 30), keys=lambda i: f"k{i % 4}")
    produce(spark_env.service_url, topic, _msgs("y", 17), batch=True, keys=lambda i: f"k{i % 2}")
    by_broker = spark_env.source(spark_env.spark.read, topic=topic).load().collect()
    by_bookies = spark_env.source(spark_env.spark.read, topic=topic, readMode="bookies").load().collect()
    assert len(by_broker) == 47
    assert sorted(map(tuple, by_broker)) == sorted(map(tuple, by_bookies))
    row = next(r for r in by_broker if bytes(r["value"]) == b"x-00005")
    assert row["__key"] == "k1" and row["__messageProperties"] == {"i": "5"}
    assert row["__topic"] == f"persistent://public/default/{topic}" and row["__eventTime"] is not None

    # startingTime: exactly the messages published at or after it
    at = row["__publishTime"]
    since = (
        spark_env.source(spark_env.spark.read, topic=topic, startingTime=str(int(at.timestamp() * 1000)))
        .load()
        .collect()
    )
    expected = sorted(bytes(r["value"]) for r in by_broker if r["__publishTime"] >= at)
    assert sorted(values_of(since)) == expected

    # a batch read between explicit offsets
    first = ledgers_of(spark_env, topic)[0]["ledgerId"]
    ranged = (
        spark_env.source(
            spark_env.spark.read,
            topic=topic,
            startingOffsets=f'{{"{topic}": {{"ledger": {first}, "entry": 3, "batch": 0}}}}',
            endingOffsets=f'{{"{topic}": {{"ledger": {first}, "entry": 8, "batch": 0}}}}',
        )
        .load()
        .collect()
    )
    assert sorted(values_of(ranged)) == _msgs("x", 8)[3:]


@pytest.mark.pyspark_oldest
def test_admission_control(spark_env: SparkEnv) -> None:
    topic = unique("admission")
    produce(spark_env.service_url, topic, _msgs("m", 30, size=1000))
    if not ADMISSION_CONTROL:
        # PySpark 4.0 and 4.1 cannot limit a Python source's batches: refused, not ignored
        df = spark_env.source(spark_env.spark.readStream, topic=topic, maxEntriesPerTrigger=7).load()
        q = df.writeStream.format("noop").option("checkpointLocation", spark_env.checkpoint()).start()
        with pytest.raises(Exception, match=r"maxEntriesPerTrigger needs PySpark 4\.2 or newer"):
            q.awaitTermination(120)
        return

    def run(**limits: int) -> list[int]:
        df = spark_env.source(spark_env.spark.readStream, topic=topic, startingOffsets="earliest", **limits).load()
        name = unique("adm").replace("-", "_")
        q = (
            df.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", spark_env.checkpoint())
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        assert spark_env.spark.sql(f"select count(distinct value) from {name}").collect()[0][0] == 30
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    sizes = run(maxEntriesPerTrigger=7)
    assert sum(sizes) == 30 and max(sizes) <= 7 and len(sizes) >= 5
    sizes = run(maxBytesPerTrigger=3500)  # entries are a bit over 1000 bytes: at most 3 per batch
    assert sum(sizes) == 30 and max(sizes) <= 3


def test_partitioned_topic_with_a_partition_added(spark_env: SparkEnv) -> None:
    topic = unique("parts")
    spark_env.admin("PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", 2)
    produce(spark_env.service_url, topic, _msgs("p", 20), keys=lambda i: f"key{i}")
    name = unique("parts").replace("-", "_")
    df = spark_env.source(spark_env.spark.readStream, topic=topic, startingOffsets="earliest").load()
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", spark_env.checkpoint())
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()
        assert spark_env.spark.sql(f"select count(*) from {name}").collect()[0][0] == 20
        spark_env.admin("POST", f"/admin/v2/persistent/public/default/{topic}/partitions", 3)
        produce(spark_env.service_url, f"persistent://public/default/{topic}-partition-2", _msgs("new", 6))
        produce(spark_env.service_url, topic, _msgs("q", 10), keys=lambda i: f"key{i}")
        wait_until(
            lambda: spark_env.spark.sql(f"select count(*) from {name}").collect()[0][0] >= 36,
            "rows of the new partition",
            timeout_s=60.0,
        )
        rows = spark_env.spark.sql(f"select value, __topic from {name}").collect()
    finally:
        q.stop()
    assert sorted(values_of(rows)) == sorted(_msgs("p", 20) + _msgs("new", 6) + _msgs("q", 10))
    partitions = {f"persistent://public/default/{topic}-partition-{i}" for i in range(3)}
    assert {r["__topic"] for r in rows} == partitions


def test_topics_pattern_picks_up_new_topics(spark_env: SparkEnv) -> None:
    prefix = unique("pat")
    spark_env.admin("PUT", f"/admin/v2/persistent/public/default/{prefix}-p/partitions", 2)
    produce(spark_env.service_url, f"{prefix}-p", _msgs("p", 8), keys=lambda i: f"k{i}")
    produce(spark_env.service_url, f"{prefix}-a", _msgs("a", 5))
    produce(spark_env.service_url, unique("other"), _msgs("o", 3))
    name = prefix.replace("-", "_")
    df = spark_env.source(
        spark_env.spark.readStream, topicsPattern=f"persistent://public/default/{prefix}-.*", startingOffsets="earliest"
    ).load()
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", spark_env.checkpoint())
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()
        assert spark_env.spark.sql(f"select count(*) from {name}").collect()[0][0] == 13
        produce(spark_env.service_url, f"{prefix}-b", _msgs("b", 4))
        wait_until(
            lambda: spark_env.spark.sql(f"select count(*) from {name}").collect()[0][0] >= 17,
            "rows of the new topic",
            timeout_s=60.0,
        )
        rows = spark_env.spark.sql(f"select value from {name}").collect()
    finally:
        q.stop()
    assert sorted(values_of(rows)) == sorted(_msgs("p", 8) + _msgs("a", 5) + _msgs("b", 4))


@pytest.mark.parametrize("fail", [True, False])
def test_fail_on_data_loss(spark_env: SparkEnv, fail: bool) -> None:
    topic = f"persistent://{LOSSY_NAMESPACE}/{unique('loss')}"
    # ledgers of 20, 20, then 5 entries in the current one
    ids = produce(spark_env.service_url, topic, _msgs("l", 45))
    first_ledger = ids[0][0]
    wait_until(lambda: ledgers_of(spark_env, topic)[0]["ledgerId"] == ids[-1][0], "retention to trim", timeout_s=60.0)
    start = f'{{"{topic}": {{"ledger": {first_ledger}, "entry": 5, "batch": 0}}}}'
    df = spark_env.source(
        spark_env.spark.readStream, topic=topic, startingOffsets=start, failOnDataLoss=str(fail).lower()
    ).load()
    name = unique("loss").replace("-", "_")
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", spark_env.checkpoint())
        .trigger(availableNow=True)
        .start()
    )
    if fail:
        with pytest.raises(Exception) as info:
            q.awaitTermination(120)
        error = str(info.value)
        assert "DataLossError" in error and topic in error, error
        assert f"messages from {first_ledger}:5:0" in error, error
        assert "retentionTimeInMinutes': 0" in error, error  # names the retention policy
    else:
        q.awaitTermination(120)
        assert q.exception() is None
        rows = spark_env.spark.sql(f"select value from {name}").collect()
        assert sorted(values_of(rows)) == _msgs("l", 45)[40:]
