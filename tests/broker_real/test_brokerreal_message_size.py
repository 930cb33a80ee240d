"""Messages at the size limits, with the official client, against standalone on default limits.

Before: the broker admitted ``maxMessageSize`` (5 MiB) plus metadata while the bookie refused any
frame over exactly 5 MiB, so a 5,242,800-byte message (and every full-size chunk of a chunked
message) could never be stored; the managed ledger rolled ledger after ledger and that send and
every later one hung. Now the bookie's frame limit is 5 MiB + 10 KiB (as Pulsar ships it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pulsar
import pytest

from tests.support.standalone import Standalone, start_standalone

pytestmark = pytest.mark.slow

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    proc = start_standalone(tmp_path_factory.mktemp("size") / "data")
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            assert proc.stop() == 0, proc.log()[-3000:]


@pytest.fixture
def client(sa: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        sa.service_url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )
    try:
        yield c
    finally:
        c.close()


def send_within(producer: pulsar.Producer, payload: bytes, seconds: float = 60.0) -> None:
    """Send ``payload`` and wait for its receipt; a send that never completes fails the test."""
    done = threading.Event()
    results: list[pulsar.Result] = []

    def callback(result: pulsar.Result, _msg_id: object) -> None:
        results.append(result)
        done.set()

    producer.send_async(payload, callback)
    assert done.wait(seconds), f"a {len(payload)}-byte send got no receipt in {seconds} s"
    assert results == [pulsar.Result.Ok], f"send failed: {results}"


def test_a_message_just_under_max_message_size_round_trips(client: pulsar.Client) -> None:
    consumer = client.subscribe("size-plain", "s")
    producer = client.create_producer("size-plain", batching_enabled=False)
    payload = os.urandom(5_242_800)
    send_within(producer, payload)
    send_within(producer, b"after")  # the topic did not stall
    assert consumer.receive(30_000).data() == payload
    assert consumer.receive(30_000).data() == b"after"


@pytest.mark.parametrize("size", [12 * MIB, 50 * MIB])
def test_chunked_messages_round_trip(client: pulsar.Client, size: int) -> None:
    topic = f"size-chunked-{size}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False, send_timeout_millis=120_000)
    payload = os.urandom(size)
    send_within(producer, payload, 120.0)
    send_within(producer, b"small")
    got = consumer.receive(120_000)
    assert len(got.data()) == size and got.data() == payload
    assert consumer.receive(30_000).data() == b"small"
    consumer.acknowledge(got)
