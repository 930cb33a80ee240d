"""Metrics after real traffic, retention trimming configured through REST, and backlog quotas.

One broker with small ledgers (5 entries) and a fast retention service (a pass every 0.3 s).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker import BrokerConfig
from managed_ledger import ManagedLedgerConfig
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns


@pytest.fixture(scope="module")
def broker() -> Iterator[AdminBroker]:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        retention_check_interval_s=0.3,
        backlog_quota_check_interval_s=0.3,
        idle_ledger_rollover_s=0.5,
        backlog_quota_hold_timeout_s=20,
    )
    ml = ManagedLedgerConfig(
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        max_entries_per_ledger=5,
        min_ledger_rollover_time_minutes=0,
        cursor_persist_interval_s=0.2,
    )
    b = AdminBroker(config, ml).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def client(broker: AdminBroker) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=logging.getLogger("pulsar-client"))
    try:
        yield c
    finally:
        c.close()


def _wait(what: str, check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _metrics(http: httpx.Client) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(http.get("/metrics").text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _topic_value(metrics: dict, name: str, topic: str) -> float | None:
    for (n, labels), v in metrics.items():
        if n == name and ("topic", topic) in labels:
            return v
    return None


def _sub_value(metrics: dict, name: str, topic: str, subscription: str) -> float | None:
    for (n, labels), v in metrics.items():
        if n == name and ("topic", topic) in labels and ("subscription", subscription) in labels:
            return v
    return None


def test_metrics_after_produce_and_consume(http: httpx.Client, client: pulsar.Client, name: str) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"persistent://{ns}/m"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    lagging = client.subscribe(
        topic, "lagging", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1
    )
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"x" * 100 + str(i).encode())
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    # acks are grouped by the client: wait until only the lagging subscription has a backlog
    m = _wait(
        "the acks",
        lambda: (lambda m: m if _topic_value(m, "pulsar_msg_backlog", topic) == 10 else None)(_metrics(http)),
    )
    assert _topic_value(m, "pulsar_in_messages_total", topic) == 10
    assert _topic_value(m, "pulsar_in_bytes_total", topic) > 1000
    assert _sub_value(m, "pulsar_out_messages_total", topic, "s") == 10
    assert _sub_value(m, "pulsar_out_bytes_total", topic, "s") > 1000
    assert _topic_value(m, "pulsar_producers_count", topic) == 1
    assert _topic_value(m, "pulsar_consumers_count", topic) == 2
    assert _topic_value(m, "pulsar_subscriptions_count", topic) == 2
    assert _topic_value(m, "pulsar_storage_size", topic) > 1000
    assert _topic_value(m, "pulsar_msg_backlog", topic) == 10  # the lagging subscription's
    assert _topic_value(m, "pulsar_storage_backlog_size", topic) > 1000
    assert _topic_value(m, "pulsar_storage_backlog_age_seconds", topic) >= 0
    for n in ("pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "magnetar_storage_retained_size"):
        assert _topic_value(m, n, topic) is not None
    latency = [v for (n, labels), v in m.items() if n == "pulsar_broker_publish_latency_count"]
    assert latency and latency[0] >= 10
    names = {n for n, _ in m}
    assert "pulsar_ml_entries_added_total" in names and "magnetar_retention_runs_total" in names
    labels = dict(next(labels for (n, labels) in m if n == "pulsar_in_messages_total" and ("topic", topic) in labels))
    assert labels == {"cluster": "standalone", "namespace": ns, "topic": topic}
    producer.close()
    consumer.close()
    lagging.close()


def test_retention_trims_consumed_ledgers(
    broker: AdminBroker, http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    assert (
        http.post(
            f"{V2}/namespaces/{ns}/retention", json={"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
        ).status_code
        == 204
    )
    topic = f"persistent://{ns}/r"
    tp = f"{V2}/persistent/{ns}/r"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    first_ledgers = [i["ledgerId"] for i in http.get(f"{tp}/internalStats").json()["ledgers"] if i["entries"]]
    assert len(first_ledgers) >= 4
    explain = http.get(f"{tp}/explain-storage").json()
    assert any(row["reason"] == "needed_by_cursor" and row["pinnedBy"] == ["s"] for row in explain["ledgers"])
    assert explain["cursors"]["s"]["pinsLedgers"]
    for _ in range(20):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))

    def trimmed() -> bool:
        ids = [i["ledgerId"] for i in http.get(f"{tp}/internalStats").json()["ledgers"]]
        return not set(ids) & set(first_ledgers)

    _wait("retention to trim every consumed ledger", trimmed)
    assert set(first_ledgers) <= set(broker.bk.deleted_ledgers)
    explain = http.get(f"{tp}/explain-storage").json()
    assert explain["lastRetentionCheck"] is not None
    assert explain["policies"]["retention"] == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert all(row["ledgerId"] not in first_ledgers for row in explain["ledgers"])
    m = _metrics(http)
    assert m[("magnetar_retention_ledgers_trimmed_total", ())] >= len(first_ledgers)
    # the topic keeps working after trimming
    producer.send(b"after")
    msg = consumer.receive(timeout_millis=5000)
    assert msg.data() == b"after"
    consumer.acknowledge(msg)
    producer.close()
    consumer.close()


def test_backlog_quota_producer_exception_refuses_producers(
    http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    quota = {"limitSize": 200, "limitTime": -1, "policy": "producer_exception"}
    assert http.post(f"{V2}/namespaces/{ns}/backlogQuota", json=quota).status_code == 204
    topic = f"persistent://{ns}/q"
    client.subscribe(topic, "slow", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1)
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"y" * 100)

    def refused() -> str:
        try:
            client.create_producer(topic).close()
        except Exception as exc:
            return str(exc) or type(exc).__name__
        return ""

    reason = _wait("the quota to refuse new producers", refused)
    assert "Quota" in reason or "quota" in reason
    explain = http.get(f"{V2}/persistent/{ns}/q/explain-storage").json()
    assert explain["lastRetentionCheck"]["backlogQuota"][0]["action"] == "reject_producers"
    # clearing the backlog lets producers in again
    assert http.post(f"{V2}/persistent/{ns}/q/subscription/slow/skip_all").status_code == 204
    _wait("producers to be accepted again", lambda: not refused())


def test_backlog_quota_hold_delays_sends_until_the_backlog_shrinks(
    http: httpx.Client, client: pulsar.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    quota = {"limitSize": 200, "limitTime": -1, "policy": "producer_request_hold"}
    assert http.post(f"{V2}/namespaces/{ns}/backlogQuota", json=quota).status_code == 204
    topic = f"persistent://{ns}/h"
    tp = f"{V2}/persistent/{ns}/h"
    client.subscribe(topic, "slow", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30000)
    for _ in range(5):
        producer.send(b"y" * 100)
    _wait(
        "the hold to be decided",
        lambda: (http.get(f"{tp}/explain-storage").json()["lastRetentionCheck"] or {}).get("backlogQuota"),
    )
    results: list[Any] = []
    producer.send_async(b"held", lambda res, msg_id: results.append(res))
    time.sleep(1.5)  # nothing should happen: a bounded chance for a (wrong) receipt to arrive
    assert results == []  # held: no receipt while the quota is exceeded
    assert http.get(f"{tp}/internalStats").json()["entriesAddedCounter"] == 5
    assert http.post(f"{tp}/subscription/slow/skip_all").status_code == 204
    producer.flush()
    _wait("the held send's receipt", lambda: results)
    assert results == [pulsar.Result.Ok]
    assert http.get(f"{tp}/internalStats").json()["entriesAddedCounter"] == 6
    producer.close()


@pytest.fixture(scope="module")
def slow_retention_broker() -> Iterator[AdminBroker]:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        retention_check_interval_s=3600,
        backlog_quota_check_interval_s=0.3,
    )
    b = AdminBroker(config).start()
    try:
        yield b
    finally:
        b.stop()


def test_backlog_quotas_are_checked_on_their_own_interval(slow_retention_broker: AdminBroker) -> None:
    # as Pulsar, backlogQuotaCheckIntervalInSeconds paces the quota checks of the loaded topics,
    # whatever retentionCheckIntervalInSeconds says (the Go client's tests rely on a 5 s check)
    b = slow_retention_broker
    http = httpx.Client(base_url=b.http, timeout=10)
    quota = {"limitSize": 200, "limitTime": -1, "policy": "producer_exception"}
    assert http.post(f"{V2}/namespaces/public/default/backlogQuota", json=quota).status_code == 204
    topic = "persistent://public/default/paced-quota"
    c = pulsar.Client(b.url, operation_timeout_seconds=10, logger=logging.getLogger("pulsar-client"))
    try:
        c.subscribe(topic, "slow", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1)
        producer = c.create_producer(topic, batching_enabled=False)
        for _ in range(5):
            try:
                producer.send(b"y" * 100)
            except pulsar.ProducerBlockedQuotaExceededException:
                break  # a check already ran between two sends (a slow machine): what is awaited below
        check = _wait(
            "a quota check after the backlog grew",
            lambda: (
                http.get(f"{V2}/persistent/public/default/paced-quota/explain-storage").json()["lastRetentionCheck"]
                or {}
            ).get("backlogQuota"),
        )
        assert check[0]["action"] == "reject_producers"
    finally:
        c.close()
