"""Backlog operations over the admin REST with messages from the official client: expire on all
subscriptions, expire up to a message id, namespace clearBacklog (all subscriptions and one) and
namespace unsubscribe."""

from __future__ import annotations

import time

import httpx
import pulsar

from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns


def _backlogs(http: httpx.Client, path: str) -> dict[str, int]:
    subs = http.get(f"{V2}/persistent/{path}/stats").json()["subscriptions"]
    return {name: sub["msgBacklog"] for name, sub in subs.items()}


def _produce(client: pulsar.Client, topic: str, n: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def _subscribe(client: pulsar.Client, topic: str, *subs: str) -> None:
    for sub in subs:
        client.subscribe(topic, sub, initial_position=pulsar.InitialPosition.Earliest).close()


def test_expire_all_subscriptions_and_up_to_id(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    path = f"public/default/{name}"
    _subscribe(client, name, "a", "b")
    ids = _produce(client, name, 5)
    assert _backlogs(http, path) == {"a": 5, "b": 5}
    # nothing is older than an hour: nothing expires
    assert http.post(f"{V2}/persistent/{path}/all_subscription/expireMessages/3600").status_code == 204
    assert _backlogs(http, path) == {"a": 5, "b": 5}
    time.sleep(1.1)  # every message is now older than one second
    assert http.post(f"{V2}/persistent/{path}/all_subscription/expireMessages/1").status_code == 204
    assert _backlogs(http, path) == {"a": 0, "b": 0}

    ids += _produce(client, name, 4)
    body = {"ledgerId": ids[6].ledger_id(), "entryId": ids[6].entry_id(), "isExcluded": False}
    assert http.post(f"{V2}/persistent/{path}/subscription/a/expireMessages", json=body).status_code == 204
    assert _backlogs(http, path) == {"a": 2, "b": 4}
    body = {"ledgerId": ids[8].ledger_id(), "entryId": ids[8].entry_id(), "isExcluded": True}
    assert http.post(f"{V2}/persistent/{path}/subscription/b/expireMessages", json=body).status_code == 204
    assert _backlogs(http, path) == {"a": 2, "b": 1}
    consumer = client.subscribe(name, "b")
    assert consumer.receive(timeout_millis=10000).data() == b"m3"  # the 9th message, second batch's last
    consumer.close()
    assert http.post(f"{V2}/persistent/{path}/subscription/nosub/expireMessages", json=body).status_code == 404
    assert http.post(f"{V2}/persistent/{path}/subscription/a/expireMessages", json={"x": 1}).status_code == 400
    assert http.post(f"{V2}/persistent/{path}/all_subscription/expireMessages/-1").status_code == 400
    assert (
        http.post(f"{V2}/persistent/public/default/{name}-missing/all_subscription/expireMessages/1").status_code == 404
    )


def test_expire_all_subscriptions_of_a_partitioned_topic(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    assert http.put(f"{V2}/persistent/public/default/{name}/partitions", json=2).status_code == 204
    _subscribe(client, name, "s")
    producer = client.create_producer(name, batching_enabled=False)
    for i in range(6):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    producer.close()
    time.sleep(1.1)  # the messages must be older than the 1 s expiry below
    assert http.post(f"{V2}/persistent/public/default/{name}/all_subscription/expireMessages/1").status_code == 204
    stats = http.get(f"{V2}/persistent/public/default/{name}/partitioned-stats").json()
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0


def test_namespace_clear_backlog_and_unsubscribe(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    for t in ("t1", "t2"):
        _subscribe(client, f"persistent://{ns}/{t}", "keep", "drop")
        _produce(client, f"persistent://{ns}/{t}", 3)
    assert http.post(f"{V2}/namespaces/{ns}/clearBacklog/drop").status_code == 204
    for t in ("t1", "t2"):
        assert _backlogs(http, f"{ns}/{t}") == {"keep": 3, "drop": 0}
    assert http.post(f"{V2}/namespaces/{ns}/clearBacklog").status_code == 204
    for t in ("t1", "t2"):
        assert _backlogs(http, f"{ns}/{t}") == {"keep": 0, "drop": 0}

    busy = client.subscribe(f"persistent://{ns}/t1", "drop")
    r = http.post(f"{V2}/namespaces/{ns}/unsubscribe/drop")
    assert r.status_code == 412 and "active connected consumers" in r.json()["reason"]
    assert set(_backlogs(http, f"{ns}/t2")) == {"keep", "drop"}  # nothing was deleted
    busy.close()
    assert http.post(f"{V2}/namespaces/{ns}/unsubscribe/drop").status_code == 204
    for t in ("t1", "t2"):
        assert set(_backlogs(http, f"{ns}/{t}")) == {"keep"}
    assert http.post(f"{V2}/namespaces/{name}/missing/clearBacklog").status_code == 404
