"""Schema compatibility that checks field types, with the official client's JsonSchema and
AvroSchema records against a real ``magnetar standalone`` process: producers under each strategy,
and a consumer refused without leaving a trace on its Exclusive subscription."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Double, Integer, JsonSchema, Long, Record, String

from tests.support.admin import new_namespace, rest
from tests.support.standalone import Standalone, start_standalone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    proc = start_standalone(tmp_path_factory.mktemp("schema") / "data")
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


def _order(amount: Any) -> type[Record]:
    """A record class named ``Order`` (the client names the Avro record after the class) with
    ``amount`` of the given field type."""
    return type("Order", (Record,), {"id": String(), "amount": amount})


Order = _order(Integer())
OrderAmountText = _order(String())  # the case: the int field declared as a string
OrderAmountLong = _order(Long())
OrderAmountDouble = _order(Double())


Invoice = type("Invoice", (Record,), {"id": String(), "amount": Integer()})  # Order's fields, another name


def _strategy(sa: Standalone, ns: str, strategy: str) -> None:
    rest("PUT", sa.admin_url, f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", json=strategy)


def test_consumer_with_a_retyped_field_is_refused_and_leaves_no_trace(sa: Standalone, client: pulsar.Client) -> None:
    """Under the default strategy (FULL), as the issue reports it."""
    topic = f"persistent://{new_namespace(sa.admin_url, 'retyped')}/orders"
    producer = client.create_producer(topic, schema=JsonSchema(Order))
    producer.send(Order(id="o1", amount=5))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(
            topic,
            "exclusive",
            schema=JsonSchema(OrderAmountText),
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
        )
    stats = rest("GET", sa.admin_url, f"/admin/v2/{topic.replace('://', '/')}/stats").json()
    assert "exclusive" not in stats["subscriptions"]  # no cursor was created
    # the correct consumer gets the subscription (no ConsumerBusy) and reads from the start
    consumer = client.subscribe(
        topic,
        "exclusive",
        schema=JsonSchema(Order),
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    msg = consumer.receive(10_000)
    assert (msg.value().id, msg.value().amount) == ("o1", 5)
    consumer.acknowledge(msg)
    # a refused consumer on an existing subscription does not disturb it either
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(
            topic, "exclusive", schema=JsonSchema(OrderAmountText), consumer_type=pulsar.ConsumerType.Exclusive
        )
    producer.send(Order(id="o2", amount=6))
    assert consumer.receive(10_000).value().id == "o2"
    # the versions stayed as they were: only the producer's
    versions = rest("GET", sa.admin_url, f"/admin/v2/schemas/{topic.split('://')[1]}/schemas").json()
    assert len(versions["getSchemaResponses"]) == 1
    consumer.close()
    producer.close()


@pytest.mark.parametrize("kind", [JsonSchema, AvroSchema])
def test_producer_type_changes_per_strategy(sa: Standalone, client: pulsar.Client, kind: type) -> None:
    # int -> long: new readers read old data (BACKWARD); old readers cannot read longs (FORWARD)
    expectations = {
        "BACKWARD": True,
        "BACKWARD_TRANSITIVE": True,
        "FORWARD": False,
        "FULL": False,
        "FULL_TRANSITIVE": False,
        "ALWAYS_COMPATIBLE": True,
        "ALWAYS_INCOMPATIBLE": False,
    }
    for strategy, widening_ok in expectations.items():
        ns = new_namespace(sa.admin_url, "types")
        _strategy(sa, ns, strategy)
        topic = f"persistent://{ns}/orders"
        first = client.create_producer(topic, schema=kind(Order))
        first.send(Order(id="a", amount=1))
        if widening_ok:
            wide = client.create_producer(topic, schema=kind(OrderAmountLong))
            wide.send(OrderAmountLong(id="b", amount=2**40))
            wide.close()
        else:
            with pytest.raises(pulsar.IncompatibleSchema):
                client.create_producer(topic, schema=kind(OrderAmountLong))
        if strategy != "ALWAYS_COMPATIBLE":
            # int -> string is no promotion in either direction
            with pytest.raises(pulsar.IncompatibleSchema):
                client.create_producer(topic, schema=kind(OrderAmountText))
        first.close()


def test_transitive_checks_every_version(sa: Standalone, client: pulsar.Client) -> None:
    """BACKWARD: long reads int, double reads long, but under BACKWARD_TRANSITIVE the third
    version must read the first too, and a later int version cannot read the longs."""
    for strategy in ("BACKWARD", "BACKWARD_TRANSITIVE"):
        ns = new_namespace(sa.admin_url, "trans")
        _strategy(sa, ns, strategy)
        topic = f"persistent://{ns}/orders"
        client.create_producer(topic, schema=AvroSchema(OrderAmountLong)).close()
        client.create_producer(topic, schema=AvroSchema(OrderAmountDouble)).close()
        # int after double: double cannot be read as int under either strategy
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(Order))
    # a consumer reading the latest version only (FORWARD) versus every version (FULL_TRANSITIVE)
    ns = new_namespace(sa.admin_url, "consumers")
    _strategy(sa, ns, "ALWAYS_COMPATIBLE")
    topic = f"persistent://{ns}/orders"
    client.create_producer(topic, schema=AvroSchema(OrderAmountText)).close()
    client.create_producer(topic, schema=AvroSchema(Order)).close()
    _strategy(sa, ns, "FORWARD")
    client.subscribe(topic, "latest-only", schema=AvroSchema(OrderAmountLong)).close()  # long reads int
    _strategy(sa, ns, "FULL_TRANSITIVE")
    with pytest.raises(pulsar.IncompatibleSchema):  # ... but not the first version's strings
        client.subscribe(topic, "every-version", schema=AvroSchema(OrderAmountLong))


def test_consumer_on_a_topic_without_a_schema(sa: Standalone, client: pulsar.Client) -> None:
    """As Pulsar: the first consumer of an idle, empty topic registers its schema; on a topic
    holding data written without a schema a consumer's schema has nothing to be checked against
    and is refused, unless the strategy is ALWAYS_COMPATIBLE."""
    ns = new_namespace(sa.admin_url, "noschema")
    fresh = f"persistent://{ns}/fresh"
    consumer = client.subscribe(fresh, "s", schema=JsonSchema(Order))
    with pytest.raises(pulsar.IncompatibleSchema):  # the consumer's schema is the topic's now
        client.create_producer(fresh, schema=JsonSchema(OrderAmountText))
    consumer.close()
    raw = f"persistent://{ns}/raw-bytes"
    producer = client.create_producer(raw)
    producer.send(b"not json")
    producer.close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(raw, "typed", schema=JsonSchema(Order))
    stats = rest("GET", sa.admin_url, f"/admin/v2/{raw.replace('://', '/')}/stats").json()
    assert "typed" not in stats["subscriptions"]
    _strategy(sa, ns, "ALWAYS_COMPATIBLE")
    client.subscribe(raw, "typed", schema=JsonSchema(Order)).close()


@pytest.mark.parametrize("kind", [JsonSchema, AvroSchema])
def test_a_renamed_record_with_the_same_fields_is_accepted(sa: Standalone, client: pulsar.Client, kind: type) -> None:
    """As Pulsar, whose Avro check does not compare record names: a producer whose record is named
    Invoice after one named Order, under the default FULL and under FORWARD; a consumer with the
    first schema reads what it wrote."""
    for strategy in ("FULL", "FORWARD"):
        ns = new_namespace(sa.admin_url, "renamed")
        _strategy(sa, ns, strategy)
        topic = f"persistent://{ns}/orders"
        consumer = client.subscribe(topic, "s", schema=kind(Order))
        first = client.create_producer(topic, schema=kind(Order))
        first.send(Order(id="o", amount=1))
        renamed = client.create_producer(topic, schema=kind(Invoice))
        renamed.send(Invoice(id="i", amount=2))
        got = [consumer.receive(10_000).value() for _ in range(2)]
        assert [(v.id, v.amount) for v in got] == [("o", 1), ("i", 2)]
        versions = rest("GET", sa.admin_url, f"/admin/v2/schemas/{topic.split('://')[1]}/schemas").json()
        assert len(versions["getSchemaResponses"]) == 2
        for c in (consumer, first, renamed):
            c.close()
