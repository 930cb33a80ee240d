"""Non-persistent topics with the official client: in-memory fan-out, drops, partitions, admin stats."""

from __future__ import annotations

import json
import time

import httpx
import pulsar
import pytest
from click.testing import CliRunner

from magnetar.cli import main
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.clients import drain, subscribe_pattern

RECEIVE_MS = 10_000
NS = "public/default"


def _topic(name: str) -> str:
    return f"non-persistent://{NS}/{name}"


@pytest.mark.parametrize(
    "sub_type",
    [
        pulsar.ConsumerType.Exclusive,
        pulsar.ConsumerType.Shared,
        pulsar.ConsumerType.Failover,
        pulsar.ConsumerType.KeyShared,
    ],
)
def test_fan_out_to_connected_consumers_of_every_subscription_type(
    client: pulsar.Client, name: str, sub_type: pulsar.ConsumerType
) -> None:
    topic = _topic(name)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")  # no subscription yet: nobody gets it
    first = client.subscribe(topic, "s1", consumer_type=sub_type)
    second = client.subscribe(topic, "s2", consumer_type=sub_type)
    ids = [producer.send(f"m{i}".encode(), partition_key=f"k{i % 3}") for i in range(20)]
    # a receipt carries a message id (ledger 0, a growing entry id, as Pulsar's non-persistent topic)
    assert [i.ledger_id() for i in ids] == [0] * 20
    assert [i.entry_id() for i in ids] == sorted({i.entry_id() for i in ids})
    for c in (first, second):
        got = drain(c)
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]
        assert [m.message_id().entry_id() for m in got] == [i.entry_id() for i in ids]
    producer.close()


def test_subscription_exists_only_while_consumers_are_connected(
    client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    topic = _topic(name)
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer.send(b"one")
    assert consumer.receive(RECEIVE_MS).data() == b"one"
    consumer.close()
    stats = http.get(f"/admin/v2/non-persistent/{NS}/{name}/stats").json()
    assert "sub" not in stats["subscriptions"]
    producer.send(b"lost")  # published while the subscription has no consumer: dropped
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer.send(b"two")
    assert [m.data() for m in drain(consumer)] == [b"two"]
    consumer.close()
    producer.close()


def test_slow_consumer_has_messages_dropped_and_counted(client: pulsar.Client, http: httpx.Client, name: str) -> None:
    topic = _topic(name)
    slow = client.subscribe(topic, "slow", receiver_queue_size=10)
    fast = client.subscribe(topic, "fast")
    producer = client.create_producer(topic, batching_enabled=False)
    n = 200
    for i in range(n):
        producer.send(f"m{i}".encode())
    # the slow consumer never asked for more than its queue: the rest was dropped, not buffered
    got_slow = drain(slow)
    assert 10 <= len(got_slow) < n
    datas = [m.data() for m in got_slow]
    assert datas == sorted(datas, key=lambda d: int(d[1:]))  # what it got is in order
    assert [m.data() for m in drain(fast)] == [f"m{i}".encode() for i in range(n)]
    stats = http.get(f"/admin/v2/non-persistent/{NS}/{name}/stats").json()
    assert stats["msgInCounter"] == n
    assert stats["subscriptions"]["slow"]["msgDropCounter"] >= n - len(got_slow) - 10
    assert stats["subscriptions"]["slow"]["msgDropCounter"] > 0
    assert stats["subscriptions"]["fast"]["msgDropCounter"] == 0
    assert stats["subscriptions"]["slow"]["msgOutCounter"] < n
    assert "msgDropRate" in stats and "msgDropRate" in stats["subscriptions"]["slow"]
    assert stats["storageSize"] == 0 and stats["backlogSize"] == 0
    producer.close()


def test_partitioned_non_persistent_topic(client: pulsar.Client, http: httpx.Client, name: str) -> None:
    topic = _topic(name)
    r = http.put(f"/admin/v2/non-persistent/{NS}/{name}/partitions", json=3)
    assert r.status_code == 204, r.text
    assert http.get(f"/admin/v2/non-persistent/{NS}/{name}/partitions").json() == {"partitions": 3}
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(
        topic, batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    for i in range(30):
        producer.send(f"m{i}".encode())
    got = drain(consumer)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(30))
    assert {m.message_id().partition() for m in got} == {0, 1, 2}
    for m in got:
        assert m.topic_name().endswith(f"-partition-{m.message_id().partition()}")
    listed = http.get(f"/admin/v2/non-persistent/{NS}").json()
    assert {f"{topic}-partition-{i}" for i in range(3)} <= set(listed)
    assert topic in http.get(f"/admin/v2/non-persistent/{NS}/partitioned").json()
    stats = http.get(f"/admin/v2/non-persistent/{NS}/{name}/partitioned-stats", params={"perPartition": "true"}).json()
    assert stats["metadata"] == {"partitions": 3, "deleted": False}
    assert stats["msgInCounter"] == 30
    assert set(stats["partitions"]) == {f"{topic}-partition-{i}" for i in range(3)}
    assert "msgDropRate" in stats
    for key in ("msgInCounter", "publishRateLimitedTimes"):  # summed over the partitions
        assert stats[key] == sum(p[key] for p in stats["partitions"].values())
    producer.close()
    consumer.close()


def test_topic_list_stats_and_lookup(client: pulsar.Client, http: httpx.Client, name: str) -> None:
    topic = _topic(name)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    producer.send(b"x")
    assert consumer.receive(RECEIVE_MS).data() == b"x"
    assert topic in http.get(f"/admin/v2/non-persistent/{NS}").json()
    assert topic not in http.get(f"/admin/v2/persistent/{NS}").json()
    stats = http.get(f"/admin/v2/non-persistent/{NS}/{name}/stats").json()
    assert stats["msgInCounter"] == 1 and len(stats["publishers"]) == 1
    assert stats["subscriptions"]["sub"]["consumers"][0]["msgOutCounter"] == 1
    lookup = http.get(f"/lookup/v2/topic/non-persistent/{NS}/{name}").json()
    assert lookup["brokerUrl"].startswith("pulsar://")
    assert http.get(f"/admin/v2/non-persistent/{NS}/never-used-{name}/stats").status_code == 404
    assert http.get(f"/admin/v2/non-persistent/no-such/ns/{name}/stats").status_code == 404
    producer.close()
    consumer.close()


def test_seek_and_exclusive_producers(client: pulsar.Client, name: str) -> None:
    topic = _topic(name)
    consumer = client.subscribe(topic, "sub")
    with pytest.raises(pulsar.PulsarException):
        consumer.seek(pulsar.MessageId.earliest)
    consumer.close()
    holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic)
    holder.close()
    client.create_producer(topic).close()


def _receive_one_while_sending(producer: pulsar.Producer, consumer: pulsar.Consumer, bound_s: float = 30.0) -> bytes:
    """Send until the consumer gets a message (a new topic reaches a pattern consumer only once
    the client has discovered it; what is sent before is dropped, as on any non-persistent topic)."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        producer.send(b"p")
        try:
            return consumer.receive(200).data()
        except pulsar.Timeout:
            continue
    raise AssertionError("the pattern consumer got nothing")


def test_pattern_subscription_over_non_persistent_topics(client: pulsar.Client, name: str) -> None:
    first = client.create_producer(_topic(f"{name}-a"))
    # the wrapper drops pattern_auto_discovery_period: the helper sets it (see its docstring)
    pattern = subscribe_pattern(
        client,
        f"non-persistent://{NS}/{name}-.*",
        "pat",
        discovery_period_s=1,
        regex_subscription_mode=pulsar.RegexSubscriptionMode.NonPersistentOnly,
    )
    assert _receive_one_while_sending(first, pattern) == b"p"
    later = client.create_producer(_topic(f"{name}-b"))  # created after subscribing: discovered
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        later.send(b"later")
        try:
            m = pattern.receive(200)
        except pulsar.Timeout:
            continue
        if m.data() == b"later":
            break
    else:
        raise AssertionError("the pattern consumer never got a message of the topic created later")
    assert m.topic_name() == _topic(f"{name}-b")
    pattern.close()
    first.close()
    later.close()


def test_admin_cli_reads_non_persistent_stats(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    topic = _topic(name)
    producer = client.create_producer(topic)
    producer.send(b"x")
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, "--json", "topics", "stats", topic])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["msgInCounter"] == 1
    producer.close()


def test_delete_and_unload_close_the_clients_who_then_recreate_the_topic(
    client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    topic, path = _topic(name), f"/admin/v2/non-persistent/{NS}/{name}"
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    assert http.delete(path).status_code == 412  # clients attached
    assert http.put(f"{path}/unload").status_code == 204
    # both reconnect by themselves and the topic works again (what is sent before the consumer is
    # back is dropped, as on any non-persistent topic: hence sending until one arrives)
    assert _receive_one_while_sending(producer, consumer) == b"p"
    assert http.delete(path, params={"force": "true"}).status_code == 204
    assert _receive_one_while_sending(producer, consumer) == b"p"
    producer.close()
    consumer.close()
    assert http.delete(f"/admin/v2/non-persistent/{NS}/never-{name}").status_code == 404
