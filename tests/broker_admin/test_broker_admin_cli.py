"""``magnetar admin`` through click's CliRunner against the live admin server."""

from __future__ import annotations

import json

import pulsar
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


def test_cli_tenants_namespaces_topics(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    assert "standalone" in _run(broker, "clusters", "list")
    _run(broker, "tenants", "create", name)
    assert name in json.loads(_run(broker, "--json", "tenants", "list"))
    assert json.loads(_run(broker, "tenants", "get", name, "--json"))["allowedClusters"] == ["standalone"]
    err = _run(broker, "tenants", "create", name, ok=False)
    assert "already exists" in err and "409" in err
    ns = f"{name}/ns"
    _run(broker, "namespaces", "create", ns)
    assert ns in _run(broker, "namespaces", "list", name)
    _run(broker, "namespaces", "set-retention", ns, "--time", "2h", "--size", "1G")
    assert json.loads(_run(broker, "--json", "namespaces", "get-retention", ns)) == {
        "retentionTimeInMinutes": 120,
        "retentionSizeInMB": 1024,
    }
    _run(broker, "namespaces", "set-message-ttl", ns, "--ttl", "60")
    assert json.loads(_run(broker, "--json", "namespaces", "get-message-ttl", ns)) == 60
    _run(broker, "namespaces", "set-backlog-quota", ns, "-l", "1000000", "-p", "producer_exception")
    out = _run(broker, "namespaces", "get-backlog-quotas", ns)
    assert "destination_storage" in out and "producer_exception" in out
    _run(broker, "namespaces", "set-deduplication", ns, "--enable")
    policies = json.loads(_run(broker, "--json", "namespaces", "policies", ns))
    assert policies["deduplicationEnabled"] is True and policies["message_ttl_in_seconds"] == 60
    assert "bad" in _run(broker, "namespaces", "set-retention", ns, "-t", "bad", "-s", "1", ok=False)

    topic = f"persistent://{ns}/cli"
    _run(broker, "topics", "create", topic)
    assert topic in _run(broker, "topics", "list", ns)
    _run(broker, "topics", "create-partitioned-topic", f"{ns}/parts", "-p", "2")
    _run(broker, "topics", "update-partitioned-topic", f"{ns}/parts", "-p", "3")
    assert json.loads(_run(broker, "--json", "topics", "get-partitioned-topic-metadata", f"{ns}/parts")) == {
        "partitions": 3
    }
    err = _run(broker, "topics", "update-partitioned-topic", f"{ns}/parts", "-p", "1", ok=False)
    assert "422" in err

    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(str(i).encode())
    _run(broker, "topics", "create-subscription", topic, "-s", "sub", "-m", "earliest")
    assert json.loads(_run(broker, "--json", "topics", "subscriptions", topic)) == ["sub"]
    stats = json.loads(_run(broker, "--json", "topics", "stats", topic))
    assert stats["msgInCounter"] == 6 and stats["subscriptions"]["sub"]["msgBacklog"] == 6
    table = _run(broker, "topics", "stats", topic)
    assert "msgInCounter" in table and "sub" in table
    _run(broker, "topics", "skip", topic, "-s", "sub", "-n", "2")
    assert json.loads(_run(broker, "--json", "topics", "stats", topic))["subscriptions"]["sub"]["msgBacklog"] == 4
    _run(broker, "topics", "clear-backlog", topic, "-s", "sub")
    _run(broker, "topics", "reset-cursor", topic, "-s", "sub", "--time", "1h")  # back an hour: all 6
    assert json.loads(_run(broker, "--json", "topics", "stats", topic))["subscriptions"]["sub"]["msgBacklog"] == 6
    _run(broker, "topics", "reset-cursor", topic, "-s", "sub", "-m", "latest")
    assert json.loads(_run(broker, "--json", "topics", "stats", topic))["subscriptions"]["sub"]["msgBacklog"] == 0
    assert "usage" in _run(broker, "topics", "reset-cursor", topic, "-s", "sub", ok=False).lower()
    internal = _run(broker, "topics", "stats-internal", topic)
    assert "ledgers" in internal and "sub" in internal
    explain = _run(broker, "topics", "explain-storage", topic)
    assert "ledgers" in explain and "(open)" in explain
    assert json.loads(_run(broker, "--json", "topics", "explain-storage", topic))["topic"] == topic
    _run(broker, "topics", "unload", topic)
    _run(broker, "topics", "unsubscribe", topic, "-s", "sub")
    err = _run(broker, "topics", "unsubscribe", topic, "-s", "sub", ok=False)
    assert "not found" in err and "404" in err
    producer.close()
    _run(broker, "topics", "delete", topic, "--force")
    _run(broker, "topics", "delete", f"{ns}/parts", ok=False)  # partitioned: needs the partitions path
    _run(broker, "namespaces", "delete", ns, "--force")
    _run(broker, "tenants", "delete", name)
    assert name not in json.loads(_run(broker, "--json", "tenants", "list"))


def test_cli_reports_unreachable_server() -> None:
    result = CliRunner().invoke(main, ["admin", "--admin-url", "http://127.0.0.1:1", "tenants", "list"])
    assert result.exit_code == 1 and "cannot reach" in result.output


def test_cli_admin_url_from_environment(broker: AdminBroker) -> None:
    result = CliRunner().invoke(main, ["admin", "--json", "clusters", "list"], env={"MAGNETAR_ADMIN_URL": broker.http})
    assert result.exit_code == 0 and json.loads(result.output) == ["standalone"]


def test_cli_inactive_topic_policies(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    _run(broker, "tenants", "create", name)
    ns = f"{name}/ns"
    _run(broker, "namespaces", "create", ns)
    assert _run(broker, "--json", "namespaces", "get-inactive-topic-policies", ns).strip() == "null"
    _run(
        broker,
        "namespaces",
        "set-inactive-topic-policies",
        ns,
        "-e",
        "-t",
        "10m",
        "-m",
        "delete_when_subscriptions_caught_up",
    )
    expected = {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 600,
        "deleteWhileInactive": True,
    }
    assert json.loads(_run(broker, "--json", "namespaces", "get-inactive-topic-policies", ns)) == expected
    topic = f"persistent://{ns}/t"
    _run(broker, "topics", "create", topic)
    assert json.loads(_run(broker, "--json", "topics", "get-inactive-topic-policies", topic, "--applied")) == expected
    _run(broker, "topics", "set-inactive-topic-policies", topic, "-d", "-t", "90", "-m", "delete_when_no_subscriptions")
    assert json.loads(_run(broker, "--json", "topics", "get-inactive-topic-policies", topic)) == {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 90,
        "deleteWhileInactive": False,
    }
    _run(broker, "topics", "remove-inactive-topic-policies", topic)
    _run(broker, "namespaces", "remove-inactive-topic-policies", ns)
    assert (
        json.loads(_run(broker, "--json", "topics", "get-inactive-topic-policies", topic, "-a"))["deleteWhileInactive"]
        is True
    )  # the broker's default, as Pulsar's
    assert "duration" in _run(
        broker,
        "topics",
        "set-inactive-topic-policies",
        topic,
        "-e",
        "-t",
        "soon",
        "-m",
        "delete_when_no_subscriptions",
        ok=False,
    )
