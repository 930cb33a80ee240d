"""Retention end to end to disk, on a real standalone process with the official client.

One standalone (small ledgers, retention every second, bookie GC only when triggered so each
step can be seen) serves every test; each test uses its own topic and namespace.

* Ledgers kept by retention (within the retention size) -> deleted from metadata once outside
  it -> still on the bookie (``awaiting_ledger_gc``) -> reclaimed after the bookie's GC, and the
  ledger directory's bytes fall to near the live data; explain-storage and ``magnetar admin
  topics explain-storage`` tell each step, ``/metrics`` reports the storage numbers.
* An idle topic's open ledger is rolled and trimmed.
* A subscription that does not acknowledge keeps its backlog whatever retention says, until a
  message TTL expires it.

Retention time is in whole minutes (Pulsar's API), too long for a test: the "kept by retention"
step uses the size axis; the time axis is covered by the pure tests of `retention`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import httpx
import pulsar
import pytest

from tests.support.standalone import Standalone, start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

T = TypeVar("T")

ARGS = (
    "--set",
    "bookie.gcWaitTime=600000",  # GC runs when the test triggers it (PUT /api/v1/bookie/gc)
    "--set",
    "bookie.logSizeLimit=131072",  # entry logs roll often, so whole logs can die
    "--set",
    "bookie.flushInterval=300",
    "--set",
    "broker.retentionCheckIntervalInSeconds=1",
    "--set",
    "broker.messageExpiryCheckIntervalInMinutes=0.02",
    "--set",
    "managed_ledger.managedLedgerMaxEntriesPerLedger=50",
    "--set",
    "managed_ledger.managedLedgerMinLedgerRolloverTimeMinutes=0",
)
PAYLOAD = 1000


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    data = tmp_path_factory.mktemp("retention-e2e") / "data"
    sa = start_standalone(data, *ARGS)
    sa.data_dir = data  # type: ignore[attr-defined]
    try:
        yield sa
    finally:
        code = sa.stop()
        assert code == 0, sa.log()[-4000:]


@pytest.fixture(scope="module")
def admin(standalone: Standalone) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=standalone.admin_url, timeout=15) as c:
        yield c


@pytest.fixture(scope="module")
def client(standalone: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.service_url, operation_timeout_seconds=15)
    yield c
    c.close()


def ok(r: httpx.Response) -> httpx.Response:
    assert r.status_code in (200, 204), f"{r.request.method} {r.request.url}: {r.status_code} {r.text}"
    return r


def rest(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def produce(client: pulsar.Client, topic: str, n: int) -> None:
    # a small window keeps ledgers near managedLedgerMaxEntriesPerLedger (in-flight adds finish
    # in the ledger they were sent to)
    p = client.create_producer(topic, batching_enabled=False, max_pending_messages=20, block_if_queue_full=True)
    for _ in range(n):
        p.send_async(os.urandom(PAYLOAD), None)
    p.flush()
    p.close()


def consume_all(consumer: pulsar.Consumer, n: int, admin: httpx.Client, topic: str, sub: str) -> None:
    """Receive and acknowledge ``n`` messages, then wait until the broker has every ack: the
    client groups acks and sends them up to 100 ms later, so its last acks can still be in flight."""
    for _ in range(n):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))

    def acked() -> bool:
        stats = ok(admin.get(rest(topic) + "/stats")).json()
        return stats["subscriptions"][sub]["msgBacklog"] == 0

    wait_until(acked, f"the broker to have every ack of {sub}", timeout_s=20.0, interval_s=0.2)


def metric(text: str, name: str, topic: str | None = None) -> float | None:
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and (topic is None or f'topic="{topic}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return None


def ledger_dir_bytes(sa: Standalone, suffix: str = "") -> int:
    root = sa.data_dir / "bookie-0" / "ledgers"  # type: ignore[attr-defined]
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and f.name.endswith(suffix))


def gc_rows(ex: dict[str, Any]) -> dict[int, dict[str, Any]]:
    assert ex["bookieGc"] is not None and "ledgers" in ex["bookieGc"], ex["bookieGc"]
    return {r["ledgerId"]: r for r in ex["bookieGc"]["ledgers"]}


def trigger_gc(admin: httpx.Client, ex: dict[str, Any]) -> None:
    for bookie in ex["bookieGc"]["bookies"].values():
        ok(httpx.put(bookie["httpUrl"] + "/api/v1/bookie/gc", json={"is_in_force_gc": True}, timeout=10))


def test_retention_deletes_ledgers_and_bookie_gc_reclaims_the_disk(
    standalone: Standalone, admin: httpx.Client, client: pulsar.Client
) -> None:
    topic = "persistent://public/ret/sized"
    ok(admin.put("/admin/v2/namespaces/public/ret"))
    ok(
        admin.post(
            "/admin/v2/namespaces/public/ret/retention", json={"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}
        )
    )
    consumer = client.subscribe(topic, "s1")
    produce(client, topic, 1500)
    consume_all(consumer, 1500, admin, topic, "s1")

    # 1. retention keeps the newest ~1 MB of consumed ledgers and deletes the older ones from metadata
    def trimmed_state() -> dict[str, Any] | None:
        ex = ok(admin.get(rest(topic) + "/explain-storage")).json()
        deleted = [r for r in gc_rows(ex).values() if r["metadata"] == "deleted"]
        return ex if deleted and ex["deletableNow"] == [] else None

    ex = wait_until(trimmed_state, "retention to trim", timeout_s=20.0, interval_s=0.2)
    reasons = {r["reason"] for r in ex["ledgers"]}
    assert "within_retention_size" in reasons, ex["ledgers"]
    kept = [r["ledgerId"] for r in ex["ledgers"] if r["reason"] == "within_retention_size"]
    rows = gc_rows(ex)
    stats = ok(admin.get(rest(topic) + "/internalStats")).json()
    in_metadata = {li["ledgerId"] for li in stats["ledgers"]}
    deleted = sorted(lid for lid, r in rows.items() if r["metadata"] == "deleted")
    assert not in_metadata & set(deleted)
    assert set(kept) <= in_metadata
    # the bookie has not run GC since: it still holds every deleted ledger, in named entry logs
    for lid in deleted:
        row = rows[lid]
        assert row["state"] == "awaiting_ledger_gc", row
        assert row["deletedAtMs"] and row["bytesOnDisk"] > 0, row
        (on_bookie,) = row["bookies"].values()
        assert on_bookie["status"] == "holds" and on_bookie["entryLogs"], row
        assert row["summary"].startswith("deleted from metadata at") and "still holds" in row["summary"]
    for lid in kept:
        assert rows[lid]["state"] == "live", rows[lid]
    awaiting_topic = ex["bookieGc"]["topicBytesAwaitingGc"]
    assert awaiting_topic >= sum(rows[lid]["size"] for lid in deleted) * 0.9

    # metrics: storage numbers of a fully consumed topic, trims, and bytes awaiting bookie GC
    def scraped() -> str | None:
        text = ok(admin.get("/metrics")).text
        value = metric(text, "magnetar_retention_bytes_awaiting_gc")
        # the backlog age is refreshed every few seconds: wait until it has seen the last acks
        age = metric(text, "pulsar_storage_backlog_age_seconds", topic)
        return text if value is not None and value >= awaiting_topic * 0.9 and age == -1 else None

    text = wait_until(scraped, "bytes awaiting GC and a backlog age of -1 in /metrics", timeout_s=30.0, interval_s=0.2)
    size = metric(text, "pulsar_storage_size", topic)
    assert size is not None and abs(size - stats["totalSize"]) < 200_000
    assert metric(text, "pulsar_storage_backlog_size", topic) == 0
    assert metric(text, "pulsar_msg_backlog", topic) == 0
    # nothing unacknowledged: Pulsar reports the oldest backlog message's age as -1 (waited for above)
    assert metric(text, "magnetar_storage_retained_size", topic) == size
    assert (metric(text, "magnetar_retention_ledgers_trimmed_total") or 0) >= len(deleted)
    disk_before = ledger_dir_bytes(standalone, ".log")

    # 2. retention 0/0: everything consumed goes except the open ledger
    ok(
        admin.post(
            "/admin/v2/namespaces/public/ret/retention", json={"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
        )
    )
    # the ledger list shrinks when the trim starts; the trimmed ledgers' rows come from the trim
    # report, told once their deletion finished (seconds later on a loaded machine): wait for both
    ex = wait_until(
        lambda: (
            (e := ok(admin.get(rest(topic) + "/explain-storage")).json())["ledgers"]
            and all(r["reason"] == "open_ledger" for r in e["ledgers"])
            and set(kept) <= {lid for lid, r in gc_rows(e).items() if r["metadata"] == "deleted"}
            and e
        ),
        "the rest to be trimmed and reported",
        timeout_s=20.0,
        interval_s=0.2,
    )
    deleted = sorted(lid for lid, r in gc_rows(ex).items() if r["metadata"] == "deleted")
    assert set(kept) <= set(deleted)

    # 3. the bookie's GC reclaims them; the entry logs fall to near the live data
    trigger_gc(admin, ex)

    def reclaimed() -> dict[str, Any] | None:
        e = ok(admin.get(rest(topic) + "/explain-storage")).json()
        rows = gc_rows(e)
        done = all(rows[lid]["state"] in ("reclaimed", "awaiting_compaction") for lid in deleted)
        return e if done else None

    ex = wait_until(reclaimed, "the bookie to reclaim the ledgers", timeout_s=30, interval_s=0.2)
    rows = gc_rows(ex)
    assert any(rows[lid]["state"] == "reclaimed" for lid in deleted)
    for lid in deleted:
        r = rows[lid]
        (on_bookie,) = r["bookies"].values()
        if r["state"] == "reclaimed":
            assert r["bytesOnDisk"] == 0 and "reclaimed it" in r["summary"], r
        else:  # bytes left as garbage in a log the compaction thresholds keep: says which and why
            assert on_bookie["status"] == "garbage" and on_bookie["entryLogs"][0]["logReason"], r
    live = sum(metric(ok(admin.get("/metrics")).text, "pulsar_storage_size", t) or 0 for t in (topic,))
    logs_after = ledger_dir_bytes(standalone, ".log")
    print(
        f"entry logs: {disk_before} bytes before GC, {logs_after} after; live {live}; "
        f"ledger dirs in all {ledger_dir_bytes(standalone)}"
    )
    # the other tests' topics and the current logs' garbage are at most a few small logs
    assert logs_after < disk_before / 2 and logs_after <= live + 4 * 131072, (disk_before, logs_after, live)

    def metric_drops() -> float | None:
        value = metric(ok(admin.get("/metrics")).text, "magnetar_retention_bytes_awaiting_gc")
        return value is not None and value < awaiting_topic / 2 and value + 1

    wait_until(metric_drops, "bytes awaiting GC to drop", timeout_s=20.0, interval_s=0.2)

    # 4. the CLI shows the same chain
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar",
            "admin",
            "--admin-url",
            standalone.admin_url,
            "topics",
            "explain-storage",
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    assert topic in out.stdout and "(open)" in out.stdout
    assert "bookie GC" in out.stdout and "ledgers on the bookies" in out.stdout
    assert re.search(r"^\d+ +reclaimed ", out.stdout, re.M), "no ledger shown as reclaimed"
    assert "deleted from metadata at" in out.stdout
    consumer.close()


def test_idle_topic_open_ledger_is_rolled_and_trimmed(admin: httpx.Client, client: pulsar.Client) -> None:
    topic = "persistent://public/default/idle"
    consumer = client.subscribe(topic, "s1")
    produce(client, topic, 10)
    consume_all(consumer, 10, admin, topic, "s1")
    first = ok(admin.get(rest(topic) + "/internalStats")).json()
    assert first["currentLedgerEntries"] == 10, first  # fewer than a ledger holds: it stays open
    written = first["ledgers"][-1]["ledgerId"]

    def trimmed() -> dict[str, Any] | None:
        st = ok(admin.get(rest(topic) + "/internalStats")).json()
        ids = {li["ledgerId"] for li in st["ledgers"]}
        return st if written not in ids and st["numberOfEntries"] == 0 else None

    wait_until(trimmed, "the idle ledger to be rolled and trimmed", timeout_s=20.0, interval_s=0.2)
    ex = ok(admin.get(rest(topic) + "/explain-storage")).json()
    row = gc_rows(ex)[written]
    assert row["metadata"] == "deleted" and row["deletedAtMs"], row
    consumer.close()


def test_unacked_subscription_keeps_backlog_until_ttl_expires_it(admin: httpx.Client, client: pulsar.Client) -> None:
    topic = "persistent://public/default/unacked"
    client.subscribe(topic, "slow").close()  # a durable subscription that never acknowledges
    produce(client, topic, 120)
    time.sleep(3.5)  # three retention passes with retention 0/0
    stats = ok(admin.get(rest(topic) + "/stats")).json()
    assert stats["subscriptions"]["slow"]["msgBacklog"] == 120
    ex = ok(admin.get(rest(topic) + "/explain-storage")).json()
    closed = [r for r in ex["ledgers"] if r["reason"] != "open_ledger"]
    assert closed and all(r["reason"] == "needed_by_cursor" and r["pinnedBy"] == ["slow"] for r in closed), closed
    text = ok(admin.get("/metrics")).text
    assert metric(text, "pulsar_msg_backlog", topic) == 120
    assert (metric(text, "pulsar_storage_backlog_size", topic) or 0) >= 120 * PAYLOAD
    assert (metric(text, "pulsar_storage_backlog_age_seconds", topic) or 0) > 0
    assert metric(text, "magnetar_storage_retained_size", topic) == 0

    ok(admin.post(rest(topic) + "/messageTTL", params={"messageTTL": 1}))

    def expired() -> dict[str, Any] | None:
        st = ok(admin.get(rest(topic) + "/stats")).json()
        return st if st["subscriptions"]["slow"]["msgBacklog"] == 0 else None

    wait_until(expired, "TTL to expire the backlog", timeout_s=20.0, interval_s=0.2)
    ex = wait_until(
        lambda: (
            (e := ok(admin.get(rest(topic) + "/explain-storage")).json())
            and all(r["reason"] == "open_ledger" for r in e["ledgers"])
            and e
        ),
        "the expired ledgers to be trimmed",
        timeout_s=20.0,
        interval_s=0.2,
    )
    assert ex["lastRetentionCheck"]["policies"]["messageTTLInSeconds"] == 1
    closed_ids = {c["ledgerId"] for c in closed}
    assert all(r["metadata"] == "deleted" for r in gc_rows(ex).values() if r["ledgerId"] in closed_ids)
