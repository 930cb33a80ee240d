"""Publish and dispatch rate limits against a real standalone (real bookie storage) with the
official client: a rate limit measurably bounds how many messages get through in a window.

The assertions are counts over multi-second windows with generous margins (the machine is shared
and slow), never the timing of a single message: the bound must hold (nothing beyond the rate plus
one window of slack gets through) and the traffic must go on (nothing is dropped or stalled).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pulsar
import pytest

from tests.support.standalone import Standalone, start_standalone

pytestmark = pytest.mark.slow

RATE = 20  # messages per second
WINDOW_S = 4.0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    sa = start_standalone(tmp_path_factory.mktemp("rate") / "data")
    try:
        yield sa
    finally:
        sa.stop()


def _post(sa: Standalone, path: str, body: object) -> None:
    r = httpx.post(f"{sa.admin_url}/admin/v2/{path}", json=body, timeout=10)
    assert r.status_code == 204, r.text


def test_publish_rate_bounds_what_producers_store(standalone: Standalone) -> None:
    sa = standalone
    assert httpx.put(f"{sa.admin_url}/admin/v2/tenants/rate", timeout=10).status_code == 204
    assert httpx.put(f"{sa.admin_url}/admin/v2/namespaces/rate/pub", timeout=10).status_code == 204
    _post(
        sa, "namespaces/rate/pub/publishRate", {"publishThrottlingRateInMsg": RATE, "publishThrottlingRateInByte": -1}
    )
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            "persistent://rate/pub/t", batching_enabled=False, max_pending_messages=200, block_if_queue_full=True
        )
        acked = 0
        lock = threading.Lock()

        def done(res: pulsar.Result, _msg_id: object) -> None:
            nonlocal acked
            if res == pulsar.Result.Ok:
                with lock:
                    acked += 1

        stop = threading.Event()

        def flood() -> None:
            i = 0
            while not stop.is_set():
                producer.send_async(f"m{i}".encode(), done)
                i += 1

        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        time.sleep(1.0)  # let the first window's burst pass before counting
        with lock:
            start = acked
        time.sleep(WINDOW_S)  # the measuring window
        with lock:
            stored = acked - start
        stop.set()
        sender.join(timeout=30)
        # at most RATE per second (plus one window of overshoot); and the producer keeps going
        assert 0 < stored <= RATE * (WINDOW_S + 2), stored
        producer.flush()
        producer.close()
    finally:
        client.close()


def test_dispatch_rate_bounds_what_consumers_receive(standalone: Standalone) -> None:
    sa = standalone
    topic = "persistent://public/default/dispatch-rate"
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        consumer.close()  # the subscription exists; the backlog builds up unthrottled
        producer = client.create_producer(topic, batching_enabled=False)
        total = 300
        for i in range(total):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        _post(
            sa,
            "persistent/public/default/dispatch-rate/dispatchRate",
            {
                "dispatchThrottlingRateInMsg": RATE,
                "dispatchThrottlingRateInByte": -1,
                "relativeToPublishRate": False,
                "ratePeriodInSecond": 1,
            },
        )
        consumer = client.subscribe(topic, "s")
        got = 0
        deadline = time.monotonic() + WINDOW_S
        while time.monotonic() < deadline:
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(msg)
            got += 1
        assert 0 < got <= RATE * (WINDOW_S + 2), got
        # lifting the limit lets the rest through: nothing was lost or stalled
        r = httpx.delete(f"{sa.admin_url}/admin/v2/persistent/public/default/dispatch-rate/dispatchRate", timeout=10)
        assert r.status_code == 204
        while got < total:
            msg = consumer.receive(timeout_millis=20000)
            consumer.acknowledge(msg)
            got += 1
        assert got == total
        consumer.close()
        producer.close()
    finally:
        client.close()


def test_max_producers_and_unacked_limits_on_real_storage(standalone: Standalone) -> None:
    sa = standalone
    topic = "persistent://public/default/limits"
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    try:
        client.create_producer(topic).close()  # the topic exists
        _post(sa, "persistent/public/default/limits/maxProducers", 1)
        _post(sa, "persistent/public/default/limits/maxUnackedMessagesOnConsumer", 2)
        producer = client.create_producer(topic, batching_enabled=False)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        for i in range(5):
            producer.send(f"m{i}".encode())
        held = [consumer.receive(timeout_millis=20000) for _ in range(2)]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=1500)  # two unacked: delivery stops
        for m in held:
            consumer.acknowledge(m)
        rest = []
        while len(rest) < 3:  # acks let the rest through, two at a time
            m = consumer.receive(timeout_millis=20000)
            consumer.acknowledge(m)
            rest.append(m.data())
        assert sorted(m.data() for m in held) + sorted(rest) == [f"m{i}".encode() for i in range(5)]
        consumer.close()
        producer.close()
    finally:
        client.close()
