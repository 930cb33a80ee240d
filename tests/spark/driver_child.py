"""A Spark driver in its own process, for tests that SIGKILL it: a streaming query from one Magnetar
topic to another (the magnetar source and sink), run until killed.

    python -m tests.spark.driver_child SERVICE_URL ADMIN_URL SOURCE_TOPIC SINK_TOPIC CHECKPOINT LOCAL_DIR
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    service_url, admin_url, source, sink, checkpoint, local_dir = sys.argv[1:7]
    os.environ.pop("PYSPARK_PYTHON", None)  # register() points local workers at this interpreter
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("magnetar-killed-driver")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", local_dir)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from sinks.spark import register

    register(spark)
    df = (
        spark.readStream.format("magnetar")
        .option("service.url", service_url)
        .option("admin.url", admin_url)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxEntriesPerTrigger", "5")
        .load()
    )
    query = (
        df.select("value", "__key", "__eventTime", "__messageProperties")
        .writeStream.format("magnetar")
        .option("service.url", service_url)
        .option("admin.url", admin_url)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    print("query started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
