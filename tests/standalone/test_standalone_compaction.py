"""Topic compaction end to end: standalone as a real process, the official client, real storage.

Covers the admin trigger and status (Pulsar's LongRunningProcessStatus), read_compacted readers
and consumers, tombstones, keyless messages, batches split per message, a SIGKILL restart between
compaction and read (the horizon and ledger live in the ``__compaction`` cursor), the automatic
trigger by the namespace's compactionThreshold, explain-storage and the client's TableView.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pulsar
import pytest

from tests.support.standalone import Standalone, start_standalone

pytestmark = pytest.mark.slow

_NS = "public/default"


def _admin(sa: Standalone, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, f"{sa.admin_url}/admin/v2/{path}", timeout=30, **kw)


def _status(sa: Standalone, topic: str) -> dict:
    r = _admin(sa, "GET", f"persistent/{_NS}/{topic}/compaction")
    assert r.status_code == 200, r.text
    return r.json()


def _wait_status(sa: Standalone, topic: str, want: str, bound_s: float = 90) -> dict:
    deadline = time.monotonic() + bound_s
    while True:
        st = _status(sa, topic)
        if st["status"] == want or time.monotonic() > deadline:
            assert st["status"] == want, (st, sa.log()[-4000:])
            return st
        time.sleep(0.2)


def _compact(sa: Standalone, topic: str) -> None:
    r = _admin(sa, "PUT", f"persistent/{_NS}/{topic}/compaction")
    assert r.status_code == 204, r.text
    _wait_status(sa, topic, "SUCCESS")


def _read_all(client: pulsar.Client, topic: str, *, compacted: bool, idle_ms: int = 3000) -> list[tuple[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    out = []
    try:
        while True:
            try:
                msg = reader.read_next(timeout_millis=idle_ms)
            except pulsar.Timeout:
                return out
            out.append((msg.partition_key(), msg.data()))
    finally:
        reader.close()


def _send_all(producer: pulsar.Producer, items: list[tuple[str | None, bytes]]) -> None:
    errors = []

    def done(res, _mid) -> None:
        if res != pulsar.Result.Ok:
            errors.append(res)

    for key, value in items:
        if key is None:
            producer.send_async(value, done)
        else:
            producer.send_async(value, done, partition_key=key)
    producer.flush()
    assert not errors


def _expected(items: list[tuple[str | None, bytes]]) -> dict[str, bytes]:
    latest: dict[str, bytes] = {}
    for key, value in items:
        if key is None:
            continue
        if value:
            latest[key] = value
        else:
            latest.pop(key, None)
    return latest


def test_compaction_survives_restart_and_serves_compacted_readers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topic = "compact-me"
    single = [(f"k{i % 5}", f"v{n}-k{i % 5}".encode()) for n, i in enumerate(range(40))]
    single += [(None, b"no-key-1"), ("k1", b""), ("gone", b"soon"), ("gone", b"")]  # keyless, tombstones
    batched = [(f"b{i % 7}", f"bv{i}".encode()) for i in range(60)] + [("b3", b"")]
    expected = _expected(single + batched)
    sa = start_standalone(data)
    try:
        assert _admin(sa, "GET", f"persistent/{_NS}/{topic}/compaction").status_code == 404  # no topic yet
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
        p1 = client.create_producer(topic, batching_enabled=False)
        _send_all(p1, single)
        p2 = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=50
        )
        _send_all(p2, batched)
        assert _status(sa, topic) == {"status": "NOT_RUN", "lastError": ""}
        _compact(sa, topic)

        view = _read_all(client, topic, compacted=True)
        assert dict(view) == expected
        assert len(view) == len(expected)  # one message per key, nothing keyless, no tombstone
        everything = _read_all(client, topic, compacted=False)
        assert len(everything) == len(single) + len(batched)  # the topic itself is untouched

        explain = _admin(sa, "GET", f"persistent/{_NS}/{topic}/explain-storage").json()
        assert explain["compaction"]["status"] == "SUCCESS"
        assert explain["compaction"]["compactedLedger"]["entries"] > 0
        assert explain["cursors"]["__compaction"]["system"] is True
        client.close()
    finally:
        sa.kill()  # SIGKILL between compaction and read

    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
        assert _status(sa, topic)["status"] == "SUCCESS"  # the view is loaded from the cursor
        assert dict(_read_all(client, topic, compacted=True)) == expected

        # after the horizon: the compacted view, then the topic's later messages as they are
        later = [("k0", b"after-0"), ("k0", b"after-1"), ("new", b"fresh")]
        producer = client.create_producer(topic, batching_enabled=False)
        _send_all(producer, later)
        got = _read_all(client, topic, compacted=True)
        assert got[: len(expected)] and dict(got[: len(expected)]) == expected
        assert got[len(expected) :] == later

        # an exclusive consumer with read_compacted gets the same, and acks it
        consumer = client.subscribe(
            topic, "compacted-sub", is_read_compacted=True, initial_position=pulsar.InitialPosition.Earliest
        )
        seen = []
        while True:
            try:
                msg = consumer.receive(timeout_millis=3000)
            except pulsar.Timeout:
                break
            seen.append((msg.partition_key(), msg.data()))
            consumer.acknowledge(msg)
        assert seen == got
        consumer.close()

        # the ledgers behind the horizon were trimmed at restart (retention 0, nothing else pins
        # them): a consumer that reconnects without acking, or seeks to earliest, still gets the
        # whole view again
        def receive_all(c: pulsar.Consumer, limit: int | None = None) -> list[tuple[str, bytes]]:
            out = []
            while limit is None or len(out) < limit:
                try:
                    m = c.receive(timeout_millis=3000)
                except pulsar.Timeout:
                    break
                out.append((m.partition_key(), m.data()))
            return out

        def subscribe_again() -> pulsar.Consumer:
            return client.subscribe(
                topic, "no-acks", is_read_compacted=True, initial_position=pulsar.InitialPosition.Earliest
            )

        stored = [
            row["ledgerId"] for row in _admin(sa, "GET", f"persistent/{_NS}/{topic}/explain-storage").json()["ledgers"]
        ]
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        first_id = reader.read_next(timeout_millis=10000).message_id()
        reader.close()
        assert first_id.ledger_id() < min(stored)  # its ledger is gone; the view still has it
        c2 = subscribe_again()
        assert receive_all(c2, 3) == got[:3]
        c2.close()
        c2 = subscribe_again()
        assert receive_all(c2) == got
        c2.seek(pulsar.MessageId.earliest)
        assert receive_all(c2) == got
        c2.close()

        # compacting again folds the later messages in and replaces the ledger
        old_ledger = _admin(sa, "GET", f"persistent/{_NS}/{topic}/explain-storage").json()["compaction"][
            "compactedLedger"
        ]["ledgerId"]
        _compact(sa, topic)
        again = dict(_read_all(client, topic, compacted=True))
        assert again == {**expected, "k0": b"after-1", "new": b"fresh"}
        new_ledger = _admin(sa, "GET", f"persistent/{_NS}/{topic}/explain-storage").json()["compaction"][
            "compactedLedger"
        ]["ledgerId"]
        assert new_ledger != old_ledger

        # TableView of the official client works on top
        table = client.create_table_view(topic)  # returns once it has read the topic to its end
        try:
            contents: dict[str, bytes] = {}
            table.for_each(lambda k, v: contents.__setitem__(k, v))
            assert contents == again
            assert table.get("k1") is None
        finally:
            table.close()
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()[-4000:]


def test_compaction_threshold_triggers_and_refusals(tmp_path: Path) -> None:
    sa = start_standalone(tmp_path / "data", "--set", "broker.compaction_monitor_interval_s=0.5")
    topic = "auto-compact"
    try:
        path = f"namespaces/{_NS}/compactionThreshold"
        unset = _admin(sa, "GET", path)
        assert unset.status_code == 204 and not unset.content  # unset: no content, as Pulsar
        assert _admin(sa, "POST", path, json=-1).status_code == 400
        assert _admin(sa, "POST", path, json=1024).status_code == 204
        assert _admin(sa, "GET", path).json() == 1024

        client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
        # read_compacted is for Exclusive / Failover subscriptions only, as in Pulsar
        with pytest.raises(pulsar.InvalidConfiguration):  # the client refuses it itself
            client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared, is_read_compacted=True)
        # the reserved cursor name is no subscription
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "__compaction")

        producer = client.create_producer(topic, batching_enabled=False)
        items = [(f"k{i % 3}", b"x" * 100 + str(i).encode()) for i in range(40)]
        _send_all(producer, items)  # ~4 KB: over the threshold
        _wait_status(sa, topic, "SUCCESS")
        assert dict(_read_all(client, topic, compacted=True)) == _expected(items)

        assert _admin(sa, "DELETE", path).status_code == 204
        assert _admin(sa, "GET", path).status_code == 204
        # unknown topic: 404
        assert _admin(sa, "PUT", f"persistent/{_NS}/no-such-topic/compaction").status_code == 404
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()[-4000:]
