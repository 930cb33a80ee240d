"""Back-pressure of a connection (`broker.protocol._connection` Rules B1-B4) with clients that do not read.

Each client talks to a `ServerConnection` of a running `BrokerService` (MockBookKeeper storage)
over a lockstep stream: the broker's writes complete only as the client reads, and the client's
writes only as the broker reads, so "the client never reads" and "the broker stopped reading" are
exact states, observed on the connection's statistics rather than timed. The same behaviour over
real bookies is in tests/broker_real/test_brokerreal_backpressure.py.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import trio
import trio.testing

from broker import BrokerService
from broker.protocol._connection import ConnectionState, PauseReason, ServerConnection
from protocols.pulsar import FrameDecoder, encode_command, encode_payload_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.broker.inproc_service import inproc_config, running_service

_ids = itertools.count()
DEADLINE_S = 30.0  # a hang guard only: every wait below ends on an observed state


class Client:
    """A client end of a lockstep stream speaking frames."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.sent = 0  # frames whose write the broker has taken

    async def send(self, type_: str, **fields: object) -> None:
        await self.stream.send_all(encode_command(make_command(type_, **fields)))
        self.sent += 1

    async def send_message(self, producer_id: int, sequence_id: int, payload: bytes) -> None:
        md = pb.MessageMetadata(producer_name="bp", sequence_id=sequence_id, publish_time=1)
        await self.stream.send_all(
            encode_payload_command(make_command("SEND", producer_id=producer_id, sequence_id=sequence_id), md, payload)
        )
        self.sent += 1

    async def recv(self) -> pb.BaseCommand:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame.command
            data = await self.stream.receive_some(65536)
            assert data, "the broker closed the connection"
            self.decoder.feed(data)

    async def expect(self, type_: int) -> pb.BaseCommand:
        cmd = await self.recv()
        assert cmd.type == type_, cmd
        return cmd


@dataclass
class Broker:
    service: BrokerService
    nursery: trio.Nursery

    async def connect(self) -> tuple[Client, ServerConnection]:
        """A new connection, past CONNECT."""
        client_end, server_end = trio.testing.lockstep_stream_pair()
        conn = ServerConnection(self.service, server_end, f"test-{next(_ids)}")
        self.nursery.start_soon(conn.serve)
        client = Client(client_end)
        await client.send("CONNECT", client_version="bp-test", protocol_version=20)
        await client.expect(pb.BaseCommand.CONNECTED)
        return client, conn

    async def producer(self, client: Client, topic: str, producer_id: int = 1) -> None:
        await client.send("PRODUCER", topic=topic, producer_id=producer_id, request_id=next(_ids))
        await client.expect(pb.BaseCommand.PRODUCER_SUCCESS)


async def until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    """Poll ``check`` (a state of the broker) until it holds."""
    with trio.fail_after(DEADLINE_S):
        while not check():
            await trio.sleep(0.005)
    assert check(), what


@pytest.fixture
def broker_overrides() -> dict[str, object]:
    """BrokerConfig keys of the test's broker (a test parametrizes this name to change them)."""
    return {}


@pytest.fixture
async def broker(broker_overrides: dict[str, object]) -> AsyncIterator[Broker]:
    async with running_service(inproc_config(**broker_overrides)) as (service, nursery):
        yield Broker(service, nursery)


async def test_pipelined_sends_never_read_hold_the_publish_window_then_every_receipt_arrives(broker: Broker) -> None:
    limit = broker.service.config.max_pending_publish_requests_per_connection
    total = 3 * limit
    client, conn = await broker.connect()
    await broker.producer(client, "persistent://public/default/bp-receipts")

    async def pipeline() -> None:
        for i in range(total):
            await client.send_message(1, i, b"x" * 100)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pipeline)
        # the receipts are stored and answered but never taken: the window stays full, so the
        # broker stops reading (Rule B1) and the client's writes stop being taken
        await until(lambda: conn.paused is PauseReason.PUBLISH_WINDOW, "the broker stops reading")
        await trio.testing.wait_all_tasks_blocked()
        stats = conn.statistics()
        assert stats["pending_publish_count"] == limit
        assert client.sent == 2 + limit  # CONNECT, PRODUCER, then the SENDs of one window
        receipt_size = len(
            encode_command(
                make_command(
                    "SEND_RECEIPT",
                    producer_id=1,
                    sequence_id=total,
                    highest_sequence_id=total,
                    message_id={"ledgerId": 2**32, "entryId": total},
                )
            )
        )
        assert stats["queued_bytes"] <= limit * receipt_size  # the receipts, nothing more

        # the broker serves another client meanwhile
        other, _ = await broker.connect()
        await broker.producer(other, "persistent://public/default/bp-other")
        await other.send_message(1, 0, b"other")
        assert (await other.expect(pb.BaseCommand.SEND_RECEIPT)).send_receipt.sequence_id == 0

        # the client reads at last: every receipt, in order, and the rest of its SENDs are taken
        seen = []
        while len(seen) < total:
            seen.append((await client.expect(pb.BaseCommand.SEND_RECEIPT)).send_receipt.sequence_id)
        assert seen == list(range(total))
    await trio.testing.wait_all_tasks_blocked()
    assert conn.statistics()["pending_publish_count"] == 0


async def test_requests_whose_answers_are_not_read_make_the_connection_unwritable(broker: Broker) -> None:
    config = broker.service.config
    client, conn = await broker.connect()
    per_write, writes = 100, 300
    pings = per_write * writes
    batch = encode_command(make_command("PING")) * per_write

    async def pipeline() -> None:
        for _ in range(writes):
            await client.stream.send_all(batch)
            client.sent += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pipeline)
        await until(lambda: conn.paused is PauseReason.UNWRITABLE, "the broker stops reading (Rule B2)")
        await trio.testing.wait_all_tasks_blocked()
        assert not conn.writable
        # the high water mark, plus the answers to what the last read brought in (a read of a
        # lockstep stream returns at most one client write)
        pong = len(encode_command(make_command("PONG")))
        high = config.write_buffer_high_water_mark
        assert high < conn.queued_bytes <= high + per_write * pong
        assert client.sent < writes

        other, _ = await broker.connect()
        await other.send("PING")
        await other.expect(pb.BaseCommand.PONG)

        for _ in range(pings):
            await client.expect(pb.BaseCommand.PONG)
    await trio.testing.wait_all_tasks_blocked()
    assert conn.writable and conn.queued_bytes == 0


@pytest.mark.parametrize("broker_overrides", [{"keep_alive_interval_s": 1}])
async def test_a_paused_connection_is_not_closed_by_the_keep_alive(
    broker: Broker, autojump_clock: trio.testing.MockClock
) -> None:
    client, conn = await broker.connect()

    async def pipeline() -> None:
        while True:
            await client.send("PING")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pipeline)
        await until(lambda: conn.paused is PauseReason.UNWRITABLE, "the broker stops reading")
        await trio.sleep(10)  # ten keep-alive intervals of virtual time, nothing read by the broker
        assert conn.state is ConnectionState.OPEN
        nursery.cancel_scope.cancel()


async def test_a_consumer_that_does_not_read_holds_one_round_not_its_permits(broker: Broker) -> None:
    config = broker.service.config
    topic = "persistent://public/default/bp-dispatch"
    consumer, cconn = await broker.connect()
    await consumer.send(
        "SUBSCRIBE",
        topic=topic,
        subscription="s",
        subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1,
        request_id=next(_ids),
    )
    await consumer.expect(pb.BaseCommand.SUCCESS)
    total, size = 2000, 10_000
    await consumer.send("FLOW", consumer_id=1, messagePermits=total)

    producer, _ = await broker.connect()
    await broker.producer(producer, topic)

    async def produce() -> None:
        for i in range(total):
            await producer.send_message(1, i, bytes([i % 256]) * size)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        for _ in range(total):
            await producer.expect(pb.BaseCommand.SEND_RECEIPT)

    sub = broker.service.topics[topic].subscriptions["s"]
    assert sub.dispatcher is not None
    (c,) = sub.dispatcher.consumers
    await until(lambda: not cconn.writable, "the consumer's connection turns unwritable")
    await trio.testing.wait_all_tasks_blocked()
    # Rule B3: the high water mark plus one dispatch round, not the 20 MB the permits allow
    round_bytes = config.dispatcher_max_read_batch_size * (size + 200)
    assert cconn.queued_bytes <= config.write_buffer_high_water_mark + round_bytes
    assert c.msg_out_counter < total
    assert c.permits > 0  # what stops it is the connection, not the permits

    got = []
    while len(got) < total:
        msg = (await consumer.expect(pb.BaseCommand.MESSAGE)).message
        got.append(msg.message_id.entryId)
    assert got == sorted(got) and len(set(got)) == total
    assert c.msg_out_counter == total
