"""Two and three real broker processes over real bookies and ZooKeeper, with the official client:
a namespace's bundles spread over every broker, a client of broker A using topics owned by the
others is redirected and works, and a partitioned topic's partitions are served where their
bundles are."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest

from tests.support.admin import new_namespace, rest
from tests.support.clients import drain
from tests.support.zookeeper import ZooKeeperServer

from .mb_support import MultiBrokerCluster, owners

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("n_brokers", [2, 3])
def test_topics_spread_and_redirect_works(zookeeper: ZooKeeperServer, tmp_path: Path, n_brokers: int) -> None:
    url = zookeeper.url(f"/mb-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    cluster = MultiBrokerCluster(tmp_path, url, n_brokers)
    try:
        cluster.start()
        a = cluster.brokers[0]
        ns = new_namespace(a.admin_url, "spread")
        topics = [f"persistent://{ns}/t{i}" for i in range(16)]
        client = pulsar.Client(a.service_url, operation_timeout_seconds=30)
        try:
            consumers = {t: client.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest) for t in topics}
            producers = {t: client.create_producer(t, batching_enabled=False) for t in topics}
            for t, p in producers.items():
                for i in range(5):
                    p.send(f"{t}-{i}".encode())
            owned = owners(url, ns)
            # 4 bundles (the default) over the brokers: every broker owns some
            assert len(owned) == 4, owned
            assert set(owned.values()) == {x.service_url for x in cluster.brokers}, owned
            for t, c in consumers.items():
                assert [m.data() for m in drain(c)] == [f"{t}-{i}".encode() for i in range(5)]

            # a partitioned topic: each partition is looked up (and served) on its own
            rest("PUT", a.admin_url, f"/admin/v2/persistent/{ns}/parted/partitions", json=6)
            parted = f"persistent://{ns}/parted"
            pc = client.subscribe(parted, "s", initial_position=pulsar.InitialPosition.Earliest)
            pp = client.create_producer(parted, batching_enabled=False)
            for i in range(60):
                pp.send(f"p-{i}".encode(), partition_key=str(i))
            assert sorted(m.data() for m in drain(pc)) == sorted(f"p-{i}".encode() for i in range(60))
        finally:
            client.close()
    finally:
        cluster.close()
