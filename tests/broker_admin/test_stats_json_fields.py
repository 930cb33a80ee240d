"""The stats JSON is Pulsar 4.0's: every field of its stats classes, with its name and JSON type.

The field list is ``pulsar4_stats_fields.json`` (from Pulsar 4.0's TopicStatsImpl,
PartitionedTopicStatsImpl, SubscriptionStatsImpl, ConsumerStatsImpl, PublisherStatsImpl, their
non-persistent variants, CompactionStatsImpl and PersistentTopicInternalStats); traffic from the
official client fills every nested class before the documents are checked against it.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pulsar

from tests.broker_admin.admin_harness import AdminBroker
from tests.broker_admin.pulsar_stats_schema import problems, schema
from tests.support.admin import V2, new_tenant_ns
from tests.support.waiting import wait_until


def _get(http: httpx.Client, path: str, **params: str) -> Any:
    r = http.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def _update(broker: AdminBroker) -> None:
    """Take the rates now, on the broker's loop."""

    async def update() -> None:
        assert broker.service is not None
        broker.service.stats.update()

    broker.call(update)


def _traffic(client: pulsar.Client, topic: str) -> list[pulsar.Consumer]:
    """A producer, an Exclusive, a Shared (with a departed consumer) and a two-consumer
    Key_Shared subscription, each having received something."""
    consumers = [
        client.subscribe(
            topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive, initial_position=pulsar.InitialPosition.Earliest
        ),
        client.subscribe(
            topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, initial_position=pulsar.InitialPosition.Earliest
        ),
    ]
    gone = client.subscribe(
        topic, "shared", consumer_type=pulsar.ConsumerType.Shared, initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(topic, properties={"app": "stats-test"})
    for i in range(6):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    gone.acknowledge(gone.receive(10_000))
    gone.close()
    consumers.append(client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared))
    consumers.append(client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared))
    consumers[0].acknowledge(consumers[0].receive(10_000))
    return consumers


def test_topic_subscription_consumer_publisher_and_internal_stats_have_pulsars_fields(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"persistent://{ns}/t"
    consumers = _traffic(client, topic)
    path = f"{V2}/persistent/{ns}/t"
    wait_until(lambda: _get(http, f"{path}/stats")["subscriptions"]["excl"]["msgOutCounter"] > 0, "a delivery")
    _update(broker)
    stats = _get(http, f"{path}/stats")
    assert problems(stats, "TopicStatsImpl") == []
    subs = stats["subscriptions"]
    # every nested class was there to check
    assert stats["publishers"] and stats["publishers"][0]["metadata"] == {"app": "stats-test"}
    assert set(subs) == {"excl", "ks", "shared"}
    assert subs["excl"]["activeConsumerName"] == subs["excl"]["consumers"][0]["consumerName"]
    assert subs["ks"]["keySharedMode"] == "AUTO_SPLIT" and len(subs["ks"]["consumers"]) == 2
    assert all(c["keyHashRanges"] for c in subs["ks"]["consumers"])
    assert "readPositionWhenJoining" in subs["ks"]["consumers"][1]
    internal = _get(http, f"{path}/internalStats")
    assert problems(internal, "PersistentTopicInternalStats") == []
    assert internal["ledgers"] and set(internal["cursors"]) == {"excl", "ks", "shared"}
    for c in consumers:
        c.close()


def test_partitioned_stats_have_pulsars_fields(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    assert http.put(f"{V2}/persistent/{ns}/p/partitions", json=2).status_code == 204
    consumers = _traffic(client, f"persistent://{ns}/p")
    _update(broker)
    stats = _get(http, f"{V2}/persistent/{ns}/p/partitioned-stats")
    assert problems(stats, "PartitionedTopicStatsImpl") == []
    assert stats["metadata"]["partitions"] == 2 and len(stats["partitions"]) == 2  # perPartition: true
    assert _get(http, f"{V2}/persistent/{ns}/p/partitioned-stats", perPartition="false")["partitions"] == {}
    internal = _get(http, f"{V2}/persistent/{ns}/p/partitioned-internalStats")
    assert internal["metadata"] == {"partitions": 2, "deleted": False}
    assert sorted(internal["partitions"]) == [f"persistent://{ns}/p-partition-{i}" for i in range(2)]
    for part in internal["partitions"].values():
        assert problems(part, "PersistentTopicInternalStats") == []
        assert set(part["cursors"]) == {"excl", "ks", "shared"}
    assert http.get(f"{V2}/persistent/{ns}/t/partitioned-internalStats").status_code == 404
    for c in consumers:
        c.close()


def test_non_persistent_stats_have_pulsars_fields(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    assert http.put(f"{V2}/non-persistent/{ns}/p/partitions", json=2).status_code == 204
    opened = []
    for topic in (f"non-persistent://{ns}/t", f"non-persistent://{ns}/p"):
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        producer.send(b"x")
        consumer.acknowledge(consumer.receive(10_000))
        opened += [consumer, producer]
    _update(broker)
    stats = _get(http, f"{V2}/non-persistent/{ns}/t/stats")
    assert problems(stats, "NonPersistentTopicStatsImpl") == []
    assert stats["publishers"] and stats["subscriptions"]["s"]["consumers"]
    partitioned = _get(http, f"{V2}/non-persistent/{ns}/p/partitioned-stats")
    assert problems(partitioned, "NonPersistentPartitionedTopicStatsImpl") == []
    assert partitioned["partitions"]
    for x in opened:
        x.close()


def test_the_field_check_fails_on_a_missing_field_a_wrong_type_and_a_foreign_field(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    consumers = _traffic(client, f"persistent://{ns}/t")
    good = _get(http, f"{V2}/persistent/{ns}/t/stats")
    assert problems(good, "TopicStatsImpl") == []
    sub = next(iter(good["subscriptions"]))
    for mutate, expected in (
        (lambda d: d.pop("msgChunkPublished"), "$.msgChunkPublished: missing"),
        (lambda d: d.update(msgRateIn=0), "$.msgRateIn: 0 is not"),
        (lambda d: d["subscriptions"][sub].update(msgBacklog=1.5), f"$.subscriptions.{sub}.msgBacklog: 1.5"),
        (lambda d: d["publishers"][0].update(msgInCounter=1), "$.publishers[0].msgInCounter: not a field"),
        (lambda d: d.update(topicEpoch=None), "$.topicEpoch: null"),
    ):
        doc = copy.deepcopy(good)
        mutate(doc)
        assert any(p.startswith(expected) for p in problems(doc, "TopicStatsImpl")), expected
    for c in consumers:
        c.close()


def test_the_field_list_names_the_pulsar_classes_it_comes_from() -> None:
    classes = schema()["classes"]
    for cls in (
        "TopicStatsImpl",
        "PartitionedTopicStatsImpl",
        "SubscriptionStatsImpl",
        "ConsumerStatsImpl",
        "PublisherStatsImpl",
        "PersistentTopicInternalStats",
        "NonPersistentTopicStatsImpl",
        "NonPersistentSubscriptionStatsImpl",
        "NonPersistentPublisherStatsImpl",
    ):
        assert cls in classes and classes[cls]["java"].startswith("org.apache.pulsar."), cls
    # the fields the issue names
    topic = classes["TopicStatsImpl"]["fields"]
    assert {
        "msgChunkPublished",
        "offloadedStorageSize",
        "nonContiguousDeletedMessagesRanges",
        "nonContiguousDeletedMessagesRangesSerializedSize",
    } <= set(topic)
