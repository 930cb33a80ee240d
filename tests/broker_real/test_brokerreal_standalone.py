"""The official client against a real ``magnetar standalone`` process: schemas (Avro, JSON),
chunked large messages, partitioned topics, Key_Shared ordering, nack redelivery, readers from a
message id and pattern subscriptions.

One standalone serves the whole module (each test uses its own namespace or topic); its
``maxMessageSize`` is small so that chunking is exercised with modest payloads.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Iterator

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from tests.support.admin import new_namespace, rest
from tests.support.clients import drain, subscribe_pattern
from tests.support.standalone import Standalone, start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MAX_MESSAGE_SIZE = 64 * 1024


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    proc = start_standalone(
        tmp_path_factory.mktemp("sa") / "data", "--set", f"broker.maxMessageSize={MAX_MESSAGE_SIZE}"
    )
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            assert proc.stop() == 0, proc.log()[-3000:]


@pytest.fixture
def client(sa: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
    try:
        yield c
    finally:
        c.close()


class User(Record):
    name = String()
    age = Integer()


# Later versions of the record: named User too, since the client names the Avro record after the
# class and records of different names never match (Avro's resolution rules)
UserNameOnly = type("User", (Record,), {"name": String()})
UserWithEmail = type("User", (Record,), {"name": String(), "age": Integer(), "email": String(required=True)})


def test_avro_schema_round_trip_and_compatibility(sa: Standalone, client: pulsar.Client) -> None:
    ns = new_namespace(sa.admin_url, "avro")
    rest("POST", sa.admin_url, f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", json="BACKWARD")
    assert rest("GET", sa.admin_url, f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy").json() == "BACKWARD"
    topic = f"persistent://{ns}/users"
    consumer = client.subscribe(topic, "s", schema=AvroSchema(User))
    producer = client.create_producer(topic, schema=AvroSchema(User))
    for i in range(5):
        producer.send(User(name=f"u{i}", age=20 + i))
    got = [consumer.receive(5000) for _ in range(5)]
    assert [(m.value().name, m.value().age) for m in got] == [(f"u{i}", 20 + i) for i in range(5)]
    for m in got:
        consumer.acknowledge(m)

    # BACKWARD: a new field without a default cannot be read from old data
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserWithEmail))
    # ... while dropping a field can: a new version
    slim = client.create_producer(topic, schema=AvroSchema(UserNameOnly))
    slim.send(UserNameOnly(name="slim"))
    # BACKWARD promises that a reader of the new version reads everything written before it
    # (the client fetches each message's writer schema by version with GET_SCHEMA)
    reader = client.subscribe(
        topic, "new-reader", schema=AvroSchema(UserNameOnly), initial_position=pulsar.InitialPosition.Earliest
    )
    assert [m.value().name for m in drain(reader)] == [f"u{i}" for i in range(5)] + ["slim"]
    reader.close()
    producer.close()
    slim.close()
    consumer.close()


def test_always_incompatible_refuses_any_new_avro_version(sa: Standalone, client: pulsar.Client) -> None:
    ns = new_namespace(sa.admin_url, "avro-strict")
    rest("PUT", sa.admin_url, f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", json="ALWAYS_INCOMPATIBLE")
    topic = f"persistent://{ns}/users"
    first = client.create_producer(topic, schema=AvroSchema(User))
    first.send(User(name="a", age=1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserNameOnly))
    # the same schema again is the existing version, not a new one
    again = client.create_producer(topic, schema=AvroSchema(User))
    again.close()
    first.close()


def test_json_schema(sa: Standalone, client: pulsar.Client) -> None:
    topic = "json-users"
    consumer = client.subscribe(topic, "s", schema=JsonSchema(User))
    producer = client.create_producer(topic, schema=JsonSchema(User))
    producer.send(User(name="ann", age=33))
    msg = consumer.receive(5000)
    assert (msg.value().name, msg.value().age) == ("ann", 33)
    consumer.acknowledge(msg)
    # an Avro producer on a JSON topic is refused: the schema types differ
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(User))
    producer.close()
    consumer.close()


def test_chunked_large_messages(sa: Standalone, client: pulsar.Client) -> None:
    topic = "chunky"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = [bytes([i]) * (5 * MAX_MESSAGE_SIZE + 123 * i) for i in range(1, 4)]
    for payload in big:
        producer.send(payload)
    producer.send(b"small")
    got = [consumer.receive(10000) for _ in range(4)]
    assert [m.data() for m in got] == [*big, b"small"]
    for m in got:
        consumer.acknowledge(m)
    # without chunking, a message over the limit is refused by the client
    plain = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):
        plain.send(b"x" * (2 * MAX_MESSAGE_SIZE))
    plain.close()
    producer.close()
    consumer.close()


def test_partitioned_topic_with_keys(sa: Standalone, client: pulsar.Client) -> None:
    ns = new_namespace(sa.admin_url, "parts")
    rest("PUT", sa.admin_url, f"/admin/v2/persistent/{ns}/orders/partitions", json=3)
    assert rest("GET", sa.admin_url, f"/admin/v2/persistent/{ns}/orders/partitions").json()["partitions"] == 3
    topic = f"persistent://{ns}/orders"
    assert len(client.get_topic_partitions(topic)) == 3
    consumer = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(8)]
    for i in range(80):
        producer.send(f"{keys[i % 8]}:{i}".encode(), partition_key=keys[i % 8])
    got = drain(consumer)
    assert sorted(m.data() for m in got) == sorted(f"{keys[i % 8]}:{i}".encode() for i in range(80))
    partition_of_key: dict[str, set[str]] = defaultdict(set)
    order: dict[str, list[int]] = defaultdict(list)
    for m in got:
        partition_of_key[m.partition_key()].add(m.topic_name())
        order[m.partition_key()].append(int(m.data().split(b":")[1]))
    assert all(len(p) == 1 for p in partition_of_key.values()), partition_of_key
    assert len({p for ps in partition_of_key.values() for p in ps}) > 1  # more than one partition used
    assert all(v == sorted(v) for v in order.values())
    producer.close()
    consumer.close()


def test_key_shared_keeps_order_per_key_with_three_consumers(sa: Standalone, client: pulsar.Client) -> None:
    topic = "ks-order"
    n, keys = 300, [f"k{j}" for j in range(20)]
    lock = threading.Lock()
    seen: dict[str, list[int]] = defaultdict(list)
    owner: dict[str, set[int]] = defaultdict(set)

    def listener(idx: int):
        # the client calls one consumer's listener for one message at a time, in delivery order
        def on_message(consumer: pulsar.Consumer, m: pulsar.Message) -> None:
            with lock:
                seen[m.partition_key()].append(int(m.data()))
                owner[m.partition_key()].add(idx)
            consumer.acknowledge(m)

        return on_message

    consumers = [
        client.subscribe(
            topic,
            "ks",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=f"c{i}",
            receiver_queue_size=50,
            message_listener=listener(i),
        )
        for i in range(3)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % len(keys)])
    producer.flush()

    def all_received() -> bool:
        with lock:
            return sum(len(v) for v in seen.values()) >= n

    wait_until(all_received, f"{n} messages on the Key_Shared consumers", timeout_s=30)
    with lock:
        assert sorted(i for v in seen.values() for i in v) == list(range(n))
        assert all(v == sorted(v) for v in seen.values())
        assert all(len(o) == 1 for o in owner.values()), owner
        assert len({i for o in owner.values() for i in o}) >= 2  # the keys were spread
    producer.close()
    for c in consumers:
        c.close()


def test_nack_redelivery(sa: Standalone, client: pulsar.Client) -> None:
    topic = "nacks"
    consumer = client.subscribe(
        topic, "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=200
    )
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"n{i}".encode())
    first = [consumer.receive(5000) for _ in range(3)]
    consumer.acknowledge(first[0])
    consumer.acknowledge(first[2])
    consumer.negative_acknowledge(first[1])
    again = consumer.receive(5000)
    assert again.data() == b"n1"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(1000)
    producer.close()
    consumer.close()


def test_readers_from_a_message_id(sa: Standalone, client: pulsar.Client) -> None:
    topic = "readers"
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"r{i}".encode()) for i in range(10)]

    def read_all(start: pulsar.MessageId, inclusive: bool = False) -> list[bytes]:
        reader = client.create_reader(topic, start, start_message_id_inclusive=inclusive)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(5000).data())
        reader.close()
        return out

    assert read_all(pulsar.MessageId.earliest) == [f"r{i}".encode() for i in range(10)]
    assert read_all(ids[4]) == [f"r{i}".encode() for i in range(5, 10)]
    assert read_all(ids[4], inclusive=True) == [f"r{i}".encode() for i in range(4, 10)]
    restored = pulsar.MessageId.deserialize(ids[7].serialize())
    assert read_all(restored) == [b"r8", b"r9"]
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    producer.send(b"after")
    assert latest.read_next(5000).data() == b"after"
    latest.close()
    producer.close()


def test_pattern_subscription_picks_up_a_new_topic(sa: Standalone, client: pulsar.Client) -> None:
    ns = new_namespace(sa.admin_url, "pat")
    before = client.create_producer(f"persistent://{ns}/pat-a")
    other = client.create_producer(f"persistent://{ns}/other")
    consumer = subscribe_pattern(
        client, f"persistent://{ns}/pat-.*", "p", discovery_period_s=1, initial_position=pulsar.InitialPosition.Earliest
    )
    before.send(b"from-a")
    other.send(b"not-matching")
    assert consumer.receive(5000).data() == b"from-a"
    # a topic created after subscribing is found by the periodic discovery
    late = client.create_producer(f"persistent://{ns}/pat-new")
    late.send(b"from-new")
    got: list[bytes] = []

    def received_late() -> bool:
        try:
            m = consumer.receive(500)
        except pulsar.Timeout:
            return False
        got.append(m.data())
        consumer.acknowledge(m)
        return m.data() == b"from-new"

    wait_until(received_late, "the pattern consumer to read the new topic", timeout_s=20)
    assert b"not-matching" not in got
    for p in (before, other, late):
        p.close()
    consumer.close()


def test_admin_explain_storage_renders_bookie_gc_as_a_table(sa: Standalone, client: pulsar.Client) -> None:
    from click.testing import CliRunner

    from magnetar.cli import main

    producer = client.create_producer("explained")
    for i in range(5):
        producer.send(f"e{i}".encode())
    producer.close()

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, ["admin", "--admin-url", sa.admin_url, *args])
        assert result.exit_code == 0, result.output
        return result.output

    table = run("topics", "explain-storage", "explained")
    gc = json.loads(run("--json", "topics", "explain-storage", "explained"))["bookieGc"]
    assert gc["ledgers"], gc
    row = gc["ledgers"][0]
    # a table with the ledger's id, state and size, not the JSON document on one line
    assert "ledgers on the bookies" in table and "on disk" in table and "summary" in table
    assert str(row["ledgerId"]) in table and row["state"].replace("_", " ") in table
    assert '"ledgers": [' not in table and not any(line.startswith("bookie GC: {") for line in table.splitlines())
