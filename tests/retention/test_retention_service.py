"""The retention service over the real managed ledger (MockBookKeeper + memory:// metadata)."""

from __future__ import annotations

import trio

from managed_ledger import InitialPosition, ManagedLedgerFactory
from protocols.managed_ledger import ManagedLedgerInfo
from retention import (
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    PolicyOverrides,
    QuotaAction,
    RetentionConfig,
    RetentionPolicies,
    RetentionService,
    StaticPoliciesProvider,
    TopicPolicies,
)
from tests.support.managed_ledger import config

from .retention_helpers import NAME, TOPIC, fill, provider, publish_time_of


async def stored_ids(store) -> list[int]:
    value, _ = await store.get(f"/managed-ledgers/{NAME}")
    return [i.ledger_id for i in ManagedLedgerInfo.decode(value).ledgers]


async def test_trims_consumed_ledgers_metadata_then_bookkeeper(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 12)  # ledgers of 5, 5 and the open one with 2
        first_ids = [i.ledger_id for i in ml.ledgers]
        assert len(first_ids) == 3
        await sub.mark_delete(pos[-1])
        svc = RetentionService(f, provider(), clock, interval_s=1)
        report = await svc.check_topic(NAME)
        assert report is not None and report.errors == {}
        assert report.trimmed == first_ids[:2]
        assert report.trimmed_bytes == 10 * 100
        assert await stored_ids(store) == first_ids[2:]
        assert not set(first_ids[:2]) & set(bk.ledger_ids())
        assert svc.metrics.ledgers_trimmed._value.get() == 2
        explained = svc.explain(TOPIC)
        assert explained["trimmed"] == first_ids[:2]
        assert [lg["decision"] for lg in explained["retention"]["ledgers"]] == ["delete", "delete", "keep"]
        assert explained["policies"]["sources"]["retention"] == "namespace"


async def test_unacked_subscription_keeps_backlog(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        fast = await ml.open_cursor("fast", InitialPosition.EARLIEST)
        await ml.open_cursor("slow", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 11)
        await fast.mark_delete(pos[-1])
        clock.advance(10 * 86400)
        svc = RetentionService(f, provider(RetentionPolicies(1, -1)), clock)
        report = await svc.check_topic(TOPIC)
        assert report.trimmed == []
        ledgers = svc.explain(TOPIC)["retention"]["ledgers"]
        assert ledgers[0]["reason"] == "needed_by_cursor" and ledgers[0]["cursor"] == "slow"


async def test_retention_time_waits_for_the_clock(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 6)
        await sub.mark_delete(pos[-1])
        svc = RetentionService(f, provider(RetentionPolicies(10, -1)), clock)
        assert (await svc.check_topic(NAME)).trimmed == []
        assert svc.explain(TOPIC)["retention"]["ledgers"][0]["reason"] == "within_retention_time"
        clock.advance(10 * 60 + 1)
        assert (await svc.check_topic(NAME)).trimmed == [pos[0].ledger_id]


async def test_idle_open_ledger_is_rolled_then_trimmed(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 3)
        await sub.mark_delete(pos[-1])
        svc = RetentionService(f, provider(), clock, interval_s=30)
        first = await svc.check_topic(NAME)
        assert not first.rolled and first.trimmed == []
        clock.advance(31)
        second = await svc.check_topic(NAME)
        assert second.rolled
        assert second.trimmed == [pos[0].ledger_id]
        assert ml.number_of_entries == 0
        assert svc.metrics.idle_rollovers._value.get() == 1


async def test_ttl_acks_old_messages_for_every_subscription(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=4), clock) as f:
        ml = await f.open(NAME)
        a = await ml.open_cursor("a", InitialPosition.EARLIEST)
        b = await ml.open_cursor("b", InitialPosition.EARLIEST)
        old = await fill(ml, clock, 6)
        clock.advance(120)
        new = await fill(ml, clock, 3)
        svc = RetentionService(f, provider(RetentionPolicies(-1, -1), ttl=60), clock, publish_time_of=publish_time_of)
        report = await svc.check_topic(NAME)
        assert a.mark_delete_position == old[-1] and b.mark_delete_position == old[-1]
        assert set(report.ttl_moves) == {"a", "b"}
        assert a.backlog == len(new)
        assert report.trimmed == []  # infinite retention keeps the expired data


async def test_ttl_without_publish_times_uses_ledger_close_times(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=4), clock) as f:
        ml = await f.open(NAME)
        a = await ml.open_cursor("a", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 6)  # ledger of 4 closed now, 2 in the open one
        clock.advance(120)
        svc = RetentionService(f, provider(ttl=60), clock)
        report = await svc.check_topic(NAME)
        assert report.ttl_moves["a"][1] == str(pos[3])
        assert report.trimmed == [pos[0].ledger_id]  # (the trim then moves mark-delete past it)
        assert a.backlog == 2  # 0/0 retention: the expired ledger goes


async def test_backlog_quota_hold_and_evict(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        slow = await ml.open_cursor("slow", InitialPosition.EARLIEST)
        await fill(ml, clock, 20)  # 2000 bytes of backlog
        hold = {BacklogQuotaType.DESTINATION_STORAGE: BacklogQuota(1000, -1)}
        svc = RetentionService(f, provider(quotas=hold), clock)
        await svc.check_topic(NAME)
        action = svc.producer_quota_action(TOPIC)
        assert action is not None and action.action is QuotaAction.HOLD_PRODUCERS
        assert slow.backlog == 20

        evict = {
            BacklogQuotaType.DESTINATION_STORAGE: BacklogQuota(1000, -1, BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION)
        }
        svc2 = RetentionService(f, provider(quotas=evict), clock)
        report = await svc2.check_topic(NAME)
        assert "slow" in report.evicted
        assert slow.backlog_size <= 900
        assert svc2.producer_quota_action(TOPIC) is None
        assert report.trimmed  # evicted ledgers are now consumed and 0/0 retention drops them


async def test_age_quota_eviction(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        slow = await ml.open_cursor("slow", InitialPosition.EARLIEST)
        old = await fill(ml, clock, 3)
        clock.advance(600)
        await fill(ml, clock, 3)
        quotas = {BacklogQuotaType.MESSAGE_AGE: BacklogQuota(-1, 300, BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION)}
        svc = RetentionService(
            f, provider(RetentionPolicies(-1, -1), quotas=quotas), clock, publish_time_of=publish_time_of
        )
        report = await svc.check_topic(NAME)
        assert report.quota and report.quota[0].quota_type is BacklogQuotaType.MESSAGE_AGE
        assert slow.mark_delete_position == old[-1]


async def test_unloaded_topics_are_opened_trimmed_and_closed(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 7)
        await sub.mark_delete(pos[-1])
        await ml.close()
        assert f.get(NAME) is None
        svc = RetentionService(f, provider(), clock)
        [report] = await svc.run_once()
        assert not report.loaded and report.errors == {}
        # Both data ledgers go: reopening made the last one a closed, non-current ledger.
        assert report.trimmed == [pos[0].ledger_id, pos[-1].ledger_id]
        assert f.get(NAME) is None
        value, _ = await store.get(f"/managed-ledgers/{NAME}")
        assert [i.entries for i in ManagedLedgerInfo.decode(value).ledgers] == [0]  # only an empty one

        skipping = RetentionService(f, provider(), clock, owns=lambda name: False)
        assert await skipping.run_once() == []


class _Flaky(StaticPoliciesProvider):
    async def topic_policies(self, topic: str) -> TopicPolicies:
        if topic.endswith("/bad"):
            raise RuntimeError("policy store unavailable")
        return await super().topic_policies(topic)


async def test_an_error_on_one_topic_does_not_stop_the_pass(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=2), clock) as f:
        bad = await f.open("public/default/persistent/bad")
        good = await f.open(NAME)
        for ml in (bad, good):
            await fill(ml, clock, 5)
        prov = _Flaky(RetentionConfig(), namespaces={"public/default": PolicyOverrides(RetentionPolicies(0, 0))})
        svc = RetentionService(f, prov, clock)
        reports = {r.topic: r for r in await svc.run_once()}
        assert "policies" in reports["persistent://public/default/bad"].errors
        assert reports[TOPIC].trimmed  # no cursors: everything is consumed
        assert svc.metrics.errors.labels(stage="policies")._value.get() == 1
        assert "policy store unavailable" in svc.explain("persistent://public/default/bad")["errors"]["policies"]


async def test_trim_errors_are_recorded(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=2), clock) as f:
        ml = await f.open(NAME)
        await fill(ml, clock, 5)
        await store.set(f"/managed-ledgers/{NAME}", b"", version=-1)  # another writer: CAS fails
        svc = RetentionService(f, provider(), clock)
        report = await svc.check_topic(NAME)
        assert "trim" in report.errors and report.trimmed == []


async def test_run_loop_in_a_nursery(store, bk, clock, autojump_clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=2), clock) as f:
        ml = await f.open(NAME)
        await fill(ml, clock, 5)
        svc = RetentionService(f, provider(), clock, interval_s=5)
        async with trio.open_nursery() as n:
            await n.start(svc.run)
            while svc.metrics.runs._value.get() < 2:
                await trio.sleep(1)
            n.cancel_scope.cancel()
        assert svc.metrics.ledgers_trimmed._value.get() == 2
        assert svc.metrics.last_run._value.get() > 0


async def test_unloaded_topic_retention_time_counts_from_the_real_close(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 3)
        await sub.mark_delete(pos[-1])
        await ml.close()
        clock.advance(11 * 60)
        svc = RetentionService(f, provider(RetentionPolicies(10, -1)), clock)
        [report] = await svc.run_once()
        assert report.trimmed == [pos[0].ledger_id]
