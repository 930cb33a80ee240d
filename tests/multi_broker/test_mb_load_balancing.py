"""The load manager leader at work with two real brokers: it splits a bundle holding more topics
than ``loadBalancerNamespaceBundleMaxTopics`` and sheds bundles of a broker above the threshold
(here set below zero so that shedding happens on an idle machine), while producers keep
sending: no send fails, nothing receipted is lost, and each decision is visible with its reason."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import httpx
import pulsar
import pytest

from tests.support.admin import rest
from tests.support.clients import drain
from tests.support.receipts import ReceiptLog
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer

from .mb_support import MultiBrokerCluster

pytestmark = pytest.mark.slow

LB_ARGS = (
    "--set",
    "broker.loadBalancerSheddingIntervalMinutes=0.05",
    "--set",
    "broker.loadBalancerNamespaceBundleMaxTopics=3",
    "--set",
    "broker.loadBalancerBrokerThresholdShedderPercentage=-1000",
)


def _decisions(cluster: MultiBrokerCluster) -> list[dict]:
    out = []
    for b in cluster.brokers:
        r = httpx.get(f"{b.admin_url}/admin/v2/broker-stats/load-decisions", timeout=15)
        if r.status_code == 200:
            out += r.json()
    return out


def test_leader_splits_and_sheds_under_load(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url(f"/mb-lb-{uuid.uuid4().hex[:8]}", session_timeout_ms=4000)
    cluster = MultiBrokerCluster(tmp_path, url, 2, *LB_ARGS).start()
    try:
        a = cluster.brokers[0]
        ns = f"public/lb-{uuid.uuid4().hex[:6]}"
        rest("PUT", a.admin_url, f"/admin/v2/namespaces/{ns}", json={"bundles": {"numBundles": 1}})
        topics = [f"persistent://{ns}/t{i}" for i in range(8)]
        client = pulsar.Client(a.service_url, operation_timeout_seconds=60)
        consumers = [client.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest) for t in topics]
        producers = [
            client.create_producer(
                t, batching_enabled=False, block_if_queue_full=True, max_pending_messages=200, send_timeout_millis=60000
            )
            for t in topics
        ]
        log = ReceiptLog()
        stop = threading.Event()

        def run() -> None:
            i = 0
            while not stop.is_set():
                for p in producers:
                    payload = f"{p.topic()}-{i}".encode()
                    p.send_async(payload, log.callback(payload))
                i += 1
                time.sleep(0.01)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            wait_until(
                lambda: rest("GET", a.admin_url, f"/admin/v2/namespaces/{ns}/bundles").json()["numBundles"] > 1,
                "an automatic bundle split",
                timeout_s=90,
            )
            wait_until(
                lambda: any(d["action"] == "shed" for d in _decisions(cluster)), "a shedding decision", timeout_s=90
            )
        finally:
            stop.set()
            thread.join(30)
        for p in producers:
            p.flush()
        decisions = _decisions(cluster)
        splits = [d for d in decisions if d["action"] == "auto-split"]
        assert splits and "topics > 3" in splits[0]["reason"], decisions
        sheds = [d for d in decisions if d["action"] == "shed"]
        assert sheds and "threshold" in sheds[0]["reason"], decisions
        assert not log.failed, log.failed[:5]
        got: set[bytes] = set()
        for c in consumers:
            got |= {m.data() for m in drain(c, wait_ms=3000)}
        missing = set(log.ok) - got
        assert log.count() > 100 and not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
        client.close()
    finally:
        cluster.close()
