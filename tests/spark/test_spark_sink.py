"""The exactly-once streaming sink, and the source's durable subscription."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.spark_harness import SINK_NAMESPACE, SparkEnv, produce, unique, values_of

pytestmark = pytest.mark.slow


def _msgs(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def test_sink_exactly_once_with_task_failure_and_rerun(spark_env: SparkEnv) -> None:
    src = unique("sink-in")
    dst = f"persistent://{SINK_NAMESPACE}/{unique('sink-out')}"
    produce(spark_env.service_url, src, _msgs("s", 40), keys=lambda i: f"k{i % 3}")
    ck = spark_env.checkpoint()

    def run() -> None:
        df = spark_env.source(spark_env.spark.readStream, topic=src, startingOffsets="earliest",
                              maxEntriesPerTrigger=20).load()
        q = (df.select("value", "__key", "__messageProperties").writeStream.format("magnetar")
             .option("service.url", spark_env.service_url).option("admin.url", spark_env.admin_url)
             .option("topic", dst)
             .option("failOnceAfterRows", "7")  # the first attempt of every task dies after 7 sent rows
             .option("checkpointLocation", ck).trigger(availableNow=True).start())
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
    df = spark_env.source(spark_env.spark.readStream, topic=topic, startingOffsets="earliest",
                          subscriptionName="spark-sub", maxEntriesPerTrigger=10).load()
    name = topic.replace("-", "_")
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", spark_env.checkpoint())
         .trigger(processingTime="100 milliseconds").start())
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
