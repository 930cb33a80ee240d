"""Hostile and broken clients over a raw socket: each bad input closes (or is answered on) only
its own connection, with the behaviour Pulsar's broker has, and the official client keeps
producing and consuming on the same broker afterwards."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pulsar
import pytest

from broker import BrokerConfig
from broker.protocol._connection import HANDSHAKE_MAX_FRAME_SIZE
from broker.protocol._handlers import BROKER_ONLY_TYPES
from protocols.pulsar import command_field, encode_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.broker_thread import BrokerThread
from tests.support.raw_pulsar import RawPeer, client_round_trip
from tests.support.waiting import wait_until

T = pb.BaseCommand


def _broker(**config) -> BrokerThread:
    return BrokerThread(
        BrokerConfig(
            advertised_address="127.0.0.1",
            bind_address="127.0.0.1",
            broker_service_port=0,
            web_service_port=0,
            **config,
        )
    )


def _producer(raw: RawPeer, topic: str, producer_id: int, **fields) -> pb.CommandProducerSuccess:
    raw.send("PRODUCER", topic=topic, producer_id=producer_id, request_id=1000 + producer_id, **fields)
    answer = raw.recv()
    assert answer is not None and answer.type == T.PRODUCER_SUCCESS, answer
    return answer.producer_success


# ------------------------------------------------------------------------- 1: SEND, unknown producer


def test_send_for_unknown_producer_closes_connection(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.connect()
    raw.send_message(producer_id=42, sequence_id=0, payload=b"nobody")
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(broker.url)


def test_send_after_client_closed_its_producer_closes_connection(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.connect()
    _producer(raw, "persistent://public/default/hostile-closed-by-client", 1)
    raw.send("CLOSE_PRODUCER", producer_id=1, request_id=2)
    assert raw.recv().type == T.SUCCESS
    raw.send_message(producer_id=1, sequence_id=0, payload=b"late")
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(broker.url)


def test_send_for_producer_the_broker_closed_is_dropped(broker: BrokerThread) -> None:
    # CLOSE_PRODUCER and the client's SENDs cross on the wire: Pulsar drops those SENDs for one
    # keep-alive interval instead of closing the connection
    topic = "persistent://public/default/hostile-fenced"
    victim, fencer = RawPeer(broker.port), RawPeer(broker.port)
    victim.connect()
    fencer.connect()
    _producer(victim, topic, 1)
    _producer(fencer, topic, 1, producer_access_mode=pb.ExclusiveWithFencing)
    closed = victim.recv()
    assert closed.type == T.CLOSE_PRODUCER and closed.close_producer.producer_id == 1
    victim.send_message(producer_id=1, sequence_id=0, payload=b"in flight")
    victim.assert_alive()
    victim.close()
    fencer.close()
    client_round_trip(broker.url)


def test_send_for_producer_waiting_for_exclusive_access_closes_connection(broker: BrokerThread) -> None:
    topic = "persistent://public/default/hostile-parked"
    holder, waiter = RawPeer(broker.port), RawPeer(broker.port)
    holder.connect()
    waiter.connect()
    _producer(holder, topic, 1, producer_access_mode=pb.Exclusive)
    assert not _producer(waiter, topic, 1, producer_access_mode=pb.WaitForExclusive).producer_ready
    waiter.send_message(producer_id=1, sequence_id=0, payload=b"jumps the queue")
    assert waiter.recv_until_closed() == []
    waiter.close()
    # the exclusive holder is untouched and the topic holds only its message
    holder.send_message(producer_id=1, sequence_id=0, payload=b"holder")
    receipt = holder.recv()
    assert receipt.type == T.SEND_RECEIPT
    holder.send(
        "SUBSCRIBE",
        topic=topic,
        subscription="check",
        subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1,
        request_id=2,
        initialPosition=pb.CommandSubscribe.Earliest,
    )
    assert holder.recv().type == T.SUCCESS
    holder.send("FLOW", consumer_id=1, messagePermits=10)
    message = holder.recv()
    assert message.type == T.MESSAGE
    assert message.message.message_id.entryId == receipt.send_receipt.message_id.entryId
    holder.send("GET_LAST_MESSAGE_ID", consumer_id=1, request_id=3)
    last = holder.recv().getLastMessageIdResponse.last_message_id
    assert (last.ledgerId, last.entryId) == (message.message.message_id.ledgerId, message.message.message_id.entryId)
    holder.close()
    client_round_trip(broker.url)


# ------------------------------------------------------------------------- 2: missing command bodies


def test_every_command_type_without_its_body_closes_connection(broker: BrokerThread) -> None:
    kept_open = []
    for t in sorted(T.Type.values()):
        if t == T.CONNECT:
            continue
        raw = RawPeer(broker.port)
        raw.connect()
        raw.send_command(pb.BaseCommand(type=t))
        if raw.recv_until_closed():
            kept_open.append(T.Type.Name(t))
        raw.close()
    assert kept_open == []
    client_round_trip(broker.url)


def test_connect_without_its_body_closes_connection(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.send_command(pb.BaseCommand(type=T.CONNECT))
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(broker.url)


def _misplaced(type_: int, body_type: str, **fields) -> pb.BaseCommand:
    """A command of ``type_`` holding only the body of ``body_type``."""
    command = pb.BaseCommand(type=type_)
    body = make_command(body_type, **fields)
    getattr(command, command_field(body_type)).CopyFrom(getattr(body, command_field(body_type)))
    return command


def test_wrong_body_with_request_id_is_answered_for_the_request_it_holds(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.connect()
    raw.send_command(
        _misplaced(
            T.PRODUCER,
            "SUBSCRIBE",
            topic="persistent://public/default/x",
            subscription="s",
            subType=pb.CommandSubscribe.Shared,
            consumer_id=1,
            request_id=7,
        )
    )
    error = raw.recv()
    assert error.type == T.ERROR
    assert error.error.request_id == 7 and error.error.error == pb.NotAllowedError
    raw.send_command(_misplaced(T.SUBSCRIBE, "LOOKUP", topic="persistent://public/default/x", request_id=8))
    lookup = raw.recv()
    assert lookup.type == T.LOOKUP_RESPONSE
    assert lookup.lookupTopicResponse.request_id == 8
    assert lookup.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
    raw.assert_alive()
    # a wrong body that carries no request id leaves nothing to answer
    raw.send_command(_misplaced(T.ACK, "FLOW", consumer_id=1, messagePermits=5))
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(broker.url)


def test_command_only_a_broker_sends_closes_connection(broker: BrokerThread) -> None:
    assert T.SEND_RECEIPT in BROKER_ONLY_TYPES
    raw = RawPeer(broker.port)
    raw.connect()
    raw.send("SUCCESS", request_id=1)
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(broker.url)


# ------------------------------------------------------------------------- 3: before CONNECT


def test_large_frame_before_connect_closes_at_its_header(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    # a 1 MiB frame header and a little of its body: closed without waiting for the rest
    raw.send_bytes(struct.pack(">II", 1024 * 1024, 100) + bytes(1000))
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(broker.url)


def test_connect_with_large_credentials_fits_the_handshake_limit(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    token = b"k" * 48_000  # Windows' Kerberos MaxTokenSize
    raw.send("CONNECT", client_version="raw-test", protocol_version=20, auth_method_name="sasl", auth_data=token)
    assert raw.recv().type == T.CONNECTED
    raw.close()


def test_full_frame_limit_applies_from_the_frame_after_connect(broker: BrokerThread) -> None:
    # a simple command four times the handshake limit, written in one go behind the CONNECT
    topic = "persistent://public/default/" + "x" * (4 * HANDSHAKE_MAX_FRAME_SIZE)
    raw = RawPeer(broker.port)
    raw.send_bytes(
        encode_command(make_command("CONNECT", client_version="raw-test", protocol_version=20))
        + encode_command(make_command("LOOKUP", topic=topic, request_id=1))
    )
    assert raw.recv().type == T.CONNECTED
    lookup = raw.recv()
    assert lookup.type == T.LOOKUP_RESPONSE and lookup.lookupTopicResponse.request_id == 1
    raw.assert_alive()
    # and a payload far over the handshake limit is stored
    _producer(raw, "persistent://public/default/hostile-big-send", 1)
    raw.send_message(producer_id=1, sequence_id=0, payload=bytes(4 * HANDSHAKE_MAX_FRAME_SIZE))
    assert raw.recv().type == T.SEND_RECEIPT
    raw.close()


@pytest.fixture(scope="module")
def quick_handshake() -> Iterator[BrokerThread]:
    # keep-alive stays at 30 s: only the handshake deadline can close these before the hang guard
    with _broker(handshake_timeout_s=3.0) as b:
        yield b


@pytest.mark.parametrize("sent", [b"", b"\x00\x00\x00\x40\x00"], ids=["silent", "partial-frame"])
def test_no_connect_within_the_handshake_deadline_closes(quick_handshake: BrokerThread, sent: bytes) -> None:
    raw = RawPeer(quick_handshake.port)
    raw.send_bytes(sent)
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(quick_handshake.url)


def test_command_before_connect_closes(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.send("LOOKUP", topic="persistent://public/default/x", request_id=1)
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(broker.url)


def test_second_connect_closes(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.connect()
    raw.send("CONNECT", client_version="raw-test", protocol_version=20)
    assert raw.recv_until_closed() == []
    raw.close()
    client_round_trip(broker.url)


# ------------------------------------------------------------------------- 4: connection caps


@pytest.fixture(scope="module")
def per_ip_capped() -> Iterator[BrokerThread]:
    with _broker(broker_max_connections_per_ip=2) as b:
        yield b


def _refused(raw: RawPeer) -> pb.CommandError:
    got = raw.recv_until_closed()
    assert [c.type for c in got] == [T.ERROR]
    return got[0].error


def test_connections_over_the_per_ip_cap_are_refused(per_ip_capped: BrokerThread) -> None:
    held = [RawPeer(per_ip_capped.port, source_ip="127.0.0.2") for _ in range(2)]
    for raw in held:
        raw.connect()
    extra = RawPeer(per_ip_capped.port, source_ip="127.0.0.2")
    error = _refused(extra)
    assert error.error == pb.NotAllowedError and "127.0.0.2" in error.message
    extra.close()
    # other addresses are not affected, and the held connections still work
    client_round_trip(per_ip_capped.url)
    for raw in held:
        raw.assert_alive()
    # a slot is free again once its connection is gone
    held.pop().close()
    wait_until(
        lambda: len(per_ip_capped.call(_connections, per_ip_capped)) == 1, "the closed connection to go", timeout_s=20.0
    )
    again = RawPeer(per_ip_capped.port, source_ip="127.0.0.2")
    again.connect()
    for raw in [*held, again]:
        raw.close()


async def _connections(b: BrokerThread) -> list:
    return list(b.service.connections)


@pytest.fixture(scope="module")
def capped() -> Iterator[BrokerThread]:
    with _broker(broker_max_connections=2) as b:
        yield b


def test_connections_over_the_broker_cap_are_refused(capped: BrokerThread) -> None:
    held = [RawPeer(capped.port, source_ip=ip) for ip in ("127.0.0.2", "127.0.0.3")]
    for raw in held:
        raw.connect()
    extra = RawPeer(capped.port)
    error = _refused(extra)
    assert error.error == pb.NotAllowedError and "maximum number of connections" in error.message
    extra.close()
    for raw in held:
        raw.assert_alive()
        raw.close()
    wait_until(lambda: not capped.call(_connections, capped), "the closed connections to go", timeout_s=20.0)
    client_round_trip(capped.url)


# ------------------------------------------------------------------------- 5: consumers that are not there


def test_flow_ack_redeliver_for_unknown_consumer_are_dropped(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.connect()
    mid = {"ledgerId": 1, "entryId": 1}
    raw.send("FLOW", consumer_id=9, messagePermits=100)
    raw.send("ACK", consumer_id=9, ack_type=pb.CommandAck.Individual, message_id=[mid])
    raw.send("REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=9)
    raw.assert_alive()
    raw.close()
    client_round_trip(broker.url)


def test_requests_for_unknown_consumer_are_answered(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.connect()
    raw.send(
        "ACK",
        consumer_id=9,
        ack_type=pb.CommandAck.Individual,
        message_id=[{"ledgerId": 1, "entryId": 1}],
        request_id=1,
    )
    ack = raw.recv()
    assert ack.type == T.ACK_RESPONSE and ack.ackResponse.request_id == 1
    assert ack.ackResponse.error == pb.ConsumerNotFound
    raw.send("UNSUBSCRIBE", consumer_id=9, request_id=2)
    raw.send("SEEK", consumer_id=9, request_id=3, message_publish_time=1)
    raw.send("CLOSE_CONSUMER", consumer_id=9, request_id=4)
    answers = [raw.recv() for _ in range(3)]  # each runs as its own task: any order
    assert sorted(c.error.request_id for c in answers if c.type == T.ERROR) == [2, 3]
    # closing is idempotent, as in Pulsar
    assert [c.success.request_id for c in answers if c.type == T.SUCCESS] == [4]
    raw.assert_alive()
    raw.close()
    client_round_trip(broker.url)


def test_unsupported_request_is_refused_and_connection_kept(broker: BrokerThread) -> None:
    raw = RawPeer(broker.port)
    raw.connect()
    raw.send("NEW_TXN", request_id=5)
    error = raw.recv()
    assert error.type == T.ERROR and error.error.request_id == 5 and error.error.error == pb.NotAllowedError
    raw.assert_alive()
    raw.close()
    client_round_trip(broker.url)


@pytest.mark.parametrize("name", ["..", ".", "a/b"])
def test_a_subscription_name_that_cannot_name_a_cursor_is_refused(client: pulsar.Client, topic: str, name: str) -> None:
    # Each subscription is one metadata node under its topic: ".." or "a/b" would name another.
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, name)
    consumer = client.subscribe(topic, "fine")
    producer = client.create_producer(topic)
    producer.send(b"still works")
    assert consumer.receive(10_000).data() == b"still works"


def test_an_ack_claiming_a_huge_batch_is_refused_not_looped_over(broker: BrokerThread) -> None:
    # A partial ack's batch_size once sized a Python loop over the batch's indexes: 2^31 - 1 would
    # block the event loop for minutes. The broker uses its own count, and a client's only up to a
    # bound (here the entry was delivered to no consumer, so the client's count is all there is).
    topic = "persistent://public/default/hostile-huge-batch-ack"
    raw = RawPeer(broker.port)
    raw.connect()
    _producer(raw, topic, 1)
    raw.send_message(producer_id=1, sequence_id=0, payload=b"x")
    receipt = raw.recv()
    assert receipt.type == T.SEND_RECEIPT
    raw.send(
        "SUBSCRIBE",
        topic=topic,
        subscription="s",
        subType=pb.CommandSubscribe.Shared,
        consumer_id=1,
        request_id=2,
        initialPosition=pb.CommandSubscribe.Earliest,
    )
    assert raw.recv().type == T.SUCCESS
    mid = receipt.send_receipt.message_id
    raw.send(
        "ACK",
        consumer_id=1,
        ack_type=pb.CommandAck.Individual,
        message_id=[{"ledgerId": mid.ledgerId, "entryId": mid.entryId, "ack_set": [0], "batch_size": 2**31 - 1}],
    )
    raw.assert_alive()  # answered at once: the ack was refused, not looped over
    raw.close()
    client_round_trip(broker.url)


def test_a_cumulative_ack_before_a_ledgers_first_entry_is_accepted(broker: BrokerThread) -> None:
    # The client acks L:-1 (entry id 2^64-1 on the wire) cumulatively when a partly acked batch is
    # entry 0 of ledger L: "everything before L". It was refused as "past the last entry".
    topic = "persistent://public/default/hostile-ack-before-first"
    raw = RawPeer(broker.port)
    raw.connect()
    _producer(raw, topic, 1)
    raw.send_message(producer_id=1, sequence_id=0, payload=b"x")
    mid = raw.recv().send_receipt.message_id
    raw.send(
        "SUBSCRIBE",
        topic=topic,
        subscription="s",
        subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1,
        request_id=2,
        initialPosition=pb.CommandSubscribe.Earliest,
    )
    assert raw.recv().type == T.SUCCESS
    raw.send(
        "ACK",
        consumer_id=1,
        ack_type=pb.CommandAck.Cumulative,
        request_id=3,
        message_id=[{"ledgerId": mid.ledgerId, "entryId": (1 << 64) - 1}],
    )
    answer = raw.recv()
    assert answer.type == T.ACK_RESPONSE and not answer.ackResponse.HasField("error"), answer
    raw.close()
