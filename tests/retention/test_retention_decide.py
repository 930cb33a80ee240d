"""The pure decisions: retention over ledgers and cursors, TTL positions, backlog quotas."""

from __future__ import annotations

import pytest

from protocols.managed_ledger import LedgerInfo, Position
from retention import (
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    CursorBacklog,
    QuotaAction,
    Reason,
    RetentionPolicies,
    Verdict,
    decide_retention,
    evaluate_backlog_quota,
    expired_ttl_position,
    first_unacked_position,
    ttl_cutoff_ms,
    ttl_floor_position,
)

MB = 1024 * 1024
NOW = 10_000_000  # ms
MIN = 60_000


def chain(*closed: tuple[int, int], open_entries: int = 0, open_size: int = 0) -> list[LedgerInfo]:
    """Closed ledgers 1..n as (size, minutes ago closed), 10 entries each, then the open ledger."""
    out = [LedgerInfo(i + 1, 10, size, NOW - ago * MIN) for i, (size, ago) in enumerate(closed)]
    out.append(LedgerInfo(len(closed) + 1, open_entries, open_size, 0))
    return out


ALL_READ = {"sub": Position(99, 0)}  # past every ledger: everything consumed


def reasons(decision):
    return [(d.verdict, d.reason) for d in decision.ledgers]


def test_open_ledger_always_kept() -> None:
    d = decide_retention(chain(open_entries=5, open_size=MB), {}, RetentionPolicies(0, 0), NOW)
    assert reasons(d) == [(Verdict.KEEP, Reason.OPEN_LEDGER)]
    assert d.deletable == []


def test_none_deletes_as_soon_as_consumed() -> None:
    ledgers = chain((MB, 1), (MB, 1), (MB, 0))
    d = decide_retention(ledgers, ALL_READ, RetentionPolicies(0, 0), NOW)
    assert d.deletable == [1, 2, 3]
    assert d.ledgers[0].reason is Reason.CONSUMED_AND_OUTSIDE_RETENTION
    assert d.ledgers[-1].reason is Reason.OPEN_LEDGER
    assert d.deletable_bytes == 3 * MB


def test_no_cursors_means_everything_consumed() -> None:
    d = decide_retention(chain((MB, 5), (MB, 5)), {}, RetentionPolicies(0, 0), NOW)
    assert d.deletable == [1, 2]
    assert d.slowest_cursor is None


def test_time_only() -> None:
    ledgers = chain((MB, 30), (MB, 20), (MB, 5), (MB, 1))
    d = decide_retention(ledgers, ALL_READ, RetentionPolicies(10, -1), NOW)
    assert d.deletable == [1, 2]
    kept = d.ledgers[2]
    assert kept.reason is Reason.WITHIN_RETENTION_TIME
    assert kept.expires_at_ms == NOW - 5 * MIN + 10 * MIN
    assert "retention time" in kept.explanation
    assert d.ledgers[3].reason is Reason.WITHIN_RETENTION_TIME


def test_time_boundary_is_strict() -> None:
    ledgers = chain((MB, 10))
    assert decide_retention(ledgers, ALL_READ, RetentionPolicies(10, -1), NOW).deletable == []
    assert decide_retention(ledgers, ALL_READ, RetentionPolicies(10, -1), NOW + 1).deletable == [1]


def test_size_only_keeps_at_least_the_size() -> None:
    # 4 closed ledgers of 1 MB + 1 MB open = 5 MB total; keep 2 MB.
    ledgers = chain((MB, 50), (MB, 40), (MB, 30), (MB, 20), open_entries=3, open_size=MB)
    d = decide_retention(ledgers, ALL_READ, RetentionPolicies(-1, 2), NOW)
    assert d.deletable == [1, 2, 3]  # leaves 2 MB (ledger 4 + open), exactly the size
    kept = d.ledgers[3]
    assert kept.reason is Reason.WITHIN_RETENTION_SIZE
    assert "under the retention size" in kept.explanation
    assert kept.expires_at_ms is None


def test_size_counts_unconsumed_data_too() -> None:
    # Pulsar's rule uses the whole managed ledger's size, backlog included.
    ledgers = chain((MB, 50), (MB, 40), (MB, 30))
    cursors = {"slow": Position(2, 9)}  # ledgers 1 and 2 consumed, 3 not
    d = decide_retention(ledgers, cursors, RetentionPolicies(-1, 1), NOW)
    assert d.deletable == [1, 2]
    assert d.ledgers[2].reason is Reason.NEEDED_BY_CURSOR and d.ledgers[2].cursor == "slow"


def test_both_either_limit_deletes() -> None:
    ledgers = chain((MB, 50), (MB, 40), (MB, 1), (MB, 1))
    # Time says 1 and 2 go; size (keep 3 MB of 4) says only 1 goes: either is enough.
    d = decide_retention(ledgers, ALL_READ, RetentionPolicies(30, 3), NOW)
    assert d.deletable == [1, 2]
    kept = d.ledgers[2]
    assert kept.reason is Reason.WITHIN_RETENTION_TIME and "retention size" in kept.explanation
    # Size alone forces deletion of young ledgers when over size.
    d = decide_retention(ledgers, ALL_READ, RetentionPolicies(600, 1), NOW)
    assert d.deletable == [1, 2, 3]


def test_infinite_keeps_everything() -> None:
    d = decide_retention(chain((MB, 10_000), (MB, 10_000)), ALL_READ, RetentionPolicies(-1, -1), NOW)
    assert d.deletable == []
    assert [r for _, r in reasons(d)] == [Reason.INFINITE_RETENTION, Reason.INFINITE_RETENTION, Reason.OPEN_LEDGER]
    assert d.ledgers[1].blocked_by == 1


def test_cursor_pins_even_expired_ledgers() -> None:
    ledgers = chain((MB, 100), (MB, 100), (MB, 100))
    cursors = {"fast": Position(3, 9), "slow": Position(1, 4)}
    d = decide_retention(ledgers, cursors, RetentionPolicies(0, 0), NOW)
    assert d.deletable == []
    assert d.slowest_cursor == "slow"
    first = d.ledgers[0]
    assert first.reason is Reason.NEEDED_BY_CURSOR and first.cursor == "slow"
    assert "1:4" in first.explanation


def test_cursor_at_last_entry_consumes_ledger() -> None:
    ledgers = chain((MB, 100), (MB, 100))
    d = decide_retention(ledgers, {"s": Position(1, 9)}, RetentionPolicies(0, 0), NOW)
    assert d.deletable == [1]
    assert d.ledgers[1].reason is Reason.NEEDED_BY_CURSOR


def test_never_a_hole_after_a_kept_ledger() -> None:
    # Ledger 2 has an older close time than ledger 1 (clock step): it must not go before 1.
    ledgers = [LedgerInfo(1, 10, MB, NOW - 5 * MIN), LedgerInfo(2, 10, MB, NOW - 60 * MIN), LedgerInfo(3, 0, 0, 0)]
    d = decide_retention(ledgers, ALL_READ, RetentionPolicies(10, -1), NOW)
    assert d.deletable == []
    assert d.ledgers[1].blocked_by == 1 and d.ledgers[1].verdict is Verdict.KEEP


def test_decision_json() -> None:
    d = decide_retention(chain((MB, 30), (MB, 1)), ALL_READ, RetentionPolicies(10, -1), NOW)
    j = d.to_json()
    assert j["deletable"] == [1]
    assert j["ledgers"][0]["decision"] == "delete" and j["ledgers"][0]["ageSeconds"] == 1800
    assert j["ledgers"][1]["reason"] == "within_retention_time"
    assert j["ledgers"][2]["ageSeconds"] is None


# --- TTL ---------------------------------------------------------------------------------------


def test_ttl_cutoff() -> None:
    assert ttl_cutoff_ms(0, NOW) is None and ttl_cutoff_ms(None, NOW) is None
    assert ttl_cutoff_ms(60, NOW) == NOW - 60_000


def test_ttl_floor_uses_closed_ledgers_only() -> None:
    ledgers = chain((MB, 30), (MB, 20), (MB, 1))
    assert ttl_floor_position(ledgers, Position(-1, -1), 600, NOW) == Position(2, 9)
    assert ttl_floor_position(ledgers, Position(2, 9), 600, NOW) is None  # nothing new
    assert ttl_floor_position(ledgers, Position(-1, -1), 0, NOW) is None
    # the open ledger is never taken whole
    assert ttl_floor_position(chain(open_entries=4), Position(-1, -1), 1, NOW) is None


async def test_expired_ttl_position_with_and_without_lookup() -> None:
    ledgers = chain((MB, 30), (MB, 1), open_entries=5, open_size=10)
    md = Position(1, 3)
    assert await expired_ttl_position(ledgers, md, 600, NOW) == Position(1, 9)
    asked = []

    async def finder(cutoff: int) -> Position | None:
        asked.append(cutoff)
        return Position(3, 2)

    assert await expired_ttl_position(ledgers, md, 600, NOW, finder) == Position(3, 2)
    assert asked == [NOW - 600_000]

    async def finds_old(cutoff: int) -> Position | None:
        return Position(1, 5)  # behind the ledger floor: the floor wins

    assert await expired_ttl_position(ledgers, md, 600, NOW, finds_old) == Position(1, 9)
    assert await expired_ttl_position(ledgers, md, 0, NOW, finder) is None


async def test_ttl_with_retention_decision() -> None:
    # TTL acks the backlog; then retention decides over the acked data like any other.
    ledgers = chain((MB, 30), (MB, 20), (MB, 1))
    md = Position(-1, -1)
    moved = await expired_ttl_position(ledgers, md, 15 * 60, NOW)
    assert moved == Position(2, 9)
    without = decide_retention(ledgers, {"s": moved}, RetentionPolicies(0, 0), NOW)
    assert without.deletable == [1, 2]
    with_ret = decide_retention(ledgers, {"s": moved}, RetentionPolicies(25, -1), NOW)
    assert with_ret.deletable == [1]


def test_first_unacked_position() -> None:
    ledgers = [LedgerInfo(1, 2, 1, 1), LedgerInfo(2, 0, 0, 1), LedgerInfo(3, 1, 1, 0)]
    assert first_unacked_position(ledgers, Position(-1, -1)) == Position(1, 0)
    assert first_unacked_position(ledgers, Position(1, 1)) == Position(3, 0)
    assert first_unacked_position(ledgers, Position(3, 0)) is None


# --- backlog quota -----------------------------------------------------------------------------

SIZE = BacklogQuotaType.DESTINATION_STORAGE
AGE = BacklogQuotaType.MESSAGE_AGE


def backlogs() -> list[CursorBacklog]:
    return [
        CursorBacklog("fast", Position(5, 0), 10, 1_000, NOW - 10_000),
        CursorBacklog("slow", Position(1, 0), 100, 10_000, NOW - 600_000),
    ]


def test_quota_within_limits() -> None:
    assert evaluate_backlog_quota(backlogs(), {SIZE: BacklogQuota(20_000, -1)}, NOW) == []
    assert evaluate_backlog_quota(backlogs(), {AGE: BacklogQuota(-1, 3600)}, NOW) == []
    assert evaluate_backlog_quota([], {SIZE: BacklogQuota(0, -1)}, NOW) == []
    assert evaluate_backlog_quota(backlogs(), {}, NOW) == []


@pytest.mark.parametrize(
    "policy,action",
    [
        (BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD, QuotaAction.HOLD_PRODUCERS),
        (BacklogQuotaPolicy.PRODUCER_EXCEPTION, QuotaAction.REJECT_PRODUCERS),
        (BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION, QuotaAction.EVICT),
    ],
)
def test_quota_size_policies(policy: BacklogQuotaPolicy, action: QuotaAction) -> None:
    [d] = evaluate_backlog_quota(backlogs(), {SIZE: BacklogQuota(5_000, -1, policy)}, NOW)
    assert d.action is action and d.cursor == "slow" and d.quota_type is SIZE
    # eviction target: 90% of the limit -> skip (10000 - 4500) / 10000 of 100 entries
    assert d.skip_entries == 55
    assert "slow" in d.explanation and d.to_json()["action"] == action.value


@pytest.mark.parametrize(
    "policy,action",
    [
        (BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD, QuotaAction.HOLD_PRODUCERS),
        (BacklogQuotaPolicy.PRODUCER_EXCEPTION, QuotaAction.REJECT_PRODUCERS),
        (BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION, QuotaAction.EVICT),
    ],
)
def test_quota_age_policies(policy: BacklogQuotaPolicy, action: QuotaAction) -> None:
    [d] = evaluate_backlog_quota(backlogs(), {AGE: BacklogQuota(-1, 300, policy)}, NOW)
    assert d.action is action and d.cursor == "slow" and d.quota_type is AGE
    assert d.evict_before_ms == NOW - 300_000


def test_quota_both_exceeded_size_first() -> None:
    quotas = {AGE: BacklogQuota(-1, 60), SIZE: BacklogQuota(500, -1, BacklogQuotaPolicy.PRODUCER_EXCEPTION)}
    ds = evaluate_backlog_quota(backlogs(), quotas, NOW)
    assert [d.quota_type for d in ds] == [SIZE, AGE]
    assert [d.action for d in ds] == [QuotaAction.REJECT_PRODUCERS, QuotaAction.HOLD_PRODUCERS]


def test_quota_age_ignores_cursors_without_backlog() -> None:
    cs = [CursorBacklog("idle", Position(9, 9), 0, 0, None)]
    assert evaluate_backlog_quota(cs, {AGE: BacklogQuota(-1, 1)}, NOW) == []
