"""System cursors (the broker's ``pulsar.dedup``): they pin ledgers up to their mark-delete (the
last dedup snapshot) but are not subscriptions for TTL, backlog quotas or "the slowest cursor"."""

from __future__ import annotations

from bk_client.testing import MockBookKeeper
from managed_ledger import InitialPosition, ManagedLedgerFactory
from protocols.managed_ledger import LedgerInfo, Position
from retention import (
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    RetentionPolicies,
    RetentionService,
    decide_retention,
)
from tests.retention.retention_helpers import NAME, TOPIC, fill, provider, publish_time_of
from tests.support.clocks import FakeClock
from tests.support.managed_ledger import config

DEDUP = "pulsar.dedup"
SYSTEM = frozenset({DEDUP})


def _ledgers() -> list[LedgerInfo]:
    return [LedgerInfo(1, 10, 1000, 1_000), LedgerInfo(2, 10, 1000, 2_000), LedgerInfo(3, 0, 0, 0)]


def test_system_cursor_pins_but_is_never_the_slowest() -> None:
    cursors = {DEDUP: Position(1, 4), "sub": Position(2, 9)}
    d = decide_retention(_ledgers(), cursors, RetentionPolicies(0, 0), 10_000, system_cursors=SYSTEM)
    assert d.slowest_cursor == "sub"
    assert d.deletable == []  # ledger 1 is after the dedup snapshot: kept, and ledger 2 behind it
    assert d.ledgers[0].cursor == DEDUP and "last snapshot" in d.ledgers[0].explanation


def test_system_cursor_alone_pins_only_up_to_its_snapshot() -> None:
    d = decide_retention(_ledgers(), {DEDUP: Position(1, 9)}, RetentionPolicies(0, 0), 10_000, system_cursors=SYSTEM)
    assert d.slowest_cursor is None
    assert d.deletable == [1]
    assert d.ledgers[1].cursor == DEDUP


async def test_ttl_and_quota_skip_the_dedup_cursor(store, bk: MockBookKeeper, clock: FakeClock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        dedup = await ml.open_cursor(DEDUP, InitialPosition.EARLIEST)
        sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 20)
        await dedup.mark_delete(pos[9])  # last snapshot after 10 entries
        clock.advance(600)
        quotas = {
            BacklogQuotaType.DESTINATION_STORAGE: BacklogQuota(500, -1, BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION)
        }
        svc = RetentionService(
            f,
            provider(RetentionPolicies(0, 0), ttl=60, quotas=quotas),
            clock,
            publish_time_of=publish_time_of,
            system_cursors=SYSTEM,
        )
        report = await svc.check_topic(NAME)
        assert DEDUP not in report.ttl_moves and "sub" in report.ttl_moves
        assert DEDUP not in report.evicted
        assert dedup.backlog == 10  # only the broker moves it (a trim may renumber it to (next, -1))
        assert sub.mark_delete_position == pos[-1]
        # the subscription consumed everything; the ledgers after the snapshot stay for dedup replay
        assert report.trimmed == [pos[0].ledger_id, pos[5].ledger_id]
        assert report.decision is not None and report.decision.slowest_cursor == "sub"


async def test_quota_ignores_a_lagging_dedup_cursor(store, bk: MockBookKeeper, clock: FakeClock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        await ml.open_cursor(DEDUP, InitialPosition.EARLIEST)  # never snapshotted: 2000 bytes behind
        sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        pos = await fill(ml, clock, 20)
        await sub.mark_delete(pos[-1])
        hold = {BacklogQuotaType.DESTINATION_STORAGE: BacklogQuota(1000, -1)}
        svc = RetentionService(f, provider(quotas=hold), clock, system_cursors=SYSTEM)
        await svc.check_topic(NAME)
        assert svc.producer_quota_action(TOPIC) is None
        # without the system-cursor rule the dedup cursor would hold the producers
        plain = RetentionService(f, provider(quotas=hold), clock)
        await plain.check_topic(NAME)
        assert plain.producer_quota_action(TOPIC) is not None
