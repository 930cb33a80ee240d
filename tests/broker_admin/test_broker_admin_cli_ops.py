"""The ``magnetar admin`` commands beyond the basics of tenants, namespaces and topics (clusters,
dynamic config, broker-stats, limits and rates; pulsar-admin's names and flags) through click's
CliRunner against the live admin server, with the official client."""

from __future__ import annotations

import json
import time

import pulsar
import pytest
from click.testing import CliRunner

from magnetar.cli import main
from tests.broker_admin.admin_harness import AdminBroker


def _run(broker: AdminBroker, *args: str, ok: bool = True) -> str:
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, *args])
    if ok:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code != 0, result.output
    return result.output


def _json(broker: AdminBroker, *args: str) -> object:
    return json.loads(_run(broker, "--json", *args))


def test_cli_clusters_and_failure_domains(broker: AdminBroker, name: str) -> None:
    cluster = f"c-{name}"
    _run(broker, "clusters", "create", cluster, "--url", "http://h:8080", "--broker-url", "pulsar://h:6650")
    assert _json(broker, "clusters", "get", cluster) == {
        "serviceUrl": "http://h:8080",
        "brokerServiceUrl": "pulsar://h:6650",
    }
    _run(broker, "clusters", "update", cluster, "--url", "http://h2:8080", "--broker-url", "pulsar://h2:6650")
    assert _json(broker, "clusters", "get", cluster)["serviceUrl"] == "http://h2:8080"  # type: ignore[index]
    _run(broker, "clusters", "create-failure-domain", cluster, "--domain-name", "r1", "--broker-list", "b1:1,b2:1")
    assert _json(broker, "clusters", "get-failure-domain", cluster, "-d", "r1") == {"brokers": ["b1:1", "b2:1"]}
    err = _run(broker, "clusters", "create-failure-domain", cluster, "-d", "r2", "-b", "b2:1", ok=False)
    assert "409" in err
    _run(broker, "clusters", "update-failure-domain", cluster, "-d", "r1", "-b", "b1:1")
    assert _json(broker, "clusters", "list-failure-domains", cluster) == {"r1": {"brokers": ["b1:1"]}}
    _run(broker, "clusters", "delete-failure-domain", cluster, "-d", "r1")
    _run(broker, "clusters", "delete", cluster)
    assert "404" in _run(broker, "clusters", "get", cluster, ok=False)


def test_cli_dynamic_config_and_broker_stats(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    assert "dispatcherMaxReadBatchSize" in _json(broker, "brokers", "list-dynamic-config")  # type: ignore[operator]
    _run(broker, "brokers", "update-dynamic-config", "--config", "dispatcherMaxReadBatchSize", "--value", "50")
    assert _json(broker, "brokers", "get-all-dynamic-config") == {"dispatcherMaxReadBatchSize": "50"}
    runtime = _json(broker, "brokers", "get-runtime-config")
    assert runtime["dispatcherMaxReadBatchSize"] == "50"  # type: ignore[index]
    err = _run(broker, "brokers", "update-dynamic-config", "-c", "clusterName", "-v", "x", ok=False)
    assert "412" in err and "dynamic" in err
    _run(broker, "brokers", "delete-dynamic-config", "-c", "dispatcherMaxReadBatchSize")
    assert _json(broker, "brokers", "get-all-dynamic-config") == {}

    producer = client.create_producer(name)
    producer.send(b"x")
    assert f"persistent://public/default/{name}" in _run(broker, "broker-stats", "topics")
    assert "brk_in_rate" in _run(broker, "broker-stats", "monitoring-metrics")
    report = _json(broker, "broker-stats", "load-report")
    assert report["numProducers"] >= 1  # type: ignore[index]
    producer.close()


def test_cli_namespace_limits_and_operations(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    _run(broker, "tenants", "create", name)
    ns = f"{name}/ns"
    _run(broker, "namespaces", "create", ns)
    _run(broker, "namespaces", "set-max-producers-per-topic", ns, "-p", "1")
    assert _json(broker, "namespaces", "get-max-producers-per-topic", ns) == 1
    topic = f"persistent://{ns}/t"
    p = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    p.close()
    _run(broker, "namespaces", "remove-max-producers-per-topic", ns)
    assert "not set" in _run(broker, "namespaces", "get-max-producers-per-topic", ns)
    for limit in (
        "max-consumers-per-topic",
        "max-consumers-per-subscription",
        "max-unacked-messages-per-consumer",
        "max-unacked-messages-per-subscription",
    ):
        _run(broker, "namespaces", f"set-{limit}", ns, "-c", "5")
        assert _json(broker, "namespaces", f"get-{limit}", ns) == 5
    _run(broker, "namespaces", "set-publish-rate", ns, "-m", "10", "-b", "1000")
    assert _json(broker, "namespaces", "get-publish-rate", ns) == {
        "publishThrottlingRateInMsg": 10,
        "publishThrottlingRateInByte": 1000,
    }
    _run(broker, "namespaces", "set-dispatch-rate", ns, "-md", "7", "-dt", "2")
    assert _json(broker, "namespaces", "get-dispatch-rate", ns)["ratePeriodInSecond"] == 2  # type: ignore[index]
    _run(broker, "namespaces", "set-subscription-dispatch-rate", ns, "-md", "3")
    _run(broker, "namespaces", "set-subscribe-rate", ns, "-sr", "4", "-st", "10")
    assert _json(broker, "namespaces", "get-subscribe-rate", ns) == {
        "subscribeThrottlingRatePerConsumer": 4,
        "ratePeriodInSecond": 10,
    }
    for rate in ("publish-rate", "dispatch-rate", "subscription-dispatch-rate", "subscribe-rate"):
        _run(broker, "namespaces", f"remove-{rate}", ns)
    _run(broker, "namespaces", "set-is-allow-auto-update-schema", ns, "--disable")
    assert _json(broker, "namespaces", "get-is-allow-auto-update-schema", ns) is False
    _run(broker, "namespaces", "set-schema-compatibility-strategy", ns, "-c", "BACKWARD")
    assert _json(broker, "namespaces", "get-schema-compatibility-strategy", ns) == "BACKWARD"
    _run(broker, "namespaces", "set-offload-threshold", ns, "--size", "10M")
    assert _json(broker, "namespaces", "get-offload-threshold", ns) == 10 * 1024 * 1024

    client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    producer.close()
    _run(broker, "namespaces", "clear-backlog", ns, "-s", "s", "-f")
    stats = _json(broker, "topics", "stats", topic)
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0  # type: ignore[index]
    _run(broker, "namespaces", "unsubscribe", ns, "-s", "s")
    assert _json(broker, "topics", "subscriptions", topic) == []


def test_cli_topic_limits_and_operations(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    topic = name
    client.subscribe(topic, "a", initial_position=pulsar.InitialPosition.Earliest).close()
    client.subscribe(topic, "b", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(4)]
    producer.close()
    for limit, flag in (
        ("max-producers", "-p"),
        ("max-consumers", "-c"),
        ("max-consumers-per-subscription", "-c"),
        ("max-unacked-messages-on-consumer", "-m"),
        ("max-unacked-messages-on-subscription", "-m"),
    ):
        _run(broker, "topics", f"set-{limit}", topic, flag, "9")
        assert _json(broker, "topics", f"get-{limit}", topic) == 9
        _run(broker, "topics", f"remove-{limit}", topic)
    _run(broker, "topics", "set-publish-rate", topic, "-m", "100")
    _run(broker, "topics", "set-dispatch-rate", topic, "-md", "100")
    _run(broker, "topics", "set-subscription-dispatch-rate", topic, "-md", "100")
    assert _json(broker, "topics", "get-dispatch-rate", topic)["dispatchThrottlingRateInMsg"] == 100  # type: ignore[index]
    for rate in ("publish-rate", "dispatch-rate", "subscription-dispatch-rate"):
        _run(broker, "topics", f"remove-{rate}", topic)
    _run(broker, "topics", "set-deduplication", topic, "--enable")
    assert _json(broker, "topics", "get-deduplication", topic) is True
    _run(broker, "topics", "remove-deduplication", topic)

    position = f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    _run(broker, "topics", "expire-messages-to-position", topic, "-s", "a", "-p", position)
    stats = _json(broker, "topics", "stats", topic, "--get-precise-backlog")
    backlogs = {n: s["msgBacklog"] for n, s in stats["subscriptions"].items()}  # type: ignore[index]
    assert backlogs == {"a": 2, "b": 4}
    time.sleep(1.1)  # the messages must be older than the 1 s expiry below
    _run(broker, "topics", "expire-messages-all-subscriptions", topic, "-t", "1")
    backlogs = {n: s["msgBacklog"] for n, s in _json(broker, "topics", "stats", topic)["subscriptions"].items()}  # type: ignore[index]
    assert backlogs == {"a": 0, "b": 0}

    _run(broker, "topics", "create-partitioned-topic", f"{name}-p", "-p", "2")
    p = client.create_producer(f"{name}-p")
    p.send(b"x")
    p.close()
    stats = _json(broker, "topics", "partitioned-stats", f"{name}-p", "--per-partition")
    assert stats["msgInCounter"] == 1 and len(stats["partitions"]) >= 1  # type: ignore[index]
    assert "msgInCounter" in _run(broker, "topics", "partitioned-stats", f"{name}-p")
