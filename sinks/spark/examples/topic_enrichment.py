"""Topic-to-topic enrichment: read click events, join them with a static table, write to a topic.

Each event of ``--topic`` gets the section of its page (from a small lookup table) and is written
to ``--output-topic`` as JSON, keyed by user, with the source message id in a property. The sink is
exactly once: producers are named after the query and partition, sequence ids come from the batch
id and row position, and the sink turns broker deduplication on for the output namespace.

Run against standalone Magnetar::

    python -m sinks.spark.examples.topic_enrichment \\
        --service-url pulsar://127.0.0.1:6650 --admin-url http://127.0.0.1:8080 \\
        --topic clicks --produce 200 --output-topic clicks-enriched --checkpoint /tmp/enrich-ck \\
        --available-now

Then read the output, e.g. ``spark.read.format("magnetar").option(...).option("topic",
"clicks-enriched").load()``, or with any Pulsar client.
"""

from __future__ import annotations

import argparse

from sinks.spark.examples._common import local_spark, produce_sample


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--output-topic", default="clicks-enriched")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--produce", type=int, default=0)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    if args.produce:
        produce_sample(args.service_url, args.topic, args.produce)
    spark = local_spark("magnetar-topic-enrichment")
    sections = spark.createDataFrame(
        [(f"/page/{i}", section) for i, section in enumerate(["home", "news", "sport", "news", "shop"])],
        "page STRING, section STRING",
    )
    events = (
        spark.readStream.format("magnetar")
        .option("service.url", args.service_url)
        .option("admin.url", args.admin_url)
        .option("topic", args.topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    parsed = events.select(
        "__key",
        "__messageId",
        "__eventTime",
        F.get_json_object(F.col("value").cast("string"), "$.user").alias("user"),
        F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"),
    )
    enriched = parsed.join(F.broadcast(sections), "page", "left").select(
        F.to_json(F.struct("user", "page", "section")).alias("value"),
        F.col("user").alias("__key"),
        "__eventTime",
        F.create_map(F.lit("source"), F.hex("__messageId")).alias("__messageProperties"),
    )
    writer = (
        enriched.writeStream.format("magnetar")
        .option("service.url", args.service_url)
        .option("admin.url", args.admin_url)
        .option("topic", args.output_topic)
        .option("checkpointLocation", args.checkpoint)
    )
    query = writer.trigger(availableNow=True).start() if args.available_now else writer.start()
    query.awaitTermination()
    print("done")


if __name__ == "__main__":
    main()
