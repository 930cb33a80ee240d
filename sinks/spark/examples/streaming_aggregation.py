"""Streaming aggregation from a Magnetar topic to Parquet, with a checkpoint (exactly once).

Counts page views per user in one-minute windows of event time (``__eventTime``) and appends each
window to Parquet once the watermark (latest event time seen minus 10 seconds) has passed its end.
Stop it at any time and run it again with the same ``--checkpoint``: it resumes where it stopped,
and no event is counted twice.

Run against standalone Magnetar (``magnetar standalone`` listens on 6650 and 8080)::

    python -m sinks.spark.examples.streaming_aggregation \\
        --service-url pulsar://127.0.0.1:6650 --admin-url http://127.0.0.1:8080 \\
        --topic clicks --produce 1000 --output /tmp/clicks-per-user --checkpoint /tmp/clicks-ck \\
        --available-now

``--produce N`` first publishes N sample events; ``--available-now`` drains what is there and stops
(without it the query runs until interrupted). Read the result with
``spark.read.parquet("/tmp/clicks-per-user")``.
"""

from __future__ import annotations

import argparse

from sinks.spark.examples._common import local_spark, produce_sample


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--produce", type=int, default=0)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    if args.produce:
        produce_sample(args.service_url, args.topic, args.produce)
    spark = local_spark("magnetar-streaming-aggregation")
    events = (
        spark.readStream.format("magnetar")
        .option("service.url", args.service_url)
        .option("admin.url", args.admin_url)
        .option("topic", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxEntriesPerTrigger", "5000")
        .load()
    )
    parsed = events.select(
        F.get_json_object(F.col("value").cast("string"), "$.user").alias("user"), F.col("__eventTime").alias("ts")
    )
    counts = (
        parsed.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "1 minute"), "user")
        .count()
        .select(F.col("window.start").alias("window_start"), "user", "count")
    )
    writer = (
        counts.writeStream.format("parquet")
        .outputMode("append")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    query = writer.trigger(availableNow=True).start() if args.available_now else writer.start()
    query.awaitTermination()
    print(f"done; windows so far: {spark.read.parquet(args.output).count()}")


if __name__ == "__main__":
    main()
