"""Every stats figure follows Pulsar's definition: known traffic through the official client, then
the figure read back over REST (and ``/metrics`` where Pulsar exports it too).

The broker's stats updater never runs on its own here (its first update is a long way off): each
test takes the rates itself with `_update` at chosen clock values, so a rate is exactly what the
counters gained divided by the chosen period.
"""

from __future__ import annotations

import datetime
import itertools
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker import BrokerConfig
from broker.resources._bundles import bundle_for, default_boundaries
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns
from tests.support.clients import drain, pulsar_client
from tests.support.raw_pulsar import RawPeer
from tests.support.waiting import wait_until

PERIOD = 10.0
"""The stats period the tests choose: a rate is what a counter gained over it, divided by it."""

_names = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[AdminBroker]:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        stats_update_initial_delay_s=10**9,
        expose_consumer_level_metrics_in_prometheus=True,
        expose_producer_level_metrics_in_prometheus=True,
        max_message_size=64 * 1024,
    )
    with AdminBroker(config) as b:
        yield b


class Clock:
    """Stats-updater times for one test: `tick` moves one `PERIOD` on and takes the rates."""

    def __init__(self, broker: AdminBroker) -> None:
        self.broker = broker
        self.now = time.monotonic() + 1000.0  # after every object's creation

    def tick(self) -> None:
        self.now += PERIOD
        _update(self.broker, self.now)


def _update(broker: AdminBroker, now: float) -> None:
    async def update() -> None:
        assert broker.service is not None
        broker.service.stats.update(now)

    broker.call(update)


def _stats(http: httpx.Client, path: str, **params: str) -> dict[str, Any]:
    r = http.get(f"{path}/stats", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def _metrics(http: httpx.Client) -> list[tuple[str, dict[str, str], float]]:
    text = http.get("/metrics").text
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def _metric(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels are exactly ``labels`` (plus the cluster's)."""
    want = {"cluster": "standalone", **labels}
    found = [v for n, lab, v in samples if n == name and lab == want]
    assert len(found) == 1, (name, want, [(n, lab) for n, lab, _ in samples if n == name])
    return found[0]


def _topic(http: httpx.Client) -> tuple[str, str, str]:
    """(namespace, topic name, REST path) of a fresh topic."""
    ns = new_tenant_ns(http, f"fig{next(_names)}")
    return ns, f"persistent://{ns}/t", f"{V2}/persistent/{ns}/t"


def _send(producer: pulsar.Producer, payloads: list[bytes]) -> None:
    for p in payloads:
        producer.send_async(p, None)
    producer.flush()


# ------------------------------------------------------------------ counters


def test_out_counters_count_messages_of_batches_and_keep_what_departed_consumers_received(
    broker: AdminBroker, http: httpx.Client
) -> None:
    ns, topic, path = _topic(http)
    labels = {"namespace": ns, "topic": topic}
    before_ms = int(time.time() * 1000)
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=2000)
        other = client.subscribe(topic, "other", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=100,
            batching_max_publish_delay_ms=100,
            block_if_queue_full=True,
        )
        _send(producer, [b"0123456789"] * 1000)
        assert len(drain(consumer)) == 1000
        assert len(drain(other)) == 1000
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["unackedMessages"] == 0, "the acks")
        stats = _stats(http, path)
        assert stats["msgInCounter"] == 1000
        entries = broker.service.topics[topic].ml.number_of_entries
        assert entries < 1000  # the producer batched: a message count is not an entry count
        sub = stats["subscriptions"]["s"]
        live = sub["consumers"][0]
        assert live["msgOutCounter"] == sub["msgOutCounter"] == 1000
        assert live["bytesOutCounter"] == sub["bytesOutCounter"] == stats["bytesInCounter"]
        assert stats["msgOutCounter"] == 2000 and stats["bytesOutCounter"] == 2 * stats["bytesInCounter"]
        assert live["avgMessagesPerEntry"] > 1
        after_ms = int(time.time() * 1000)
        assert before_ms <= live["lastConsumedTimestamp"] <= after_ms
        assert before_ms <= live["lastAckedTimestamp"] <= after_ms
        assert before_ms <= live["lastConsumedFlowTimestamp"] <= after_ms
        assert before_ms <= sub["lastMarkDeleteAdvancedTimestamp"] <= after_ms
        assert datetime.datetime.fromisoformat(live["lastAckedTime"]).timestamp() * 1000 == pytest.approx(
            live["lastAckedTimestamp"], abs=1
        )
        m = _metrics(http)
        assert _metric(m, "pulsar_in_messages_total", **labels) == 1000
        assert _metric(m, "pulsar_out_messages_total", **labels, subscription="s") == 1000
        assert _metric(m, "pulsar_out_bytes_total", **labels, subscription="s") == stats["bytesInCounter"]
        consumer_labels = {
            **labels,
            "subscription": "s",
            "consumer_name": consumer.consumer_name(),
            "consumer_id": str(broker.service.topics[topic].subscriptions["s"].consumers[0].consumer_id),
        }
        assert _metric(m, "pulsar_out_messages_total", **consumer_labels) == 1000

        consumer.close()
        other.unsubscribe()
        wait_until(lambda: not _stats(http, path)["subscriptions"]["s"]["consumers"], "the consumer to leave")
        stats = _stats(http, path)
        sub = stats["subscriptions"]["s"]
        assert "other" not in stats["subscriptions"]
        # the subscription keeps its type and what its departed consumer received; the topic also
        # what the removed subscription delivered
        assert sub["type"] == "Shared"
        assert sub["msgOutCounter"] == 1000 and sub["bytesOutCounter"] == stats["bytesInCounter"]
        assert stats["msgOutCounter"] == 2000
        m = _metrics(http)
        assert _metric(m, "pulsar_out_messages_total", **labels, subscription="s") == 1000
        producer.close()


# ------------------------------------------------------------------ rates


def test_rates_are_what_the_counters_gained_over_the_stats_period(broker: AdminBroker, http: httpx.Client) -> None:
    ns, topic, path = _topic(http)
    labels = {"namespace": ns, "topic": topic}
    clock = Clock(broker)
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        clock.tick()  # the base of the period
        _send(producer, [b"x" * 100] * 50)
        assert len(drain(consumer)) == 50
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["unackedMessages"] == 0, "the acks")
        size = _stats(http, path)["bytesInCounter"] // 50  # one stored entry per message
        clock.tick()
        stats = _stats(http, path)
        pub = stats["publishers"][0]
        assert (pub["msgRateIn"], pub["msgThroughputIn"], pub["averageMsgSize"]) == (5.0, 5.0 * size, float(size))
        assert (stats["msgRateIn"], stats["msgThroughputIn"], stats["averageMsgSize"]) == (5.0, 5.0 * size, float(size))
        sub = stats["subscriptions"]["s"]
        con = sub["consumers"][0]
        for figures in (stats, sub, con):
            assert (figures["msgRateOut"], figures["msgThroughputOut"]) == (5.0, 5.0 * size)
        assert con["messageAckRate"] == sub["messageAckRate"] == 5.0
        assert con["msgRateRedeliver"] == 0.0
        m = _metrics(http)
        assert (_metric(m, "pulsar_rate_in", **labels), _metric(m, "pulsar_rate_out", **labels)) == (5.0, 5.0)
        assert (
            _metric(m, "pulsar_throughput_in", **labels) == _metric(m, "pulsar_throughput_out", **labels) == 5.0 * size
        )
        assert _metric(m, "pulsar_average_msg_size", **labels) == size
        assert _metric(m, "pulsar_subscription_msg_rate_out", **labels, subscription="s") == 5.0
        assert _metric(m, "pulsar_subscription_msg_ack_rate", **labels, subscription="s") == 5.0
        assert _metric(m, "pulsar_subscription_msg_throughput_out", **labels, subscription="s") == 5.0 * size
        producer_labels = {**labels, "producer_name": producer.producer_name(), "producer_id": "0"}
        assert _metric(m, "pulsar_producer_msg_rate_in", **producer_labels) == 5.0
        assert _metric(m, "pulsar_producer_msg_average_Size", **producer_labels) == size

        # a redelivery: ten messages delivered, not acknowledged, handed back
        _send(producer, [b"x" * 100] * 10)
        got = [consumer.receive(10_000) for _ in range(10)]
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["unackedMessages"] == 10, "10 unacked")
        clock.tick()
        consumer.redeliver_unacknowledged_messages()
        wait_until(
            lambda: _stats(http, path)["subscriptions"]["s"]["consumers"][0]["msgOutCounter"] == 70, "the redelivery"
        )
        clock.tick()
        con = _stats(http, path)["subscriptions"]["s"]["consumers"][0]
        assert con["msgRateRedeliver"] == 1.0 and con["msgRateOut"] == 1.0
        m = _metrics(http)
        assert _metric(m, "pulsar_subscription_msg_rate_redeliver", **labels, subscription="s") == 1.0
        assert len(got) == 10
        drain(consumer)

        # a period without traffic
        clock.tick()
        clock.tick()
        stats = _stats(http, path)
        assert (stats["msgRateIn"], stats["msgRateOut"], stats["averageMsgSize"]) == (0.0, 0.0, 0.0)
        producer.close()
        consumer.close()


def test_a_departed_consumer_takes_its_rate_with_it(broker: AdminBroker, http: httpx.Client) -> None:
    _, topic, path = _topic(http)
    clock = Clock(broker)
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        clock.tick()
        _send(producer, [b"x"] * 20)
        assert len(drain(consumer)) == 20
        clock.tick()
        assert _stats(http, path)["msgRateOut"] == 2.0
        consumer.close()
        wait_until(lambda: not _stats(http, path)["subscriptions"]["s"]["consumers"], "the consumer to leave")
        stats = _stats(http, path)
        assert stats["msgRateOut"] == 0.0 and stats["subscriptions"]["s"]["msgOutCounter"] == 20
        producer.close()


# ------------------------------------------------------------------ CONSUMER_STATS and unacked limits


def test_consumer_stats_command_reports_rates_and_the_topic_policys_unacked_block(
    broker: AdminBroker, http: httpx.Client
) -> None:
    ns, topic, path = _topic(http)
    clock = Clock(broker)
    with pulsar_client(broker.url) as client:
        client.create_producer(topic).close()  # the topic exists
        # the broker allows 50,000 unacked messages per consumer; the topic's policy 5
        assert http.post(f"{path}/maxUnackedMessagesOnConsumer", json=5).status_code == 204
        peer = RawPeer(broker.port)
        peer.connect()
        peer.send(
            "SUBSCRIBE",
            topic=topic,
            subscription="s",
            subType=pb.CommandSubscribe.Shared,
            consumer_id=1,
            request_id=1,
            consumer_name="raw",
        )
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.SUCCESS, answer
        clock.tick()
        peer.send("FLOW", consumer_id=1, messagePermits=100)
        producer = client.create_producer(topic, batching_enabled=False)
        _send(producer, [b"y" * 10] * 10)
        got = []
        while len(got) < 5:
            cmd = peer.recv()
            assert cmd is not None
            if cmd.type == pb.BaseCommand.MESSAGE:
                got.append(cmd)
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["msgBacklog"] == 10, "the backlog")
        clock.tick()
        peer.send("CONSUMER_STATS", consumer_id=1, request_id=2)
        cmd = peer.recv()
        assert cmd is not None and cmd.type == pb.BaseCommand.CONSUMER_STATS_RESPONSE, cmd
        r = cmd.consumerStatsResponse
        assert not r.HasField("error_code")
        assert (r.msgRateOut, r.unackedMessages, r.blockedConsumerOnUnackedMsgs) == (0.5, 5, True)
        assert (r.consumerName, r.type, r.msgBacklog, r.availablePermits) == ("raw", "Shared", 10, 95)
        assert r.msgThroughputOut > 0 and r.address.startswith("/127.0.0.1:") and r.connectedSince
        con = _stats(http, path)["subscriptions"]["s"]["consumers"][0]
        assert con["blockedConsumerOnUnackedMsgs"] is True and con["unackedMessages"] == 5
        m = _metrics(http)
        consumer_labels = {
            "namespace": ns,
            "topic": topic,
            "subscription": "s",
            "consumer_name": "raw",
            "consumer_id": "1",
        }
        assert _metric(m, "pulsar_consumer_blocked_on_unacked_messages", **consumer_labels) == 1
        assert _metric(m, "pulsar_consumer_msg_rate_out", **consumer_labels) == 0.5
        peer.close()
        producer.close()


def test_subscription_blocked_follows_the_namespace_policy(broker: AdminBroker, http: httpx.Client) -> None:
    ns, topic, path = _topic(http)
    assert http.post(f"{V2}/namespaces/{ns}/maxUnackedMessagesPerSubscription", json=4).status_code == 204
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        _send(producer, [b"z"] * 10)
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["unackedMessages"] == 4, "4 unacked")
        sub = _stats(http, path)["subscriptions"]["s"]
        assert sub["blockedSubscriptionOnUnackedMsgs"] is True and sub["msgBacklog"] == 10
        assert sub["consumers"][0]["blockedConsumerOnUnackedMsgs"] is False  # 4 < 50,000 per consumer
        m = _metrics(http)
        assert (
            _metric(m, "pulsar_subscription_blocked_on_unacked_messages", namespace=ns, topic=topic, subscription="s")
            == 1
        )
        assert _metric(m, "pulsar_subscription_unacked_messages", namespace=ns, topic=topic, subscription="s") == 4
        consumer.close()
        producer.close()


# ------------------------------------------------------------------ backlog, acks, expiry, chunks


def test_backlog_ranges_age_quota_and_earliest_publish_time(broker: AdminBroker, http: httpx.Client) -> None:
    ns, topic, path = _topic(http)
    # one quota per type, as in Pulsar: a size and an age
    quota = {"limitSize": 1_000_000, "limitTime": -1, "policy": "producer_request_hold"}
    assert http.post(f"{V2}/namespaces/{ns}/backlogQuota", json=quota).status_code == 204
    quota = {"limitSize": -1, "limitTime": 3600, "policy": "producer_request_hold"}
    assert (
        http.post(
            f"{V2}/namespaces/{ns}/backlogQuota", json=quota, params={"backlogQuotaType": "message_age"}
        ).status_code
        == 204
    )
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        before_ms = int(time.time() * 1000)
        _send(producer, [b"m"] * 5)
        after_ms = int(time.time() * 1000)
        msgs = [consumer.receive(10_000) for _ in range(5)]
        for i in (1, 3):  # two acknowledged ranges, not next to the mark-delete position
            consumer.acknowledge(msgs[i])
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["msgBacklog"] == 3, "two acks")
        stats = _stats(http, path, getEarliestTimeInBacklog="true")
        sub = stats["subscriptions"]["s"]
        internal = http.get(f"{path}/internalStats").json()["cursors"]["s"]
        assert sub["nonContiguousDeletedMessagesRanges"] == internal["totalNonContiguousDeletedMessagesRange"] == 2
        assert internal["individuallyDeletedMessages"].count("..") == 2
        # each range is two (ledger, entry) positions: 4 varint ids in 2 nested messages per range
        assert 2 * 14 <= sub["nonContiguousDeletedMessagesRangesSerializedSize"] <= 2 * 50
        assert stats["nonContiguousDeletedMessagesRanges"] == 2
        assert sub["unackedMessages"] == 3 and sub["backlogSize"] > 0
        assert before_ms <= sub["earliestMsgPublishTimeInBacklog"] <= after_ms
        assert sub["earliestMsgPublishTimeInBacklog"] == stats["earliestMsgPublishTimeInBacklogs"]
        assert (stats["backlogQuotaLimitSize"], stats["backlogQuotaLimitTime"]) == (1_000_000, 3600)
        assert 0 <= stats["oldestBacklogMessageAgeSeconds"] <= (int(time.time() * 1000) - before_ms) // 1000 + 1
        assert stats["oldestBacklogMessageSubscriptionName"] == "s"
        assert _stats(http, path, subscriptionBacklogSize="false")["subscriptions"]["s"]["backlogSize"] == -1
        assert _stats(http, path)["subscriptions"]["s"]["earliestMsgPublishTimeInBacklog"] == 0  # not asked for
        m = _metrics(http)
        assert _metric(m, "pulsar_storage_backlog_age_seconds", namespace=ns, topic=topic) >= 0
        for i in (0, 2, 4):
            consumer.acknowledge(msgs[i])
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["msgBacklog"] == 0, "every ack")
        broker.call(_refresh_age, broker, topic)
        stats = _stats(http, path)
        assert stats["oldestBacklogMessageAgeSeconds"] == -1 and "oldestBacklogMessageSubscriptionName" not in stats
        assert stats["subscriptions"]["s"]["nonContiguousDeletedMessagesRanges"] == 0
        consumer.close()
        producer.close()


async def _refresh_age(broker: AdminBroker, topic: str) -> None:
    from broker.topics._stats import refresh_backlog_age

    assert broker.service is not None
    await refresh_backlog_age(broker.service.topics[topic], int(time.time() * 1000))


def test_expired_messages_are_counted_and_rated(broker: AdminBroker, http: httpx.Client) -> None:
    ns, topic, path = _topic(http)
    clock = Clock(broker)
    with pulsar_client(broker.url) as client:
        client.subscribe(topic, "s").close()
        producer = client.create_producer(topic, batching_enabled=False)
        _send(producer, [b"old"] * 5)
        clock.tick()
        before_ms = int(time.time() * 1000)
        assert http.post(f"{path}/subscription/s/expireMessages/0").status_code == 204
        clock.tick()
        sub = _stats(http, path)["subscriptions"]["s"]
        assert (sub["totalMsgExpired"], sub["msgRateExpired"], sub["msgBacklog"]) == (5, 0.5, 0)
        assert before_ms <= sub["lastExpireTimestamp"] <= int(time.time() * 1000)
        m = _metrics(http)
        assert _metric(m, "pulsar_subscription_total_msg_expired", namespace=ns, topic=topic, subscription="s") == 5
        assert _metric(m, "pulsar_subscription_msg_rate_expired", namespace=ns, topic=topic, subscription="s") == 0.5
        producer.close()


def test_chunked_messages_set_msg_chunk_published_and_chunk_rates(broker: AdminBroker, http: httpx.Client) -> None:
    _, topic, path = _topic(http)
    clock = Clock(broker)
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
        clock.tick()
        payload = bytes(range(256)) * 800  # 200 KiB: four chunks of at most 64 KiB
        producer.send(payload)
        msg = consumer.receive(10_000)
        assert msg.data() == payload
        consumer.acknowledge(msg)
        assert _stats(http, path)["msgChunkPublished"] is False  # set by the next stats update, as in Pulsar
        clock.tick()
        stats = _stats(http, path)
        assert stats["msgChunkPublished"] is True
        assert stats["msgInCounter"] == 4  # each chunk is a message on the wire
        assert stats["publishers"][0]["chunkedMessageRate"] == 0.4
        assert stats["subscriptions"]["s"]["consumers"][0]["chunkedMessageRate"] == 0.4
        assert stats["subscriptions"]["s"]["chunkedMessageRate"] == 0.4
        producer.close()
        consumer.close()


# ------------------------------------------------------------------ partitioned, internal, broker-wide


def test_partitioned_stats_add_up_the_partitions(broker: AdminBroker, http: httpx.Client) -> None:
    ns = new_tenant_ns(http, f"fig{next(_names)}")
    path = f"{V2}/persistent/{ns}/p"
    assert http.put(f"{path}/partitions", json=2).status_code == 204
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(f"persistent://{ns}/p", "s")
        producer = client.create_producer(
            f"persistent://{ns}/p",
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        _send(producer, [b"p"] * 10)
        assert len(drain(consumer)) == 10
        stats = http.get(f"{path}/partitioned-stats").json()
        parts = stats["partitions"]
        assert set(parts) == {f"persistent://{ns}/p-partition-0", f"persistent://{ns}/p-partition-1"}
        assert stats["msgInCounter"] == 10 == sum(p["msgInCounter"] for p in parts.values())
        assert stats["msgOutCounter"] == 10 and stats["subscriptions"]["s"]["msgOutCounter"] == 10
        assert stats["bytesInCounter"] == sum(p["bytesInCounter"] for p in parts.values())
        assert stats["storageSize"] == sum(p["storageSize"] for p in parts.values())
        assert stats["subscriptions"]["s"]["type"] == "Exclusive"
        producer.close()
        consumer.close()


def test_internal_stats_figures(broker: AdminBroker, http: httpx.Client) -> None:
    _, topic, path = _topic(http)
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        before = time.time()
        ids = [producer.send(b"i" * 10) for _ in range(3)]
        consumer.acknowledge(consumer.receive(10_000))
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["msgBacklog"] == 2, "an ack")
        internal = http.get(f"{path}/internalStats").json()
        last = ids[-1]
        assert (internal["entriesAddedCounter"], internal["numberOfEntries"]) == (3, 3)
        assert internal["totalSize"] == _stats(http, path)["storageSize"] == internal["currentLedgerSize"]
        assert internal["lastConfirmedEntry"] == f"{last.ledger_id()}:{last.entry_id()}"
        assert internal["state"] == "LedgerOpened"
        created = datetime.datetime.fromisoformat(internal["lastLedgerCreatedTimestamp"]).timestamp()
        assert created <= time.time() and created >= before - 60
        cursor = internal["cursors"]["s"]
        first = ids[0]
        assert cursor["markDeletePosition"] == f"{first.ledger_id()}:{first.entry_id()}"
        assert cursor["state"] == "Open" and cursor["active"] is True
        assert internal["compactedLedger"]["ledgerId"] == -1
        producer.close()
        consumer.close()


def test_broker_stats_and_load_report_put_each_topic_under_its_bundle(broker: AdminBroker, http: httpx.Client) -> None:
    ns = new_tenant_ns(http, f"fig{next(_names)}")
    boundaries = default_boundaries(4)  # a new namespace's bundles
    names: dict[str, str] = {}
    for i in itertools.count():
        name = f"persistent://{ns}/b{i}"
        names.setdefault(bundle_for(boundaries, name).name, name)
        if len(names) == 2:
            break
    with pulsar_client(broker.url) as client:
        producers = [client.create_producer(t) for t in names.values()]
        tree = http.get(f"{V2}/broker-stats/topics").json()[ns]
        assert {bundle: set(kinds["persistent"]) for bundle, kinds in tree.items()} == {
            bundle: {name} for bundle, name in names.items()
        }
        report = http.get(f"{V2}/broker-stats/load-report").json()
        expected = {f"{ns}/{bundle}" for bundle in names}
        assert expected <= set(report["bundles"]) and expected <= set(report["lastStats"])
        for bundle in names:
            assert report["lastStats"][f"{ns}/{bundle}"]["producerCount"] == 1
        for p in producers:
            p.close()


def test_non_persistent_counters_and_drop_rate(broker: AdminBroker, http: httpx.Client) -> None:
    ns = new_tenant_ns(http, f"fig{next(_names)}")
    topic, path = f"non-persistent://{ns}/t", f"{V2}/non-persistent/{ns}/t"
    clock = Clock(broker)
    with pulsar_client(broker.url) as client:
        fast = client.subscribe(topic, "fast")
        slow = client.subscribe(topic, "slow", receiver_queue_size=1)  # takes one, then drops
        producer = client.create_producer(topic, batching_enabled=False)
        clock.tick()
        _send(producer, [b"n"] * 20)
        assert len(drain(fast)) == 20
        clock.tick()
        stats = _stats(http, path)
        dropped = stats["subscriptions"]["slow"]["msgDropCounter"]
        assert dropped > 0
        assert stats["subscriptions"]["slow"]["msgDropRate"] == dropped / PERIOD
        assert stats["msgDropRate"] == 0.0  # Pulsar's topic-level drops are the publishers': none here
        assert stats["msgRateIn"] == 2.0 and stats["subscriptions"]["fast"]["msgRateOut"] == 2.0
        fast.close()
        wait_until(lambda: "fast" not in _stats(http, path)["subscriptions"], "the subscription to go")
        assert _stats(http, path)["msgOutCounter"] == 20 + (20 - dropped)  # kept from the removed subscription
        slow.close()
        producer.close()


def test_delayed_messages_are_counted_apart_from_the_backlog(broker: AdminBroker, http: httpx.Client) -> None:
    ns, topic, path = _topic(http)
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"later", deliver_after=datetime.timedelta(hours=1))
        producer.send(b"now")
        consumer.acknowledge(consumer.receive(10_000))
        wait_until(lambda: _stats(http, path)["subscriptions"]["s"]["msgBacklog"] == 1, "the ack")
        stats = _stats(http, path)
        sub = stats["subscriptions"]["s"]
        assert (sub["msgDelayed"], sub["msgBacklogNoDelayed"]) == (1, 0)
        assert sub["delayedMessageIndexSizeInBytes"] == stats["delayedMessageIndexSizeInBytes"] > 0
        m = _metrics(http)
        labels = {"namespace": ns, "topic": topic, "subscription": "s"}
        assert _metric(m, "pulsar_subscription_delayed", **labels) == 1
        assert _metric(m, "pulsar_subscription_back_log_no_delayed", **labels) == 0
        assert (
            _metric(m, "pulsar_delayed_message_index_size_bytes", namespace=ns, topic=topic)
            == stats["delayedMessageIndexSizeInBytes"]
        )
        producer.close()
        consumer.close()


def test_message_ttl_expiry_is_counted_on_the_subscription(broker: AdminBroker, http: httpx.Client) -> None:
    _, topic, path = _topic(http)
    with pulsar_client(broker.url) as client:
        client.subscribe(topic, "s").close()
        producer = client.create_producer(topic, batching_enabled=False)
        _send(producer, [b"old"] * 4)
        assert http.post(f"{path}/messageTTL", params={"messageTTL": 1}).status_code == 204
        time.sleep(1.1)  # the messages must be older than the TTL

        async def ttl_pass() -> None:
            assert broker.service is not None
            await broker.service.retention.check_topic(topic, quota=False, trim=False)

        broker.call(ttl_pass)
        sub = _stats(http, path)["subscriptions"]["s"]
        assert (sub["msgBacklog"], sub["totalMsgExpired"]) == (0, 4) and sub["lastExpireTimestamp"] > 0
        producer.close()
