"""One Magnetar standalone (ZooKeeper-backed, so executors can read bookies) and one SparkSession
for the whole Spark test run, plus small helpers to produce and inspect messages."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sinks.spark._compat import ADMISSION_CONTROL
from tests.support.standalone import Standalone, start_standalone
from tests.support.zookeeper import ZooKeeperServer

LEDGER_ENTRIES = 20
"""Ledgers roll every 20 entries, so small topics span several ledgers."""

LOSSY_NAMESPACE = "public/lossy"
"""A namespace with retention 0: closed ledgers without a cursor are trimmed within a second."""

SINK_NAMESPACE = "public/sink"
"""The sink tests write here (the sink turns deduplication on for the namespace)."""


@dataclass
class SparkEnv:
    """The running standalone, its metadata URL, and the shared SparkSession."""

    standalone: Standalone
    metadata_url: str
    spark: Any
    tmp: Path

    @property
    def service_url(self) -> str:
        return self.standalone.service_url

    @property
    def admin_url(self) -> str:
        return self.standalone.admin_url

    def source(self, reader: Any, **options: Any) -> Any:
        """``reader.format("magnetar")`` with the URLs set, plus ``options``. Before PySpark 4.2 a
        streaming read names its subscription (`check_streaming_support`): one is named here when
        the test names none."""
        named = {"subscriptionName", "predefinedSubscription", "durableSubscription"} & set(options)
        if not ADMISSION_CONTROL and type(reader).__name__ == "DataStreamReader" and not named:
            options["subscriptionName"] = unique("sub")
        r = reader.format("magnetar").option("service.url", self.service_url).option("admin.url", self.admin_url)
        if options.get("readMode") == "bookies":
            r = r.option("metadata.url", self.metadata_url)
        for k, v in options.items():
            r = r.option(k, str(v))
        return r

    def checkpoint(self) -> str:
        return str(self.tmp / f"ck-{uuid.uuid4().hex[:8]}")

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        resp = httpx.request(method, self.admin_url + path, json=body, timeout=30)
        assert resp.status_code < 300, f"{method} {path}: {resp.status_code} {resp.text}"
        return resp.json() if resp.content else None


def trigger_limit(**limit: int) -> dict[str, int]:
    """``limit`` (``maxEntriesPerTrigger=...``) where the PySpark in use has admission control
    (4.2 onwards), else nothing: a test that is about something else runs on older ones too."""
    return limit if ADMISSION_CONTROL else {}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(
    service_url: str,
    topic: str,
    values: list[bytes],
    *,
    batch: bool = False,
    keys: Callable[[int], str | None] | None = None,
) -> list[tuple[int, int]]:
    """Publish ``values`` in order (synchronously unless batched), waiting for every ack; returns
    the (ledger, entry) of each message when not batched."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    ids = []
    try:
        producer = client.create_producer(
            topic, batching_enabled=batch, batching_max_messages=5, batching_max_publish_delay_ms=10
        )
        for i, v in enumerate(values):
            key = keys(i) if keys else None
            kwargs = {"partition_key": key} if key else {}
            if batch:
                producer.send_async(v, None, properties={"i": str(i)}, **kwargs)
            else:
                mid = producer.send(v, properties={"i": str(i)}, event_timestamp=1_000 + i, **kwargs)
                ids.append((mid.ledger_id(), mid.entry_id()))
        producer.flush()
    finally:
        client.close()
    return ids


def _spark_session(tmp: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2,3]")  # 2 threads; a task may be tried 3 times
        .appName("magnetar-spark-tests")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.local.dir", str(tmp / "spark-local"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from sinks.spark import register

    register(spark)
    return spark


def spark_env_fixture(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkEnv]:
    """Body of the session-scoped ``spark_env`` fixture (see conftest)."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    tmp = tmp_path_factory.mktemp("spark")
    url = zookeeper.url(f"/spark-{uuid.uuid4().hex[:8]}")
    standalone = start_standalone(
        tmp / "standalone",
        "--set",
        f"standalone.metadata_url={url}",
        "--set",
        "broker.default_retention_time_minutes=-1",
        "--set",
        "broker.default_retention_size_mb=-1",
        "--set",
        "broker.retention_check_interval_s=1",
        "--set",
        "broker.idle_ledger_rollover_s=3600",
        "--set",
        f"managed_ledger.max_entries_per_ledger={LEDGER_ENTRIES}",
        "--set",
        "managed_ledger.min_ledger_rollover_time_minutes=0",
    )
    try:
        env = SparkEnv(standalone, url, None, tmp)
        env.admin("PUT", f"/admin/v2/namespaces/{LOSSY_NAMESPACE}", {})
        env.admin(
            "POST",
            f"/admin/v2/namespaces/{LOSSY_NAMESPACE}/retention",
            {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
        )
        env.admin("PUT", f"/admin/v2/namespaces/{SINK_NAMESPACE}", {})
        env.spark = _spark_session(tmp)
        try:
            yield env
        finally:
            for q in env.spark.streams.active:
                q.stop()
            env.spark.stop()
    finally:
        standalone.stop()


def ledgers_of(env: SparkEnv, topic: str) -> list[dict[str, Any]]:
    tenant_ns_name = topic.split("://", 1)[1] if "://" in topic else f"public/default/{topic}"
    return env.admin("GET", f"/admin/v2/persistent/{tenant_ns_name}/internalStats")["ledgers"]


def values_of(rows: list[Any]) -> list[bytes]:
    return [bytes(r["value"]) for r in rows]


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)
