"""`NonPersistentTopic` rules checked without a network: fan-out, drops, subscription lifetime, limits."""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio
import trio.testing

from broker import BrokerConfig
from broker._errors import ConsumerBusyError, ProducerBusyError
from broker.topics._dispatcher import SubType
from broker.topics._nonpersistent import NonPersistentTopic
from broker.topics._producer import AccessMode, Producer
from broker.topics._stats_json import np_subscription_stats
from broker.topics._topic_limits import DispatchRate, TopicLimits
from protocols.pulsar import TopicName, decode_frame, encode_payload_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb


class _Service:
    clock = staticmethod(time.time)
    config = BrokerConfig()


class _Conn:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.writable = True
        self.remote = "test"

    def send_nowait(self, data: bytes) -> None:
        self.frames.append(data)

    def send_receipt(self, data: bytes, publish_size: int) -> None:
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
    raw = decode_frame(
        encode_payload_command(make_command("SEND", producer_id=0, sequence_id=0), metadata, payload)
    ).raw_metadata_and_payload
    assert raw is not None
    return raw


async def _setup(sub_type: int = SubType.SHARED) -> tuple[NonPersistentTopic, Producer, list[Any], list[_Conn]]:
    topic = NonPersistentTopic(_Service(), TopicName.parse("non-persistent://t/ns/x"))  # type: ignore[arg-type]
    pconn = _Conn()
    producer = Producer(
        topic=topic, producer_id=0, name="p", connection=pconn, access_mode=AccessMode.SHARED, user_provided_name=False
    )
    assert await topic.add_producer(producer, lambda _e: None)
    sub = await topic.subscribe("s")
    conns = [_Conn(), _Conn()]
    consumers = []
    for i, conn in enumerate(conns):
        c = await sub.add_consumer(
            consumer_id=i, name=f"c{i}", connection=conn, sub_type=sub_type, priority=0, hash_ranges=None, metadata={}
        )
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
        conn1.writable = False
        sub.flow(c1, 5)  # permits, but its connection cannot take more: skipped
        for i in range(4):
            topic.publish(producer, i + 1, i + 1, raw, 1)
        assert len(conn0.frames) == 2 and not conn1.frames
        assert sub.msg_drop_counter == 3
        assert np_subscription_stats(sub)["msgDropCounter"] == 3
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


def test_dispatch_rates_drop_over_the_window_and_deliver_again_in_the_next() -> None:
    """`_nonpersistent` Rule 7: over the topic's or the subscription's dispatch rate a message is
    dropped for the subscription and counted; the next window delivers again."""

    async def main() -> None:
        topic, producer, (c0, c1), (conn0, conn1) = await _setup(SubType.SHARED)
        sub = topic.subscriptions["s"]
        sub.flow(c0, 100)
        sub.flow(c1, 100)
        topic.apply_limits(TopicLimits(dispatch_rate=DispatchRate(2, 0, 1)))
        raw = _entry(b"m")
        for i in range(5):
            topic.publish(producer, i, i, raw, 1)
        assert len(conn0.frames) + len(conn1.frames) == 2
        assert sub.msg_drop_counter == 3 and topic.msg_drop_counter == 3 and topic.stats_state.out.msgs == 2
        await trio.sleep(1.0)  # the next window (mock clock)
        topic.publish(producer, 5, 5, raw, 1)
        assert len(conn0.frames) + len(conn1.frames) == 3 and sub.msg_drop_counter == 3
        # a subscription rate set on the loaded topic reaches its subscription at once
        topic.apply_limits(TopicLimits(subscription_dispatch_rate=DispatchRate(1, 0, 600)))
        for i in range(3):
            topic.publish(producer, 6 + i, 6 + i, raw, 1)
        assert len(conn0.frames) + len(conn1.frames) == 4 and sub.msg_drop_counter == 5
        assert np_subscription_stats(sub)["msgDropCounter"] == 5

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_count_limits_refuse_with_the_persistent_errors() -> None:
    async def main() -> None:
        topic, _producer, _consumers, _ = await _setup(SubType.SHARED)
        topic.apply_limits(TopicLimits(max_producers=1, max_consumers=3, max_consumers_per_subscription=2))
        extra = Producer(
            topic=topic,
            producer_id=1,
            name="p2",
            connection=_Conn(),
            access_mode=AccessMode.SHARED,
            user_provided_name=False,
        )
        with pytest.raises(ProducerBusyError, match="Topic reached max producers limit"):
            await topic.add_producer(extra, lambda _e: None)
        sub = topic.subscriptions["s"]
        with pytest.raises(ConsumerBusyError, match="Subscription reached max consumers limit"):
            await sub.add_consumer(
                consumer_id=9,
                name="c9",
                connection=_Conn(),
                sub_type=SubType.SHARED,
                priority=0,
                hash_ranges=None,
                metadata={},
            )
        other = await topic.subscribe("other")
        await other.add_consumer(
            consumer_id=10,
            name="c10",
            connection=_Conn(),
            sub_type=SubType.SHARED,
            priority=0,
            hash_ranges=None,
            metadata={},
        )
        late = await topic.subscribe("late")
        with pytest.raises(ConsumerBusyError, match="Topic reached max consumers limit"):
            await late.add_consumer(
                consumer_id=11,
                name="c11",
                connection=_Conn(),
                sub_type=SubType.SHARED,
                priority=0,
                hash_ranges=None,
                metadata={},
            )
        assert "late" not in topic.subscriptions  # it existed only for the refused consumer

    trio.run(main)
