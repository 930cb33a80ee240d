"""The topic side of transactions, driven over the wire as a transactional client and a coordinator
would drive it (no coordinator runs): transactional SENDs held until their commit, aborted ones
never delivered, plain messages kept in order behind open transactions, acks held by
transactions with Pulsar's conflicts, committed or released by the end."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import trio

from broker.topics._entries import ack_set_words
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.broker_thread import BrokerThread, loopback_config
from tests.support.txn_peer import ABORT, COMMIT, TxnPeer

_topics = itertools.count()
EXCLUSIVE = pb.CommandSubscribe.Exclusive


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    """A broker with transactions on: without, transactional requests are refused, as in Pulsar."""
    with BrokerThread(loopback_config(transaction_coordinator_enabled=True)) as b:
        yield b


@pytest.fixture
def peer(broker: BrokerThread) -> Iterator[TxnPeer]:
    p = TxnPeer(broker.port)
    try:
        yield p
    finally:
        p.close()


def _topic() -> str:
    return f"persistent://public/default/txn-topic-{next(_topics)}"


def test_open_transaction_holds_everything_after_it_and_commit_releases_in_order(peer: TxnPeer) -> None:
    topic = _topic()
    peer.subscribe(topic, "s", 1)
    peer.producer(topic, 1)
    peer.send(1, 0, b"plain-before")
    peer.send(1, 1, b"txn-a", txn=(1, 7))
    peer.send(1, 2, b"plain-after")
    peer.send(1, 3, b"txn-b", txn=(1, 7))
    peer.drain()
    assert peer.payloads(1) == [b"plain-before"]  # the rest waits behind the open transaction

    answer = peer.end_on_partition(topic, (1, 7), COMMIT)
    assert not answer.HasField("error"), answer
    peer.drain()
    # the marker is not delivered; everything else comes in stored order
    assert peer.payloads(1) == [b"plain-before", b"txn-a", b"plain-after", b"txn-b"]


def test_aborted_messages_are_never_delivered_and_later_subscriptions_skip_them(peer: TxnPeer) -> None:
    topic = _topic()
    peer.subscribe(topic, "s", 1)
    peer.producer(topic, 1)
    peer.send(1, 0, b"a1", txn=(2, 1), txn_in_metadata=False)  # as the Go client sends it
    peer.send(1, 1, b"c1", txn=(2, 2))
    peer.send(1, 2, b"plain")
    assert not peer.end_on_partition(topic, (2, 1), ABORT).HasField("error")
    peer.drain()
    assert peer.payloads(1) == []  # (2, 2) is still open and first: nothing passes it
    assert not peer.end_on_partition(topic, (2, 2), COMMIT).HasField("error")
    peer.drain()
    assert peer.payloads(1) == [b"c1", b"plain"]
    # ending again the same way succeeds (a coordinator retries); the other way is refused
    assert not peer.end_on_partition(topic, (2, 1), ABORT).HasField("error")
    refused = peer.end_on_partition(topic, (2, 1), COMMIT)
    assert refused.error == pb.InvalidTxnStatus
    # a new subscription from the earliest position sees the same
    peer.subscribe(topic, "late", 2)
    peer.drain()
    assert peer.payloads(2) == [b"c1", b"plain"]
    # a SEND in a transaction that ended here is refused
    assert peer.send_error(1, 3, b"late", (2, 1)).error == pb.NotAllowedError


def test_acks_in_a_transaction_conflict_as_in_pulsar_and_commit_makes_them_real(peer: TxnPeer) -> None:
    topic = _topic()
    peer.subscribe(topic, "s", 1)
    peer.producer(topic, 1)
    positions = [peer.send(1, i, f"m{i}".encode()) for i in range(3)]
    peer.drain()
    assert peer.payloads(1) == [b"m0", b"m1", b"m2"]

    assert not peer.ack(1, [positions[0]], txn=(3, 1)).HasField("error")
    # the same message in another transaction, or again in the same one: conflict
    assert peer.ack(1, [positions[0]], txn=(3, 2)).error == pb.TransactionConflict
    assert peer.ack(1, [positions[0]], txn=(3, 1)).error == pb.TransactionConflict
    # one already acknowledged outside any transaction: conflict
    assert not peer.ack(1, [positions[1]]).HasField("error")
    assert peer.ack(1, [positions[1]], txn=(3, 2)).error == pb.TransactionConflict

    assert not peer.end_on_subscription(topic, "s", (3, 1), COMMIT).HasField("error")
    assert not peer.end_on_subscription(topic, "s", (3, 1), COMMIT).HasField("error")  # idempotent
    # after the commit m0 is acknowledged: another consumer gets only m2 again
    peer.close_consumer(1)
    peer.subscribe(topic, "s", 2)
    peer.drain()
    assert peer.payloads(2) == [b"m2"]


def test_abort_releases_held_acks_for_redelivery_and_held_ones_are_not_redelivered_meanwhile(
    peer: TxnPeer,
) -> None:
    topic = _topic()
    peer.subscribe(topic, "s", 1)
    peer.producer(topic, 1)
    positions = [peer.send(1, i, f"m{i}".encode()) for i in range(2)]
    peer.drain()
    assert not peer.ack(1, [positions[0]], txn=(4, 1)).HasField("error")
    # the consumer leaves: what it held unacked goes to the next one, but not what the txn holds
    peer.close_consumer(1)
    peer.subscribe(topic, "s", 2)
    peer.drain()
    assert peer.payloads(2) == [b"m1"]
    assert not peer.end_on_subscription(topic, "s", (4, 1), ABORT).HasField("error")
    peer.drain()
    assert peer.payloads(2) == [b"m1", b"m0"]  # released by the abort: delivered again


def test_cumulative_acks_in_transactions(peer: TxnPeer) -> None:
    topic = _topic()
    peer.subscribe(topic, "s", 1, sub_type=EXCLUSIVE)
    peer.producer(topic, 1)
    positions = [peer.send(1, i, f"m{i}".encode()) for i in range(4)]
    peer.drain()
    assert not peer.ack(1, [positions[1]], txn=(5, 1), cumulative=True).HasField("error")
    # another transaction's cumulative ack while (5, 1) holds one: conflict; the same one going back too
    assert peer.ack(1, [positions[2]], txn=(5, 2), cumulative=True).error == pb.TransactionConflict
    assert peer.ack(1, [positions[0]], txn=(5, 1), cumulative=True).error == pb.TransactionConflict
    assert not peer.ack(1, [positions[2]], txn=(5, 1), cumulative=True).HasField("error")
    assert not peer.end_on_subscription(topic, "s", (5, 1), COMMIT).HasField("error")
    # at or before the mark-delete position: conflict
    assert peer.ack(1, [positions[2]], txn=(5, 3), cumulative=True).error == pb.TransactionConflict
    peer.close_consumer(1)
    peer.subscribe(topic, "s", 2, sub_type=EXCLUSIVE)
    peer.drain()
    assert peer.payloads(2) == [b"m3"]


def test_end_on_a_topic_that_does_not_exist_fails_and_shared_subscriptions_refuse_cumulative(peer: TxnPeer) -> None:
    answer = peer.end_on_partition("persistent://public/no-such-ns/t", (6, 1), COMMIT)
    assert answer.HasField("error")
    topic = _topic()
    peer.subscribe(topic, "s", 1)
    peer.producer(topic, 1)
    pos = peer.send(1, 0, b"m")
    peer.drain()
    assert peer.ack(1, [pos], txn=(6, 2), cumulative=True).error == pb.NotAllowedError


def test_state_is_taken_back_from_the_snapshot_after_an_unload(broker: BrokerThread, peer: TxnPeer) -> None:
    # closing the topic snapshots the buffer (its cursor moves past the abort marker, so only
    # the snapshot can tell the aborted transaction after the reload)
    topic = _topic()
    peer.subscribe(topic, "s", 1)
    peer.producer(topic, 1)
    peer.send(1, 0, b"x1", txn=(7, 1), txn_in_metadata=False)  # as the Go client sends it
    peer.send(1, 1, b"p1")
    assert not peer.end_on_partition(topic, (7, 1), ABORT).HasField("error")
    peer.send(1, 2, b"y1", txn=(7, 2))  # open across the unload
    peer.send(1, 3, b"p2")
    peer.drain()
    assert peer.payloads(1) == [b"p1"]
    peer.close()

    async def unload() -> None:
        service = broker.service
        assert service is not None
        await service.unload(service.topics[topic])

    broker.call(unload)
    again = TxnPeer(broker.port)
    try:
        again.subscribe(topic, "fresh", 2)
        again.drain()
        assert again.payloads(2) == [b"p1"]
        assert not again.end_on_partition(topic, (7, 2), COMMIT).HasField("error")
        again.drain()
        assert again.payloads(2) == [b"p1", b"y1", b"p2"]
    finally:
        again.close()


def test_last_message_id_is_never_past_an_open_transaction_nor_a_marker(peer: TxnPeer) -> None:
    # a reader asks it to know whether a message is available: it must be one it can get
    topic = _topic()
    peer.subscribe(topic, "s", 1)
    peer.producer(topic, 1)
    p0 = peer.send(1, 0, b"p0")
    a1 = peer.send(1, 1, b"a1", txn=(8, 1))
    peer.send(1, 2, b"b1", txn=(8, 2))
    assert peer.last_message_id(1) == p0
    assert not peer.end_on_partition(topic, (8, 1), COMMIT).HasField("error")
    assert not peer.end_on_partition(topic, (8, 2), ABORT).HasField("error")
    # stored after a1: b1 (aborted) and two markers
    assert peer.last_message_id(1) == a1


def test_batch_index_acks_in_transactions(peer: TxnPeer) -> None:
    # the Java client acks one message of a batch in a transaction with its ack set
    topic = _topic()
    peer.subscribe(topic, "s", 1)
    peer.producer(topic, 1)
    pos = peer.send_batch(1, 0, [b"b0", b"b1", b"b2"])
    peer.drain()
    assert not peer.ack(1, [pos], txn=(10, 1), batch_index=(0, 3)).HasField("error")
    # the same index in another transaction conflicts; another index does not
    assert peer.ack(1, [pos], txn=(10, 2), batch_index=(0, 3)).error == pb.TransactionConflict
    assert not peer.ack(1, [pos], txn=(10, 2), batch_index=(1, 3)).HasField("error")
    assert not peer.end_on_subscription(topic, "s", (10, 1), COMMIT).HasField("error")
    assert not peer.end_on_subscription(topic, "s", (10, 2), ABORT).HasField("error")
    # acknowledged before: index 0 in a transaction conflicts now
    assert peer.ack(1, [pos], txn=(10, 3), batch_index=(0, 3)).error == pb.TransactionConflict
    peer.close_consumer(1)
    peer.subscribe(topic, "s", 2)
    peer.drain()
    # delivered again with index 0 marked acknowledged (bit clear), 1 and 2 to consume
    assert peer.ack_sets[(2, pos)] == ack_set_words(3, [0])


def test_compaction_keeps_no_aborted_message_and_stops_before_open_transactions(
    broker: BrokerThread, peer: TxnPeer
) -> None:
    topic = _topic()
    peer.subscribe(topic, "s", 1)  # keeps what is written (no retention)
    peer.producer(topic, 1)
    peer.send(1, 0, b"v1", key="k1")
    peer.send(1, 1, b"aborted", txn=(11, 1), key="k2")
    peer.send(1, 2, b"v2", txn=(11, 2), key="k1")
    assert not peer.end_on_partition(topic, (11, 1), ABORT).HasField("error")
    assert not peer.end_on_partition(topic, (11, 2), COMMIT).HasField("error")
    peer.send(1, 3, b"open", txn=(11, 3), key="k3")

    async def compact() -> None:
        service = broker.service
        assert service is not None
        compactor = service.topics[topic].compactor
        compactor.start()
        while compactor.running:
            await trio.sleep(0.02)
        assert compactor.status()["status"] == "SUCCESS", compactor.status()
        assert compactor.view is not None and compactor.view.entries == 1  # v2 alone

    broker.call(compact)
    peer.subscribe(topic, "compacted", 2, sub_type=EXCLUSIVE, read_compacted=True)
    peer.drain()
    # k1's latest committed value; nothing of the aborted transaction; nothing of the open one
    assert peer.payloads(2) == [b"v2"]


def test_transactional_requests_are_refused_while_transactions_are_off() -> None:
    """As Pulsar with transactionCoordinatorEnabled=false: no coordinator would ever end such a
    transaction, so a SEND, an ACK or an end carrying one is refused and holds nothing; plain
    messages after it are delivered."""
    with BrokerThread() as plain:
        peer = TxnPeer(plain.port)
        try:
            topic = _topic()
            peer.subscribe(topic, "s", 1)
            peer.producer(topic, 1)
            error = peer.send_error(1, 0, b"in-a-transaction", (0, 1))
            assert error.error == pb.NotAllowedError and "not enabled" in error.message
            peer.send(1, 1, b"plain")
            peer.drain()
            assert peer.payloads(1) == [b"plain"]
            position = peer.received[0][1]
            assert peer.ack(1, [position], (0, 1)).error == pb.NotAllowedError
            assert peer.end_on_partition(topic, (0, 1), COMMIT).error == pb.NotAllowedError
            assert peer.end_on_subscription(topic, "s", (0, 1), ABORT).error == pb.NotAllowedError
        finally:
            peer.close()
