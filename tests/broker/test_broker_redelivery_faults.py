"""Reads that fail while a message waits to be delivered again, with the official client.

Storage is MockBookKeeper with the entry cache off, so every redelivery reads storage, and reads
fail on cue (bookie timeouts). Before: the dispatcher dropped a position from its redelivery queue
on the first failed read, so the message stayed unacknowledged and was never delivered again
while the consumer stayed connected (a negative ack, and a delayed message coming due, both go
that way). Now the read is retried with a backoff until it succeeds.
"""

from __future__ import annotations

import datetime

import pulsar

from bk_client import Timeout
from broker import BrokerConfig
from managed_ledger import ManagedLedgerConfig
from tests.support.broker_thread import BrokerThread
from tests.support.clients import pulsar_client

FAILED_READS = 4


def _broker() -> BrokerThread:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        dispatcher_read_failure_backoff_initial_time_ms=100,
        dispatcher_read_failure_backoff_max_time_ms=400,
        delayed_delivery_tick_time_ms=100,
    )
    return BrokerThread(config, ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1, cache_size_mb=0))


def _fail_reads(b: BrokerThread, count: int) -> None:
    async def program() -> None:
        b.bk.fail_now(Timeout(), count=count, ops={"read"})

    b.call(program)


def _pending_read_failures(b: BrokerThread) -> int:
    async def count() -> int:
        return sum(p.count for p in b.bk._programmed)

    return b.call(count)


def _consumers(b: BrokerThread, topic: str, sub: str) -> int:
    async def count() -> int:
        return len(b.service.topics[topic].subscriptions[sub].consumers)  # type: ignore[union-attr]

    return b.call(count)


def test_a_negatively_acked_message_is_redelivered_after_failed_reads(topic: str) -> None:
    with _broker() as b, pulsar_client(b.url) as client:
        consumer = client.subscribe(
            topic, "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100
        )
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"again")
        first = consumer.receive(10_000)
        _fail_reads(b, FAILED_READS)
        consumer.negative_acknowledge(first)
        again = consumer.receive(30_000)  # before: never, the position was dropped on the first failure
        assert again.data() == b"again" and again.redelivery_count() == 1
        assert _pending_read_failures(b) == 0  # every programmed failure was met, and retried
        assert _consumers(b, topic, "s") == 1  # the consumer stayed connected all along
        consumer.acknowledge(again)


def test_a_delayed_message_that_comes_due_is_delivered_after_failed_reads(topic: str) -> None:
    with _broker() as b, pulsar_client(b.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"later", deliver_after=datetime.timedelta(milliseconds=1500))
        producer.send(b"now")
        assert consumer.receive(10_000).data() == b"now"  # the delayed one has been read and is held
        _fail_reads(b, FAILED_READS)  # when it comes due, its reads fail first
        later = consumer.receive(30_000)
        assert later.data() == b"later"
        assert _pending_read_failures(b) == 0
        assert _consumers(b, topic, "s") == 1
        consumer.acknowledge(later)
