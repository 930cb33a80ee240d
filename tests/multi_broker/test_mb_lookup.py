"""Two real broker processes over real bookies and ZooKeeper, with the official client:
bundles spread over both brokers, and a client of broker A using topics owned by B is
redirected and works."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest

from tests.broker_real.brokerreal_support import drain, new_namespace
from tests.support.zookeeper import ZooKeeperServer

from .mb_support import MultiBrokerCluster, owners

pytestmark = pytest.mark.slow


def test_topics_spread_and_redirect_works(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url(f"/mb-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    cluster = MultiBrokerCluster(tmp_path, url, 2)
    try:
        cluster.start()
        a, b = cluster.brokers
        ns = new_namespace(a.admin_url, "spread")
        topics = [f"persistent://{ns}/t{i}" for i in range(16)]
        client = pulsar.Client(a.service_url, operation_timeout_seconds=30)
        try:
            consumers = {t: client.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest)
                         for t in topics}
            producers = {t: client.create_producer(t, batching_enabled=False) for t in topics}
            for t, p in producers.items():
                for i in range(5):
                    p.send(f"{t}-{i}".encode())
            owned = owners(url, ns)
            # 4 bundles (the default) over 2 brokers: both own some
            assert len(owned) == 4, owned
            assert set(owned.values()) == {a.service_url, b.service_url}, owned
            for t, c in consumers.items():
                assert [m.data() for m in drain(c)] == [f"{t}-{i}".encode() for i in range(5)]
        finally:
            client.close()
    finally:
        cluster.close()
