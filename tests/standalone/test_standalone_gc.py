"""Issue 19's scenario on standalone, as a user runs it: a topic written with the official client
and deleted, then one forced ``PUT /api/v1/bookie/gc`` (major compaction allowed) -> most of the
deleted topic's bytes have left the disk although the current entry log is far below
``logSizeLimit``; the kept topic reads back in full, also after a restart."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import httpx
import pulsar
import pytest

from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow

DOOMED, KEPT = 1500, 300
SIZE = 4096


def _log_bytes(data: Path) -> int:
    d = data / "bookie-0" / "ledgers"
    return sum(os.stat(d / n).st_size for n in os.listdir(d) if n.endswith(".log"))


def _produce(client: pulsar.Client, topic: str, n: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    for i in range(n):
        producer.send_async(i.to_bytes(4, "big") * (SIZE // 4), None)
    producer.flush()
    producer.close()


def _read_all(client: pulsar.Client, topic: str) -> list[int]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(int.from_bytes(reader.read_next(timeout_millis=10_000).data()[:4], "big"))
    reader.close()
    return got


def test_deleted_topic_leaves_the_disk_after_one_forced_gc(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data, "--set", "bookie.flush_interval_ms=200")
    try:
        (bookie_http,) = re.findall(r"bookie \S+: protocol \S+ http (http://\S+)", sa.log())
        r = httpx.post(
            f"{sa.admin_url}/admin/v2/namespaces/public/default/retention",
            json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
            timeout=10,
        )
        assert r.status_code in (200, 204), r.text  # "kept" has no subscription: keep it by retention
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
        _produce(client, "doomed", DOOMED)
        _produce(client, "kept", KEPT)
        client.close()
        deleted = DOOMED * SIZE
        deadline = time.monotonic() + 30  # the periodic checkpoint moves the entries into the log
        while _log_bytes(data) < (DOOMED + KEPT) * SIZE and time.monotonic() < deadline:
            time.sleep(0.1)
        before = _log_bytes(data)
        assert before >= (DOOMED + KEPT) * SIZE
        r = httpx.delete(f"{sa.admin_url}/admin/v2/persistent/public/default/doomed", timeout=30)
        assert r.status_code in (200, 204), r.text
        r = httpx.put(
            f"{bookie_http}/api/v1/bookie/gc", json={"is_in_force_gc": True, "is_force_major_gc": True}, timeout=30
        )
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + 60
        while httpx.get(f"{bookie_http}/api/v1/bookie/gc", timeout=10).json()["is_in_force_gc"] == "true":
            assert time.monotonic() < deadline, "forced GC did not finish"
            time.sleep(0.1)
        (details,) = httpx.get(f"{bookie_http}/api/v1/bookie/gc_details", timeout=10).json()
        assert details["lastResult"] == "ok", details
        freed = before - _log_bytes(data)
        assert freed >= 0.6 * deleted, (before, freed, deleted)
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
        assert _read_all(client, "kept") == list(range(KEPT))
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()
    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
        assert _read_all(client, "kept") == list(range(KEPT))
        client.close()
    finally:
        sa.stop()
