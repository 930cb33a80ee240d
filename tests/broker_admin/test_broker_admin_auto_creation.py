"""``namespaces/{t}/{ns}/autoTopicCreation`` (POST/GET/DELETE, and the CLI) and its effect on the official
client: TopicNotFound when disabled, partitioned auto-creation with defaultNumPartitions, the
broker's settings again once removed."""

from __future__ import annotations

import json

import httpx
import pulsar
import pytest
from click.testing import CliRunner

from magnetar.cli import main
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_namespace


def test_rest_round_trip_and_bad_input(http: httpx.Client, name: str) -> None:
    ns = new_namespace(str(http.base_url).rstrip("/"), name)
    path = f"{V2}/namespaces/{ns}/autoTopicCreation"
    assert http.get(path).status_code == 204  # no override: the broker's settings apply
    override = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2}
    assert http.post(path, json=override).status_code == 204
    assert http.get(path).json() == override
    assert http.get(f"{V2}/namespaces/{ns}").json()["autoTopicCreationOverride"] == override
    for bad in (
        {"allowAutoTopicCreation": "yes"},
        {"allowAutoTopicCreation": True, "topicType": "sideways"},
        {"allowAutoTopicCreation": True, "topicType": "partitioned"},
        [1],
    ):
        r = http.post(path, json=bad)
        assert r.status_code == 412, (bad, r.text)
    r = http.post(path, json={"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0})
    assert r.status_code == 406
    assert http.post(path, content=b"{").status_code == 400
    assert http.get(path).json() == override  # refused changes left it alone
    assert http.delete(path).status_code == 204
    assert http.get(path).status_code == 204
    assert http.get(f"{V2}/namespaces/public/no-such-ns-{name}/autoTopicCreation").status_code == 404
    assert http.post(f"{V2}/namespaces/public/no-such-ns-{name}/autoTopicCreation", json=override).status_code == 404


def test_disabled_refuses_missing_topics(http: httpx.Client, client: pulsar.Client, name: str) -> None:
    ns = new_namespace(str(http.base_url).rstrip("/"), name)
    path = f"{V2}/namespaces/{ns}/autoTopicCreation"
    assert http.post(path, json={"allowAutoTopicCreation": False}).status_code == 204
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://{ns}/missing")
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(f"persistent://{ns}/missing", "s")
    # neither does creating a subscription create it (Pulsar answers 412)
    r = http.put(f"{V2}/persistent/{ns}/missing/subscription/s")
    assert r.status_code == 412, r.text
    assert http.get(f"{V2}/persistent/{ns}/missing/stats").status_code == 404
    # a topic created through the admin API is usable
    assert http.put(f"{V2}/persistent/{ns}/made").status_code == 204
    consumer = client.subscribe(f"persistent://{ns}/made", "s")
    producer = client.create_producer(f"persistent://{ns}/made")
    producer.send(b"x")
    assert consumer.receive(10_000).data() == b"x"
    producer.close()
    consumer.close()
    # removing the override: the broker default (auto-creation of non-partitioned topics) again
    assert http.delete(path).status_code == 204
    client.create_producer(f"persistent://{ns}/now-allowed").close()
    assert client.get_topic_partitions(f"persistent://{ns}/now-allowed") == [f"persistent://{ns}/now-allowed"]


def test_partitioned_auto_creation(http: httpx.Client, client: pulsar.Client, name: str) -> None:
    ns = new_namespace(str(http.base_url).rstrip("/"), name)
    assert (
        http.post(
            f"{V2}/namespaces/{ns}/autoTopicCreation",
            json={"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
        ).status_code
        == 204
    )
    topic = f"persistent://{ns}/auto-part"
    consumer = client.subscribe(topic, "s")
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    assert http.get(f"{V2}/persistent/{ns}/auto-part/partitions").json() == {"partitions": 3}
    producer = client.create_producer(
        topic, batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    for i in range(6):
        producer.send(f"m{i}".encode())
    got = sorted(consumer.receive(10_000).data() for _ in range(6))
    assert got == sorted(f"m{i}".encode() for i in range(6))
    producer.close()
    consumer.close()
    # creating a subscription on a missing topic creates it the same way, partitioned
    assert http.put(f"{V2}/persistent/{ns}/by-sub/subscription/s").status_code == 204
    assert http.get(f"{V2}/persistent/{ns}/by-sub/partitions").json() == {"partitions": 3}
    assert http.get(f"{V2}/persistent/{ns}/by-sub/subscriptions").json() == ["s"]


def test_cli(broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str) -> None:
    """``magnetar admin namespaces set-/get-/remove-auto-topic-creation`` (pulsar-admin's names)."""

    def run(*args: str, ok: bool = True) -> str:
        result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, *args])
        assert (result.exit_code == 0) is ok, result.output
        return result.output

    ns = new_namespace(str(http.base_url).rstrip("/"), name)
    run("namespaces", "set-auto-topic-creation", ns, "--enable", "--type", "partitioned", "-n", "2")
    assert json.loads(run("--json", "namespaces", "get-auto-topic-creation", ns)) == {
        "allowAutoTopicCreation": True,
        "topicType": "partitioned",
        "defaultNumPartitions": 2,
    }
    assert len(client.get_topic_partitions(f"persistent://{ns}/via-cli")) == 2
    assert "412" in run("namespaces", "set-auto-topic-creation", ns, "--enable", "--type", "partitioned", ok=False)
    run("namespaces", "set-auto-topic-creation", ns, "--disable")
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://{ns}/refused")
    run("namespaces", "remove-auto-topic-creation", ns)
    assert http.get(f"{V2}/namespaces/{ns}/autoTopicCreation").status_code == 204
    run("namespaces", "get-auto-topic-creation", ns)
    client.create_producer(f"persistent://{ns}/allowed-again").close()
