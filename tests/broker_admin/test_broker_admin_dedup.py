"""Deduplication follow-ups: the namespace policy applies to loaded topics at once, batched SENDs
are keyed on their highest sequence id, and the ``pulsar.dedup`` cursor is never a subscription."""

from __future__ import annotations

import threading

import pulsar
import pytest

from broker.topics._dedup import DEDUP_CURSOR, Deduplication, DedupVerdict, highest_sequence_id
from tests.support.admin import V2, new_tenant_ns
from tests.support.clients import drain


def _values(client: pulsar.Client, topic: str) -> list[bytes]:
    consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    try:
        return [m.data() for m in drain(consumer, wait_ms=300)]
    finally:
        consumer.close()


def _send_batches(producer: pulsar.Producer, ids: range, prefix: str = "m") -> list[tuple[object, object]]:
    """Send ``ids`` asynchronously (the client batches them), flush, and return (result, id) pairs."""
    done: list[tuple[object, object]] = []
    lock = threading.Lock()

    def cb(result, msg_id) -> None:
        with lock:
            done.append((result, msg_id))

    for i in ids:
        producer.send_async(f"{prefix}{i}".encode(), cb, sequence_id=i)
    producer.flush()
    return done


def _batching_producer(client: pulsar.Client, topic: str, name: str) -> pulsar.Producer:
    # batches cut every 5 messages and never by time: the same sends make the same batches
    return client.create_producer(
        topic,
        producer_name=name,
        batching_enabled=True,
        batching_max_messages=5,
        batching_max_publish_delay_ms=3_600_000,
    )


# ---------------------------------------------------------------------------------- units


def test_highest_sequence_id_falls_back_to_the_batch_size() -> None:
    assert highest_sequence_id(10, 0, 1) == 10
    assert highest_sequence_id(10, 0, 4) == 13
    assert highest_sequence_id(10, 20, 4) == 20  # the field wins when set (Java client)
    assert highest_sequence_id(10, 5, 0) == 10


def test_dedup_keys_a_batch_on_its_highest_id() -> None:
    d = Deduplication(store=None, ml_name="x", snapshot_interval=100)  # type: ignore[arg-type]
    assert d.check("p", 1, 5) is DedupVerdict.NEW
    assert d.check("p", 1, 5) is DedupVerdict.DUPLICATE_PENDING
    assert d.check("p", 3, 5) is DedupVerdict.DUPLICATE_PENDING
    assert d.check("p", 4, 8) is DedupVerdict.NEW  # overlapping but with new ids: stored whole (Pulsar)
    d.on_persisted("p", 1, 5, _pos(1))
    assert d.check("p", 1, 5) is DedupVerdict.DUPLICATE_PERSISTED
    assert d.last_sequence_id("p") == 5


def _pos(entry: int):
    from managed_ledger import Position

    return Position(1, entry)


# ---------------------------------------------------------------------------------- end to end


def test_policy_change_applies_to_a_loaded_topic(broker, http, client: pulsar.Client, name: str) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"persistent://{ns}/t"
    producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
    for i in (1, 2):
        producer.send(f"m{i}".encode(), sequence_id=i)
    loaded = broker.service.topics[topic]
    assert loaded.dedup is None

    assert http.post(f"{V2}/namespaces/{ns}/deduplication", json=True).status_code == 204
    assert broker.service.topics[topic] is loaded and loaded.deduplication_enabled  # not reloaded
    assert DEDUP_CURSOR in loaded.ml.cursors
    producer.send(b"dup", sequence_id=2)  # stored before dedup was on: still known as a duplicate
    producer.send(b"m3", sequence_id=3)
    assert _values(client, topic) == [b"m1", b"m2", b"m3"]

    assert http.delete(f"{V2}/namespaces/{ns}/deduplication").status_code == 204
    assert broker.service.topics[topic] is loaded and not loaded.deduplication_enabled
    assert DEDUP_CURSOR not in loaded.ml.cursors  # it must not pin anything any more
    producer.send(b"again", sequence_id=1)
    assert _values(client, topic)[-1] == b"again"
    producer.close()


def test_policy_change_elsewhere_is_picked_up_by_the_recheck(broker, http, name: str) -> None:
    from broker import NamespaceName

    ns = new_tenant_ns(http, name)
    topic = f"persistent://{ns}/t"
    assert http.put(f"{V2}/persistent/{ns}/t").status_code == 204
    c = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        c.create_producer(topic).close()
        loaded = broker.service.topics[topic]

        async def change_directly() -> None:  # as another broker would, without this admin API
            await broker.service.namespaces.update_policies(NamespaceName.parse(ns), {"deduplicationEnabled": True})
            assert loaded.dedup is None
            await broker.service.apply_namespace_policies()  # what the periodic recheck runs

        broker.call(change_directly)
        assert loaded.deduplication_enabled
    finally:
        c.close()


def test_batched_resends_are_duplicates(broker, http, client: pulsar.Client, name: str) -> None:
    ns = new_tenant_ns(http, name, dedup=True)
    topic = f"persistent://{ns}/t"
    producer = _batching_producer(client, topic, "bp")
    first = _send_batches(producer, range(1, 11))
    assert all(r == pulsar.Result.Ok for r, _ in first) and len(first) == 10
    producer.close()

    producer = _batching_producer(client, topic, "bp")
    assert producer.last_sequence_id() == 10  # the highest id of the last batch, not its first
    again = _send_batches(producer, range(1, 11), prefix="dup")  # the same two batches re-sent
    assert all(r == pulsar.Result.Ok for r, _ in again) and len(again) == 10
    more = _send_batches(producer, range(11, 16))
    assert all(r == pulsar.Result.Ok for r, _ in more)
    producer.close()
    assert _values(client, topic) == [f"m{i}".encode() for i in range(1, 16)]


def test_batched_dedup_survives_a_reload(broker, http, client: pulsar.Client, name: str) -> None:
    ns = new_tenant_ns(http, name, dedup=True)
    topic = f"persistent://{ns}/t"
    # a durable subscription first: without one, the unloaded topic's closed ledger is consumed
    # data, and the quota check of the next PRODUCER trims it (0/0 retention)
    client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = _batching_producer(client, topic, "rp")
    _send_batches(producer, range(1, 11))
    producer.close()
    assert http.put(f"{V2}/persistent/{ns}/t/unload").status_code == 204
    producer = _batching_producer(client, topic, "rp")
    assert producer.last_sequence_id() == 10  # replayed from the batch entries' metadata
    _send_batches(producer, range(6, 11), prefix="dup")
    _send_batches(producer, range(11, 13))
    producer.close()
    assert _values(client, topic) == [f"m{i}".encode() for i in range(1, 13)]


def test_dedup_cursor_is_not_a_subscription(broker, http, client: pulsar.Client, name: str) -> None:
    ns = new_tenant_ns(http, name, dedup=True)
    topic = f"persistent://{ns}/t"
    producer = client.create_producer(topic, producer_name="sp", batching_enabled=False)
    producer.send(b"x", sequence_id=1)
    producer.close()
    assert DEDUP_CURSOR in broker.service.topics[topic].ml.cursors
    tp = f"{V2}/persistent/{ns}/t"
    assert DEDUP_CURSOR not in http.get(f"{tp}/subscriptions").json()
    assert DEDUP_CURSOR not in http.get(f"{tp}/stats").json()["subscriptions"]
    assert http.put(f"{tp}/subscription/{DEDUP_CURSOR}").status_code == 412
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, DEDUP_CURSOR)
    explain = http.get(f"{tp}/explain-storage").json()
    assert explain["cursors"][DEDUP_CURSOR]["system"] is True
    assert explain["slowestCursor"] != DEDUP_CURSOR


def test_chunk_before_the_last_is_not_recorded() -> None:
    d = Deduplication(store=None, ml_name="x", snapshot_interval=100)  # type: ignore[arg-type]
    for chunk in range(3):  # chunks 0 and 1 of message 7, then its last chunk
        assert d.check("p", 7, 7, partial_chunk=chunk < 2) is DedupVerdict.NEW
        d.on_persisted("p", 7, 7, _pos(chunk), partial_chunk=chunk < 2)
    assert d.last_sequence_id("p") == 7
    # the whole message re-sent after its last chunk was stored: every chunk is a duplicate
    assert d.check("p", 7, 7, partial_chunk=True) is DedupVerdict.DUPLICATE_PERSISTED
    assert d.check("p", 7, 7) is DedupVerdict.DUPLICATE_PERSISTED


def test_chunked_messages_with_deduplication_on(name: str) -> None:
    from broker import BrokerConfig
    from tests.broker_admin.admin_harness import AdminBroker
    from tests.support.clients import pulsar_client

    # a small maxMessageSize so that a 150 KiB message travels as 3 chunks
    with AdminBroker(BrokerConfig(max_message_size=64 * 1024, web_service_port=0)) as b, pulsar_client(b.url) as client:
        import httpx

        with httpx.Client(base_url=b.http, timeout=10) as http:
            ns = new_tenant_ns(http, name, dedup=True)
        topic = f"persistent://{ns}/chunky"
        producer = client.create_producer(topic, producer_name="cp", chunking_enabled=True, batching_enabled=False)
        big = [bytes([i]) * (150 * 1024) for i in range(1, 4)]
        for i, payload in enumerate(big, start=1):
            producer.send(payload, sequence_id=i)
        producer.send(big[0], sequence_id=1)  # a re-send of an old id: dropped whole
        producer.close()
        assert _values(client, topic) == big
