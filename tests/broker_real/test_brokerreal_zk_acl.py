"""A cluster with ZooKeeper digest ACLs (``zkEnableSecurity`` + ``zkDigestCredentials``): a
``magnetar bookie``, a ``magnetar broker`` and a ``magnetar autorecovery`` process, all with the
same credential, over a real ZooKeeper. The official client produces and consumes through it;
every node the cluster created carries only the credential's CREATOR_ALL ACL, and a ZooKeeper
session without the credential (or with another one) cannot read, change, delete or add nodes:
it cannot unregister a bookie, rewrite a topic's ledger list or vote in the auditor election."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from bk_client import LedgerManager
from metadata import ZkSecurity, open_metadata_store
from tests.support.bookies import MagnetarProcess, RealCluster
from tests.support.brokers import BrokerProcess
from tests.support.clients import drain
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

CREDENTIAL = "magnetar:zk-s3cret"
TOPIC = "persistent://public/default/zk-acl-topic"


def _wait_bookies(url: str, n: int, timeout: float = 60.0) -> list[str]:
    async def wait() -> list[str]:
        async with open_metadata_store(url, security=ZkSecurity(CREDENTIAL)) as store:
            manager = LedgerManager(store)
            with trio.move_on_after(timeout):
                while len(ids := await manager.list_bookies()) < n:
                    await trio.sleep(0.1)
                return ids
            raise AssertionError(f"fewer than {n} bookies registered")

    return trio.run(wait)


def _tree(client: KazooClient, path: str) -> list[str]:
    out = [path]
    for kid in client.get_children(path):
        out += _tree(client, f"{path.rstrip('/')}/{kid}")
    return out


def test_cluster_runs_with_digest_acls_and_strangers_cannot_touch_its_nodes(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/zkacl-{uuid.uuid4().hex[:10]}"
    url = zookeeper.url(chroot, session_timeout_ms=4000)
    secure = ["--set", "zkEnableSecurity=true", "--set", f"zkDigestCredentials={CREDENTIAL}"]
    bookies = RealCluster(tmp_path / "bookies", url, secure)
    broker = BrokerProcess(
        tmp_path / "broker",
        url,
        "--set",
        "cluster.zkEnableSecurity=true",
        "--set",
        f"cluster.zkDigestCredentials={CREDENTIAL}",
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
        (bookie_id,) = _wait_bookies(url, 1)
        broker.start()
        autorecovery = MagnetarProcess(["autorecovery", "--metadata-url", url, *secure], tmp_path / "autorecovery.log")
        line = autorecovery.first_line()
        assert "running" in line, (line, (tmp_path / "autorecovery.log").read_text())

        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(TOPIC)
        sent = [f"m-{i}".encode() for i in range(20)]
        for payload in sent:
            producer.send(payload)
        assert [m.data() for m in drain(consumer)] == sent

        owner = KazooClient(hosts=zookeeper.hosts, auth_data=[("digest", CREDENTIAL)])
        owner.start(timeout=10)
        strangers = [
            KazooClient(hosts=zookeeper.hosts),
            KazooClient(hosts=zookeeper.hosts, auth_data=[("digest", "magnetar:wrong")]),
        ]
        try:
            nodes = _tree(owner, chroot)
            # the cluster wrote its bookie, ledger, managed-ledger and auditor nodes...
            registration = f"{chroot}/ledgers/available/{bookie_id}"
            assert registration in nodes
            managed = [p for p in nodes if p.startswith(f"{chroot}/managed-ledgers/") and p.endswith("zk-acl-topic")]
            assert managed, nodes
            assert any("auditor" in p or "underreplication" in p for p in nodes), nodes
            # ...each with the credential's identity alone, holding every permission
            for path in nodes:
                acls, _ = owner.get_acls(path)
                assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls] == [
                    ("digest", "magnetar", Permissions.ALL)
                ], path
            for stranger in strangers:
                stranger.start(timeout=10)
                for path in (registration, managed[0], f"{chroot}/ledgers"):
                    with pytest.raises(NoAuthError):
                        stranger.get(path)
                    with pytest.raises(NoAuthError):
                        stranger.set(path, b"forged")
                with pytest.raises(NoAuthError):
                    stranger.delete(registration)  # unregister the bookie
                with pytest.raises(NoAuthError):
                    stranger.delete(managed[0], recursive=True)  # drop the topic's ledgers
                with pytest.raises(NoAuthError):
                    stranger.create(f"{chroot}/ledgers/available/fake:3181", ephemeral=True)
            # nothing changed: the cluster goes on
            producer.send(b"after")
            assert [m.data() for m in drain(consumer)] == [b"after"]
            assert owner.exists(registration) is not None
        finally:
            for zk in (owner, *strangers):
                zk.stop()
                zk.close()
    finally:
        if client is not None:
            client.close()
        if autorecovery is not None:
            autorecovery.stop()
        broker.stop()
        bookies.stop_all()


def _produce_consume(url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"s{i}".encode())
        return [m.data() for m in drain(consumer)]
    finally:
        client.close()


async def test_standalone_on_zookeeper_uses_one_credential(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """A standalone with zk:// metadata and the [bookie] zkEnableSecurity keys: its broker session
    and its bookies share the credential, so the broker finds its bookies and topics work; the
    nodes are closed to anyone else."""
    from bk_client import ClientConfig
    from bookie import BookieConfig
    from broker import BrokerConfig
    from magnetar.common.config import load_config
    from magnetar.stack import StandaloneConfig, serve_standalone
    from managed_ledger import ManagedLedgerConfig

    chroot = f"/zkacl-sa-{uuid.uuid4().hex[:10]}"
    url = zookeeper.url(chroot)
    broker = load_config(BrokerConfig, {"bindAddress": "127.0.0.1", "brokerServicePort": 0, "webServicePort": 0})
    bookie = load_config(
        BookieConfig,
        {
            "listen_address": "127.0.0.1",
            "http_address": "127.0.0.1",
            "journal_prealloc_size_mb": 1,
            "write_cache_max_mb": 4,
            "read_cache_max_mb": 4,
            "zkEnableSecurity": True,
            "zkDigestCredentials": CREDENTIAL,
        },
    )
    standalone = StandaloneConfig(data_dir=str(tmp_path / "data"), bookie_port=0, bookie_http_port=0, metadata_url=url)
    async with trio.open_nursery() as nursery:
        ep = await nursery.start(
            lambda task_status: serve_standalone(
                standalone, broker, bookie, ManagedLedgerConfig(), ClientConfig(), task_status=task_status
            )
        )
        got = await trio.to_thread.run_sync(
            _produce_consume, ep.broker.service_url, "persistent://public/default/zk-acl-standalone"
        )
        assert got == [f"s{i}".encode() for i in range(5)]
        async with open_metadata_store(url) as stranger:
            from metadata import NoAuthError as StoreNoAuth

            with pytest.raises(StoreNoAuth):
                await stranger.children("/ledgers/available")
            with pytest.raises(StoreNoAuth):
                await stranger.create("/intruder", b"")
        nursery.cancel_scope.cancel()
