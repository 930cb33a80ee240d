"""A duplicate of a SEND still in flight is confirmed only once that SEND is stored (`_topic` Rule 8).

Before: the broker answered such a resend with a success receipt at once; when the original's add
then failed, the client had dropped a message it was told was stored. Here the topic's managed
ledger holds every add until the test lets it finish, stored or failed: a fake that fails on cue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from bk_client.testing import MockBookKeeper
from broker import BrokerConfig, BrokerService
from broker.topics._producer import AccessMode, Producer
from broker.topics._topic import Topic
from managed_ledger import ManagedLedgerConfig, ManagedLedgerError, ManagedLedgerFactory, PendingAdd
from metadata import open_metadata_store
from protocols.pulsar import FrameDecoder, TopicName, encode_metadata_and_payload
from protocols.pulsar import pulsar_api_pb2 as pb

TOPIC = TopicName.parse("persistent://public/default/dedup-pending")


class HeldAdds:
    """The topic's managed ledger, except that each add waits for the test: `store` writes it to
    the real managed ledger and finishes it there, `fail` finishes it with an error."""

    def __init__(self, ml: Any) -> None:
        self._ml = ml
        self.held: list[PendingAdd] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ml, name)

    async def append(self, data: bytes) -> PendingAdd:
        op = PendingAdd(data, trio.current_time())
        self.held.append(op)
        await trio.lowlevel.checkpoint()
        return op

    async def store(self, op: PendingAdd) -> None:
        op.position = await self._ml.add_entry(op.data)
        op.finish(None)

    @staticmethod
    def fail(op: PendingAdd) -> None:
        op.finish(ManagedLedgerError("injected: the bookies refused the add"))


class Conn:
    """What a producer needs of its connection; records the commands sent to the client."""

    def __init__(self) -> None:
        self.commands: list[pb.BaseCommand] = []

    def publish_done(self, size: int) -> None:
        pass

    def send_nowait(self, data: bytes) -> None:
        decoder = FrameDecoder()
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            self.commands.append(frame.command)

    def send_receipt(self, data: bytes, publish_size: int) -> None:
        self.send_nowait(data)

    def forget_producer(self, producer_id: int, producer: Producer) -> None:
        pass

    def answers(self) -> list[tuple[str, int]]:
        """("receipt" | "error", sequence id) for each SEND answered, in order."""
        out = []
        for c in self.commands:
            if c.type == pb.BaseCommand.SEND_RECEIPT:
                out.append(("receipt", c.send_receipt.sequence_id))
            elif c.type == pb.BaseCommand.SEND_ERROR:
                out.append(("error", c.send_error.sequence_id))
        return out


class Harness:
    def __init__(self, service: BrokerService, topic: Topic, ml: HeldAdds) -> None:
        self.service, self.topic, self.ml = service, topic, ml
        self._ids = iter(range(1, 1000))

    async def producer(self, name: str = "p") -> tuple[Producer, Conn]:
        """A producer named ``name`` attached over a new connection."""
        conn = Conn()
        p = Producer(
            topic=self.topic,
            producer_id=next(self._ids),
            name=name,
            connection=conn,
            access_mode=AccessMode.SHARED,
            user_provided_name=True,
        )
        assert await self.topic.add_producer(p, lambda _e: None)
        return p, conn

    def send(self, p: Producer, seq: int) -> None:
        md = pb.MessageMetadata(producer_name=p.name, sequence_id=seq, publish_time=1)
        self.topic.publish(p, seq, seq, encode_metadata_and_payload(md, f"m{seq}".encode()), 1)

    def disconnect(self, p: Producer) -> None:
        self.topic.remove_producer(p)

    async def stored(self) -> list[int]:
        """The sequence ids of every entry in the managed ledger, in order."""
        from broker.topics._entries import entry_metadata
        from managed_ledger import InitialPosition

        cursor = self.topic.ml.new_non_durable_cursor(InitialPosition.EARLIEST, inclusive=True)
        out = []
        while entries := await cursor.read_entries(100):
            out += [entry_metadata(e.data).sequence_id for e in entries]
        await cursor.close()
        return out


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    config = BrokerConfig(broker_deduplication_enabled=True, advertised_address="127.0.0.1")
    async with open_metadata_store("memory://dedup-pending") as store, trio.open_nursery() as nursery:
        factory = ManagedLedgerFactory(
            MockBookKeeper(), store, ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)
        )
        await nursery.start(factory.run)
        service = BrokerService(factory, store, config)
        await nursery.start(service.run)
        topic = await service.get_topic(TOPIC)
        assert topic.dedup is not None
        held = HeldAdds(topic.ml)
        topic.ml = held  # type: ignore[assignment]
        yield Harness(service, topic, held)
        nursery.cancel_scope.cancel()


async def test_a_resend_fails_with_its_original_and_is_then_stored_once(h: Harness) -> None:
    p1, _ = await h.producer()
    h.send(p1, 0)  # the original: its add is in flight
    await trio.testing.wait_all_tasks_blocked()
    assert len(h.ml.held) == 1
    h.disconnect(p1)  # the client lost its connection and resends on a new one
    p2, conn2 = await h.producer()
    h.send(p2, 0)
    h.send(p2, 1)  # pipelined behind the resend
    await trio.testing.wait_all_tasks_blocked()
    assert conn2.answers() == [], "a duplicate was confirmed before its original was stored"

    for op in h.ml.held:  # the original fails, and with it every add admitted after it
        h.ml.fail(op)
    await trio.testing.wait_all_tasks_blocked()
    assert conn2.answers() == [("error", 0), ("error", 1)]

    h.disconnect(p2)  # the client drops the connection on SEND_ERROR and resends both
    p3, conn3 = await h.producer()
    h.send(p3, 0)
    h.send(p3, 1)
    await trio.testing.wait_all_tasks_blocked()
    for op in h.ml.held[2:]:
        await h.ml.store(op)
    await trio.testing.wait_all_tasks_blocked()
    assert conn3.answers() == [("receipt", 0), ("receipt", 1)]
    assert await h.stored() == [0, 1]


async def test_a_resend_is_confirmed_once_its_original_is_stored(h: Harness) -> None:
    p1, _ = await h.producer()
    h.send(p1, 0)
    await trio.testing.wait_all_tasks_blocked()
    h.disconnect(p1)
    p2, conn2 = await h.producer()
    h.send(p2, 0)
    h.send(p2, 1)
    await trio.testing.wait_all_tasks_blocked()
    assert conn2.answers() == []
    assert len(h.ml.held) == 2  # the resend is not stored again; the next message is
    for op in h.ml.held:
        await h.ml.store(op)
    await trio.testing.wait_all_tasks_blocked()
    assert conn2.answers() == [("receipt", 0), ("receipt", 1)]
    receipt = next(c.send_receipt for c in conn2.commands if c.type == pb.BaseCommand.SEND_RECEIPT)
    assert receipt.message_id.ledgerId == 2**64 - 1  # -1:-1, as for any duplicate
    assert await h.stored() == [0, 1]


async def test_nothing_is_stored_after_a_held_duplicate_whose_original_failed(h: Harness) -> None:
    q, _ = await h.producer("q")
    h.send(q, 0)  # another producer's add ahead of the original keeps its failure unanswered
    p1, _ = await h.producer()
    h.send(p1, 0)
    await trio.testing.wait_all_tasks_blocked()
    h.disconnect(p1)
    p2, conn2 = await h.producer()
    h.send(p2, 0)
    await trio.testing.wait_all_tasks_blocked()
    h.ml.fail(h.ml.held[1])  # the original failed; the topic has not answered that yet
    h.send(p2, 1)
    await trio.testing.wait_all_tasks_blocked()
    assert len(h.ml.held) == 2, "a message was stored ahead of the resend it follows"
    await h.ml.store(h.ml.held[0])
    await trio.testing.wait_all_tasks_blocked()
    assert conn2.answers() == [("error", 0), ("error", 1)]
    assert await h.stored() == [0]  # q's message only


async def test_in_flight_names_fall_back_to_what_is_persisted_once_nothing_is_in_flight(h: Harness) -> None:
    p1, conn1 = await h.producer()
    h.send(p1, 0)
    h.send(p1, 1)
    await trio.testing.wait_all_tasks_blocked()
    await h.ml.store(h.ml.held[0])
    h.ml.fail(h.ml.held[1])
    await trio.testing.wait_all_tasks_blocked()
    assert conn1.answers() == [("receipt", 0), ("error", 1)]
    assert h.topic.dedup is not None and h.topic.dedup.pushed("p") == 0
    h.disconnect(p1)
    p2, conn2 = await h.producer()
    h.send(p2, 0)  # stored before: a duplicate, confirmed at once
    h.send(p2, 1)  # failed before: new again
    await trio.testing.wait_all_tasks_blocked()
    await h.ml.store(h.ml.held[2])
    await trio.testing.wait_all_tasks_blocked()
    assert conn2.answers() == [("receipt", 0), ("receipt", 1)]
    assert await h.stored() == [0, 1]
