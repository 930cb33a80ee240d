"""Non-persistent topics in a two-broker cluster (real processes, ZooKeeper, official client): each
topic is served by its bundle's owner, a client of the other broker is redirected there, and
messages fan out to the connected consumers."""

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


def test_non_persistent_topics_are_served_by_their_bundles_owner(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url(f"/mb-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    cluster = MultiBrokerCluster(tmp_path, url, 2)
    try:
        cluster.start()
        a = cluster.brokers[0]
        ns = new_namespace(a.admin_url, "np")
        topics = [f"non-persistent://{ns}/t{i}" for i in range(12)]
        client = pulsar.Client(a.service_url, operation_timeout_seconds=30)
        try:
            consumers = {t: client.subscribe(t, "s") for t in topics}
            producers = {t: client.create_producer(t, batching_enabled=False) for t in topics}
            for t, p in producers.items():
                for i in range(5):
                    p.send(f"{t}-{i}".encode())
            for t, c in consumers.items():
                assert [m.data() for m in drain(c)] == [f"{t}-{i}".encode() for i in range(5)]
            owned = owners(url, ns)
            assert set(owned.values()) == {x.service_url for x in cluster.brokers}, owned
            # each broker lists (and reports stats of) only the non-persistent topics it serves
            listed = [set(rest("GET", b.admin_url, f"/admin/v2/non-persistent/{ns}").json()) for b in cluster.brokers]
            assert listed[0] | listed[1] == set(topics) and not listed[0] & listed[1], listed
        finally:
            client.close()
    finally:
        cluster.close()
