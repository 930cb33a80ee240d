"""What pulsar-admin users type by habit works on ``magnetar admin`` against a live broker: its
option names, its value formats (durations, sizes, reset-cursor's "this long ago") and its command
names, with the effect pulsar-admin's have."""

from __future__ import annotations

import json

import pulsar
from click.testing import CliRunner

from magnetar.cli import main
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import new_tenant_ns


def _run(broker: AdminBroker, *args: str) -> str:
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, *args])
    assert result.exit_code == 0, result.output
    return result.output


def _json(broker: AdminBroker, *args: str) -> object:
    return json.loads(_run(broker, "--json", *args))


def test_namespace_policies_in_pulsar_admin_spelling(broker: AdminBroker, http: object, name: str) -> None:
    ns = new_tenant_ns(http, name)  # type: ignore[arg-type]
    _run(broker, "namespaces", "set-message-ttl", ns, "--messageTTL", "60")
    assert _json(broker, "namespaces", "get-message-ttl", ns) == 60
    _run(broker, "namespaces", "set-message-ttl", ns, "-ttl", "2h")
    assert _json(broker, "namespaces", "get-message-ttl", ns) == 7200
    _run(broker, "namespaces", "set-retention", ns, "-t", "120", "-s", "100M")  # seconds, as pulsar-admin 4.0
    assert _json(broker, "namespaces", "get-retention", ns) == {"retentionTimeInMinutes": 2, "retentionSizeInMB": 100}
    _run(
        broker,
        "namespaces",
        "set-backlog-quota",
        ns,
        "--limit",
        "10M",
        "--limitTime",
        "1h",
        "-p",
        "producer_request_hold",
    )
    quota = _json(broker, "namespaces", "get-backlog-quotas", ns)["destination_storage"]  # type: ignore[index]
    assert (quota["limitSize"], quota["limitTime"]) == (10 * 1024 * 1024, 3600)
    _run(broker, "namespaces", "set-max-unacked-messages-per-consumer", ns, "--max-unacked-messages-per-topic", "7")
    assert _json(broker, "namespaces", "get-max-unacked-messages-per-consumer", ns) == 7


def test_topic_commands_in_pulsar_admin_spelling(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    topic = f"persistent://public/default/{name}-habits"
    _run(
        broker,
        "topics",
        "create-subscription",
        topic,
        "-s",
        "sub",
        "-m",
        "earliest",
        "-p",
        "owner=etl",
        "--property",
        "team=data",
    )
    props = json.loads(
        CliRunner()
        .invoke(main, ["admin", "--admin-url", broker.http, "--json", "topics", "explain-storage", topic])
        .output
    )["cursors"]["sub"]["properties"]
    assert props == {"owner": "etl", "team": "data"}
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(str(i).encode()) for i in range(3)]

    def backlog() -> int:
        stats = _json(broker, "topics", "stats", topic, "-etb", "-sbs")
        return stats["subscriptions"]["sub"]["msgBacklog"]  # type: ignore[index,no-any-return]

    assert backlog() == 3
    stats = _json(broker, "topics", "stats", topic, "-etb")
    assert stats["earliestMsgPublishTimeInBacklogs"] > 0  # type: ignore[index]
    _run(broker, "topics", "expire-messages", topic, "-s", "sub", "-p", f"{ids[1].ledger_id()}:{ids[1].entry_id()}")
    assert backlog() == 1
    _run(broker, "topics", "reset-cursor", topic, "-s", "sub", "-t", "1h")  # back an hour: everything again
    assert backlog() == 3
    _run(broker, "topics", "reset-cursor", topic, "-s", "sub", "-m", f"{ids[0].ledger_id()}:{ids[0].entry_id()}", "-e")
    assert backlog() == 2  # from the message after the first
    _run(broker, "topics", "expire-messages", topic, "-s", "sub", "--expireTime", "0")
    assert backlog() == 0

    assert _json(broker, "topics", "get-max-producers", topic) is None  # not set on the topic
    assert isinstance(_json(broker, "topics", "get-max-producers", topic, "-ap"), int)  # the one in force
    _run(broker, "topics", "set-max-unacked-messages-per-consumer", topic, "--maxNum", "5")
    assert _json(broker, "topics", "get-max-unacked-messages-on-consumer", topic) == 5
    assert "Message ID:" in _run(broker, "topics", "examine-messages", topic, "-i", "earliest", "-m", "1")


def test_brokers_namespaces_with_url_as_pulsar_admin(broker: AdminBroker) -> None:
    [broker_id] = _json(broker, "brokers", "list", "standalone")  # type: ignore[misc]
    owned = _json(broker, "brokers", "namespaces", "standalone", "--url", broker_id)
    assert owned == _json(broker, "brokers", "owned-namespaces", "standalone", broker_id)
    assert any(bundle.startswith("public/default/") for bundle in owned), owned  # type: ignore[union-attr]
    both = CliRunner().invoke(
        main, ["admin", "--admin-url", broker.http, "brokers", "namespaces", "standalone", broker_id, "-u", broker_id]
    )
    assert both.exit_code == 2 and "name the broker once" in both.output
