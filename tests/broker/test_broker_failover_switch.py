"""Single-active (Failover) dispatch when the active consumer changes while a dispatch round is in
progress: what the old consumer held must still reach the new one before anything after it,
since a Failover client acknowledges cumulatively (a later entry first, acked, would skip them)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from broker.topics._dispatcher import SubType
from managed_ledger import InitialPosition, Position
from protocols.pulsar import FrameDecoder, TopicName, encode_metadata_and_payload
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.broker.inproc_service import inproc_config, running_service


class _Conn:
    """A client connection that records the positions of the MESSAGE frames sent to it."""

    def __init__(self, remote: str) -> None:
        self.remote = remote
        self.client_version = "test"
        self.writable = True
        self.positions: list[Position] = []
        self._decoder = FrameDecoder()

    async def send(self, data: bytes) -> None:
        self.send_nowait(data)

    def send_nowait(self, data: bytes) -> None:
        self._decoder.feed(data)
        while (frame := self._decoder.next_frame()) is not None:
            if frame.command.type == pb.BaseCommand.MESSAGE:
                mid = frame.command.message.message_id
                self.positions.append(Position(mid.ledgerId, mid.entryId))

    def forget_consumer(self, *_: Any) -> None:
        pass


def _entry(i: int) -> bytes:
    return encode_metadata_and_payload(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1), b"m%d" % i)


async def _append(topic, i: int) -> Position:
    stored = await (await topic.ml.append(_entry(i))).result()
    return Position(stored.ledger_id, stored.entry_id)


async def _until(condition) -> None:
    with trio.fail_after(10):
        while not condition():
            await trio.sleep(0.01)


async def _subscribe(service, name: str):
    topic = await service.get_topic(TopicName.parse(f"persistent://public/default/{name}"))
    first = [await _append(topic, i) for i in range(5)]
    sub = await topic.subscribe("fail", durable=True, initial_position=InitialPosition.EARLIEST, start=None)

    async def attach(conn: _Conn):
        """A Failover consumer named as the client names it again when it re-subscribes."""
        consumer = await sub.add_consumer(
            consumer_id=1,
            name="c",
            connection=conn,
            sub_type=SubType.FAILOVER,
            priority=0,
            hash_ranges=None,
            metadata={},
        )
        consumer.ready = True
        sub.dispatcher.flow(consumer, 100)
        return consumer

    return topic, sub, first, attach


@pytest.mark.parametrize("delay_ms", [0, 100])
async def test_failover_switch_during_a_read_keeps_order(delay_ms: int) -> None:
    """The old active consumer (same name, its connection dead) leaves while the dispatcher reads
    new entries for it: the new active consumer gets the old one's unacked entries first."""
    config = inproc_config(active_consumer_failover_delay_ms=delay_ms)
    async with running_service(config) as (service, _):
        topic, sub, first, attach = await _subscribe(service, f"switch-in-read-{delay_ms}")
        old_conn, new_conn = _Conn("old"), _Conn("new")
        old = await attach(old_conn)
        await _until(lambda: old_conn.positions == first)
        # the client subscribes again on a new connection before the broker sees the old one fail
        new = await attach(new_conn)
        assert sub.dispatcher.active is old

        cursor = sub.cursor
        read_entries = cursor.read_entries
        armed = False

        async def read_while_the_old_connection_fails(*args: Any, **kwargs: Any):
            nonlocal armed
            if armed:
                armed = False
                await sub.remove_consumer(old)
            return await read_entries(*args, **kwargs)

        cursor.read_entries = read_while_the_old_connection_fails  # type: ignore[method-assign]
        later = [await _append(topic, i) for i in range(5, 10)]  # stored without waking the dispatcher
        await trio.testing.wait_all_tasks_blocked()
        assert sub.dispatcher.active is old and not new_conn.positions
        armed = True
        sub.dispatcher.wake()
        await _until(lambda: len(new_conn.positions) >= 10)
        assert not armed
        assert sub.dispatcher.active is new
        assert new_conn.positions == first + later


async def test_nothing_is_read_while_the_active_consumer_cannot_take() -> None:
    """A second consumer's permits do not make the dispatcher read entries the active one (its
    connection dead and full) cannot take; once it leaves, the other gets everything in order."""
    async with running_service(inproc_config(active_consumer_failover_delay_ms=0)) as (service, _):
        topic, sub, first, attach = await _subscribe(service, "dead-active")
        old_conn, new_conn = _Conn("old"), _Conn("new")
        old = await attach(old_conn)
        await _until(lambda: old_conn.positions == first)
        old_conn.writable = False
        await attach(new_conn)
        later = [await _append(topic, i) for i in range(5, 10)]
        read_position = sub.cursor.read_position
        sub.dispatcher.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert sub.cursor.read_position == read_position
        assert not sub.dispatcher.replay and not new_conn.positions
        await sub.remove_consumer(old)
        await _until(lambda: len(new_conn.positions) >= 10)
        assert new_conn.positions == first + later
