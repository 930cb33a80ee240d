"""Pure parts of the broker: topic names, selection policies, schema compatibility, ack sets, config."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker import (
    AutoSplitRanges,
    BrokerConfig,
    ConsumerKey,
    IncompatibleSchemaError,
    InvalidTopicNameError,
    NamespaceName,
    RangeConflictError,
    RoundRobin,
    SchemaInfo,
    StickyRanges,
    TopicName,
    check_compatible,
    choose_active_consumer,
)
from magnetar.common.config import ConfigError, load_config

# ---------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("text", "full"),
    [
        ("my-topic", "persistent://public/default/my-topic"),
        ("t1/ns1/topic", "persistent://t1/ns1/topic"),
        ("persistent://t1/ns1/a/b", "persistent://t1/ns1/a/b"),
        ("non-persistent://t1/ns1/x", "non-persistent://t1/ns1/x"),
    ],
)
def test_topic_name_forms(text: str, full: str) -> None:
    assert str(TopicName.parse(text)) == full


def test_partition_names() -> None:
    t = TopicName.parse("persistent://t/ns/orders-partition-3")
    assert t.partition == 3
    assert str(t.partitioned_topic) == "persistent://t/ns/orders"
    assert t.partitioned_topic.partition == -1
    assert t.partitioned_topic.partition_name(3) == t
    assert TopicName.parse("orders-partition-x").partition == -1


def test_managed_ledger_name_encodes_local_name() -> None:
    t = TopicName.parse("persistent://t/ns/a/b c")
    assert t.managed_ledger_name == "t/ns/persistent/a%2Fb%20c"
    assert t.namespace_name == NamespaceName("t", "ns")


@pytest.mark.parametrize(
    "bad", ["", "a/b", "http://t/ns/x", "persistent://t/ns", "persistent://t//x", "persistent:///ns/x"]
)
def test_invalid_topic_names(bad: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(bad)


def test_namespace_name() -> None:
    assert str(NamespaceName.parse("public/default")) == "public/default"
    with pytest.raises(InvalidTopicNameError):
        NamespaceName.parse("public")


# ---------------------------------------------------------------------------------------- selection


def test_failover_active_consumer_by_priority_then_name() -> None:
    a, b, c = ConsumerKey(1, "a", 1), ConsumerKey(0, "z", 2), ConsumerKey(0, "b", 3)
    assert choose_active_consumer([a, b, c]) == c
    assert choose_active_consumer([]) is None
    # partitioned topics spread partitions over the best-priority consumers
    assert choose_active_consumer([a, b, c], partition=0) == c
    assert choose_active_consumer([a, b, c], partition=1) == b


def test_round_robin_skips_full_consumers() -> None:
    rr: RoundRobin[str] = RoundRobin()
    keys = ["a", "b", "c"]
    assert [rr.pick(keys, lambda k: True) for _ in range(4)] == ["a", "b", "c", "a"]
    assert rr.pick(keys, lambda k: k == "c") == "c"
    assert rr.pick(keys, lambda k: False) is None


def test_auto_split_ranges() -> None:
    r: AutoSplitRanges[str] = AutoSplitRanges()
    assert r.select(5) is None
    r.add("a")
    assert r.ranges() == [(0, 65535, "a")]
    r.add("b")
    assert r.ranges() == [(0, 32767, "b"), (32768, 65535, "a")]
    r.add("c")
    assert r.ranges() == [(0, 16383, "c"), (16384, 32767, "b"), (32768, 65535, "a")]
    assert r.select(20000) == "b" and r.select(65535) == "a" and r.select(0) == "c"
    r.remove("b")
    assert r.ranges() == [(0, 16383, "c"), (16384, 65535, "a")]
    r.remove("a")
    assert r.ranges() == [(0, 65535, "c")]
    r.remove("c")
    assert r.ranges() == []


def test_auto_split_covers_everything() -> None:
    r: AutoSplitRanges[int] = AutoSplitRanges()
    for i in range(7):
        r.add(i)
    ranges = r.ranges()
    assert ranges[0][0] == 0 and ranges[-1][1] == 65535
    assert all(ranges[i][1] + 1 == ranges[i + 1][0] for i in range(len(ranges) - 1))
    assert {k for _, _, k in ranges} == set(range(7))


def test_sticky_ranges() -> None:
    r: StickyRanges[str] = StickyRanges()
    r.add("a", [(0, 100), (200, 300)])
    r.add("b", [(101, 199)])
    assert r.select(150) == "b" and r.select(250) == "a" and r.select(400) is None
    with pytest.raises(RangeConflictError):
        r.add("c", [(300, 400)])
    with pytest.raises(RangeConflictError):
        r.add("c", [(500, 70000)])
    r.remove("a")
    assert r.select(50) is None


# ---------------------------------------------------------------------------------------- schemas


def _record(*fields: tuple[str, bool]) -> SchemaInfo:
    body = {
        "type": "record",
        "name": "R",
        "fields": [dict({"name": n, "type": "string"}, **({"default": ""} if d else {})) for n, d in fields],
    }
    return SchemaInfo(type=2, data=json.dumps(body).encode())


def test_schema_compatibility_full() -> None:
    v1 = _record(("a", False))
    check_compatible(_record(("a", False), ("b", True)), [v1], "FULL")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(_record(("a", False), ("b", False)), [v1], "FULL")  # added without default
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(_record(("b", True)), [v1], "FULL")  # dropped a field with no default
    check_compatible(_record(("b", True)), [v1], "BACKWARD")
    check_compatible(_record(("a", False), ("b", False)), [v1], "FORWARD")
    check_compatible(SchemaInfo(type=4, data=b'"string"'), [v1], "ALWAYS_COMPATIBLE")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(SchemaInfo(type=4, data=v1.data), [v1], "FULL")  # type change
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(v1, [v1], "ALWAYS_INCOMPATIBLE")


# ---------------------------------------------------------------------------------------- ack sets


def test_ack_set_round_trip() -> None:
    from broker.topics._entries import ack_set_words, acked_indexes_from_ack_set

    # acking index 0 of 3 leaves bits 1 and 2 set: the client sends 6
    assert ack_set_words(3, {0}) == [6]
    assert acked_indexes_from_ack_set(3, [6]) == {0}
    words = ack_set_words(130, {0, 64, 129})
    assert acked_indexes_from_ack_set(130, words) == {0, 64, 129}
    assert all(-(1 << 63) <= w < (1 << 63) for w in words)


@given(st.integers(1, 300), st.sets(st.integers(0, 299)))
def test_ack_sets_match_java_bitset_semantics(size: int, acked: set[int]) -> None:
    from broker.topics._entries import ack_set_words, acked_indexes_from_ack_set

    acked = {i for i in acked if i < size}
    expected = 0
    for i in range(size):
        if i not in acked:
            expected |= 1 << i  # BitSet: bit i of word i // 64
    words = ack_set_words(size, acked)
    assert sum((w & ((1 << 64) - 1)) << (64 * k) for k, w in enumerate(words)) == expected
    assert len(words) == (size + 63) // 64
    assert acked_indexes_from_ack_set(size, words) == acked
    assert acked_indexes_from_ack_set(size, words[:1]) == acked | set(range(64, size))  # missing words: acked


def test_a_producer_cannot_claim_more_messages_than_its_entry_holds() -> None:
    # the dispatcher sizes loops over a batch's indexes by this count: a producer setting
    # num_messages_in_batch = 2^31 - 1 on a tiny entry once meant minutes of blocked event loop
    from broker.topics._entries import entry_info
    from protocols.pulsar import MessageMetadata, encode_metadata_and_payload

    md = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=2**31 - 1)
    data = encode_metadata_and_payload(md, b"x" * 600)
    assert entry_info(data).num_messages <= len(data) // 6


# ---------------------------------------------------------------------------------------- config


def test_config_aliases_and_validation() -> None:
    cfg = load_config(
        BrokerConfig,
        {"brokerServicePort": 7000, "allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": 3},
    )
    assert cfg.broker_service_port == 7000 and cfg.default_num_partitions == 3
    assert BrokerConfig().max_message_size == 5 * 1024 * 1024
    assert BrokerConfig().keep_alive_interval_s == 30
    with pytest.raises(ConfigError, match="allow_auto_topic_creation_type"):
        load_config(BrokerConfig, {"allowAutoTopicCreationType": "sometimes"})
    with pytest.raises(ConfigError, match="broker_service_port"):
        load_config(BrokerConfig, {"brokerServicePort": 70000})
    with pytest.raises(ConfigError):
        load_config(BrokerConfig, {"maxMessageSize": 0})


def test_a_broker_id_is_the_host_and_port_of_its_first_url_admin_first() -> None:
    from broker._service import broker_id_of

    assert broker_id_of("http://h:8080", "https://h:8443", "pulsar://h:6650") == "h:8080"
    assert broker_id_of("", "https://h:8443", "pulsar://h:6650") == "h:8443"
    assert broker_id_of("", "", "", "pulsar+ssl://h:6651") == "h:6651"
    assert broker_id_of("", "") == ""
