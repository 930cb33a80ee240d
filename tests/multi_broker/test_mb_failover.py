"""Broker failover with two real brokers over real bookies and ZooKeeper, official client.

* SIGTERM on the topic's owner mid-produce: no send fails, nothing receipted is lost, the
  subscription resumes from its (persisted) cursor.
* SIGKILL on the owner: once its session expires the bundle is reassigned and the clients
  resume by themselves; nothing receipted is lost.
* SIGSTOP on the owner past its session timeout: another broker takes the bundle; once resumed,
  the old owner does not write (its managed ledger is fenced, its bundles dropped) and its
  client moves to the new owner.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pulsar
import pytest
import trio

from tests.support.admin import new_namespace
from tests.support.brokers import BrokerProcess
from tests.support.clients import drain
from tests.support.receipts import ReceiptLog, produce_until
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer

from .mb_support import MultiBrokerCluster, owners, sigcont, sigstop, terminate

pytestmark = pytest.mark.slow

SESSION_MS = 4000


def _owner_of(url: str, ns: str, topic: str, cluster: MultiBrokerCluster) -> tuple[BrokerProcess, BrokerProcess]:
    """(owner, other) of the topic's bundle, once the topic is in use."""
    from broker.resources._bundles import bundle_hash, parse_bundle

    h = bundle_hash(topic)
    owned = owners(url, ns)
    owner_url = next(u for name, u in owned.items() if parse_bundle(name).contains(h))
    owner = next(b for b in cluster.brokers if b.service_url == owner_url)
    other = next(b for b in cluster.brokers if b is not owner)
    return owner, other


def _setup(zookeeper: ZooKeeperServer, tmp_path: Path, name: str) -> tuple[str, MultiBrokerCluster]:
    url = zookeeper.url(f"/mb-{name}-{uuid.uuid4().hex[:8]}", session_timeout_ms=SESSION_MS)
    return url, MultiBrokerCluster(tmp_path, url, 2).start()


class _Background:
    """Sends ``prefix-i`` asynchronously from a thread until stopped (paced, queue blocking)."""

    def __init__(self, producer: pulsar.Producer, log: ReceiptLog, prefix: str) -> None:
        self.producer, self.log, self.prefix = producer, log, prefix
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            payload = f"{self.prefix}-{self.sent}".encode()
            self.producer.send_async(payload, self.log.callback(payload))
            self.sent += 1
            time.sleep(0.002)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.producer.flush()


def test_sigterm_moves_the_topic_without_a_failed_send(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url, cluster = _setup(zookeeper, tmp_path, "term")
    try:
        ns = new_namespace(cluster.brokers[0].admin_url, "term")
        topic = f"persistent://{ns}/moving"
        # the client looks up through the broker that stays (its service URL must outlive the other)
        client = pulsar.Client(cluster.brokers[0].service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=500, send_timeout_millis=60000
        )
        owner, other = _owner_of(url, ns, topic, cluster)
        if owner is cluster.brokers[0]:  # swap the client over to the survivor's URL
            client.close()
            client = pulsar.Client(other.service_url, operation_timeout_seconds=30)
            consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(
                topic,
                batching_enabled=False,
                block_if_queue_full=True,
                max_pending_messages=500,
                send_timeout_millis=60000,
            )
        warm = [f"warm-{i}".encode() for i in range(50)]
        for w in warm:
            producer.send(w)
        got = drain(consumer)
        assert [m.data() for m in got] == warm
        log = ReceiptLog()
        bg = _Background(producer, log, "m")
        wait_until(lambda: log.count() >= 200, "200 receipts before the SIGTERM", timeout_s=60)
        assert terminate(owner) == 0, owner.log()[-3000:]
        wait_until(lambda: log.count() >= 600, "receipts after the move", timeout_s=60)
        bg.finish()
        assert log.failed == [], log.failed[:5]
        assert owners(url, ns) and set(owners(url, ns).values()) == {other.service_url}
        after = [m.data() for m in drain(consumer, wait_ms=3000)]
        # the cursor was persisted on unload: nothing acknowledged comes back
        assert not set(after) & set(warm)
        missing = set(log.ok) - set(after)
        assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
        client.close()
    finally:
        cluster.close()


def _cursor_version(url: str, topic: str, cursor: str) -> int:
    """The version of the cursor's node in the store (-1 while it does not exist): +1 per persist."""
    from broker import TopicName
    from metadata import open_metadata_store

    async def read() -> int:
        async with open_metadata_store(url) as store:
            stat = await store.exists(f"/managed-ledgers/{TopicName.parse(topic).managed_ledger_name}/{cursor}")
            return -1 if stat is None else stat.version

    return trio.run(read)


def _wait_cursor_settled(url: str, topic: str, cursor: str, quiet_s: float = 2.5, timeout: float = 60.0) -> None:
    """Block until the cursor was persisted at least once and then not again for ``quiet_s``
    (more than two persist intervals): every acknowledgement sent before is stored."""
    last, since = None, time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        v = _cursor_version(url, topic, cursor)
        if v != last:
            last, since = v, time.monotonic()
        elif v >= 1 and time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.2)
    raise AssertionError(f"cursor {cursor} of {topic} did not settle (version {last})")


def test_sigkill_bundle_reassigned_after_session_expiry(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    # cursors persist every second (Pulsar's default is 60 s), so the test can wait for a persist
    url = zookeeper.url(f"/mb-kill-{uuid.uuid4().hex[:8]}", session_timeout_ms=SESSION_MS)
    cluster = MultiBrokerCluster(
        tmp_path, url, 2, "--set", "managed_ledger.managedLedgerCursorPositionFlushSeconds=1"
    ).start()
    try:
        a, _b = cluster.brokers
        ns = new_namespace(a.admin_url, "kill")
        # topics on both brokers; the client looks up through a broker that survives
        topics = [f"persistent://{ns}/k{i}" for i in range(8)]
        probe = pulsar.Client(a.service_url, operation_timeout_seconds=30)
        for t in topics:
            probe.create_producer(t).close()
        probe.close()
        victim, survivor = _owner_of(url, ns, topics[0], cluster)
        client = pulsar.Client(survivor.service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(topics[0], "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(
            topics[0],
            batching_enabled=False,
            block_if_queue_full=True,
            max_pending_messages=500,
            send_timeout_millis=120000,
        )
        log = ReceiptLog()
        produce_until(producer, log, "before", 300)
        first = [m.data() for m in drain(consumer)]
        assert set(log.ok) <= set(first)
        # the acknowledgements reach the broker within 100 ms and a changed cursor is persisted
        # within the 1 s interval: wait until it was persisted and then stays unchanged
        _wait_cursor_settled(url, topics[0], "sub")
        victim.kill()
        killed_at = time.monotonic()
        more = ReceiptLog()
        sent = 0
        while more.count() == 0 and time.monotonic() - killed_at < 90:
            payload = f"after-{sent}".encode()
            producer.send_async(payload, more.callback(payload))
            sent += 1
            time.sleep(0.05)
        resumed_s = time.monotonic() - killed_at
        print(f"producer resumed {resumed_s:.1f} s after SIGKILL (session timeout {SESSION_MS / 1000:.0f} s)")
        produce_until(producer, more, "after2", more.count() + 200)
        producer.flush()
        assert more.count() > 0 and not more.failed, more.failed[:5]
        assert set(owners(url, ns).values()) == {survivor.service_url}
        after = [m.data() for m in drain(consumer, wait_ms=3000)]
        missing = set(more.ok) - set(after)
        assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
        # the subscription resumed from its persisted cursor: nothing acknowledged came back
        assert not set(after) & set(first), sorted(set(after) & set(first))[:5]
        client.close()
    finally:
        cluster.close()


def test_sigstopped_owner_past_its_session_does_not_write(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url, cluster = _setup(zookeeper, tmp_path, "stop")
    try:
        a, _b = cluster.brokers
        ns = new_namespace(a.admin_url, "stop")
        topic = f"persistent://{ns}/paused"
        setup = pulsar.Client(a.service_url, operation_timeout_seconds=30)
        setup.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
        setup.close()
        old, new = _owner_of(url, ns, topic, cluster)
        # client 1 talks to the owner that will be paused
        c1 = pulsar.Client(new.service_url, operation_timeout_seconds=30)
        p1 = c1.create_producer(
            topic, producer_name="p1", batching_enabled=False, block_if_queue_full=True, send_timeout_millis=120000
        )
        log1 = ReceiptLog()
        produce_until(p1, log1, "p1-before", 50)
        sigstop(old)
        try:
            for i in range(20):  # queued in the paused broker's socket
                payload = f"p1-paused-{i}".encode()
                p1.send_async(payload, log1.callback(payload))
            time.sleep(SESSION_MS / 1000 * 2)  # well past the session timeout
            # client 2 finds the bundle unowned: the other broker takes it (fencing the old owner)
            c2 = pulsar.Client(new.service_url, operation_timeout_seconds=30)
            p2 = c2.create_producer(topic, producer_name="p2", batching_enabled=False)
            for i in range(20):
                p2.send(f"p2-{i}".encode())
            assert set(owners(url, ns).values()) == {new.service_url}
        finally:
            sigcont(old)
        # the old owner finds its session gone: it drops the bundle, and its client moves
        produce_until(p1, log1, "p1-after", log1.count() + 50, deadline_s=90)
        p1.flush()
        assert not log1.failed, log1.failed[:5]
        wait_until(lambda: "metadata session lost" in old.log(), "the old owner to see its session lost", timeout_s=60)
        assert set(owners(url, ns).values()) == {new.service_url}
        reader = c2.subscribe(topic, "sub")
        got = [m.data() for m in drain(reader, wait_ms=3000)]
        missing = set(log1.ok) - set(got)
        assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
        assert {f"p2-{i}".encode() for i in range(20)} <= set(got)
        # nothing written twice: the paused owner's late adds were refused by the fenced ledger
        assert len(got) == len(set(got)), "a message was stored twice"
        c1.close()
        c2.close()
    finally:
        cluster.close()
