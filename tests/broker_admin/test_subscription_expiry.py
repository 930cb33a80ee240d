"""Subscription expiration (`broker.housekeeping._subscription_expiry`): the namespace policy over REST with
Pulsar's path and body, and the check deleting durable subscriptions without consumers that were
inactive for longer than the namespace's (or the broker's) expiration time."""

from __future__ import annotations

import httpx
import pulsar

from protocols.pulsar import TopicName
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns


def test_namespace_policy_over_rest(http: httpx.Client, name: str) -> None:
    ns = new_tenant_ns(http, name)
    path = f"{V2}/namespaces/{ns}/subscriptionExpirationTime"
    assert http.get(path).status_code == 204  # not set: the broker's key applies
    assert http.post(path, json=120).status_code == 204
    assert http.get(path).json() == 120
    assert http.get(f"{V2}/namespaces/{ns}").json()["subscription_expiration_time_minutes"] == 120
    for bad in (-1, "soon", 1.5, True):
        assert http.post(path, json=bad).status_code == 400, bad
    assert http.get(path).json() == 120
    assert http.delete(path).status_code == 204
    assert http.get(path).status_code == 204
    assert http.post(f"{V2}/namespaces/{name}/no-such-ns/subscriptionExpirationTime", json=1).status_code == 404


def test_inactive_subscriptions_without_consumers_expire(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    other = new_tenant_ns(http, f"{name}x")  # no policy: the broker's default, 0, never expires
    assert http.post(f"{V2}/namespaces/{ns}/subscriptionExpirationTime", json=1).status_code == 204
    topic, kept_topic = f"persistent://{ns}/t", f"persistent://{other}/t"
    for t in (topic, kept_topic):
        for sub in ("idle", "recent", "connected"):
            assert http.put(f"{V2}/persistent/{t.removeprefix('persistent://')}/subscription/{sub}").status_code == 204
    consumer = client.subscribe(topic, "connected")
    client.create_producer(topic).send(b"x")

    async def age(t: str, subs: tuple[str, ...], seconds: float) -> None:
        loaded = broker.service.topics[str(TopicName.parse(t))]
        for s in subs:
            loaded.subscriptions[s].last_active -= seconds

    async def check() -> list[str]:
        return await broker.service.subscription_expiry.check()

    broker.call(age, topic, ("idle", "connected"), 61)
    broker.call(age, topic, ("recent",), 30)
    broker.call(age, kept_topic, ("idle", "recent", "connected"), 3600)
    assert broker.call(check) == [f"{topic}/idle"]
    assert http.get(f"{V2}/persistent/{ns}/t/subscriptions").json() == ["connected", "recent"]
    assert http.get(f"{V2}/persistent/{other}/t/subscriptions").json() == ["connected", "idle", "recent"]

    # an acknowledgement is activity: the subscription whose consumer leaves is young again
    consumer.acknowledge(consumer.receive(10_000))
    consumer.close()
    broker.call(age, topic, ("recent",), 60)
    assert broker.call(check) == [f"{topic}/recent"]
    assert http.get(f"{V2}/persistent/{ns}/t/subscriptions").json() == ["connected"]
