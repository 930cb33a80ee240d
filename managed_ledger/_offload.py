"""Offloading one managed ledger's closed ledgers to tiered storage, and deleting their bookie copies.

A ledger's copy in the tier goes through these states, each recorded in its `LedgerInfo`'s
``offload`` (`OffloadContext`) with a compare-and-set of the ledger list before the next step:

    NONE --(prepare: new uid, complete=false)--> STARTED --(written + verified)--> COMPLETE
    COMPLETE --(deletion lag passed, bookie copy deleted)--> BOOKIE_DELETED

Rules:

* Rule O1: only closed ledgers before the current one are offloaded, each whole; one offload run
  at a time per managed ledger (`OffloadInProgress` otherwise).
* Rule O2: the uid is recorded (STARTED) before anything is written, so whatever a failed or
  interrupted attempt wrote can be found; the next attempt records a new uid and then deletes the
  objects of the old one.
* Rule O3: a ledger becomes COMPLETE only after the offloader verified its copy (index read back
  and equal, every block read back and its CRC32C checked); only then may reads go to the tier.
* Rule O4: the bookie copy is deleted only from a COMPLETE ledger still in the list, once
  ``now - completed_at >= deletion lag``; BookKeeper's delete comes first (a ledger already gone
  counts as deleted), then BOOKIE_DELETED is recorded. A crash in between deletes again, harmlessly.
* Rule O5: a failed ledger leaves the list as it was (STARTED with its uid, or as before); the run
  stops at the first ledger that failed ``retries`` times, status ERROR with the reason and the
  first position not offloaded. Automatic offload tries again on the next check, after a back-off.
* Rule O6: when a ledger leaves the list (retention, deletion of the topic) its tier objects are
  deleted by the managed ledger after the list no longer names them (``ManagedLedger.trim``).

Reads (``_reader``) go to the tier for COMPLETE ledgers when the read priority is
tiered-storage-first or the bookie copy is gone, and fall back to the tier when the bookies no
longer have a ledger that is COMPLETE.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from magnetar.common.backoff import Backoff
from managed_ledger._errors import ManagedLedgerError
from protocols.managed_ledger import LedgerInfo, OffloadContext, Position
from tiered_storage import LedgerOffloader, OffloadPolicies, ReadPriority, TieredStorage, TierError

__all__ = [
    "BookieSource",
    "OffloadHost",
    "OffloadInProgress",
    "OffloadPoliciesResolver",
    "OffloadStatus",
    "OffloadRunStatus",
    "Offloads",
    "select_for_threshold",
]

log = logging.getLogger("managed_ledger.offload")

OffloadPoliciesResolver = Callable[[str], Awaitable[OffloadPolicies]]
"""``resolver(managed_ledger_name)`` -> the offload policies in force for it (topic > namespace >
broker); the broker installs one, the default is the broker level alone."""

_RETRY_BACKOFF_S = (1.0, 4.0)  # between attempts at one ledger within a run: initial, cap
_AUTO_BACKOFF_S = (2.0, 300.0)  # between failed automatic runs of one managed ledger: initial, cap


class OffloadInProgress(ManagedLedgerError):
    """An offload of this managed ledger is already running (Rule O1)."""


class OffloadStatus(enum.Enum):
    """Pulsar's ``LongRunningProcessStatus.Status`` of the last offload run."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@dataclass(frozen=True)
class OffloadRunStatus:
    """The last offload run: its status, error and the first position it left on bookies."""

    status: OffloadStatus = OffloadStatus.NOT_RUN
    error: str = ""
    first_unoffloaded: Position | None = None
    started_at_ms: int = 0
    finished_at_ms: int = 0
    trigger: str = ""


class OffloadHost(Protocol):
    """What an offload run uses of its managed ledger (`ManagedLedger` gives it one)."""

    @property
    def name(self) -> str:
        """The managed ledger's name."""
        ...

    def ledger_infos(self) -> list[LedgerInfo]:
        """The ledger list now, oldest first."""
        ...

    @property
    def current_ledger(self) -> int | None:
        """The ledger being written (never offloaded), if any."""
        ...

    async def record_offload(self, ledger_id: int, expected: OffloadContext | None, new: OffloadContext) -> bool:
        """Compare-and-set the ledger's offload context in the list: False (nothing written) when
        the ledger left the list or its context is no longer ``expected``."""
        ...

    async def bookie_source(self, ledger_id: int) -> BookieSource:
        """The ledger's bookie copy as an `EntrySource` (the caller closes it)."""
        ...

    async def delete_bookie_copy(self, ledger_id: int) -> None:
        """Delete the ledger in BookKeeper (gone already counts as done)."""
        ...

    def now_ms(self) -> int:
        """Wall time in ms (the factory's clock)."""
        ...


def select_for_threshold(
    ledgers: Sequence[LedgerInfo], current: int | None, policies: OffloadPolicies, now_ms: int
) -> list[LedgerInfo]:
    """The ledgers automatic offload takes now, oldest first (pure; Pulsar's ``maybeOffload``).

    Walking from the newest ledger back, a ledger not yet offloaded is taken once the bytes of
    the ledgers from it to the newest exceed ``threshold_bytes``, or once it was closed more than
    ``threshold_seconds`` ago. The current ledger is never taken.
    """
    size_limit, age_limit = policies.threshold_bytes, policies.threshold_seconds
    if size_limit is None and age_limit is None:
        return []
    summed = 0
    out: list[LedgerInfo] = []
    for info in reversed(ledgers):
        summed += info.size
        if info.ledger_id == current or info.offloaded:
            continue
        by_size = size_limit is not None and summed > size_limit
        by_age = age_limit is not None and info.timestamp_ms > 0 and now_ms - info.timestamp_ms > age_limit * 1000
        if by_size or by_age:
            out.append(info)
    out.reverse()
    return out


class BookieSource:
    """A BookKeeper read handle as a `tiered_storage.EntrySource`."""

    def __init__(self, ledger_id: int, handle: Any) -> None:
        self.ledger_id = ledger_id
        self._handle = handle

    @property
    def last_entry_id(self) -> int:
        return int(self._handle.last_add_confirmed)

    async def read(self, first: int, last: int) -> Sequence[bytes]:
        return [e.data for e in await self._handle.read(first, last)]

    async def close(self) -> None:
        try:
            await self._handle.close()
        except Exception:
            pass  # a read handle holds nothing worth reporting


class Offloads:
    """The offload state machine of one managed ledger (see the module rules)."""

    def __init__(
        self,
        host: OffloadHost,
        tier: TieredStorage,
        resolver: OffloadPoliciesResolver,
        nursery: trio.Nursery,
        *,
        retries: int = 3,
    ) -> None:
        self._host = host
        self._tier = tier
        self._resolver = resolver
        self._nursery = nursery
        self._retries = retries
        self._running = False
        self._done = trio.Event()
        self._done.set()
        self.status = OffloadRunStatus()
        self.policies: OffloadPolicies | None = None  # the last resolved, for reads and explain
        self.last_success_ms = 0
        self.last_failure_ms = 0
        self.last_offloaded_ledger = 0
        self._auto_backoff = Backoff(*_AUTO_BACKOFF_S)
        self._auto_not_before = 0.0
        self._deletions_scheduled: set[int] = set()
        self.namespace = "/".join(host.name.split("/")[:2])

    # --- policies ----------------------------------------------------------------------------

    async def resolve_policies(self) -> OffloadPolicies:
        """The policies in force now (remembered for reads and explain)."""
        self.policies = await self._resolver(self._host.name)
        return self.policies

    @property
    def read_priority(self) -> ReadPriority:
        """Where ledgers on both tiers are read from (the last resolved policies')."""
        policies = self.policies or self._tier.broker_policies
        return policies.read_priority

    def offloader_for(self, ctx: OffloadContext) -> LedgerOffloader:
        """The offloader that reads or deletes a ledger offloaded with ``ctx``."""
        return self._tier.offloader_for_ledger(ctx.driver, ctx.driver_metadata, self.policies)

    # --- runs --------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether a run is in progress."""
        return self._running

    def start(self, up_to: Position, *, trigger: str = "manual") -> None:
        """Start offloading every closed ledger before ``up_to``'s ledger in the background;
        `OffloadInProgress` when a run is going on (Rule O1)."""
        if self._running:
            raise OffloadInProgress(f"{self._host.name}: an offload is already running")
        self._begin(trigger)
        self._nursery.start_soon(self._run_guarded, up_to)

    async def offload_prefix(self, up_to: Position, *, trigger: str = "manual") -> Position:
        """Offload every closed ledger before ``up_to``'s ledger now; the first position left on
        bookies. Raises `OffloadInProgress`, or `ManagedLedgerError` naming the failed ledger."""
        if self._running:
            raise OffloadInProgress(f"{self._host.name}: an offload is already running")
        self._begin(trigger)
        return await self._run(up_to)

    def _begin(self, trigger: str) -> None:
        self._running = True
        self._done = trio.Event()
        self.status = OffloadRunStatus(OffloadStatus.RUNNING, started_at_ms=self._host.now_ms(), trigger=trigger)

    async def wait(self) -> OffloadRunStatus:
        """Wait for the running offload (if any) and return the status."""
        await self._done.wait()
        return self.status

    async def _run_guarded(self, up_to: Position) -> None:
        try:
            await self._run(up_to)
        except ManagedLedgerError:
            pass  # recorded in the status

    def _first_unoffloaded(self) -> Position:
        for info in self._host.ledger_infos():
            if not info.offloaded and info.entries > 0:
                return Position(info.ledger_id, 0)
        infos = self._host.ledger_infos()
        return Position(infos[-1].ledger_id, 0) if infos else Position(-1, -1)

    async def _run(self, up_to: Position) -> Position:
        trigger = self.status.trigger
        started = self.status.started_at_ms
        try:
            policies = await self.resolve_policies()
            offloader = self._tier.offloader_for(policies)
            for info in self._candidates(up_to):
                await self._offload_one(info, offloader, policies)
        except BaseException as exc:
            error = str(exc) if isinstance(exc, (ManagedLedgerError, TierError)) else f"{type(exc).__name__}: {exc}"
            self.last_failure_ms = self._host.now_ms()
            self.status = OffloadRunStatus(
                OffloadStatus.ERROR, error, self._first_unoffloaded(), started, self.last_failure_ms, trigger
            )
            log.warning("%s: offload failed: %s", self._host.name, error)
            self._end()
            if isinstance(exc, Exception):
                raise ManagedLedgerError(f"{self._host.name}: {error}") from exc
            raise
        first = self._first_unoffloaded()
        self.status = OffloadRunStatus(OffloadStatus.SUCCESS, "", first, started, self._host.now_ms(), trigger)
        self._end()
        return first

    def _end(self) -> None:
        self._running = False
        self._done.set()

    def _candidates(self, up_to: Position) -> list[LedgerInfo]:
        current = self._host.current_ledger
        return [
            i
            for i in self._host.ledger_infos()
            if i.ledger_id < up_to.ledger_id and i.ledger_id != current and i.entries > 0 and not i.offloaded
        ]

    async def _offload_one(self, info: LedgerInfo, offloader: LedgerOffloader, policies: OffloadPolicies) -> None:
        lid = info.ledger_id
        attempt = 0
        backoff = Backoff(*_RETRY_BACKOFF_S)
        while True:
            attempt += 1
            try:
                await self._attempt(info, offloader)
                return
            except (TierError, ManagedLedgerError) as exc:
                still_listed = any(i.ledger_id == lid for i in self._host.ledger_infos())
                if isinstance(exc, _LedgerLeft) or not still_listed:
                    return  # trimmed meanwhile: nothing to offload (its copy was deleted)
                if attempt >= self._retries:
                    raise ManagedLedgerError(f"ledger {lid} not offloaded after {attempt} attempts: {exc}") from exc
                log.info(
                    "%s: offload of ledger %s failed (attempt %d): %s; retrying", self._host.name, lid, attempt, exc
                )
                await trio.sleep(backoff.next())
                fresh = {i.ledger_id: i for i in self._host.ledger_infos()}.get(lid)
                if fresh is None:
                    return
                info = fresh

    async def _attempt(self, info: LedgerInfo, offloader: LedgerOffloader) -> None:
        host, lid = self._host, info.ledger_id
        previous = info.offload
        ctx = OffloadContext(uuid.uuid4(), driver=offloader.driver_name, driver_metadata=offloader.driver_metadata)
        if not await host.record_offload(lid, previous, ctx):  # Rule O2
            raise _LedgerLeft(f"ledger {lid} left the list")
        if previous is not None:
            await self._delete_objects(lid, previous)
        source = await host.bookie_source(lid)
        try:
            result = await offloader.offload(
                source, ctx.uid, {"ManagedLedgerName": host.name, "LedgerId": str(lid)}, namespace=self.namespace
            )
        finally:
            with trio.CancelScope(shield=True):
                await source.close()
        if result.entries != info.entries:
            raise ManagedLedgerError(f"ledger {lid}: offloaded {result.entries} entries, the list says {info.entries}")
        done = ctx.completed(host.now_ms())
        if not await host.record_offload(lid, ctx, done):  # Rule O3: recorded only after verification
            await self._delete_objects(lid, ctx)
            raise _LedgerLeft(f"ledger {lid} left the list while offloading")
        self.last_success_ms = done.timestamp_ms
        self.last_offloaded_ledger = lid
        log.info(
            "%s: ledger %s offloaded to %s (%d entries, %d bytes, %.1f s)",
            host.name,
            lid,
            offloader.location,
            result.entries,
            result.ledger_bytes,
            result.seconds,
        )
        lag = (self.policies or self._tier.broker_policies).deletion_lag_ms
        self._schedule_deletion(lid, lag / 1000.0)

    async def _delete_objects(self, ledger_id: int, ctx: OffloadContext) -> None:
        try:
            await self.offloader_for(ctx).delete(ledger_id, ctx.uid, namespace=self.namespace)
        except TierError as exc:
            log.warning(
                "%s: could not delete the tier copy %s of ledger %s: %s", self._host.name, ctx.uid, ledger_id, exc
            )

    async def delete_tier_copy(self, info: LedgerInfo) -> None:
        """Delete a ledger's objects in the tier (Rule O6; failures are logged)."""
        if info.offload is not None:
            await self._delete_objects(info.ledger_id, info.offload)

    # --- automatic offload and bookie-copy deletion -----------------------------------------

    async def check(self, *, wait: bool = False) -> dict[str, Any]:
        """Apply the policies now: start an automatic offload of the ledgers over the thresholds
        (in the background unless ``wait``), and delete the bookie copies whose deletion lag passed
        (Rule O4). Returns what it did (for explain and tests)."""
        policies = await self.resolve_policies()
        report: dict[str, Any] = {"offloadStarted": [], "bookieCopiesDeleted": []}
        if policies.configured and not self._running and trio.current_time() >= self._auto_not_before:
            chosen = select_for_threshold(
                self._host.ledger_infos(), self._host.current_ledger, policies, self._host.now_ms()
            )
            if chosen:
                report["offloadStarted"] = [i.ledger_id for i in chosen]
                up_to = Position(chosen[-1].ledger_id + 1, 0)
                if wait:
                    self._begin("threshold")
                    try:
                        await self._run(up_to)
                        self._auto_backoff.reset()
                    except ManagedLedgerError:
                        self._auto_backed_off()
                else:
                    self._begin("threshold")
                    self._nursery.start_soon(self._auto_run, up_to)
        report["bookieCopiesDeleted"] = await self.delete_due_bookie_copies(policies)
        return report

    async def _auto_run(self, up_to: Position) -> None:
        try:
            await self._run(up_to)
            self._auto_backoff.reset()
        except ManagedLedgerError:
            self._auto_backed_off()

    def _auto_backed_off(self) -> None:
        self._auto_not_before = trio.current_time() + self._auto_backoff.next()

    def deletion_due_at_ms(self, info: LedgerInfo, policies: OffloadPolicies | None = None) -> int | None:
        """When the bookie copy of a COMPLETE ledger may go (None unless COMPLETE and on bookies)."""
        ctx = info.offload
        if ctx is None or not ctx.complete or ctx.bookkeeper_deleted:
            return None
        policies = policies or self.policies or self._tier.broker_policies
        return ctx.timestamp_ms + policies.deletion_lag_ms

    async def delete_due_bookie_copies(self, policies: OffloadPolicies | None = None) -> list[int]:
        """Delete every bookie copy whose deletion lag passed (Rule O4); the ids deleted."""
        host = self._host
        now = host.now_ms()
        deleted = []
        for info in host.ledger_infos():
            due = self.deletion_due_at_ms(info, policies)
            if due is None or now < due or info.ledger_id == host.current_ledger:
                continue
            assert info.offload is not None
            try:
                await host.delete_bookie_copy(info.ledger_id)
            except Exception as exc:
                log.warning(
                    "%s: could not delete the bookie copy of offloaded ledger %s: %s", host.name, info.ledger_id, exc
                )
                continue
            if await host.record_offload(info.ledger_id, info.offload, info.offload.bookie_copy_deleted()):
                deleted.append(info.ledger_id)
                self._tier.metrics.bookie_copies_deleted.labels(self.namespace).inc()
                log.info("%s: bookie copy of offloaded ledger %s deleted", host.name, info.ledger_id)
        return deleted

    def _schedule_deletion(self, ledger_id: int, after_s: float) -> None:
        if ledger_id in self._deletions_scheduled:
            return
        self._deletions_scheduled.add(ledger_id)

        async def later() -> None:
            try:
                await trio.sleep(max(0.0, after_s))
                await self.delete_due_bookie_copies()
            except ManagedLedgerError as exc:
                log.info("%s: deferred deletion of bookie copies: %s", self._host.name, exc)
            finally:
                self._deletions_scheduled.discard(ledger_id)

        self._nursery.start_soon(later)

    # --- explain -----------------------------------------------------------------------------

    def explain(self, info: LedgerInfo, now_ms: int) -> dict[str, Any]:
        """Where ``info``'s data lives and why its bookie copy is (not yet) deleted."""
        ctx = info.offload
        policies = self.policies or self._tier.broker_policies
        if ctx is None:
            state = "NONE"
        elif not ctx.complete:
            state = "STARTED"
        elif not ctx.bookkeeper_deleted:
            state = "COMPLETE"
        else:
            state = "BOOKIE_DELETED"
        out: dict[str, Any] = {
            "state": state,
            "location": "tier" if state == "BOOKIE_DELETED" else ("both" if state == "COMPLETE" else "bookies"),
        }
        if ctx is not None:
            out.update(
                {
                    "uid": str(ctx.uid),
                    "driver": ctx.driver,
                    "driverMetadata": dict(ctx.driver_metadata),
                    "offloadedAtMs": ctx.timestamp_ms or None,
                }
            )
        if info.ledger_id == self._host.current_ledger:
            why = "the ledger is being written: only closed ledgers are offloaded"
        elif state == "NONE":
            why = (
                "not offloaded: no offload driver is configured for this topic"
                if not policies.configured
                else "not offloaded yet: under the offload thresholds, or waiting for a manual offload"
            )
        elif state == "STARTED":
            why = (
                "an offload is in progress"
                if self._running
                else "an offload started but did not complete (it is retried; its partial copy is deleted first)"
            )
        elif state == "COMPLETE":
            due = ctx.timestamp_ms + policies.deletion_lag_ms if ctx else 0
            why = (
                f"offloaded and verified; the bookie copy is kept until the deletion lag "
                f"({policies.deletion_lag_ms} ms) passes at {due}"
                if now_ms < due
                else "offloaded and verified; the deletion lag passed: the bookie copy goes at the next check"
            )
            out["bookieCopyDeletableAtMs"] = due
        else:
            why = "offloaded and verified; the deletion lag passed and the bookie copy was deleted"
        out["bookieCopy"] = why
        return out


class _LedgerLeft(ManagedLedgerError):
    """The ledger left the list during its offload (trimmed): nothing more to do for it."""
