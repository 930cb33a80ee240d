"""Sends while no ledger can be created (bookies full, read-only or all in quarantine), with the
official client.

The broker closes the topic's producers when an add fails for it and never refuses to create them
again (`broker.topics._topic` Rule 6): the client keeps its unanswered sends, reconnects and
resends them, and they are stored once storage is back, as with Pulsar. (Refusing the producer
with ProducerBlockedQuotaExceededException failed the pending sends at once, but the client's
reconnect backoff doubled with every refusal, so writes stayed stopped for up to a minute after
storage returned.)
"""

from __future__ import annotations

import threading

import pulsar
import pytest

from bk_client import NotEnoughBookies
from tests.support.broker_thread import BrokerThread
from tests.support.clients import pulsar_client


def _set_storage(b: BrokerThread, writable: bool) -> None:
    async def apply() -> None:
        if writable:
            b.bk.clear_failures()
        else:
            b.bk.fail_now(NotEnoughBookies(1, 0), count=10**9, ops={"add", "create"})

    b.call(apply)


def test_producers_are_not_refused_while_storage_is_unavailable_and_sends_resume(topic: str) -> None:
    with BrokerThread() as b, pulsar_client(b.url) as client:
        consumer = client.subscribe(topic, "s")
        # a send timeout far longer than the test waits: sends wait for storage, they do not fail
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=600_000)
        producer.send(b"before")
        _set_storage(b, writable=False)
        outcomes: list[pulsar.Result] = []
        answered = threading.Event()

        def callback(result: pulsar.Result, _msg_id: object) -> None:
            outcomes.append(result)
            answered.set()

        producer.send_async(b"during", callback)
        # a producer created while storage is unavailable is admitted (it used to be refused with
        # ProducerBlockedQuotaExceededException, and every refusal lengthened the client's backoff)
        other = client.create_producer(topic, batching_enabled=False, send_timeout_millis=600_000)
        # reads go on meanwhile
        msg = consumer.receive(10_000)
        assert msg.data() == b"before"
        consumer.acknowledge(msg)
        assert outcomes in ([], [pulsar.Result.Ok]), outcomes  # never failed for the outage
        # a send waits for storage no longer than its producer's send timeout (the broker holds
        # it; closing the producer again at every resend kept the client's timer from firing)
        short = client.create_producer(topic, batching_enabled=False, send_timeout_millis=2000)
        timed_out: list[pulsar.Result] = []
        gave_up = threading.Event()
        short.send_async(b"short", lambda result, _msg_id: (timed_out.append(result), gave_up.set()))
        assert gave_up.wait(30), "a send with a 2 s timeout was still pending after 30 s"
        assert timed_out == [pulsar.Result.Timeout]

        _set_storage(b, writable=True)
        assert answered.wait(60), "the send made while storage was unavailable was never stored"
        assert outcomes == [pulsar.Result.Ok]
        other.send(b"new producer")
        got = []
        while not got or got[-1] != b"new producer":
            got.append(consumer.receive(10_000).data())
        # the broker may store what the client gave up on ("short"): at least once, as Pulsar
        assert [m for m in got if m != b"short"] == [b"during", b"new producer"], got


@pytest.mark.parametrize("dedup", [False, True])
def test_a_failed_add_loses_reorders_and_duplicates_nothing(topic: str, dedup: bool) -> None:
    # Found by the chaos run: an add given up on after failing on 3 ledgers failed alone while
    # the adds behind it were stored, so the client's resend came after them (reordered) or,
    # with dedup, was taken for a duplicate and lost.
    from broker import BrokerConfig

    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        broker_deduplication_enabled=dedup,
    )
    with BrokerThread(config) as b, pulsar_client(b.url) as client:
        reader = client.subscribe(topic, "check")
        producer = client.create_producer(
            topic, producer_name="p", batching_enabled=False, send_timeout_millis=600_000, block_if_queue_full=True
        )
        producer.send(b"0")

        async def fail_three_ledgers() -> None:
            b.bk.fail_now(NotEnoughBookies(1, 0), count=3, ops={"add"})

        b.call(fail_three_ledgers)
        for i in range(1, 60):
            producer.send_async(str(i).encode(), None)
        producer.flush()
        got = []
        while True:
            try:
                msg = reader.receive(3000)
            except pulsar.Timeout:
                break
            got.append(int(msg.data()))
            reader.acknowledge(msg)
        if dedup:
            assert got == list(range(60))
        else:  # without dedup a resend may store a message twice, but never out of order
            assert sorted(set(got)) == list(range(60))
            assert got == sorted(got)
