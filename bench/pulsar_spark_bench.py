"""Streaming read and write throughput: StreamNative's pulsar-spark against this connector, on the same
topic of the same ``magnetar standalone``, one after the other on the same machine.

Publishes ``--messages`` messages of ``--size`` bytes (one message per entry) and writes the same
rows (one binary column ``value``) to a Parquet directory, then measures, each with
``Trigger.AvailableNow`` in local[2] mode, from the query's start to its end:

* read: the whole topic from its start into Spark's ``noop`` sink;
* write: the Parquet rows into a new topic through the connector's sink.

pulsar-spark (3.1.1.4, the newest Maven Central serves here) runs in the Java job of
``tests/pulsar_spark`` on Spark 3.4.4 (the newest Spark it runs on); this connector runs in PySpark
(the venv's, 4.3) with its default ``readMode=broker`` and its exactly-once sink (deduplication on
the topic written). Each side runs every query ``--runs`` times (fresh checkpoints and topics) in
one Spark session; the first run pays for JIT and Python worker start-up, the last is reported.
The load average before and after is printed: the machine is shared.

    .venv/bin/python bench/pulsar_spark_bench.py [--messages 20000] [--size 1024] [--runs 2]
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

from bench.spark_bench import produce  # noqa: E402
from tests.support.pulsar_spark_job import run_job  # noqa: E402
from tests.support.standalone import Standalone, start_standalone  # noqa: E402


def write_parquet(path: Path, n: int, size: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    payload = os.urandom(size)
    values = [i.to_bytes(8, "big") + payload[8:] for i in range(n)]
    path.mkdir(parents=True)
    pq.write_table(pa.table({"value": pa.array(values, pa.binary())}), path / "part-0.parquet")


def count(sa: Standalone, topic: str) -> int:
    """Messages published to ``topic`` (its stats' ``msgInCounter``; both sinks may batch them)."""
    import httpx

    stats = httpx.get(f"{sa.admin_url}/admin/v2/persistent/public/default/{topic}/stats", timeout=30).json()
    return int(stats["msgInCounter"])


def magnetar_runs(sa: Standalone, topic: str, parquet: Path, work: Path, runs: int) -> list[tuple[str, int, float]]:
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
    out = []
    try:
        for run in range(runs):
            df = (
                spark.readStream.format("magnetar")
                .option("service.url", sa.service_url)
                .option("admin.url", sa.admin_url)
                .option("topic", topic)
                .option("startingOffsets", "earliest")
                .option("durableSubscription", "false")
                .load()
            )
            start = time.perf_counter()
            q = (
                df.select("value")
                .writeStream.format("noop")
                .option("checkpointLocation", str(work / f"m-read-{run}"))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            out.append(("read", sum(p["numInputRows"] for p in q.recentProgress), time.perf_counter() - start))

            dst = f"{topic}-magnetar-{run}"
            df = spark.readStream.schema("value binary").parquet(str(parquet))
            start = time.perf_counter()
            q = (
                df.writeStream.format("magnetar")
                .option("service.url", sa.service_url)
                .option("admin.url", sa.admin_url)
                .option("topic", dst)
                .option("checkpointLocation", str(work / f"m-write-{run}"))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            out.append(("write", count(sa, dst), time.perf_counter() - start))
    finally:
        spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    work = Path(args.dir or tempfile.mkdtemp(prefix="magnetar-pulsar-spark-bench-"))
    load_before = os.getloadavg()
    sa = start_standalone(
        work / "standalone",
        "--set",
        "broker.default_retention_time_minutes=-1",
        "--set",
        "broker.default_retention_size_mb=-1",
    )
    try:
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        secs = produce(sa.service_url, topic, args.messages, args.size)
        print(f"produced {args.messages} x {args.size} B in {secs:.1f} s ({args.messages / secs:,.0f} msg/s)")
        parquet = work / "rows"
        write_parquet(parquet, args.messages, args.size)

        results: dict[str, list[tuple[str, int, float]]] = {}
        ps = run_job(
            "read",
            work / "pulsar-spark-read.log",
            service_url=sa.service_url,
            admin_url=sa.admin_url,
            in_=f"persistent://public/default/{topic}",
            checkpoint=str(work / "ps-read"),
            runs=args.runs,
        )
        ps += run_job(
            "write",
            work / "pulsar-spark-write.log",
            service_url=sa.service_url,
            admin_url=sa.admin_url,
            parquet=str(parquet),
            out=f"persistent://public/default/{topic}-pulsar-spark",
            checkpoint=str(work / "ps-write"),
            runs=args.runs,
        )
        # the job counts rows read; what a write stored is counted on the topic
        results["pulsar-spark 3.1.1.4 (Spark 3.4.4)"] = [
            (r.mode, r.rows if r.mode == "read" else count(sa, f"{topic}-pulsar-spark-{r.run}"), r.seconds) for r in ps
        ]
        import pyspark

        results[f"magnetar (PySpark {pyspark.__version__})"] = magnetar_runs(sa, topic, parquet, work, args.runs)
        load_after = os.getloadavg()

        mb = args.messages * args.size / 1e6
        print(f"\n{args.messages} messages of {args.size} B, last of {args.runs} runs; load average "
              f"before {load_before[0]:.1f}/{load_before[1]:.1f}, after {load_after[0]:.1f}/{load_after[1]:.1f} "
              f"(1/5 min)")  # fmt: skip
        print(f"{'connector':<36} {'query':<6} {'rows':>7} {'rows/s':>9} {'MB/s':>6} {'s':>6}")
        for name, rows in results.items():
            for mode in ("read", "write"):
                last = [r for r in rows if r[0] == mode][-1]
                _, n, s = last
                assert n == args.messages, (name, mode, n)
                print(f"{name:<36} {mode:<6} {n:>7} {n / s:>9,.0f} {mb / s:>6.1f} {s:>6.1f}")
    finally:
        sa.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
