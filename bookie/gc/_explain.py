"""Explain, per entry log, why its space has not been given back yet (pure decisions + lookups).

Reasons (`Reason`), checked in this order for each log:

1. ROLLS_AT_NEXT_GC - a current log that a GC run will roll early (`roll_reason`): none of its
   data is live, or it is older than ``gc_roll_current_log_after_s`` (the next run rolls it), or
   its live share is under a compaction threshold (the next forced run, or the next compaction
   run of that kind, rolls and compacts it).
   STILL_BEING_WRITTEN - any other current log; GC leaves it alone until it rolls.
2. SKIPPED_AFTER_ERROR - an error on this log (or its ledgers map cannot be read now); GC leaves
   it alone until the time given.
3. DEAD - no stored ledger has data in it; the next GC run deletes the file.
4. WAITING_FOR_HEADROOM - the last compaction attempt found too little free space in the log's
   directory for its live bytes; it is retried at every compaction run.
5. USAGE_ABOVE_THRESHOLD - its live share is at or above every enabled compaction threshold
   (the major one, or the minor one when major compaction is off): no compaction will take it
   until more of its ledgers are deleted.
6. NEXT_COMPACTION_DUE - its usage is below a threshold; the earliest compaction whose threshold
   it is under is due at the time given (that is also the answer after a run stopped at its
   time bound).

A rolled log that GC rolled early carries why in ``rolled_for_gc`` (its reason is then one of
3-6 like any rolled log's).

The ledgers keeping a log alive are listed with their bytes in it, largest first, and, when the
metadata store is available, where their metadata says they belong: the managed ledger (topic)
named in the custom metadata (``pulsar/managed-ledger``), else ``application/component``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import trio

from metadata import MetadataStore, NoNodeError
from protocols.bookkeeper import LedgerLayout, LedgerMetadata, ledger_path

__all__ = [
    "Reason",
    "LedgerPin",
    "LogExplanation",
    "GcSchedule",
    "GcExplanation",
    "explain_log",
    "roll_reason",
    "ledger_owner",
    "lookup_ledgers",
]

log = logging.getLogger(__name__)


class Reason(enum.Enum):
    """Why a log's space is not reclaimed yet (module docstring, in precedence order)."""

    ROLLS_AT_NEXT_GC = "rolls_at_next_gc"
    STILL_BEING_WRITTEN = "still_being_written"
    DEAD = "dead"
    SKIPPED_AFTER_ERROR = "skipped_after_error"
    WAITING_FOR_HEADROOM = "waiting_for_disk_headroom"
    USAGE_ABOVE_THRESHOLD = "usage_above_threshold"
    NEXT_COMPACTION_DUE = "next_compaction_due"


@dataclass(frozen=True, slots=True)
class LedgerPin:
    """A ledger keeping a log alive: its bytes there and what its metadata says about it.

    ``metadata`` is ``"present"``, ``"absent"`` (deleted: GC removes the ledger at its next run),
    ``"unreadable"``, or ``"not_looked_up"`` (no store, or past the lookup limit).
    """

    ledger_id: int
    bytes: int
    metadata: str = "not_looked_up"
    belongs_to: str | None = None
    state: str | None = None


@dataclass(frozen=True, slots=True)
class LogExplanation:
    """One entry log: its sizes, usage, pinning ledgers and the reason it is still on disk."""

    log_id: int
    directory: str
    size_bytes: int
    total_bytes: int
    live_bytes: int
    usage: float
    reason: Reason
    detail: str
    next_attempt_ms: int | None
    ledgers: tuple[LedgerPin, ...]
    other_ledgers: int
    rolled_for_gc: str | None = None  # why GC rolled this log before logSizeLimit, if it did


@dataclass(frozen=True, slots=True)
class GcSchedule:
    """When the next compactions run and with which thresholds (wall-clock ms)."""

    now_ms: int
    minor_enabled: bool
    major_enabled: bool
    minor_threshold: float
    major_threshold: float
    next_minor_ms: int | None
    next_major_ms: int | None


@dataclass(frozen=True, slots=True)
class GcExplanation:
    """The answer of ``GET /api/v1/bookie/gc/explain``."""

    schedule: GcSchedule
    last_run_ms: int | None
    last_result: str | None
    logs: tuple[LogExplanation, ...]
    placement: str = "interleaved"  # or "per-ledger" (entryLogPerLedgerEnabled: a log per ledger)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as their values, log ids also in hex as on disk)."""
        logs = []
        for e in self.logs:
            d = asdict(e)
            d["reason"] = e.reason.value
            d["log_file"] = f"{e.log_id:x}.log"
            logs.append(d)
        return {
            "schedule": asdict(self.schedule),
            "last_run_ms": self.last_run_ms,
            "last_result": self.last_result,
            "placement": self.placement,
            "logs": logs,
        }


def _fmt_time(ms: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def roll_reason(
    *,
    total_bytes: int,
    live_bytes: int,
    age_s: float,
    kind: str | None,
    threshold: float | None,
    roll_dead: bool,
    max_age_s: int,
) -> tuple[str, str] | None:
    """Whether a GC run rolls a current log early, as ``(why, detail)`` (``why`` is ``"dead"`` or
    ``"age"``), else None. Pure.

    ``kind``/``threshold`` are the compaction the run does (None: none); ``roll_dead`` and
    ``max_age_s`` are ``gc_roll_dead_current_log`` and ``gc_roll_current_log_after_s``. A log
    with no live data is rolled whenever ``roll_dead`` (dead-log deletion takes it, nothing is
    copied); one whose live share is under the run's threshold only when the run compacts.
    """
    if roll_dead and total_bytes > 0:
        usage = live_bytes / total_bytes
        if live_bytes == 0:
            return "dead", "none of its data is live any more"
        if threshold is not None and usage < threshold:
            return "dead", f"usage {usage:.1%} is below the {kind} compaction threshold {threshold:.0%}"
    if max_age_s > 0 and age_s >= max_age_s:
        return "age", f"open for {age_s:.0f} s, at least gc_roll_current_log_after_s = {max_age_s}"
    return None


def explain_log(
    *,
    log_id: int,
    directory: str,
    size_bytes: int,
    total_bytes: int,
    live: Mapping[int, int],
    current: bool,
    schedule: GcSchedule,
    skipped: tuple[int, str] | None,
    headroom: tuple[int, int] | None,
    pins: tuple[LedgerPin, ...],
    other_ledgers: int,
    error: str | None = None,
    roll_due: tuple[str, int | None] | None = None,
    rolled_for_gc: str | None = None,
) -> LogExplanation:
    """Decide one log's reason (module docstring order). Pure.

    ``roll_due`` (current logs) is ``(detail, when_ms or None for the next run)`` when a GC run
    will roll the log early; ``rolled_for_gc`` (rolled logs) why GC rolled it early."""
    live_bytes = sum(live.values())
    usage = live_bytes / total_bytes if total_bytes else 0.0
    nxt: int | None = None
    if current and roll_due is not None:
        reason, (detail, nxt) = Reason.ROLLS_AT_NEXT_GC, roll_due
    elif current:
        reason, detail = Reason.STILL_BEING_WRITTEN, "the log is still being written; GC waits until it rolls"
    elif skipped is not None:
        nxt = skipped[0]
        reason = Reason.SKIPPED_AFTER_ERROR
        detail = f"skipped after an error until {_fmt_time(skipped[0])}: {skipped[1]}"
    elif error is not None:
        reason = Reason.SKIPPED_AFTER_ERROR
        detail = f"its ledgers map cannot be read ({error}); GC skips it after trying"
    elif not live:
        reason, detail = Reason.DEAD, "none of its ledgers is stored any more; the next GC run deletes it"
    elif headroom is not None:
        need, free = headroom
        reason = Reason.WAITING_FOR_HEADROOM
        detail = (
            f"compaction needs {need} free bytes in {directory} for its output but only {free} "
            f"were free; retried at every compaction run"
        )
    else:
        due: list[tuple[int, str, float]] = []
        if schedule.minor_enabled and usage < schedule.minor_threshold and schedule.next_minor_ms is not None:
            due.append((schedule.next_minor_ms, "minor", schedule.minor_threshold))
        if schedule.major_enabled and usage < schedule.major_threshold and schedule.next_major_ms is not None:
            due.append((schedule.next_major_ms, "major", schedule.major_threshold))
        if not due:
            top = (
                schedule.major_threshold
                if schedule.major_enabled
                else (schedule.minor_threshold if schedule.minor_enabled else 0.0)
            )
            reason = Reason.USAGE_ABOVE_THRESHOLD
            if not (schedule.major_enabled or schedule.minor_enabled):
                detail = "compaction is disabled (both thresholds or intervals are 0)"
            else:
                detail = (
                    f"usage {usage:.1%} is at or above the {'major' if schedule.major_enabled else 'minor'} "
                    f"compaction threshold {top:.0%}; it stays until more of its ledgers are deleted"
                )
        else:
            when, kind, threshold = min(due)
            nxt = when
            reason = Reason.NEXT_COMPACTION_DUE
            detail = (
                f"usage {usage:.1%} is below the {kind} threshold {threshold:.0%}; the next {kind} "
                f"compaction is due at {_fmt_time(when)}"
            )
    if rolled_for_gc is not None and not current:
        detail = f"rolled early for GC ({rolled_for_gc}); {detail}"
    return LogExplanation(
        log_id,
        directory,
        size_bytes,
        total_bytes,
        live_bytes,
        round(usage, 6),
        reason,
        detail,
        nxt,
        pins,
        other_ledgers,
        rolled_for_gc if not current else None,
    )


def ledger_owner(metadata: LedgerMetadata) -> str | None:
    """Where a ledger belongs according to its custom metadata, or None when it does not say."""
    custom = metadata.custom_metadata
    ml = custom.get("pulsar/managed-ledger")
    if ml:
        return "managed-ledger " + ml.decode("utf-8", "replace")
    parts = [custom[k].decode("utf-8", "replace") for k in ("application", "component") if custom.get(k)]
    return "/".join(parts) if parts else None


async def lookup_ledgers(
    store: MetadataStore,
    root: str,
    ledger_ids: list[int],
    *,
    concurrency: int = 16,
    layout: LedgerLayout = LedgerLayout.HIERARCHICAL,
) -> dict[int, tuple[str, str | None, str | None]]:
    """Read the metadata of ``ledger_ids``: id -> (metadata status, belongs_to, state name).

    Never raises for a single ledger: a missing node is ``"absent"``, a failed read or an
    undecodable record ``"unreadable"``.
    """
    out: dict[int, tuple[str, str | None, str | None]] = {}
    limit = trio.CapacityLimiter(concurrency)

    async def one(lid: int) -> None:
        async with limit:
            try:
                data, _stat = await store.get(ledger_path(root, lid, layout))
                md = LedgerMetadata.decode(data)
            except NoNodeError:
                out[lid] = ("absent", None, None)
                return
            except Exception as exc:
                log.debug("explain: metadata of ledger %d unreadable: %s", lid, exc)
                out[lid] = ("unreadable", None, None)
                return
            out[lid] = ("present", ledger_owner(md), md.state.name)

    async with trio.open_nursery() as nursery:
        for lid in ledger_ids:
            nursery.start_soon(one, lid)
    return out
