"""A cluster whose ZooKeeper hop is TLS: a ``magnetar bookie``, a ``magnetar broker`` and a
``magnetar autorecovery`` process, each given the same ZooKeeper client configuration file
(``metadataStoreConfigPath``, as Pulsar takes it) against a ZooKeeper that serves only a TLS port and
requires client certificates. The official client produces and consumes through it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest
import trio

from bk_client import LedgerManager
from metadata import ZkTls, open_metadata_store
from tests.support.bookies import MagnetarProcess, RealCluster
from tests.support.brokers import BrokerProcess
from tests.support.clients import drain
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

TOPIC = "persistent://public/default/zk-tls-topic"


def _wait_bookies(url: str, tls: ZkTls, n: int, timeout: float = 60.0) -> list[str]:
    async def wait() -> list[str]:
        async with open_metadata_store(url, tls=tls) as store:
            manager = LedgerManager(store)
            with trio.move_on_after(timeout):
                while len(ids := await manager.list_bookies()) < n:
                    await trio.sleep(0.1)
                return ids
            raise AssertionError(f"fewer than {n} bookies registered")

    return trio.run(wait)


def test_cluster_runs_over_a_tls_zookeeper(zookeeper_tls: ZooKeeperServer, tmp_path: Path) -> None:
    assert zookeeper_tls.tls is not None
    client_conf = zookeeper_tls.tls.client_config(tmp_path / "zk-client.conf")
    tls = ZkTls.from_config_file(str(client_conf))
    assert tls is not None
    url = f"zk://127.0.0.1:{zookeeper_tls.port}/zktls-{uuid.uuid4().hex[:10]}?session_timeout_ms=4000"
    bookies = RealCluster(tmp_path / "bookies", url, ["--set", f"metadataStoreConfigPath={client_conf}"])
    broker = BrokerProcess(
        tmp_path / "broker",
        url,
        "--set",
        f"cluster.metadataStoreConfigPath={client_conf}",
        "--set",
        "managed_ledger.managedLedgerDefaultEnsembleSize=1",
        "--set",
        "managed_ledger.managedLedgerDefaultWriteQuorum=1",
        "--set",
        "managed_ledger.managedLedgerDefaultAckQuorum=1",
    )
    autorecovery: MagnetarProcess | None = None
    client: pulsar.Client | None = None
    try:
        bookies.start(1)
        _wait_bookies(url, tls, 1)
        broker.start()
        autorecovery = MagnetarProcess(
            ["autorecovery", "--metadata-url", url, "--set", f"metadataStoreConfigPath={client_conf}"],
            tmp_path / "autorecovery.log",
        )
        line = autorecovery.first_line()
        assert "running" in line, (line, (tmp_path / "autorecovery.log").read_text())

        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(TOPIC)
        sent = [f"m-{i}".encode() for i in range(20)]
        for payload in sent:
            producer.send(payload)
        assert [m.data() for m in drain(consumer)] == sent
    finally:
        if client is not None:
            client.close()
        if autorecovery is not None:
            autorecovery.stop()
        broker.stop()
        bookies.stop_all()
