"""Tiered storage end to end: a ``magnetar broker`` process over ZooKeeper, two real bookies and a
real S3-compatible server, driven with the official client, the admin REST and ``magnetar admin``.

1. Manual offload (``magnetar admin topics offload``) of the closed ledgers to S3; each bookie copy
   is deleted only once the deletion lag has passed since its tier copy was verified (its ledger
   metadata is gone, so bookie GC reclaims it); a consumer from the earliest position gets every
   message once, in order.
2. SIGKILL of the broker in the middle of an offload (the object store frozen, a ledger recorded
   STARTED): after the restart the state is consistent (nothing incomplete counts as offloaded,
   the interrupted ledger is still on the bookies), reads from the earliest position succeed, and
   the automatic offload (namespace threshold) retries it under a new uid, deleting whatever the
   interrupted attempt wrote; every message is read back once, in order, from the tier.
3. Retention deletes the ledgers it trims from the bucket too.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pulsar
import pytest
import trio
from click.testing import CliRunner

from bk_client import LedgerManager, NoSuchLedger
from magnetar.cli import main
from metadata import open_metadata_store
from tests.support.admin import rest
from tests.support.bookies import RealCluster
from tests.support.brokers import BrokerProcess, wait_bookies
from tests.support.s3server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

BUCKET = "offload-e2e"
LAG_MS = 2000
TOPIC = "persistent://tier/s3/t"
TP = "/admin/v2/persistent/tier/s3/t"


def broker_args(s3: S3Server) -> tuple[str, ...]:
    return (
        "--set",
        "managed_ledger.managedLedgerDefaultEnsembleSize=2",
        "--set",
        "managed_ledger.managedLedgerDefaultWriteQuorum=2",
        "--set",
        "managed_ledger.managedLedgerDefaultAckQuorum=2",
        "--set",
        "managed_ledger.managedLedgerMaxEntriesPerLedger=20",
        "--set",
        "managed_ledger.managedLedgerMinLedgerRolloverTimeMinutes=0",
        "--set",
        "broker.retentionCheckIntervalInSeconds=1",
        "--set",
        "offload.managedLedgerOffloadDriver=S3",
        "--set",
        f"offload.s3ManagedLedgerOffloadBucket={BUCKET}",
        "--set",
        f"offload.s3ManagedLedgerOffloadServiceEndpoint={s3.endpoint}",
        "--set",
        f"offload.s3ManagedLedgerOffloadCredentialId={ACCESS_KEY}",
        "--set",
        f"offload.s3ManagedLedgerOffloadCredentialSecret={SECRET_KEY}",
        "--set",
        "offload.s3ManagedLedgerOffloadReadBufferSizeInBytes=4096",
        "--set",
        f"offload.managedLedgerOffloadDeletionLagMs={LAG_MS}",
    )


def admin(broker: BrokerProcess, *args: str) -> str:
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.admin_url, *args])
    assert result.exit_code == 0, result.output
    return result.output


def explain(broker: BrokerProcess) -> list[dict[str, Any]]:
    return list(rest("GET", broker.admin_url, f"{TP}/explain-storage").json()["ledgers"])


def internal_ledgers(broker: BrokerProcess) -> list[dict[str, Any]]:
    return list(rest("GET", broker.admin_url, f"{TP}/internalStats").json()["ledgers"])


def offload_status(broker: BrokerProcess) -> dict[str, Any]:
    return dict(rest("GET", broker.admin_url, f"{TP}/offload").json())


def produce(client: pulsar.Client, prefix: str, n: int) -> list[bytes]:
    producer = client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=30_000)
    values = [f"{prefix}-{i:04d}".encode() for i in range(n)]
    for v in values:
        producer.send(v)
    producer.close()
    return values


def consume_from_earliest(client: pulsar.Client, expected: int) -> list[bytes]:
    """Every message a new subscription at the earliest position gets: ``expected`` of them, then
    a quiet second (a duplicate or an extra message would arrive in it)."""
    consumer = client.subscribe(
        TOPIC, f"check-{uuid.uuid4().hex[:8]}", initial_position=pulsar.InitialPosition.Earliest
    )
    out = []
    try:
        while len(out) < expected:
            msg = consumer.receive(timeout_millis=30_000)
            out.append(msg.data())
            consumer.acknowledge(msg)
        try:
            out.append(consumer.receive(timeout_millis=1000).data())
        except pulsar.Timeout:
            pass
    finally:
        consumer.unsubscribe()
    return out


def ledger_exists(url: str, ledger_id: int) -> bool:
    async def read() -> bool:
        async with open_metadata_store(url) as store:
            try:
                await LedgerManager(store).read(ledger_id)
            except NoSuchLedger:
                return False
            return True

    return trio.run(read)


def watch_bookie_deletions(broker: BrokerProcess, ledger_ids: set[int]) -> dict[int, tuple[int, dict[str, Any]]]:
    """Poll explain-storage until every ledger of ``ledger_ids`` lives in the tier only; for each,
    the wall time (ms) at which that was first seen and its row then."""
    seen: dict[int, tuple[int, dict[str, Any]]] = {}

    def all_in_tier() -> bool:
        rows = explain(broker)
        now = int(time.time() * 1000)  # after the answer: the state it shows was reached by now
        for row in rows:
            ts = row["tieredStorage"]
            if row["ledgerId"] in ledger_ids and ts["location"] == "tier" and row["ledgerId"] not in seen:
                seen[row["ledgerId"]] = (now, ts)
        return set(seen) == ledger_ids

    wait_until(all_in_tier, f"ledgers {sorted(ledger_ids)} to leave the bookies", timeout_s=60, interval_s=0.1)
    return seen


def test_offload_over_real_bookies_and_sigkill_mid_offload(
    zookeeper: ZooKeeperServer, s3_server: S3Server, tmp_path: Path
) -> None:
    s3_server.create_bucket(BUCKET)
    url = zookeeper.url(f"/tier-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    bookies = RealCluster(tmp_path / "bookies", url)
    broker = BrokerProcess(tmp_path / "broker", url, *broker_args(s3_server))
    try:
        bookies.start(2)
        wait_bookies(url, set(bookies.live_ids))
        broker.start()
        rest("PUT", broker.admin_url, "/admin/v2/tenants/tier", json={"allowedClusters": ["standalone"]})
        rest("PUT", broker.admin_url, "/admin/v2/namespaces/tier/s3")
        rest(
            "POST",
            broker.admin_url,
            "/admin/v2/namespaces/tier/s3/retention",
            json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )

        # 1. manual offload; the bookie copies go once the deletion lag has passed
        with_client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            sent = produce(with_client, "a", 100)  # 20 entries a ledger
            closed = [li["ledgerId"] for li in internal_ledgers(broker)][:-1]  # all but the current one
            assert len(closed) >= 4
            assert "Offload triggered" in admin(broker, "topics", "offload", TOPIC, "-s", "0")
            wait_until(lambda: offload_status(broker)["status"] != "RUNNING", "the manual offload", timeout_s=60)
            assert offload_status(broker)["status"] == "SUCCESS", offload_status(broker)
            assert all(li["offloaded"] for li in internal_ledgers(broker) if li["ledgerId"] in closed)
            deleted = watch_bookie_deletions(broker, set(closed))
            for lid, (seen_ms, ts) in deleted.items():
                assert seen_ms >= ts["offloadedAtMs"] + LAG_MS, (lid, seen_ms, ts)  # never before the lag
                assert not ledger_exists(url, lid)  # deleted in BookKeeper: bookie GC reclaims it
                assert any(ts["uid"] in key for key in s3_server.keys(BUCKET))
            assert consume_from_earliest(with_client, len(sent)) == sent

            # 2. the broker dies (SIGKILL) while a ledger is being offloaded
            more = produce(with_client, "b", 60)
        finally:
            with_client.close()
        s3_server.pause()
        try:
            rest("PUT", broker.admin_url, f"{TP}/offload", json={"ledgerId": 2**62, "entryId": 0, "partitionIndex": -1})

            def started() -> list[dict[str, Any]]:
                return [r for r in explain(broker) if r["tieredStorage"]["state"] == "STARTED"]

            interrupted = wait_until(started, "a ledger recorded STARTED", timeout_s=30)[0]
            broker.kill()
        finally:
            s3_server.resume()
        lid, old_uid = interrupted["ledgerId"], interrupted["tieredStorage"]["uid"]

        broker.start()

        def served_again() -> list[dict[str, Any]] | None:
            # until the killed instance's metadata session expires, its ownership of the bundle
            # stands and the restarted broker redirects (307) to the owner it names
            r = httpx.get(f"{broker.admin_url}{TP}/explain-storage", timeout=15)
            return list(r.json()["ledgers"]) if r.status_code == 200 else None

        ledgers = wait_until(served_again, "the restarted broker to serve the topic", timeout_s=60)
        rows = {r["ledgerId"]: r["tieredStorage"] for r in ledgers}
        assert rows[lid]["state"] == "STARTED" and rows[lid]["location"] == "bookies", rows[lid]
        assert "did not complete" in rows[lid]["bookieCopy"]
        assert ledger_exists(url, lid)
        offloaded = {li["ledgerId"] for li in internal_ledgers(broker) if li["offloaded"]}
        assert offloaded == set(closed)  # nothing incomplete counts as offloaded
        assert all(rows[c]["location"] == "tier" for c in closed)
        with_client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            assert consume_from_earliest(with_client, len(sent) + len(more)) == sent + more

            # the automatic offload retries the interrupted ledger under a new uid (and the others)
            admin(broker, "namespaces", "set-offload-threshold", "tier/s3", "-s", "0")
            rest_of_b = {li["ledgerId"] for li in internal_ledgers(broker)[:-1]} - set(closed)
            assert lid in rest_of_b
            deleted = watch_bookie_deletions(broker, rest_of_b)
            assert deleted[lid][1]["uid"] != old_uid
            assert not [key for key in s3_server.keys(BUCKET) if old_uid in key]
            assert not ledger_exists(url, lid)
            assert consume_from_earliest(with_client, len(sent) + len(more)) == sent + more
        finally:
            with_client.close()
        metrics = rest("GET", broker.admin_url, "/metrics").text
        assert "pulsar_storage_offloaded_size{" in metrics

        # 3. retention (no subscription left, nothing retained) deletes the trimmed ledgers' objects
        uids = [r["tieredStorage"]["uid"] for r in explain(broker) if r["tieredStorage"].get("uid")]
        assert uids and all(any(u in key for key in s3_server.keys(BUCKET)) for u in uids)
        rest(
            "POST",
            broker.admin_url,
            "/admin/v2/namespaces/tier/s3/retention",
            json={"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
        )
        wait_until(
            lambda: not [key for key in s3_server.keys(BUCKET) for u in uids if u in key],
            "retention to delete the trimmed ledgers from the bucket",
            timeout_s=60,
        )
    finally:
        s3_server.resume()
        broker.kill()
        bookies.stop_all()
