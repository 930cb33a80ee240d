"""`NonPersistentTopic` rules checked without a network: fan-out, drops, subscription lifetime."""

from __future__ import annotations

import time
from typing import Any

import trio

from broker import BrokerConfig
from broker._dispatcher import SubType
from broker._nonpersistent import NonPersistentTopic
from broker._producer import AccessMode, Producer
from protocols.pulsar import TopicName, decode_frame, encode_payload_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb


class _Service:
    clock = staticmethod(time.time)
    config = BrokerConfig()


class _Conn:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.outgoing_full = False
        self.remote = "test"

    def send_nowait(self, data: bytes) -> None:
        self.frames.append(data)

    def publish_done(self, size: int) -> None:
        pass

    def forget_consumer(self, *_: Any) -> None:
        pass

    def forget_producer(self, *_: Any) -> None:
        pass


def _entry(payload: bytes) -> bytes:
    """A stored-entry-shaped SEND body (metadata + payload) as the client sends it."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    raw = decode_frame(encode_payload_command(make_command("SEND", producer_id=0, sequence_id=0), metadata,
                                              payload)).raw_metadata_and_payload
    assert raw is not None
    return raw


async def _setup(sub_type: int = SubType.SHARED) -> tuple[NonPersistentTopic, Producer, list[Any], list[_Conn]]:
    topic = NonPersistentTopic(_Service(), TopicName.parse("non-persistent://t/ns/x"))  # type: ignore[arg-type]
    pconn = _Conn()
    producer = Producer(topic=topic, producer_id=0, name="p", connection=pconn, access_mode=AccessMode.SHARED,
                        user_provided_name=False)
    assert await topic.add_producer(producer, lambda _e: None)
    sub = await topic.subscribe("s")
    conns = [_Conn(), _Conn()]
    consumers = []
    for i, conn in enumerate(conns):
        c = await sub.add_consumer(consumer_id=i, name=f"c{i}", connection=conn, sub_type=sub_type, priority=0,
                                   hash_ranges=None, metadata={})
        c.ready = True
        consumers.append(c)
    return topic, producer, consumers, conns


def test_drops_for_consumers_without_permits_or_with_a_full_connection() -> None:
    async def main() -> None:
        topic, producer, (c0, c1), (conn0, conn1) = await _setup()
        sub = topic.subscriptions["s"]
        raw = _entry(b"m")
        topic.publish(producer, 0, 0, raw, 1)  # nobody has permits: dropped, counted
        assert sub.msg_drop_counter == 1 and not conn0.frames and not conn1.frames
        sub.flow(c0, 2)
        conn1.outgoing_full = True
        sub.flow(c1, 5)  # permits, but its connection cannot take more: skipped
        for i in range(4):
            topic.publish(producer, i + 1, i + 1, raw, 1)
        assert len(conn0.frames) == 2 and not conn1.frames
        assert sub.msg_drop_counter == 3
        assert topic.stats()["subscriptions"]["s"]["msgDropCounter"] == 3
        # every SEND got its receipt at once (ledger 0, growing entry ids)
        assert len(producer.connection.frames) == 5  # type: ignore[attr-defined]

    trio.run(main)


def test_subscription_disappears_with_its_last_consumer() -> None:
    async def main() -> None:
        topic, producer, (c0, c1), _ = await _setup(SubType.FAILOVER)
        sub = topic.subscriptions["s"]
        await sub.remove_consumer(c0)
        assert "s" in topic.subscriptions
        await sub.remove_consumer(c1)
        assert "s" not in topic.subscriptions
        topic.publish(producer, 0, 0, _entry(b"m"), 1)  # no subscription: nothing to drop for
        assert sub.msg_drop_counter == 0
        assert not topic.idle  # the producer is still there
        topic.remove_producer(producer)
        assert topic.idle

    trio.run(main)
