"""Shared bits of the examples: a local SparkSession set up for Magnetar, and sample data."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def local_spark(app: str) -> Any:
    """A local[2] SparkSession bound to 127.0.0.1, with the ``magnetar`` format registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from sinks.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def produce_sample(service_url: str, topic: str, n: int) -> None:
    """Publish ``n`` JSON click events ``{"user": ..., "page": ..., "ms": ...}`` keyed by user, with
    event times one second apart ending now (so event-time windows close as the events go by)."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(topic)
        start = int(time.time() * 1000) - n * 1000
        for i in range(n):
            user = f"user-{i % 7}"
            ms = start + i * 1000
            event = {"user": user, "page": f"/page/{i % 5}", "ms": ms}
            producer.send_async(json.dumps(event).encode(), None, partition_key=user, event_timestamp=ms)
        producer.flush()
    finally:
        client.close()
