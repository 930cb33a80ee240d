"""Producer access modes against a real ``magnetar standalone`` process, restarted in the middle:
the topic epoch an exclusive grant set is stored with the topic's managed ledger
(``pulsar.topic.epoch``, as Pulsar keeps it), so after a restart the next exclusive producer gets
the following epoch, and the rules of Exclusive / WaitForExclusive hold as before.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pulsar
import pytest

from tests.support.admin import new_namespace, rest
from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow


def _epoch(admin_url: str, topic: str) -> int | None:
    return rest("GET", admin_url, f"/admin/v2/{topic.replace('://', '/')}/stats").json()["topicEpoch"]


def test_topic_epoch_and_access_modes_across_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data)
    try:
        ns = new_namespace(sa.admin_url, "access")
        # keep the data without subscriptions (retention 0 would let the broker trim it)
        rest(
            "POST",
            sa.admin_url,
            f"/admin/v2/namespaces/{ns}/retention",
            json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
        topic = f"persistent://{ns}/single-writer"
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive, send_timeout_millis=5000)
        first.send(b"one")
        assert _epoch(sa.admin_url, topic) == 0
        with pytest.raises(pulsar.ProducerFenced):
            client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        fencing = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
        fencing.send(b"two")
        with pytest.raises(pulsar.ProducerFenced):
            first.send(b"fenced")
        assert _epoch(sa.admin_url, topic) == 1
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()[-3000:]

    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        assert _epoch(sa.admin_url, topic) == 2  # goes on from the stored epoch
        created: list[pulsar.Producer] = []
        waiter = threading.Thread(
            target=lambda: created.append(
                client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)
            )
        )
        waiter.start()
        time.sleep(1.0)  # nothing should happen: a bounded chance for the waiter to be (wrongly) created
        assert not created
        holder.send(b"three")
        holder.close()
        waiter.join(15)
        assert created, "WaitForExclusive was not promoted after the holder left"
        created[0].send(b"four")
        assert _epoch(sa.admin_url, topic) == 3
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(5000).data() for _ in range(4)]
        assert got == [b"one", b"two", b"three", b"four"]
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()[-3000:]
