"""Compaction through the admin REST and ``magnetar admin``, with the official client: compressed
batches, Failover read_compacted consumers, a run failing cleanly, repeated runs, the CLI."""

from __future__ import annotations

import json
import time

import httpx
import pulsar
import pytest
from click.testing import CliRunner

from magnetar.cli import main
from tests.broker_admin.admin_harness import AdminBroker


def _cli(broker: AdminBroker, *args: str, ok: bool = True) -> str:
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, *args])
    assert (result.exit_code == 0) == ok, result.output
    return result.output


def _wait_done(http: httpx.Client, topic: str) -> dict:
    deadline = time.monotonic() + 60
    while True:
        st = http.get(f"/admin/v2/persistent/public/default/{topic}/compaction").json()
        if st["status"] != "RUNNING" or time.monotonic() > deadline:
            return st
        time.sleep(0.1)


def _read_compacted(client: pulsar.Client, topic: str) -> list[tuple[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    out = []
    try:
        while True:
            try:
                msg = reader.read_next(timeout_millis=2000)
            except pulsar.Timeout:
                return out
            out.append((msg.partition_key(), msg.data()))
    finally:
        reader.close()


@pytest.mark.parametrize(
    "codec",
    [
        pulsar.CompressionType.LZ4,
        pulsar.CompressionType.ZLib,
        pulsar.CompressionType.ZSTD,
        pulsar.CompressionType.SNAPPY,
    ],
)
def test_compressed_batches_are_compacted_per_message(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str, codec
) -> None:
    topic = f"cmp-{name}"
    producer = client.create_producer(
        topic, compression_type=codec, batching_enabled=True, batching_max_messages=8, batching_max_publish_delay_ms=20
    )
    latest = {}
    for i in range(50):
        key, value = f"k{i % 6}", (f"value-{i}-" * 20).encode()
        producer.send_async(value, None, partition_key=key)
        latest[key] = value
    producer.flush()
    assert http.put(f"/admin/v2/persistent/public/default/{topic}/compaction").status_code == 204
    assert _wait_done(http, topic)["status"] == "SUCCESS"
    got = _read_compacted(client, topic)
    assert dict(got) == latest and len(got) == len(latest)


def test_failover_consumer_reads_compacted_and_shared_is_refused(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    topic = f"fo-{name}"
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 4}")
    assert http.put(f"/admin/v2/persistent/public/default/{topic}/compaction").status_code == 204
    assert _wait_done(http, topic)["status"] == "SUCCESS"
    producer.send(b"tail", partition_key="k0")
    consumer = client.subscribe(
        topic,
        "fo",
        consumer_type=pulsar.ConsumerType.Failover,
        is_read_compacted=True,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=2000)
        except pulsar.Timeout:
            break
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == [b"v16", b"v17", b"v18", b"v19", b"tail"]
    consumer.close()
    # the official client refuses it itself (InvalidConfiguration); the broker refuses it too
    with pytest.raises((pulsar.InvalidConfiguration, pulsar.NotAllowedError)):
        client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, is_read_compacted=True)


def test_compaction_of_an_empty_topic_and_twice_in_a_row(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    topic = f"empty-{name}"
    assert http.put(f"/admin/v2/persistent/public/default/{topic}").status_code == 204
    base = f"/admin/v2/persistent/public/default/{topic}/compaction"
    assert http.get(base).json() == {"status": "NOT_RUN", "lastError": ""}
    assert http.put(base).status_code == 204
    assert _wait_done(http, topic) == {"status": "SUCCESS", "lastError": ""}
    assert _read_compacted(client, topic) == []
    client.create_producer(topic).send(b"x", partition_key="a")
    assert http.put(base).status_code == 204
    assert _wait_done(http, topic)["status"] == "SUCCESS"
    assert _read_compacted(client, topic) == [("a", b"x")]
    explain = http.get(f"/admin/v2/persistent/public/default/{topic}/explain-storage").json()
    assert explain["compaction"]["compactedLedger"]["entries"] == 1
    assert explain["compaction"]["horizon"] is not None
    stats = http.get(f"/admin/v2/persistent/public/default/{topic}/stats").json()["compaction"]
    assert stats["lastCompactionSucceedTimestamp"] > 0 and stats["lastCompactionFailedTimestamp"] == 0
    assert stats["lastCompactionRemovedEventCount"] == 0
    metrics = http.get("/metrics").text
    line = next(
        x for x in metrics.splitlines() if x.startswith("pulsar_compaction_succeed_count") and f'/{topic}"' in x
    )
    assert float(line.rsplit(" ", 1)[1]) == 2


def test_partitioned_topic_compacts_every_partition(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    topic = f"parts-{name}"
    assert http.put(f"/admin/v2/persistent/public/default/{topic}/partitions", json=3).status_code == 204
    producer = client.create_producer(topic, batching_enabled=False)
    latest = {}
    for i in range(30):
        key = f"k{i % 5}"
        producer.send(f"{i}".encode(), partition_key=key)
        latest[key] = f"{i}".encode()
    assert http.put(f"/admin/v2/persistent/public/default/{topic}/compaction").status_code == 204
    for p in range(3):
        assert _wait_done(http, f"{topic}-partition-{p}")["status"] == "SUCCESS"
    got = _read_compacted(client, f"persistent://public/default/{topic}")
    assert dict(got) == latest and len(got) == len(latest)


def test_cli_compact_and_threshold(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    topic = f"persistent://public/default/cli-{name}"
    client.create_producer(topic).send(b"v", partition_key="k")
    assert "has not been run" in _cli(broker, "topics", "compaction-status", topic)
    assert "triggered" in _cli(broker, "topics", "compact", topic)
    assert "success" in _cli(broker, "topics", "compaction-status", "-w", topic)
    assert json.loads(_cli(broker, "--json", "topics", "compaction-status", topic)) == {
        "status": "SUCCESS",
        "lastError": "",
    }
    _cli(broker, "namespaces", "set-compaction-threshold", "public/default", "-t", "10M")
    assert json.loads(_cli(broker, "--json", "namespaces", "get-compaction-threshold", "public/default")) == 10485760
    assert "invalid" in _cli(broker, "namespaces", "set-compaction-threshold", "public/default", "-t", "lots", ok=False)
    _cli(broker, "namespaces", "remove-compaction-threshold", "public/default")
    assert "404" in _cli(broker, "topics", "compact", f"persistent://public/default/none-{name}", ok=False)


def test_new_run_and_topic_deletion_delete_the_compacted_ledgers(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    from managed_ledger import ManagedLedgerError

    topic = f"del-{name}"
    base = f"/admin/v2/persistent/public/default/{topic}"
    producer = client.create_producer(topic, batching_enabled=False)

    def compact_and_ledger(value: bytes) -> int:
        producer.send(value, partition_key="k")
        assert http.put(f"{base}/compaction").status_code == 204
        assert _wait_done(http, topic)["status"] == "SUCCESS"
        return http.get(f"{base}/explain-storage").json()["compaction"]["compactedLedger"]["ledgerId"]

    def exists(ledger_id: int) -> bool:
        assert broker.service is not None
        try:
            broker.call(broker.service.factory.side_ledgers.open, ledger_id)
        except ManagedLedgerError:
            return False
        return True

    first = compact_and_ledger(b"1")
    second = compact_and_ledger(b"2")
    assert not exists(first) and exists(second)  # a new run deletes the ledger it replaces
    producer.close()
    assert http.delete(base, params={"force": "true"}).status_code == 204
    assert not exists(second)  # deleting the topic deletes its compacted ledger


def test_broker_refuses_read_compacted_on_shared_and_the_reserved_name(broker: AdminBroker, name: str) -> None:
    # what a client that does not check its configuration sends (the official one refuses it itself)
    from protocols.pulsar import pulsar_api_pb2 as pb
    from tests.support.raw_pulsar import RawPeer

    peer = RawPeer(broker.port)
    try:
        peer.connect()
        topic = f"persistent://public/default/raw-{name}"
        peer.send(
            "SUBSCRIBE",
            topic=topic,
            subscription="s",
            subType=pb.CommandSubscribe.Shared,
            consumer_id=1,
            request_id=1,
            read_compacted=True,
        )
        reply = peer.recv()
        assert reply is not None and reply.type == pb.BaseCommand.ERROR
        assert reply.error.error == pb.NotAllowedError and "compacted" in reply.error.message
        peer.send(
            "SUBSCRIBE",
            topic=topic,
            subscription="__compaction",
            subType=pb.CommandSubscribe.Exclusive,
            consumer_id=2,
            request_id=2,
        )
        reply = peer.recv()
        assert reply is not None and reply.type == pb.BaseCommand.ERROR and reply.error.error == pb.NotAllowedError
    finally:
        peer.close()


def test_a_failed_run_reports_error_and_keeps_the_previous_view(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    from bk_client import NotEnoughBookies

    topic = f"fail-{name}"
    base = f"/admin/v2/persistent/public/default/{topic}/compaction"
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"old", partition_key="k")
    assert http.put(base).status_code == 204
    assert _wait_done(http, topic)["status"] == "SUCCESS"
    producer.send(b"new", partition_key="k")
    broker.bk.fail_now(NotEnoughBookies(2, 0, detail="no bookies for the test"), ops={"create"})
    assert http.put(base).status_code == 204
    st = _wait_done(http, topic)
    assert st["status"] == "ERROR" and "no bookies for the test" in st["lastError"]
    assert _read_compacted(client, topic) == [("k", b"old"), ("k", b"new")]  # old view, then the topic
    # a write failing half-way: the unfinished compacted ledger is deleted
    deleted_before = len(broker.bk.deleted_ledgers)
    broker.bk.fail_now(NotEnoughBookies(2, 0, detail="write failed for the test"), ops={"add"})
    assert http.put(base).status_code == 204
    st = _wait_done(http, topic)
    assert st["status"] == "ERROR" and "write failed for the test" in st["lastError"]
    assert len(broker.bk.deleted_ledgers) == deleted_before + 1
    assert _read_compacted(client, topic) == [("k", b"old"), ("k", b"new")]
    assert http.put(base).status_code == 204  # the next run works again
    assert _wait_done(http, topic) == {"status": "SUCCESS", "lastError": ""}
    assert _read_compacted(client, topic) == [("k", b"new")]


def test_message_ttl_moves_subscriptions_but_not_the_compaction_horizon(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    import functools

    topic = f"ttl-{name}"
    base = f"/admin/v2/persistent/public/default/{topic}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"{i}".encode(), partition_key=f"k{i}")
    assert http.put(f"{base}/compaction").status_code == 204
    assert _wait_done(http, topic)["status"] == "SUCCESS"
    producer.send(b"late", partition_key="k0")  # after the horizon
    horizon = http.get(f"{base}/internalStats").json()["cursors"]["__compaction"]["markDeletePosition"]
    assert http.post(f"{base}/messageTTL", params={"messageTTL": 1}).status_code == 204
    assert broker.service is not None
    deadline = time.monotonic() + 60
    while True:  # until TTL has expired the subscription's backlog (its messages are 1 s old)
        broker.call(functools.partial(broker.service.retention.run_once, force=True))
        stats = http.get(f"{base}/stats").json()["subscriptions"]["s"]
        if stats["msgBacklog"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert stats["msgBacklog"] == 0  # TTL acknowledged the subscription's messages
    cursors = http.get(f"{base}/internalStats").json()["cursors"]
    assert cursors["__compaction"]["markDeletePosition"] == horizon  # the horizon stays
    got = _read_compacted(client, topic)
    assert got[-1] == ("k0", b"late") and len(got) == 6
    consumer.close()


def test_a_topic_ending_in_a_tombstone_reads_to_its_end(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    # the last message id a read-compacted reader is told is the view's last one when the topic
    # ends at or before the horizon (else hasMessageAvailable waits for a compacted-out message)
    topic = f"tomb-{name}"
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"keep", partition_key="a")
    producer.send(b"x", partition_key="b")
    producer.send(b"", partition_key="b")  # the topic's last message: a tombstone
    assert http.put(f"/admin/v2/persistent/public/default/{topic}/compaction").status_code == 204
    assert _wait_done(http, topic)["status"] == "SUCCESS"
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=10000).data() == b"keep"
    assert not reader.has_message_available()
    reader.close()
    table = client.create_table_view(topic)  # reads to the end it is told, then returns
    try:
        contents: dict[str, bytes] = {}
        table.for_each(lambda k, v: contents.__setitem__(k, v))
        assert contents == {"a": b"keep"}
    finally:
        table.close()
