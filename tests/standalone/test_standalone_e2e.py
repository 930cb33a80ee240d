"""Standalone Magnetar end to end, as a user runs it: a real process, the official client.

These are synchronous tests on purpose: the official client blocks, and the server is a separate
process, as it is for a user.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pulsar
import pytest

from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow


def _set_infinite_retention(admin_url: str) -> None:
    r = httpx.post(
        f"{admin_url}/admin/v2/namespaces/public/default/retention",
        json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        timeout=10,
    )
    assert r.status_code in (200, 204), r.text


def _drain(client: pulsar.Client, topic: str, subscription: str) -> list[bytes]:
    consumer = client.subscribe(topic, subscription, initial_position=pulsar.InitialPosition.Earliest)
    got = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=3000)
        except pulsar.Timeout:
            break
        got.append(msg.data())
        consumer.acknowledge(msg)
    consumer.close()
    return got


def test_restart_keeps_topics_subscriptions_and_messages(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe("restart-topic", "keep")
        producer = client.create_producer("restart-topic")
        for i in range(50):
            producer.send(f"m-{i}".encode())
        for _ in range(20):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()
    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        rest = _drain(client, "restart-topic", "keep")
        client.close()
        topics = httpx.get(f"{sa.admin_url}/admin/v2/persistent/public/default", timeout=10).json()
    finally:
        sa.stop()
    # The cursor was persisted on the clean shutdown: the acked 20 are not redelivered.
    assert rest == [f"m-{i}".encode() for i in range(20, 50)]
    assert "persistent://public/default/restart-topic" in topics


@pytest.mark.parametrize("batching", [False, True])
def test_sigkill_during_produce_loses_no_receipted_message(tmp_path: Path, batching: bool) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data)
    receipted: list[bytes] = []
    lock = threading.Lock()
    try:
        _set_infinite_retention(sa.admin_url)
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=5)
        producer = client.create_producer(
            "kill-topic",
            batching_enabled=batching,
            block_if_queue_full=True,
            max_pending_messages=500,
            send_timeout_millis=5000,
        )

        def on_sent(res: pulsar.Result, _msg_id: object, payload: bytes) -> None:
            if res == pulsar.Result.Ok:
                with lock:
                    receipted.append(payload)

        deadline = time.monotonic() + 30
        i = 0
        while time.monotonic() < deadline:
            payload = f"k-{i}".encode()
            producer.send_async(payload, lambda r, m, p=payload: on_sent(r, m, p))
            i += 1
            with lock:
                if len(receipted) >= 400:
                    break
            if i % 50 == 0:
                time.sleep(0.005)
        sa.kill()
        client.close()
    finally:
        if sa.proc.poll() is None:
            sa.kill()
    with lock:
        acked = set(receipted)
    assert len(acked) >= 400
    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        got = _drain(client, "kill-topic", "fresh-after-kill")
        client.close()
    finally:
        sa.stop()
    missing = acked - set(got)
    assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
    assert len(got) == len(set(got)), "a message was delivered twice"
