"""Spark data source throughput: a topic of 1 KiB messages into Parquet, read through the broker
versus straight from the bookies, and the exactly-once sink's write rate.

Starts its own ZooKeeper (Debian's package) and a ZooKeeper-backed ``magnetar standalone`` (so
executors can open the ledger metadata), publishes ``--messages`` messages of ``--size`` bytes
(one message per entry), then, in one local[2] SparkSession:

1. ``spark.read.format("magnetar")`` of the whole topic written to Parquet, ``readMode=broker``;
2. the same with ``readMode=bookies``;
3. a streaming query (``Trigger.AvailableNow``) from that topic into another topic through the
   sink (producers with explicit sequence ids, broker deduplication on).

Each measurement runs twice and the second run is reported (the first one warms Python workers up).

    .venv/bin/python bench/spark_bench.py [--messages 20000] [--size 1024] [--bookies 1] [--tasks 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.standalone import start_standalone  # noqa: E402
from tests.support.zookeeper import start_zookeeper  # noqa: E402


def produce(service_url: str, topic: str, n: int, size: int) -> float:
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    payload = os.urandom(size)
    start = time.perf_counter()
    producer = client.create_producer(
        topic, batching_enabled=False, max_pending_messages=2000, block_if_queue_full=True
    )
    for i in range(n):
        producer.send_async(i.to_bytes(8, "big") + payload[8:], None)
    producer.flush()
    elapsed = time.perf_counter() - start
    client.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--bookies", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=2, help="Spark tasks per topic (maxEntriesPerTask)")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    work = Path(args.dir or tempfile.mkdtemp(prefix="magnetar-spark-bench-"))
    zk = start_zookeeper(work / "zk")
    url = zk.url("/bench")
    sa = start_standalone(
        work / "standalone",
        "--set",
        f"standalone.metadata_url={url}",
        "--set",
        f"standalone.num_bookies={args.bookies}",
        "--set",
        "broker.default_retention_time_minutes=-1",
        "--set",
        "broker.default_retention_size_mb=-1",
    )
    try:
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        secs = produce(sa.service_url, topic, args.messages, args.size)
        mb = args.messages * args.size / 1e6
        print(f"produced {args.messages} x {args.size} B in {secs:.1f} s ({args.messages / secs:,.0f} msg/s)")

        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        from sinks.spark import register

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        per_task = max(1, -(-args.messages // args.tasks))

        def source(reader, **opts):
            r = (
                reader.format("magnetar")
                .option("service.url", sa.service_url)
                .option("admin.url", sa.admin_url)
                .option("metadata.url", url)
                .option("maxEntriesPerTask", str(per_task))
            )
            for k, v in opts.items():
                r = r.option(k, v)
            return r

        results = []
        for mode in ("broker", "bookies"):
            for attempt in range(2):
                out = work / f"parquet-{mode}-{attempt}"
                start = time.perf_counter()
                source(spark.read, topic=topic, readMode=mode).load().write.parquet(str(out))
                elapsed = time.perf_counter() - start
            rows = spark.read.parquet(str(out)).count()
            assert rows == args.messages, (mode, rows)
            results.append((f"source -> Parquet, readMode={mode}", rows / elapsed, mb / elapsed, elapsed))

        for attempt in range(2):  # the first run pays for Python workers and producer set-up
            sink_topic = f"{topic}-copy{attempt}"
            start = time.perf_counter()
            df = source(spark.readStream, topic=topic, startingOffsets="earliest").load()
            q = (
                df.select("value")
                .writeStream.format("magnetar")
                .option("service.url", sa.service_url)
                .option("admin.url", sa.admin_url)
                .option("topic", sink_topic)
                .option("checkpointLocation", str(work / f"sink-ck{attempt}"))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            elapsed = time.perf_counter() - start
        copied = source(spark.read, topic=sink_topic).load().count()
        assert copied == args.messages, copied
        results.append(("topic -> sink -> topic (streaming, exactly once)", copied / elapsed, mb / elapsed, elapsed))
        spark.stop()

        print(f"\n{args.messages} messages of {args.size} B, {args.bookies} bookie(s), {args.tasks} task(s)")
        print(f"{'path':<52} {'rows/s':>10} {'MB/s':>8} {'s':>6}")
        for name, rps, mbps, secs in results:
            print(f"{name:<52} {rps:>10,.0f} {mbps:>8.1f} {secs:>6.1f}")
    finally:
        sa.stop()
        zk.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
