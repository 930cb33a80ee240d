"""Pure retention, TTL and backlog-quota decisions over a managed ledger's ledger list.

Retention (Pulsar's ``ManagedLedgerImpl.internalTrimLedgers`` semantics):

* Rule 1: retention only ever applies to data every durable cursor has acknowledged: a ledger is a
  candidate only when its last entry is at or before every cursor's mark-delete position. With no
  durable cursor every ledger is consumed (a topic without subscriptions retains only what
  retention keeps).
* Rule 2: the last ledger of the list (the current, open one) is never deleted.
* Rule 3: candidates are walked oldest first; a ledger goes when its retention time has passed
  (``now - closed_at > time``) OR deleting it, together with the ones before it, still leaves at
  least the retention size (``total - deleted_so_far >= size``, total over every ledger, the current
  one included). -1 on an axis disables it; -1/-1 keeps everything; 0/0 deletes on consumption.
* Rule 4: the walk stops at the first ledger kept; every later ledger is kept too, so trimming never
  leaves a hole in the log.
* Rule 5: *system cursors* (the broker's ``pulsar.dedup``, which holds the deduplication snapshot
  at its mark-delete position) pin ledgers like any cursor -- only up to their mark-delete, i.e.
  the last snapshot -- but are never the "slowest subscription": they are not subscriptions, so
  TTL and backlog quotas leave them alone (the service skips them).

TTL: an entry is expired when ``now > publish_time + ttl``. Expiry acknowledges it for every
subscription (it moves mark-delete); the whole of a closed ledger closed before the cut-off is
expired without reading it, and the rest is found by a bounded binary search over publish times that
the caller supplies (`expired_ttl_position`).

Backlog quota: ``destination_storage`` is exceeded when the slowest subscription's backlog reaches
``limitSize`` bytes, ``message_age`` when its oldest unacknowledged entry is older than ``limitTime``
seconds. The action is the quota's policy; eviction names the slowest subscription and how far to
move it (size: skip entries down to 90% of the limit, as Pulsar does; age: acknowledge everything
published before the age cut-off).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from protocols.managed_ledger import LedgerInfo, Position

from ._policies import BacklogQuota, BacklogQuotaPolicy, BacklogQuotaType, RetentionPolicies

__all__ = [
    "CursorBacklog",
    "LedgerDecision",
    "QuotaAction",
    "QuotaDecision",
    "Reason",
    "RetentionDecision",
    "Verdict",
    "decide_retention",
    "evaluate_backlog_quota",
    "expired_ttl_position",
    "ttl_cutoff_ms",
    "ttl_floor_position",
]

EVICTION_TARGET = 0.9
"""Size eviction brings the slowest backlog down to this fraction of the limit (Pulsar's factor)."""


class Verdict(enum.Enum):
    """What retention does with a ledger."""

    KEEP = "keep"
    DELETE = "delete"


class Reason(enum.Enum):
    """Why a ledger is kept (every value but the last) or may be deleted."""

    OPEN_LEDGER = "open_ledger"
    NEEDED_BY_CURSOR = "needed_by_cursor"
    WITHIN_RETENTION_TIME = "within_retention_time"
    WITHIN_RETENTION_SIZE = "within_retention_size"
    INFINITE_RETENTION = "infinite_retention"
    CONSUMED_AND_OUTSIDE_RETENTION = "consumed_and_outside_retention"


class _LedgerFields(NamedTuple):
    """The first four fields of a `LedgerDecision`: the ledger as listed."""

    ledger_id: int
    entries: int
    size: int
    timestamp_ms: int


@dataclass(frozen=True)
class LedgerDecision:
    """One ledger's verdict and why. ``cursor`` names the pinning cursor for NEEDED_BY_CURSOR;
    ``expires_at_ms`` is when retention time lets it go (None when time does not limit it)."""

    ledger_id: int
    entries: int
    size: int
    timestamp_ms: int
    verdict: Verdict
    reason: Reason
    explanation: str
    cursor: str | None = None
    expires_at_ms: int | None = None
    blocked_by: int | None = None

    def to_json(self, now_ms: int) -> dict[str, Any]:
        """JSON for explain (ages in seconds; no age for the open ledger, which has no close time)."""
        out: dict[str, Any] = {
            "ledgerId": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "closedAtMs": self.timestamp_ms or None,
            "ageSeconds": (now_ms - self.timestamp_ms) / 1000 if self.timestamp_ms else None,
            "decision": self.verdict.value,
            "reason": self.reason.value,
            "explanation": self.explanation,
        }
        if self.cursor is not None:
            out["cursor"] = self.cursor
        if self.expires_at_ms is not None:
            out["expiresAtMs"] = self.expires_at_ms
        if self.blocked_by is not None:
            out["blockedByLedger"] = self.blocked_by
        return out


@dataclass(frozen=True)
class RetentionDecision:
    """The verdict for every ledger of one managed ledger at ``now_ms``, oldest first."""

    ledgers: tuple[LedgerDecision, ...]
    now_ms: int
    retention: RetentionPolicies
    total_size: int
    slowest_cursor: str | None

    @property
    def deletable(self) -> list[int]:
        """Ids retention allows to delete: always a prefix of the list."""
        return [d.ledger_id for d in self.ledgers if d.verdict is Verdict.DELETE]

    @property
    def deletable_bytes(self) -> int:
        """Bytes of the deletable ledgers."""
        return sum(d.size for d in self.ledgers if d.verdict is Verdict.DELETE)

    def to_json(self) -> dict[str, Any]:
        """JSON for explain."""
        return {
            "nowMs": self.now_ms,
            "retention": self.retention.to_json(),
            "totalSize": self.total_size,
            "slowestCursor": self.slowest_cursor,
            "deletable": self.deletable,
            "ledgers": [d.to_json(self.now_ms) for d in self.ledgers],
        }


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _fmt_s(ms: int) -> str:
    return f"{ms / 1000:g}s"


def _pinned_by_cursor(
    base: _LedgerFields, end: Position, cursors: Mapping[str, Position], system_cursors: Collection[str]
) -> LedgerDecision | None:
    """The KEEP decision for a ledger whose last entry ``end`` some cursor has not passed, naming
    the furthest-behind one; None when every cursor is past it."""
    pinning = sorted((pos, name) for name, pos in cursors.items() if pos < end)
    if not pinning:
        return None
    pos, name = pinning[0]
    others = f" (and {len(pinning) - 1} more cursor(s))" if len(pinning) > 1 else ""
    if name in system_cursors:
        text = (
            f"system cursor {name!r}{others} still needs it: its last snapshot, at {pos}, is "
            f"before its last entry {end}"
        )
    else:
        text = f"cursor {name!r}{others} has not acknowledged it: mark-delete {pos} is before its last entry {end}"
    return LedgerDecision(*base, verdict=Verdict.KEEP, reason=Reason.NEEDED_BY_CURSOR, cursor=name, explanation=text)


def _kept_within_retention(
    base: _LedgerFields, info: LedgerInfo, remaining: int, total: int, retention: RetentionPolicies, now_ms: int
) -> LedgerDecision:
    """The KEEP decision for a consumed ledger that retention's time or size still holds;
    ``remaining`` is the topic's size before this ledger would be deleted."""
    time_ms, size_bytes = retention.time_ms, retention.size_bytes
    size_note = (
        ""
        if size_bytes is None
        else (
            f"deleting it would leave {_fmt_bytes(remaining - info.size)} of "
            f"{_fmt_bytes(total)}, under the retention size of {_fmt_bytes(size_bytes)}"
        )
    )
    if time_ms is None:
        return LedgerDecision(
            *base, verdict=Verdict.KEEP, reason=Reason.WITHIN_RETENTION_SIZE, explanation="consumed; " + size_note
        )
    text = (
        f"consumed; within the retention time of {_fmt_s(time_ms)} for another "
        f"{_fmt_s(info.timestamp_ms + time_ms - now_ms)} (closed {_fmt_s(now_ms - info.timestamp_ms)} ago)"
    )
    if size_note:
        text += "; and " + size_note
    return LedgerDecision(
        *base,
        verdict=Verdict.KEEP,
        reason=Reason.WITHIN_RETENTION_TIME,
        expires_at_ms=info.timestamp_ms + time_ms,
        explanation=text,
    )


def decide_retention(
    ledgers: Sequence[LedgerInfo],
    cursors: Mapping[str, Position],
    retention: RetentionPolicies,
    now_ms: int,
    *,
    system_cursors: Collection[str] = (),
) -> RetentionDecision:
    """Decide, for each ledger (oldest first, the last one being the current ledger), whether
    retention may delete it, following the module rules. ``cursors`` maps every durable cursor to
    its mark-delete position (empty: no cursors); those named in ``system_cursors`` pin ledgers but
    are never the slowest subscription (Rule 5). Pure; never raises for well-formed input."""
    total = sum(i.size for i in ledgers)
    slowest_name: str | None = None
    subscriptions = [n for n in cursors if n not in system_cursors]
    if subscriptions:
        slowest_name = min(subscriptions, key=lambda n: (cursors[n], n))
    time_ms, size_bytes = retention.time_ms, retention.size_bytes
    out: list[LedgerDecision] = []
    deleted_bytes = 0
    blocker: LedgerDecision | None = None
    last = len(ledgers) - 1
    for k, info in enumerate(ledgers):
        base = _LedgerFields(info.ledger_id, info.entries, info.size, info.timestamp_ms)
        if k == last:
            out.append(
                LedgerDecision(
                    *base,
                    verdict=Verdict.KEEP,
                    reason=Reason.OPEN_LEDGER,
                    explanation="the current ledger (last of the list) is never trimmed",
                )
            )
            continue
        end = Position(info.ledger_id, info.entries - 1)
        pinned = _pinned_by_cursor(base, end, cursors, system_cursors)
        if pinned is not None:
            out.append(pinned)
            continue
        expires_at = None if time_ms is None else info.timestamp_ms + time_ms
        if blocker is not None:
            out.append(
                LedgerDecision(
                    *base,
                    verdict=Verdict.KEEP,
                    reason=blocker.reason,
                    expires_at_ms=expires_at,
                    blocked_by=blocker.ledger_id,
                    explanation=f"consumed, but ledger {blocker.ledger_id} before it is kept "
                    f"({blocker.reason.value}) and trimming goes oldest first",
                )
            )
            continue
        if retention.infinite:
            blocker = LedgerDecision(
                *base,
                verdict=Verdict.KEEP,
                reason=Reason.INFINITE_RETENTION,
                explanation="consumed; retention is infinite (-1/-1)",
            )
            out.append(blocker)
            continue
        expired = time_ms is not None and now_ms - info.timestamp_ms > time_ms
        over_size = size_bytes is not None and total - (deleted_bytes + info.size) >= size_bytes
        if expired or over_size:
            deleted_bytes += info.size
            why = []
            if expired:
                why.append(
                    f"closed {_fmt_s(now_ms - info.timestamp_ms)} ago, past the retention time "
                    f"of {_fmt_s(time_ms or 0)}"
                )
            if over_size:
                why.append(
                    f"deleting it leaves {_fmt_bytes(total - deleted_bytes)}, at least the "
                    f"retention size of {_fmt_bytes(size_bytes or 0)}"
                )
            out.append(
                LedgerDecision(
                    *base,
                    verdict=Verdict.DELETE,
                    reason=Reason.CONSUMED_AND_OUTSIDE_RETENTION,
                    expires_at_ms=expires_at,
                    explanation="consumed by every cursor; " + " and ".join(why),
                )
            )
            continue
        blocker = _kept_within_retention(base, info, total - deleted_bytes, total, retention, now_ms)
        out.append(blocker)
    return RetentionDecision(tuple(out), now_ms, retention, total, slowest_name)


# --- TTL ---------------------------------------------------------------------------------------


def ttl_cutoff_ms(ttl_s: int | None, now_ms: int) -> int | None:
    """Entries published strictly before this time are expired; None when TTL is off (0/None)."""
    if not ttl_s or ttl_s <= 0:
        return None
    return now_ms - ttl_s * 1000


def ttl_floor_position(
    ledgers: Sequence[LedgerInfo], mark_delete: Position, ttl_s: int | None, now_ms: int
) -> Position | None:
    """The last entry of the newest closed ledger (never the last of the list) that was closed
    before the TTL cut-off: all its entries are expired without reading them. None when no such
    ledger lies after ``mark_delete`` or TTL is off."""
    cutoff = ttl_cutoff_ms(ttl_s, now_ms)
    if cutoff is None:
        return None
    found = None
    for info in ledgers[:-1]:
        if info.timestamp_ms >= cutoff:
            break
        if info.entries > 0:
            found = Position(info.ledger_id, info.entries - 1)
    return found if found is not None and found > mark_delete else None


async def expired_ttl_position(
    ledgers: Sequence[LedgerInfo],
    mark_delete: Position,
    ttl_s: int | None,
    now_ms: int,
    find_newest_published_before: Callable[[int], Awaitable[Position | None]] | None = None,
) -> Position | None:
    """Where a subscription's mark-delete should move for TTL: the newest expired entry after
    ``mark_delete``, or None when nothing new is expired (or TTL is off).

    Whole closed ledgers closed before the cut-off count as expired (no reads). When
    ``find_newest_published_before(cutoff_ms)`` is given (the broker builds it from
    ``cursor.find_newest_matching`` and the entry's publish time) it finds expired entries in the
    remaining ledgers too; its answer is trusted only if it is after the ledger floor.
    """
    cutoff = ttl_cutoff_ms(ttl_s, now_ms)
    if cutoff is None:
        return None
    best = ttl_floor_position(ledgers, mark_delete, ttl_s, now_ms)
    if find_newest_published_before is not None:
        found = await find_newest_published_before(cutoff)
        if found is not None and found > mark_delete and (best is None or found > best):
            best = found
    return best


# --- backlog quota -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CursorBacklog:
    """One durable subscription's backlog: entries and bytes not acknowledged, and the publish
    (or, lacking it, ledger) time of its oldest unacknowledged entry (None: no backlog)."""

    name: str
    mark_delete: Position
    backlog_entries: int
    backlog_size: int
    oldest_unacked_ms: int | None = None


class QuotaAction(enum.Enum):
    """What the broker does about an exceeded quota."""

    HOLD_PRODUCERS = "hold_producers"
    REJECT_PRODUCERS = "reject_producers"
    EVICT = "evict"


_ACTIONS = {
    BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD: QuotaAction.HOLD_PRODUCERS,
    BacklogQuotaPolicy.PRODUCER_EXCEPTION: QuotaAction.REJECT_PRODUCERS,
    BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION: QuotaAction.EVICT,
}


@dataclass(frozen=True)
class QuotaDecision:
    """An exceeded quota and its action. For EVICT, ``cursor`` is advanced: by ``skip_entries``
    (destination_storage) or up to the newest entry published before ``evict_before_ms``
    (message_age)."""

    quota_type: BacklogQuotaType
    quota: BacklogQuota
    action: QuotaAction
    cursor: str
    explanation: str
    skip_entries: int = 0
    evict_before_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON for explain and the broker's error messages."""
        out: dict[str, Any] = {
            "type": self.quota_type.value,
            "quota": self.quota.to_json(),
            "action": self.action.value,
            "cursor": self.cursor,
            "explanation": self.explanation,
        }
        if self.action is QuotaAction.EVICT:
            out["skipEntries"] = self.skip_entries
            out["evictBeforeMs"] = self.evict_before_ms
        return out


def evaluate_backlog_quota(
    cursors: Sequence[CursorBacklog], quotas: Mapping[BacklogQuotaType, BacklogQuota], now_ms: int
) -> list[QuotaDecision]:
    """The quotas exceeded now (destination_storage first), each with its action; empty when the
    topic is within every quota or has no subscription. Pure."""
    out: list[QuotaDecision] = []
    size_q = quotas.get(BacklogQuotaType.DESTINATION_STORAGE)
    if size_q is not None and size_q.limit_size >= 0 and cursors:
        worst = max(cursors, key=lambda c: (c.backlog_size, c.name))
        if worst.backlog_size > 0 and worst.backlog_size >= size_q.limit_size:
            target = EVICTION_TARGET * size_q.limit_size
            skip = 0
            if worst.backlog_entries > 0:
                skip = min(
                    worst.backlog_entries,
                    math.ceil(worst.backlog_entries * (worst.backlog_size - target) / worst.backlog_size),
                )
            out.append(
                QuotaDecision(
                    BacklogQuotaType.DESTINATION_STORAGE,
                    size_q,
                    _ACTIONS[size_q.policy],
                    worst.name,
                    f"subscription {worst.name!r} has a backlog of {_fmt_bytes(worst.backlog_size)}, at or "
                    f"over the limit of {_fmt_bytes(size_q.limit_size)} ({size_q.policy.value})",
                    skip_entries=skip,
                )
            )
    age_q = quotas.get(BacklogQuotaType.MESSAGE_AGE)
    if age_q is not None and age_q.limit_time > 0:
        aged = [c for c in cursors if c.oldest_unacked_ms is not None and c.backlog_entries > 0]
        if aged:
            worst = min(aged, key=lambda c: (c.oldest_unacked_ms, c.name))
            assert worst.oldest_unacked_ms is not None
            age_ms = now_ms - worst.oldest_unacked_ms
            if age_ms > age_q.limit_time * 1000:
                out.append(
                    QuotaDecision(
                        BacklogQuotaType.MESSAGE_AGE,
                        age_q,
                        _ACTIONS[age_q.policy],
                        worst.name,
                        f"subscription {worst.name!r} has an unacknowledged entry {_fmt_s(age_ms)} old, over "
                        f"the limit of {age_q.limit_time}s ({age_q.policy.value})",
                        evict_before_ms=now_ms - age_q.limit_time * 1000,
                    )
                )
    return out
