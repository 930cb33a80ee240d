"""Per-topic, per-producer and per-connection state of the broker is bounded: what concerns a loaded
topic lives with it and goes when it unloads; what is kept across topics has a bound.

* backlog-quota decisions: on the loaded topic, never evicted by the explain reports' bound, and
  the time of the last check for a producer likewise (no service-wide map of every topic seen);
* the topics retention opened itself (the service's retention view);
* a reader whose consumer is refused leaves no subscription on the topic;
* the load manager's assignment counts keep the current load report of each broker only.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest

from broker import BrokerService
from broker._errors import BrokerServiceError
from broker.cluster._ownership import Ownership
from broker.resources._bundles import BundleRange
from broker.topics._topic import Topic
from managed_ledger import InitialPosition
from protocols.pulsar import NamespaceName, TopicName
from retention import QuotaAction
from tests.broker.inproc_service import inproc_config, running_service

NS = NamespaceName.parse("public/default")
QUOTA = {"destination_storage": {"limitSize": 200, "limitTime": -1, "policy": "producer_exception"}}


def name(i: int | str) -> TopicName:
    return TopicName.parse(f"persistent://public/default/state-{i}")


def mentions(root: Any, names: Iterable[str], *, skip: Iterable[str] = ()) -> list[str]:
    """Where a name of ``names`` is a key or member of a dict, set or list reachable from ``root``
    through the attributes of broker objects (two levels deep), skipping the attributes ``skip``."""
    wanted, skipped, found = set(names), set(skip), []

    def walk(obj: Any, path: str, depth: int) -> None:
        if isinstance(obj, dict):
            found.extend(f"{path}[{k!r}]" for k in obj if k in wanted)
            return
        if isinstance(obj, (set, frozenset, list, tuple)):
            found.extend(f"{path} has {k!r}" for k in obj if isinstance(k, str) and k in wanted)
            return
        if depth == 0 or not type(obj).__module__.startswith("broker"):
            return
        for attr, value in vars(obj).items():
            if attr not in skipped:
                walk(value, f"{path}.{attr}", depth - 1)

    walk(root, "service", 2)
    return found


async def over_quota(service: BrokerService, i: int) -> Topic:
    topic = await service.get_topic(name(i))
    await topic.subscribe("slow", durable=True, initial_position=InitialPosition.EARLIEST, start=None)
    for _ in range(5):
        add = await topic.ml.append(b"q" * 100)  # 500 bytes of backlog, over the 200-byte quota
    await add.result()  # stored, so that a quota check counts it
    return topic


async def test_quota_enforcement_outlives_the_explain_reports_and_goes_with_the_topic() -> None:
    async with running_service(inproc_config()) as (service, _):
        await service.namespaces.update_policies(NS, {"backlog_quota_map": QUOTA})
        service.retention._max_reports = 3  # the explain reports' bound (10,000 in production)
        topics = [await over_quota(service, i) for i in range(8)]
        for t in topics:
            await service.recheck_quota(t.name)  # what a PRODUCER does
        assert len(service.retention.reports()) == 3
        for t in topics:  # every loaded topic still refuses producers
            decision = service.quota_rejects(t.name)
            assert decision is not None and decision.action is QuotaAction.REJECT_PRODUCERS, t.name

        await service.unload(topics[0])
        assert service.quota_rejects(name(0)) is None  # gone with the topic
        again = await service.get_topic(name(0))
        assert again is not topics[0] and not again.quota_decisions
        await service.recheck_quota(name(0))  # a producer attaching evaluates it again
        assert service.quota_rejects(name(0)) is not None


async def test_asked_by_the_loaded_topic_a_quota_answers_as_asked_by_name() -> None:
    hold = {"destination_storage": {"limitSize": 200, "limitTime": -1, "policy": "producer_request_hold"}}
    async with running_service(inproc_config()) as (service, _):
        await service.namespaces.update_policies(NS, {"backlog_quota_map": QUOTA})
        topic = await over_quota(service, "by-object")
        assert service.quota_rejects(topic) is None is service.quota_rejects(topic.name)  # not checked yet
        await service.recheck_quota(topic.name)
        decision = service.quota_rejects(topic)
        assert decision is not None and decision is service.quota_rejects(topic.name)
        assert not service.quota_holds(topic) and not service.quota_holds(topic.name)

        held = await over_quota(service, "held")
        await service.namespaces.update_policies(NS, {"backlog_quota_map": hold})
        await service.recheck_quota(held.name)
        assert service.quota_holds(held) and service.quota_holds(held.name)

        await service.unload(topic)  # the closed object still holds its decisions: asked, it answers by name
        assert topic.quota_decisions
        again = await service.get_topic(topic.name)
        assert service.quota_rejects(topic) is None is service.quota_rejects(again)
        await service.recheck_quota(again.name)  # held now: the namespace's quota is the hold one
        topic.quota_decisions = ()  # nor does a closed object without decisions speak for the name
        assert service.quota_holds(topic) and service.quota_holds(again)


async def test_unloaded_topics_leave_nothing_in_the_service() -> None:
    async with running_service(inproc_config()) as (service, _):
        await service.namespaces.update_policies(NS, {"backlog_quota_map": QUOTA})
        churned = [name(f"churn-{i}") for i in range(30)]
        for n in churned:
            topic = await service.get_topic(n)
            await topic.ml.append(b"x")
            await service.recheck_quota(n)
            await service.unload(topic)
        # retention opens each stored topic that is not loaded, checks it and closes it again
        await service.retention.run_once(force=True)
        keys = [str(n) for n in churned] + [n.managed_ledger_name for n in churned]
        # what the retention view has open at most: the last topic it checked (forgotten at its next open)
        found = mentions(service, keys, skip={"retention"})
        assert len(found) <= 1, found
        assert all(not service.retention.quota_states.get(str(n)) for n in churned)


async def test_a_refused_reader_leaves_no_subscription() -> None:
    async with running_service(inproc_config(max_consumers_per_topic=1)) as (service, _):
        topic = await service.get_topic(name("readers"))
        conn = SimpleNamespace(remote="test", client_version="test", writable=True)
        first = await topic.subscribe("keep", durable=True, initial_position=InitialPosition.EARLIEST, start=None)
        await first.add_consumer(
            consumer_id=1, name="c1", connection=conn, sub_type=0, priority=0, hash_ranges=None, metadata={}
        )
        for i in range(5):
            reader = await topic.subscribe(
                f"reader-{i}", durable=False, initial_position=InitialPosition.LATEST, start=None
            )
            with pytest.raises(BrokerServiceError):
                await reader.add_consumer(
                    consumer_id=10 + i,
                    name=f"r{i}",
                    connection=conn,
                    sub_type=0,
                    priority=0,
                    hash_ranges=None,
                    metadata={},
                )
            assert reader.closed
        assert set(topic.subscriptions) == {"keep"}


async def test_assignment_counts_keep_the_current_report_of_each_broker() -> None:
    ownership = Ownership(SimpleNamespace(), None)  # type: ignore[arg-type]  # pick_broker reads neither
    reports = itertools.count()

    async def brokers() -> dict[str, dict[str, Any]]:
        t = next(reports) // 3  # a new load report every third lookup
        return {
            "a:8080": {"timestamp": t, "numTopics": 0, "numBundles": 0},
            "b:8080": {"timestamp": t, "numTopics": 1, "numBundles": 1},
        }

    ownership.membership.brokers = brokers  # type: ignore[method-assign]
    picked = [(await ownership.pick_broker(NS, BundleRange(i, i + 1)))[0] for i in range(300)]
    assert len(ownership.lookups.assigned_since_report) <= 2
    # the counts still do their work within a report: the emptier broker first, then both
    assert picked[0] == "a:8080" and set(picked) == {"a:8080", "b:8080"}
