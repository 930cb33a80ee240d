"""Inactive topics are deleted as Pulsar deletes them (``brokerDeleteInactiveTopics*`` and the
``inactiveTopicPolicies`` of namespaces and topics), against a real ``magnetar standalone`` with
the official client.

The standalone checks every second and deletes after 2 s of inactivity; it also unloads idle
topics after 1 s, so every test also shows that idle unloading does not spare a topic that waits
to be deleted. Where a test shows that a topic is *kept*, it waits until two "witness" topics made
inactive after it, in a namespace where deletion is on, have been deleted: by then at least one
whole check has found the kept topic inactive for long enough (no sleeps, no timing assertions).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from tests.support.admin import new_namespace, rest
from tests.support.clients import drain
from tests.support.standalone import Standalone, start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

POLICY = "inactiveTopicPolicies"


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    proc = start_standalone(
        tmp_path_factory.mktemp("inactive") / "data",
        "--set",
        "broker.brokerDeleteInactiveTopicsFrequencySeconds=1",
        "--set",
        "broker.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=2",
        "--set",
        "broker.topic_unload_idle_s=1",
    )
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            assert proc.stop() == 0, proc.log()[-3000:]


@pytest.fixture
def client(sa: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
    try:
        yield c
    finally:
        c.close()


def _topics(sa: Standalone, ns: str) -> list[str]:
    return rest("GET", sa.admin_url, f"/admin/v2/persistent/{ns}").json()


def _produce(client: pulsar.Client, topic: str, n: int = 3) -> None:
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"m{i}".encode())
    producer.close()


def _wait_deleted(sa: Standalone, topic: str, timeout: float = 30.0) -> None:
    ns = topic.split("://", 1)[1].rsplit("/", 1)[0]
    wait_until(lambda: topic not in _topics(sa, ns), f"{topic} to be deleted", timeout_s=timeout)


def _after_two_witnesses(sa: Standalone, client: pulsar.Client) -> None:
    """Return once two topics made inactive now (default policies) have been deleted in turn."""
    ns = new_namespace(sa.admin_url, "witness")
    for _ in range(2):
        witness = f"persistent://{ns}/w-{uuid.uuid4().hex[:6]}"
        _produce(client, witness, 1)
        _wait_deleted(sa, witness)


def test_a_topic_without_subscriptions_is_deleted_one_with_a_subscription_kept(
    sa: Standalone, client: pulsar.Client
) -> None:
    ns = new_namespace(sa.admin_url, "nosubs")
    kept, gone = f"persistent://{ns}/subscribed", f"persistent://{ns}/unsubscribed"
    client.subscribe(kept, "sub").close()  # a durable subscription, no consumer left
    _produce(client, kept)
    _produce(client, gone)
    assert {kept, gone} <= set(_topics(sa, ns))
    _wait_deleted(sa, gone)
    _after_two_witnesses(sa, client)
    assert kept in _topics(sa, ns)
    # deleted with its data: a new topic of that name starts empty
    reader = client.create_reader(gone, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    reader.close()


def test_caught_up_mode_deletes_topics_whose_subscriptions_have_no_backlog(
    sa: Standalone, client: pulsar.Client
) -> None:
    ns = new_namespace(sa.admin_url, "caughtup")
    rest(
        "POST",
        sa.admin_url,
        f"/admin/v2/namespaces/{ns}/{POLICY}",
        json={
            "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
            "maxInactiveDurationSeconds": 2,
            "deleteWhileInactive": True,
        },
    )
    caught_up, behind = f"persistent://{ns}/caught-up", f"persistent://{ns}/behind"
    for topic in (caught_up, behind):
        consumer = client.subscribe(topic, "sub")
        _produce(client, topic)
        drain(consumer, ack=topic == caught_up)
        consumer.close()
    _wait_deleted(sa, caught_up)
    _after_two_witnesses(sa, client)
    assert behind in _topics(sa, ns)
    stats = rest("GET", sa.admin_url, f"/admin/v2/persistent/{ns}/behind/stats").json()
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 3


def test_namespace_and_topic_policies_switch_deletion_off(sa: Standalone, client: pulsar.Client) -> None:
    off_ns = new_namespace(sa.admin_url, "off")
    rest(
        "POST",
        sa.admin_url,
        f"/admin/v2/namespaces/{off_ns}/{POLICY}",
        json={
            "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
            "maxInactiveDurationSeconds": 2,
            "deleteWhileInactive": False,
        },
    )
    on_ns = new_namespace(sa.admin_url, "on")
    kept_by_ns, kept_by_topic = f"persistent://{off_ns}/t", f"persistent://{on_ns}/kept"
    _produce(client, kept_by_ns)
    _produce(client, kept_by_topic)
    rest(
        "POST",
        sa.admin_url,
        f"/admin/v2/persistent/{on_ns}/kept/{POLICY}",
        json={
            "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
            "maxInactiveDurationSeconds": 2,
            "deleteWhileInactive": False,
        },
    )
    _after_two_witnesses(sa, client)
    assert kept_by_ns in _topics(sa, off_ns) and kept_by_topic in _topics(sa, on_ns)
    # removing the topic's policy brings the broker's back: once loaded again (a topic whose policies
    # keep it may be unloaded for idleness, and only loaded topics are checked), it goes
    rest("DELETE", sa.admin_url, f"/admin/v2/persistent/{on_ns}/kept/{POLICY}")
    _produce(client, kept_by_topic, 1)
    _wait_deleted(sa, kept_by_topic)


def test_infinite_retention_keeps_a_topic_with_data(sa: Standalone, client: pulsar.Client) -> None:
    ns = new_namespace(sa.admin_url, "retained")
    rest(
        "POST",
        sa.admin_url,
        f"/admin/v2/namespaces/{ns}/retention",
        json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    with_data = f"persistent://{ns}/with-data"
    _produce(client, with_data)
    _after_two_witnesses(sa, client)
    assert with_data in _topics(sa, ns)


def test_partitioned_topic_metadata_goes_with_its_last_partition(sa: Standalone, client: pulsar.Client) -> None:
    key = "brokerDeleteInactivePartitionedTopicMetadataEnabled"
    rest("POST", sa.admin_url, f"/admin/v2/brokers/configuration/{key}/true")  # a dynamic key
    try:
        wait_until(
            lambda: rest("GET", sa.admin_url, "/admin/v2/brokers/configuration/runtime").json()[key] == "true",
            "the dynamic key to apply",
            timeout_s=20.0,
        )
        ns = new_namespace(sa.admin_url, "parts")
        rest("PUT", sa.admin_url, f"/admin/v2/persistent/{ns}/p/partitions", json=2)
        _produce(client, f"persistent://{ns}/p", 4)
        wait_until(
            lambda: (
                f"persistent://{ns}/p" not in rest("GET", sa.admin_url, f"/admin/v2/persistent/{ns}/partitioned").json()
            ),
            "the partitioned topic to be deleted",
            timeout_s=30,
        )
        assert _topics(sa, ns) == []
    finally:
        rest("DELETE", sa.admin_url, f"/admin/v2/brokers/configuration/{key}")


def test_inactive_topic_policies_endpoints(sa: Standalone, client: pulsar.Client) -> None:
    ns = new_namespace(sa.admin_url, "endpoints")
    base = f"/admin/v2/namespaces/{ns}/{POLICY}"
    assert rest("GET", sa.admin_url, base).status_code == 204  # not set
    body = {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 600,
        "deleteWhileInactive": True,
    }
    rest("POST", sa.admin_url, base, json=body)
    assert rest("GET", sa.admin_url, base).json() == body
    rest("POST", sa.admin_url, base, json={"inactiveTopicDeleteMode": "sometimes"}, ok=(400,))
    client.subscribe(f"persistent://{ns}/t", "sub")
    topic_path = f"/admin/v2/persistent/{ns}/t/{POLICY}"
    assert rest("GET", sa.admin_url, topic_path).status_code == 204
    assert rest("GET", sa.admin_url, f"{topic_path}?applied=true").json() == body  # the namespace's
    own = {**body, "maxInactiveDurationSeconds": 60}
    rest("POST", sa.admin_url, topic_path, json=own)
    assert rest("GET", sa.admin_url, topic_path).json() == own
    assert rest("GET", sa.admin_url, f"{topic_path}?applied=true").json() == own
    rest("DELETE", sa.admin_url, topic_path)
    rest("DELETE", sa.admin_url, base)
    broker = {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 2,
        "deleteWhileInactive": True,
    }
    assert rest("GET", sa.admin_url, f"{topic_path}?applied=true").json() == broker
    rest("GET", sa.admin_url, f"/admin/v2/persistent/{ns}/missing/{POLICY}", ok=(404,))
