"""Unread data stays while a pipeline reads it: the durable subscription every streaming query keeps
by default (named in its checkpoint), across a SIGKILL of the driver, on a namespace whose
retention keeps nothing; explain-storage naming the pipeline; and listing and removing the
subscriptions of pipelines that no longer run. The killed driver writes through the magnetar sink,
so the same run checks that the sink's writes stay exactly-once across the kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sinks.spark._pipelines import checkpoint_subscription
from tests.spark.spark_harness import LOSSY_NAMESPACE, SINK_NAMESPACE, SparkEnv, ledgers_of, produce, unique, values_of
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _msgs(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def _tp(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://", 1)[1]


def _cursors(env: SparkEnv, topic: str) -> dict[str, Any]:
    return env.admin("GET", _tp(topic) + "/internalStats")["cursors"]


def _retention_passes(env: SparkEnv, topic: str, n: int) -> None:
    """Wait until the retention service has checked ``topic`` ``n`` more times."""

    def checked() -> int:
        last = env.admin("GET", _tp(topic) + "/explain-storage").get("lastRetentionCheck") or {}
        return int(last.get("checkedAtMs") or 0)

    seen: set[int] = set()

    def enough() -> bool:
        seen.add(checked())
        return len(seen) > n

    wait_until(enough, f"{n} retention passes", timeout_s=60)


def _pipelines(env: SparkEnv, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "sinks.spark", "pipelines", *args, "--admin-url", env.admin_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.timeout(900)  # a second driver JVM and retention passes, on a shared machine
def test_unread_data_survives_a_killed_driver_and_retention(spark_env: SparkEnv) -> None:
    src = f"persistent://{LOSSY_NAMESPACE}/{unique('kill-src')}"
    dst = f"persistent://{SINK_NAMESPACE}/{unique('kill-dst')}"
    expected = _msgs("k", 120)
    spark_env.admin("PUT", _tp(src))  # the pipeline starts on an empty topic; data comes while it runs
    ck = spark_env.checkpoint()
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    log_path = spark_env.tmp / unique("child-driver.log")
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.spark.driver_child",
                spark_env.service_url,
                spark_env.admin_url,
                src,
                dst,
                ck,
                str(spark_env.tmp / unique("child-local")),
            ],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: bool(_cursors(spark_env, src)) or child.poll() is not None,
            "the child driver's query to subscribe",
            timeout_s=480,
        )
        produce(spark_env.service_url, src, expected, keys=lambda i: f"key{i % 5}")
        first_ledger = ledgers_of(spark_env, src)[0]["ledgerId"]
        last_ledger = ledgers_of(spark_env, src)[-1]["ledgerId"]
        # two micro-batches of 5 entries committed: most of the topic is still unread
        try:
            wait_until(
                lambda: Path(ck, "commits", "1").exists() or child.poll() is not None,
                "the child driver to commit two micro-batches",
                timeout_s=480,
            )
        except AssertionError:
            raise AssertionError("the child driver committed nothing:\n" + log_path.read_text()[-3000:]) from None
        assert child.poll() is None, "the child driver died on its own:\n" + log_path.read_text()[-3000:]
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        child.wait(timeout=30)
    assert len(list(Path(ck, "commits").glob("[0-9]*"))) < 16, "most of the topic was read before the kill"

    # the subscription the checkpoint names pins what was not processed, whatever retention says
    name = checkpoint_subscription(ck)
    assert name is not None and name.startswith("magnetar-spark-")
    md_ledger = int(_cursors(spark_env, src)[name]["markDeletePosition"].split(":")[0])
    _retention_passes(spark_env, src, 2)
    # retention (which keeps nothing here) trimmed at most what the query had processed
    ledgers = ledgers_of(spark_env, src)
    assert ledgers[0]["ledgerId"] <= md_ledger and len(ledgers) >= 3, "retention trimmed unread data"
    explain = spark_env.admin("GET", _tp(src) + "/explain-storage")
    assert explain["cursors"][name]["pipeline"] == f"spark topic={src}"
    assert explain["cursors"][name]["pinsLedgers"]
    listed = [json.loads(line) for line in _pipelines(spark_env, "list", "--json").splitlines()]
    assert any(p["subscription"] == name and src in p["topics"] and p["backlog"] > 0 for p in listed)

    # restarted from its checkpoint (here, in another driver): every message once, in the sink too
    df = spark_env.source(
        spark_env.spark.readStream, topic=src, startingOffsets="earliest", maxEntriesPerTrigger=40
    ).load()
    q = (
        df.select("value", "__key", "__eventTime", "__messageProperties")
        .writeStream.format("magnetar")
        .option("service.url", spark_env.service_url)
        .option("admin.url", spark_env.admin_url)
        .option("topic", dst)
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert q.exception() is None
    rows = spark_env.source(spark_env.spark.read, topic=dst).load().collect()
    assert sorted(values_of(rows)) == expected, "messages lost or written twice across the kill"
    by_value = {bytes(r["value"]): r for r in rows}
    assert by_value[b"k-00007"]["__key"] == "key2" and by_value[b"k-00007"]["__messageProperties"] == {"i": "7"}
    assert by_value[b"k-00007"]["__eventTime"] is not None
    # deduplication was turned on for the topic written, not for its namespace
    assert spark_env.admin("GET", _tp(dst) + "/deduplicationEnabled") is True
    assert spark_env.admin("GET", f"/admin/v2/namespaces/{SINK_NAMESPACE}/deduplication") is None

    # processed data is released: the subscription moved on and retention trims what it read
    wait_until(
        lambda: ledgers_of(spark_env, src)[0]["ledgerId"] not in (first_ledger, md_ledger),
        "retention to trim the processed ledgers",
        timeout_s=120,
    )
    assert ledgers_of(spark_env, src)[0]["ledgerId"] <= last_ledger

    # the pipeline is retired: its checkpoint names the subscription to remove
    assert name in _pipelines(spark_env, "remove", "--checkpoint", ck)
    assert name not in _cursors(spark_env, src)


def test_named_subscription_opt_out_and_idle_removal(spark_env: SparkEnv) -> None:
    topics = {mode: f"persistent://{LOSSY_NAMESPACE}/{unique('sub-' + mode)}" for mode in ("named", "off")}

    def run(topic: str, **options: Any) -> None:
        produce(spark_env.service_url, topic, _msgs("n", 8))
        df = spark_env.source(
            spark_env.spark.readStream, topic=topic, startingOffsets="earliest", maxEntriesPerTrigger=3, **options
        ).load()
        name = unique("q").replace("-", "_")
        q = (
            df.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", spark_env.checkpoint())
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        assert spark_env.spark.sql(f"select count(*) from {name}").collect()[0][0] == 8

    run(topics["named"], subscriptionName="etl-orders", pipelineName="orders to lake")
    props = spark_env.admin("GET", _tp(topics["named"]) + "/subscription/etl-orders/properties")
    assert props["pipeline"] == "orders to lake" and props["spark.subscription"] == "named"
    run(topics["off"], durableSubscription="false")
    assert _cursors(spark_env, topics["off"]) == {}

    # a pipeline gone quiet: listed as idle, then removed by idleness (and only it)
    listed = _pipelines(spark_env, "list", "--namespace", LOSSY_NAMESPACE, "--idle-for", "0s")
    assert "etl-orders" in listed
    assert "etl-orders" in _pipelines(
        spark_env, "remove", "--namespace", LOSSY_NAMESPACE, "--subscription", "etl-orders"
    )
    assert "etl-orders" not in _cursors(spark_env, topics["named"])
