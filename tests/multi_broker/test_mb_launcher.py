"""``magnetar cluster start|status|stop`` with real processes: ZooKeeper, 3 bookies,
AutoRecovery and 2 brokers; the official client uses both brokers through one service URL."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pulsar
import pytest

from tests.support.admin import new_namespace, rest
from tests.support.bookies import REPO
from tests.support.clients import drain
from tests.support.ports import free_port
from tests.support.zookeeper import zookeeper_available

from .mb_support import run_magnetar

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper (Debian's zookeeper package) or java is missing")
def test_cluster_launcher_starts_uses_and_stops(tmp_path: Path) -> None:
    d = tmp_path / "cluster"
    started = False
    try:
        run_magnetar(
            "cluster",
            "start",
            "--dir",
            str(d),
            "--brokers",
            "2",
            "--zk-port",
            str(free_port()),
            "--broker-port",
            "0",
            "--web-port",
            "0",
            "--bookie-port",
            "0",
            "--bookie-http-port",
            "0",
            "--broker-conf",
            str(REPO / "deploy" / "broker.toml"),
            "--bookie-conf",
            str(REPO / "deploy" / "bookie.toml"),
        )
        started = True
        status = json.loads(run_magnetar("cluster", "status", "--dir", str(d), "--json"))
        names = sorted(p["name"] for p in status["processes"])
        assert names == ["autorecovery", "bookie-0", "bookie-1", "bookie-2", "broker-0", "broker-1", "zookeeper"]
        assert all(p["running"] for p in status["processes"]), status
        brokers = status["brokers"]
        admin = brokers[0]["admin_url"]
        assert len(rest("GET", admin, "/admin/v2/brokers").json()) == 2
        ns = new_namespace(admin, f"launch{uuid.uuid4().hex[:4]}")
        service_url = "pulsar://" + ",".join(b["service_url"].split("://")[1] for b in brokers)
        client = pulsar.Client(service_url, operation_timeout_seconds=30)
        topics = [f"persistent://{ns}/t{i}" for i in range(8)]
        consumers = [client.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest) for t in topics]
        for t in topics:
            p = client.create_producer(t, batching_enabled=False)
            for i in range(3):
                p.send(f"{t}-{i}".encode())
        for t, c in zip(topics, consumers, strict=True):
            assert [m.data() for m in drain(c)] == [f"{t}-{i}".encode() for i in range(3)]
        client.close()
    finally:
        if started or (d / "cluster.json").exists():
            run_magnetar("cluster", "stop", "--dir", str(d))
    assert not (d / "cluster.json").exists()
