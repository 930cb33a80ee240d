"""``magnetar initialize-cluster-metadata`` on a real ZooKeeper, then real bookies and a broker on
what it wrote, used through the official client; running it again changes nothing and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pulsar
import pytest
import trio

from metadata import open_metadata_store
from tests.support.bookies import REPO, RealCluster, wait_registered
from tests.support.brokers import BrokerProcess


def _init(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar", "initialize-cluster-metadata", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def _node(url: str, path: str) -> bytes | None:
    async def read() -> bytes | None:
        async with open_metadata_store(url) as store:
            if await store.exists(path) is None:
                return None
            return (await store.get(path))[0]

    return trio.run(read)


@pytest.mark.parametrize(
    "args, message",
    [
        (["-c", "bad name", "--metadata-store", "memory://x"], "invalid cluster name"),
        (["-c", "c1"], "--metadata-store (or --zookeeper) is required"),
        (["-c", "c1", "--metadata-store", "memory://x", "--zookeeper", "h:1"], "not both"),
        (["-c", "c1", "--metadata-store", "memory://x", "--broker-service-url", "http://b:6650"], "pulsar://"),
        (
            ["-c", "c1", "--metadata-store", "memory://x", "--configuration-metadata-store", "zk://other:2181"],
            "one store",
        ),
    ],
)
def test_bad_arguments_exit_2_with_the_reason(args: list[str], message: str) -> None:
    result = _init(*args)
    assert result.returncode == 2, result
    assert message in result.stderr


@pytest.mark.slow
def test_initialize_then_run_bookies_and_a_broker_on_it(zk_url: str, tmp_path: Path) -> None:
    args = [
        "--cluster",
        "east",
        "--metadata-store",
        zk_url,
        "--web-service-url",
        "http://broker-1:8080",
        "--broker-service-url",
        "pulsar://broker-1:6650",
    ]
    first = _init(*args)
    assert first.returncode == 0, first.stderr
    assert "Cluster metadata for 'east' initialized." in first.stdout
    cluster = json.loads(_node(zk_url, "/admin/clusters/east") or b"{}")
    assert cluster["serviceUrl"] == "http://broker-1:8080"
    assert cluster["brokerServiceUrl"] == "pulsar://broker-1:6650"
    assert json.loads(_node(zk_url, "/admin/policies/public") or b"{}")["allowedClusters"] == ["east"]
    assert json.loads(_node(zk_url, "/admin/policies/public/default") or b"{}")["replication_clusters"] == ["east"]
    # BookKeeper's default layout, as `bookkeeper shell initnewcluster` records it
    assert _node(zk_url, "/ledgers/LAYOUT") == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
    instance_id = _node(zk_url, "/ledgers/INSTANCEID")
    assert instance_id
    # one transaction coordinator per partition, 16 as Pulsar's initialize-cluster-metadata makes
    assign = _node(zk_url, "/admin/partitioned-topics/pulsar/system/persistent/transaction_coordinator_assign")
    assert json.loads(assign or b"{}")["partitions"] == 16

    again = _init(*args)
    assert again.returncode == 0, again.stderr
    assert "already initialized: nothing changed" in again.stdout
    assert _node(zk_url, "/ledgers/INSTANCEID") == instance_id

    bookies = RealCluster(tmp_path / "bookies", zk_url)
    broker = BrokerProcess(tmp_path / "broker", zk_url, "--set", "broker.cluster_name=east")
    try:
        bookies.start(2)
        wait_registered(zk_url, 2)
        broker.start()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30, logger=None)
        try:
            consumer = client.subscribe("after-init", "s")
            client.create_producer("after-init").send(b"hello")
            assert consumer.receive(timeout_millis=20_000).data() == b"hello"
        finally:
            client.close()
        r = httpx.get(f"{broker.admin_url}/admin/v2/namespaces/public", timeout=10)
        assert r.status_code == 200 and "public/default" in r.json(), r.text
    finally:
        broker.stop()
        bookies.stop_all()
