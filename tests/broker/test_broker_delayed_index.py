"""The delayed-delivery index of a subscription inside a broker, with the official client.

Before: every delayed message read was kept in an in-memory heap (one tuple each, for ever, and
again after a restart) and the dispatcher read the whole delayed backlog at once. Now the index
keeps sealed buckets in bucket ledgers (keys in the cursor's properties), holds in memory at most
its configured bound, and the dispatcher stops reading while the index has no room.
"""

from __future__ import annotations

import time
from typing import Any

import pulsar

from bk_client import NotEnoughBookies
from broker import BrokerConfig
from managed_ledger import ManagedLedgerConfig
from tests.support.broker_thread import BrokerThread
from tests.support.clients import pulsar_client


def _broker(*, admin: bool = False, **kw: Any) -> BrokerThread:
    settings: dict[str, Any] = dict(
        delayed_delivery_min_index_count_per_bucket=100,
        delayed_delivery_max_indexes_per_bucket_snapshot_segment=20,
        delayed_delivery_max_num_buckets=3,
        delayed_delivery_tick_time_ms=100,
        dispatcher_read_failure_backoff_initial_time_ms=100,
        dispatcher_read_failure_backoff_max_time_ms=500,
    )
    settings.update(kw)
    config = BrokerConfig(
        advertised_address="127.0.0.1", bind_address="127.0.0.1", broker_service_port=0, web_service_port=0, **settings
    )
    return BrokerThread(config, ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1), admin=admin)


def _state(b: BrokerThread, topic: str, sub: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        s = b.service.topics[topic].subscriptions[sub]  # type: ignore[union-attr]
        index = s.delayed
        return {
            "read": s.cursor.read_position,
            "last": s.topic.ml.last_confirmed_entry,
            "count": index.count if index else 0,
            "loaded": index.loaded if index else 0,
            "memory": index.memory_bytes() if index else 0,
            "bound": index.settings.memory_bound if index else None,
            "buckets": index.buckets if index else 0,
            "merges": index.counters["merge"] if index else 0,
            "keys": [k for k in s.cursor.cursor_properties if k.startswith("#pulsar.internal.delayed.bucket")],
        }

    return b.call(read)


def _wait(check, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _send_delayed(producer: pulsar.Producer, n: int, due_ms: int) -> None:
    for i in range(n):
        producer.send_async(f"d{i}".encode(), None, deliver_at=due_ms + i)
    producer.flush()


def test_the_index_holds_a_delayed_backlog_within_its_memory_bound(topic: str) -> None:
    with _broker() as b, pulsar_client(b.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        due = int(time.time() * 1000) + 3_600_000
        _send_delayed(producer, 3000, due)
        peak = 0

        def indexed() -> bool:
            nonlocal peak
            st = _state(b, topic, "s")
            peak = max(peak, st["memory"])
            return st["count"] == 3000 and st["read"] > st["last"]

        _wait(indexed, "every delayed message to be indexed")
        st = _state(b, topic, "s")
        assert st["bound"] is not None and peak <= st["bound"], (peak, st["bound"])
        assert st["loaded"] < 3000 // 2  # most of the index is in storage, not in memory
        assert 1 <= len(st["keys"]) <= 3 + 4 and st["merges"] > 0  # buckets merged past 3
        # nothing is delivered before its time
        try:
            consumer.receive(500)
            raise AssertionError("a delayed message came early")
        except pulsar.Timeout:
            pass


def test_reading_stops_while_the_index_cannot_store_a_bucket(topic: str) -> None:
    with _broker(delayed_delivery_max_num_buckets=-1) as b, pulsar_client(b.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)

        async def no_new_ledgers() -> None:
            b.bk.fail_now(NotEnoughBookies(1, 0), count=10**9, ops={"create"})

        b.call(no_new_ledgers)
        _send_delayed(producer, 1000, int(time.time() * 1000) + 3_600_000)
        producer.send(b"plain")
        # one bucket sealed and waiting to be stored, the mutable bucket full: reading stops there
        _wait(lambda: _state(b, topic, "s")["count"] >= 200, "the index to fill")
        time.sleep(1.0)  # nothing more should be read: a bounded chance for more reads to show
        st = _state(b, topic, "s")
        assert st["count"] < 200 + 100  # at most one read batch past the full index
        assert st["read"].entry_id < 400 and not st["keys"]  # the rest of the backlog stays unread
        assert st["memory"] <= 2 * 200 * 68  # before: the whole backlog, as Python tuples
        with_room_again = b.bk.clear_failures
        b.call(_async(with_room_again))
        msg = consumer.receive(30_000)  # storage is back: buckets stored, the backlog read through
        assert msg.data() == b"plain"
        _wait(lambda: _state(b, topic, "s")["count"] == 1000, "the whole backlog to be indexed")
        st = _state(b, topic, "s")
        # stored buckets of about 100, each with one segment of 20 in memory, and the mutable bucket
        assert len(st["keys"]) >= 8 and st["loaded"] <= 20 * len(st["keys"]) + 200


def test_seek_unsubscribe_and_topic_deletion_delete_the_bucket_ledgers(topic: str) -> None:
    import httpx

    with _broker(admin=True, delayed_delivery_max_num_buckets=-1) as b, pulsar_client(b.url) as client:

        def stored(sub: str) -> dict[str, int]:
            async def read() -> dict[str, int]:
                props = b.service.topics[topic].subscriptions[sub].cursor.cursor_properties  # type: ignore[union-attr]
                return {k: int(v) for k, v in props.items() if k.startswith("#pulsar.internal.delayed.bucket")}

            return b.call(read)

        def deleted() -> set[int]:
            return set(b.bk.deleted_ledgers)

        s = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        t = client.subscribe(topic, "t", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        _send_delayed(producer, 250, int(time.time() * 1000) + 3_600_000)
        _wait(lambda: len(stored("s")) == 2 and len(stored("t")) == 2, "two buckets in each subscription")
        first = set(stored("s").values())
        s.seek(pulsar.MessageId.earliest)  # the index starts over: its buckets go
        _wait(lambda: first <= deleted(), "the buckets of s to be deleted on seek")
        assert not set(stored("s").values()) & first
        _wait(lambda: len(stored("s")) == 2, "s to index its backlog again")
        again = set(stored("s").values())
        s.unsubscribe()
        _wait(lambda: again <= deleted(), "the buckets of s to be deleted on unsubscribe")
        of_t = set(stored("t").values())
        t.close()
        r = httpx.delete(
            f"{b.http}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}",
            params={"force": "true"},
            timeout=30,
        )
        assert r.status_code in (200, 204), r.text
        assert of_t <= deleted()


def test_subscription_properties_leave_the_bucket_keys_alone(topic: str) -> None:
    import httpx

    with _broker(admin=True) as b, pulsar_client(b.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        _send_delayed(producer, 250, int(time.time() * 1000) + 3_600_000)
        _wait(lambda: len(_state(b, topic, "s")["keys"]) == 2, "two stored buckets")
        keys = _state(b, topic, "s")["keys"]
        url = f"{b.http}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/subscription/s/properties"
        # replacing the subscription's properties keeps the broker's own (Pulsar's internal prefix)
        assert httpx.put(url, json={"team": "a"}, timeout=10).status_code in (200, 204)
        assert _state(b, topic, "s")["keys"] == keys
        # and a user may not set one
        r = httpx.put(url, json={"#pulsar.internal.delayed.bucket_1:0_1:5": "7"}, timeout=10)
        assert r.status_code == 400, r.text
        assert _state(b, topic, "s")["keys"] == keys
        consumer.close()


def _async(fn):  # type: ignore[no-untyped-def]
    async def run() -> None:
        fn()

    return run
