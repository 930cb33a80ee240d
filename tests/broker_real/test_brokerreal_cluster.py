"""A broker process over real bookie processes and ZooKeeper, with the official client.

ZooKeeper + 4 ``magnetar bookie`` processes (E=3 Qw=2 Qa=2 leaves one spare for the ensemble
change) + a ``magnetar broker`` process. One test walks through the phases on one cluster:

1. produce and consume;
2. SIGKILL a bookie of the current ledger's ensemble while a producer sends: the ledger's
   ensemble changes, every receipted message is consumed;
3. SIGKILL the broker, start a new broker process: a fresh subscription from the earliest
   position reads every receipted message exactly once.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pulsar
import pytest

from tests.support.admin import rest
from tests.support.bookies import RealCluster
from tests.support.brokers import BrokerProcess, ledger_ensembles, wait_bookies
from tests.support.clients import drain
from tests.support.receipts import ReceiptLog, produce_until
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

N_BOOKIES = 4
BROKER_ARGS = (
    "--set",
    "managed_ledger.managedLedgerDefaultEnsembleSize=3",
    "--set",
    "managed_ledger.managedLedgerDefaultWriteQuorum=2",
    "--set",
    "managed_ledger.managedLedgerDefaultAckQuorum=2",
    # a dead bookie is given up on (ensemble change) after 2 s instead of 5
    "--set",
    "bk_client.add_entry_timeout_s=2",
)
TOPIC = "persistent://public/default/cluster-topic"


def test_cluster_survives_bookie_and_broker_kill(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url(f"/brokerreal-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    bookies = RealCluster(tmp_path / "bookies", url)
    broker = BrokerProcess(tmp_path / "broker", url, *BROKER_ARGS)
    try:
        bookies.start(N_BOOKIES)
        wait_bookies(url, set(bookies.live_ids))
        broker.start()
        rest(
            "POST",
            broker.admin_url,
            "/admin/v2/namespaces/public/default/retention",
            json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )

        # 1. produce and consume
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=20)
        live = client.subscribe(TOPIC, "live", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(
            TOPIC, batching_enabled=False, block_if_queue_full=True, max_pending_messages=200, send_timeout_millis=30000
        )
        for i in range(50):
            producer.send(f"warm-{i}".encode())
        assert [m.data() for m in drain(live)] == [f"warm-{i}".encode() for i in range(50)]

        # 2. a bookie of the current ensemble dies while messages are being sent
        ledger_id = rest(
            "GET", broker.admin_url, "/admin/v2/persistent/public/default/cluster-topic/internalStats"
        ).json()["ledgers"][-1]["ledgerId"]
        victim = ledger_ensembles(url, ledger_id)[-1][1][0]
        log = ReceiptLog()
        produce_until(producer, log, "a", 200)
        bookies.kill(victim)
        produce_until(producer, log, "b", log.count() + 300)
        producer.flush()
        segments = ledger_ensembles(url, ledger_id)
        assert len(segments) >= 2 and victim not in segments[-1][1], segments
        receipted = set(log.ok)
        assert len(receipted) >= 500 and not log.failed, log.failed[:5]
        got = [m.data() for m in drain(live)]
        assert set(got) >= receipted
        assert len(got) == len(set(got))

        # 3. the broker dies mid-produce; a new broker process takes over the topic
        more = ReceiptLog()
        produce_until(producer, more, "c", 200)
        broker.kill()
        client.close()
        receipted |= set(more.ok)
        broker.start()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=20)
        fresh = client.subscribe(TOPIC, "fresh", initial_position=pulsar.InitialPosition.Earliest)
        everything = [m.data() for m in drain(fresh, wait_ms=3000)]
        client.close()
        assert len(everything) == len(set(everything)), "a message was delivered twice"
        missing = receipted - set(everything)
        assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
        assert {f"warm-{i}".encode() for i in range(50)} <= set(everything)
    finally:
        broker.stop()
        bookies.stop_all()


def test_a_clean_stop_under_load_finishes_and_keeps_every_ack(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    # Before: SIGINT cancelled the BookKeeper client's connection tasks together with the broker,
    # so closing the topics (finishing adds in flight, persisting cursors) waited forever for
    # answers nobody read, and the broker had to be SIGKILLed.
    url = zookeeper.url(f"/brokerreal-stop-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    bookies = RealCluster(tmp_path / "bookies", url)
    broker = BrokerProcess(tmp_path / "broker", url, *BROKER_ARGS)
    try:
        bookies.start(3)
        wait_bookies(url, set(bookies.live_ids))
        for round_ in range(2):
            broker.start()
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=20)
            consumer = client.subscribe(TOPIC + "-stop", "s", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(TOPIC + "-stop", batching_enabled=False, block_if_queue_full=True)
            log = ReceiptLog()
            produce_until(producer, log, f"r{round_}-", 300)
            acked = set()
            for _ in range(100):
                msg = consumer.receive(10_000)
                consumer.acknowledge(msg)
                acked.add(msg.data())
            time.sleep(0.3)  # the acks reach the broker (grouped every 100 ms)
            for i in range(200):  # still sending when the broker is told to stop
                producer.send_async(f"late-{round_}-{i}".encode(), None)
            assert broker.stop() == 0, broker.log()[-3000:]  # SIGINT; -9 means it had to be killed
            client.close()
        broker.start()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=20)
        rest_ = {m.data() for m in drain(client.subscribe(TOPIC + "-stop", "s"), wait_ms=3000)}
        client.close()
        assert not acked & rest_, "messages acknowledged before a clean stop were delivered again"
    finally:
        broker.stop()
        bookies.stop_all()
