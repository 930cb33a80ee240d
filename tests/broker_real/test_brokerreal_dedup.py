"""Message deduplication survives a restart of a real ``magnetar standalone`` process.

The namespace enables deduplication over admin REST; a producer with a fixed name sends sequence
ids 0..N-1; after the restart (clean, and after SIGKILL) the same producer name learns its last
sequence id and re-sends an overlapping range: a fresh subscription from the earliest position
reads every sequence id exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest

from tests.support.admin import new_namespace, rest
from tests.support.clients import drain
from tests.support.standalone import start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def _send(producer: pulsar.Producer, ids: range) -> None:
    for i in ids:
        producer.send_async(f"seq-{i}".encode(), None, sequence_id=i)
    producer.flush()


@pytest.mark.parametrize("restart", ["clean", "sigkill"])
def test_dedup_across_restart(tmp_path: Path, restart: str) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data)
    try:
        ns = new_namespace(sa.admin_url, "dedup")
        rest("POST", sa.admin_url, f"/admin/v2/namespaces/{ns}/deduplication", json=True)
        # keep the data without subscriptions (retention 0 would let the broker trim it)
        rest(
            "POST",
            sa.admin_url,
            f"/admin/v2/namespaces/{ns}/retention",
            json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
        topic = f"persistent://{ns}/once"
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        producer = client.create_producer(topic, producer_name="fixed-name", batching_enabled=False)
        _send(producer, range(30))
        # a duplicate in the same session is dropped too
        _send(producer, range(25, 30))
        assert producer.last_sequence_id() == 29
        if restart == "clean":
            client.close()
    finally:
        if restart == "clean":
            assert sa.stop() == 0, sa.log()[-3000:]
        else:
            sa.kill()
    if restart == "sigkill":
        client.close()

    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        producer = client.create_producer(topic, producer_name="fixed-name", batching_enabled=False)
        # PRODUCER_SUCCESS carried the last stored sequence id
        assert producer.last_sequence_id() == 29
        _send(producer, range(20, 40))
        consumer = client.subscribe(topic, f"fresh-{restart}", initial_position=pulsar.InitialPosition.Earliest)
        got = [m.data() for m in drain(consumer)]
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()[-3000:]
    assert got == [f"seq-{i}".encode() for i in range(40)]


def test_dedup_survives_a_crash_after_the_consumed_ledger_could_be_trimmed(tmp_path: Path) -> None:
    """Default retention (0): once a subscription has acked everything, the old ledger may be
    trimmed at restart. The sequence ids it carried must not be forgotten with it."""
    data = tmp_path / "data"
    # cursors persist every 0.5 s, so the subscription's acks are durable before the kill
    args = ("--set", "managed_ledger.managedLedgerCursorPositionFlushSeconds=0.5")
    sa = start_standalone(data, *args)
    try:
        ns = new_namespace(sa.admin_url, "dedup-trim")
        rest("POST", sa.admin_url, f"/admin/v2/namespaces/{ns}/deduplication", json=True)
        topic = f"persistent://{ns}/once"
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, producer_name="fixed-name", batching_enabled=False)
        _send(producer, range(30))
        assert len(drain(consumer)) == 30
        internal = f"/admin/v2/persistent/{ns}/once/internalStats"
        # the dedup cursor is not a subscription
        assert rest("GET", sa.admin_url, f"/admin/v2/persistent/{ns}/once/subscriptions").json() == ["s"]
        # the client sends its grouped acks up to 100 ms later
        wait_until(
            lambda: rest("GET", sa.admin_url, internal).json()["cursors"]["s"]["markDeletePosition"].endswith(":29"),
            "the mark-delete position to reach the last message",
            timeout_s=20.0,
        )
    finally:
        sa.kill()
    client.close()

    sa = start_standalone(data, *args)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, producer_name="fixed-name", batching_enabled=False)
        assert producer.last_sequence_id() == 29
        _send(producer, range(25, 35))
        got = [m.data() for m in drain(consumer)]
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()[-3000:]
    assert got == [f"seq-{i}".encode() for i in range(30, 35)]
