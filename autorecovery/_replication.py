"""Replication workers: repair under-replicated ledgers (BookKeeper's ``ReplicationWorker``).

A worker loops: take the lock of one marked ledger, repair it, clear the mark, release the lock.
Repairing one ledger (``ReplicationWorker.replicate``):

1. Read the ledger's metadata; gone (deleted) or no segment on a missing bookie: done.
2. For each segment (fragment) with a missing bookie at ensemble index k: choose a replacement
   with the placement policy (never a current member nor a missing bookie), then copy every
   entry of the fragment whose write set contains k, from a surviving replica of its write set
   (failover across them; the digest is verified before forwarding the stored bytes unchanged)
   to the replacement with RECOVERY_ADD, so a fenced or closed ledger accepts it. A fragment
   ends where the next segment starts; the last fragment of a CLOSED ledger ends at its last
   entry.
3. Compare-and-set the segment's new ensemble into the metadata. On a version conflict re-read:
   if the segment still has the old ensemble, retry the write; if someone else changed it, the
   ledger is retried later (nothing copied is lost: extra replicas are harmless).
4. Mark the ledger replicated (the record is deleted only if the auditor added nothing since the
   lock was taken) and release the lock.

Open ledgers (the choice made here, as BookKeeper does): fragments before the last segment are
immutable and are repaired at once. The last fragment of an OPEN (or IN_RECOVERY) ledger is still
being written - its writer replaces a dead bookie itself on its next add (ensemble change). It is
left alone for ``open_ledger_grace_period_s`` after the ledger was marked; after that the worker
recovers the ledger (fence + close, as a new owner would: ``BookKeeper.open_ledger`` with
``recovery=True``) and repairs the now closed last fragment. Until then the ledger is DEFERRED:
its other fragments are repaired, the mark stays and the lock is released.

A failure (no surviving replica answered, no replacement bookie, metadata race, store error)
releases the lock and the ledger is retried after a backoff (doubling per ledger, shared by the
workers of one process). Entries in flight per worker are bounded (``max_entries_in_flight``) and
the copy rate of a process is bounded by a shared ``RateLimiter`` (entries/s).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

import trio

from bk_client import (
    BKError,
    BookieClient,
    BookKeeper,
    DistributionSchedule,
    MetadataVersionConflict,
    NoSuchLedger,
    master_key,
)
from magnetar.common.backoff import doubled
from metadata import MetadataError
from protocols.bookkeeper import LedgerMetadata, Segment

from ._underreplication import UnderReplicatedLedger, UnderReplicationManager

__all__ = [
    "EntryCopier",
    "PoolEntryCopier",
    "RateLimiter",
    "ReplicationError",
    "ReplicationOutcome",
    "ReplicationWorker",
    "RetryTable",
    "WorkerStatistics",
]

log = logging.getLogger(__name__)

_MAX_CAS_ATTEMPTS = 50


class ReplicationError(BKError):
    """A ledger could not be repaired now (no replica to copy from, a metadata race lost); the
    worker retries it later."""

    code = -200  # BookKeeper's ReplicationException
    default_message = "re-replication failed"


class ReplicationOutcome(enum.Enum):
    """What ``replicate`` achieved for one ledger.

    REPLICATED: no segment references a missing bookie any more (or the ledger is gone): clear
    the mark. DEFERRED: the last fragment of an open ledger still references one (see the module
    docstring); keep the mark and come back later.
    """

    REPLICATED = "replicated"
    DEFERRED = "deferred"


class EntryCopier(Protocol):
    """The worker's seam to the bookies: read one stored entry, write it elsewhere."""

    async def read_entry(self, bookie: str, ledger_id: int, entry_id: int, metadata: LedgerMetadata) -> bytes:
        """The digest-framed entry as ``bookie`` stores it, verified with the digest type (and
        password) of the ledger's ``metadata``. Raises ``BKError``
        (``NoSuchEntry``, ``ReadError``, ``BookieUnavailable``, ``Timeout``, ``DigestMismatch``)."""
        ...

    async def write_entry(self, bookie: str, ledger_id: int, entry_id: int, key: bytes, body: bytes) -> None:
        """Store ``body`` on ``bookie`` with RECOVERY_ADD; raises ``BKError`` on any failure."""
        ...


class PoolEntryCopier:
    """``EntryCopier`` over a client's pooled bookie connections (``BookKeeper.bookie_client``):
    reads verify the digest and return the stored bytes unchanged, writes are RECOVERY_ADDs;
    timeouts from the client config (``read_entry_timeout_s``, ``add_entry_timeout_s``)."""

    def __init__(self, bookies: BookieClient) -> None:
        self._bookies = bookies

    async def read_entry(self, bookie: str, ledger_id: int, entry_id: int, metadata: LedgerMetadata) -> bytes:
        """See ``EntryCopier.read_entry`` (``BookieClient.read_entry``)."""
        return await self._bookies.read_entry(bookie, ledger_id, entry_id, metadata=metadata)

    async def write_entry(self, bookie: str, ledger_id: int, entry_id: int, key: bytes, body: bytes) -> None:
        """See ``EntryCopier.write_entry`` (``BookieClient.recovery_add``)."""
        await self._bookies.recovery_add(bookie, ledger_id, entry_id, key, body)


class RateLimiter:
    """A token bucket: at most ``rate`` acquisitions per second on average, bursts up to
    ``burst`` (default: one second's worth). ``rate <= 0`` means unlimited. FIFO among waiters."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = float(rate)
        self._burst = float(burst) if burst is not None else max(1.0, self.rate)
        self._tokens = self._burst
        self._last: float | None = None
        self._lock = trio.Lock()

    async def acquire(self) -> None:
        """Wait for one token."""
        if self.rate <= 0:
            await trio.lowlevel.checkpoint()
            return
        async with self._lock:
            now = trio.current_time()
            if self._last is not None:
                self._tokens = min(self._burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens < 1:
                await trio.sleep((1 - self._tokens) / self.rate)
                self._tokens, self._last = 1.0, trio.current_time()
            self._tokens -= 1


class RetryTable:
    """Per-ledger retry backoff shared by the workers of one process (bounded: the oldest entry
    goes when ``max_entries`` is reached). Also remembers when a worker first saw a ledger whose
    record has no ctime (for the open-ledger grace period)."""

    def __init__(self, *, min_s: float = 1.0, max_s: float = 60.0, max_entries: int = 10_000) -> None:
        if min_s <= 0 or max_s < min_s:
            raise ValueError("need 0 < min_s <= max_s")
        self._min, self._max, self._cap = min_s, max_s, max_entries
        self._entries: OrderedDict[int, tuple[float, float]] = OrderedDict()  # id -> (retry_at, delay)
        self._first_seen: OrderedDict[int, float] = OrderedDict()

    def blocked(self) -> set[int]:
        """Ledgers whose retry time has not come."""
        now = trio.current_time()
        return {lid for lid, (at, _) in self._entries.items() if at > now}

    def next_retry(self) -> float:
        """The earliest retry time (``inf`` when none)."""
        return min((at for at, _ in self._entries.values()), default=math.inf)

    def failed(self, ledger_id: int, delay: float | None = None) -> float:
        """Back off ``ledger_id`` (doubling, or by ``delay``); return the retry time."""
        _, last = self._entries.pop(ledger_id, (0.0, 0.0))
        step = delay if delay is not None else doubled(last, self._min, self._max)
        at = trio.current_time() + step
        self._entries[ledger_id] = (at, step)
        while len(self._entries) > self._cap:
            self._entries.popitem(last=False)
        return at

    def succeeded(self, ledger_id: int) -> None:
        """Forget ``ledger_id``'s backoff."""
        self._entries.pop(ledger_id, None)
        self._first_seen.pop(ledger_id, None)

    def first_seen(self, ledger_id: int) -> float:
        """Wall-clock seconds when this process first saw the ledger marked (set on first call)."""
        if ledger_id not in self._first_seen:
            self._first_seen[ledger_id] = time.time()
            while len(self._first_seen) > self._cap:
                self._first_seen.popitem(last=False)
        return self._first_seen[ledger_id]


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerStatistics:
    """A snapshot of a worker's counters (totals since it started)."""

    ledgers_replicated: int
    ledgers_deferred: int
    failures: int
    fragments_replicated: int
    entries_copied: int
    bytes_copied: int
    open_ledgers_recovered: int
    replicate_time_s: float


class ReplicationWorker:
    """Repairs under-replicated ledgers one at a time (see the module docstring).

    ``client`` supplies the ledger metadata (``ledger_manager``), the placement policy, the bookie
    connections (``bookie_client``) and recovery of open ledgers (``open_ledger``); the worker
    neither opens nor closes it. ``copier`` defaults to ``PoolEntryCopier(client.bookie_client)``.
    ``rate_limiter`` and ``retry`` may be shared by several workers.
    """

    def __init__(
        self,
        client: BookKeeper,
        under_replication: UnderReplicationManager,
        *,
        copier: EntryCopier | None = None,
        rate_limiter: RateLimiter | None = None,
        retry: RetryTable | None = None,
        max_entries_in_flight: int = 64,
        poll_interval_s: float = 1.0,
        open_ledger_grace_period_s: float = 30.0,
        name: str = "replication-worker",
    ) -> None:
        if max_entries_in_flight < 1 or poll_interval_s <= 0 or open_ledger_grace_period_s < 0:
            raise ValueError("need max_entries_in_flight >= 1, poll_interval_s > 0, grace period >= 0")
        self._client = client
        self._urm = under_replication
        self._copier = copier or PoolEntryCopier(client.bookie_client)
        self._rate = rate_limiter or RateLimiter(0)
        self._retry = retry or RetryTable()
        self._window = max_entries_in_flight
        self._poll = poll_interval_s
        self._open_grace = open_ledger_grace_period_s
        self.name = name
        self.current: int | None = None  # the ledger being repaired
        self._stats = dict.fromkeys(
            (
                "ledgers_replicated",
                "ledgers_deferred",
                "failures",
                "fragments_replicated",
                "entries_copied",
                "bytes_copied",
                "open_ledgers_recovered",
            ),
            0,
        )
        self._time = 0.0

    def statistics(self) -> WorkerStatistics:
        """Counters for metrics and tests."""
        s = self._stats
        return WorkerStatistics(
            s["ledgers_replicated"],
            s["ledgers_deferred"],
            s["failures"],
            s["fragments_replicated"],
            s["entries_copied"],
            s["bytes_copied"],
            s["open_ledgers_recovered"],
            self._time,
        )

    # ---- the loop ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Repair ledgers until cancelled. Store errors are logged and retried after
        ``poll_interval_s``; a held lock is released when cancelled."""
        task_status.started()
        while True:
            try:
                await self._urm.wait_until_enabled()
                record = await self._urm.acquire_next(skip=self._retry.blocked())
            except (BKError, MetadataError):
                log.warning("%s: cannot look for under-replicated ledgers", self.name, exc_info=True)
                await trio.sleep(self._poll)
                continue
            if record is None:
                wait = min(self._poll, max(0.0, self._retry.next_retry() - trio.current_time()))
                await self._urm.wait_for_mark(wait)
                continue
            await self.process(record)

    async def process(self, record: UnderReplicatedLedger) -> ReplicationOutcome | None:
        """Repair one ledger whose lock this worker's manager holds, then clear the mark or back
        off; the lock is released in every case. Returns the outcome, None on failure."""
        lid = record.ledger_id
        self.current = lid
        start = trio.current_time()
        try:
            outcome = await self.replicate(record)
            if outcome is ReplicationOutcome.REPLICATED:
                await self._urm.mark_replicated(lid, record.version)
                self._retry.succeeded(lid)
                self._stats["ledgers_replicated"] += 1
                log.info("%s: ledger %d is fully replicated again", self.name, lid)
            else:
                self._stats["ledgers_deferred"] += 1
                self._retry.failed(lid, delay=min(self._poll, self._open_grace) or self._poll)
            return outcome
        except (BKError, MetadataError, ValueError) as exc:
            self._stats["failures"] += 1
            at = self._retry.failed(lid)
            log.warning(
                "%s: re-replication of ledger %d failed (retry in %.1fs): %s",
                self.name,
                lid,
                at - trio.current_time(),
                exc,
            )
            return None
        finally:
            self._time += trio.current_time() - start
            self.current = None
            with trio.CancelScope(shield=True):
                try:
                    await self._urm.release(lid)
                except BKError:
                    log.warning("%s: could not release the lock of ledger %d", self.name, lid, exc_info=True)

    # ---- one ledger --------------------------------------------------------------------------

    def _open_grace_over(self, record: UnderReplicatedLedger) -> bool:
        marked = record.ctime_ms / 1000 if record.ctime_ms is not None else self._retry.first_seen(record.ledger_id)
        return time.time() - marked >= self._open_grace

    async def replicate(self, record: UnderReplicatedLedger) -> ReplicationOutcome:
        """Steps 1-3 of the module docstring for ``record``'s ledger (its lock must be held).

        Raises ``ReplicationError``, ``NotEnoughBookies``, ``MetadataStoreError``, or a
        ``BKError`` from recovering an open ledger.
        """
        client = self._client
        lid = record.ledger_id
        lost = set(record.missing)
        try:
            meta, _ = await client.ledger_manager.read(lid)
        except NoSuchLedger:
            return ReplicationOutcome.REPLICATED
        if not _segments_on(meta, lost):
            return ReplicationOutcome.REPLICATED
        deferred = False
        if not meta.is_closed and lost & set(meta.last_segment.ensemble):
            if self._open_grace_over(record):
                log.info("%s: recovering open ledger %d to repair its last fragment", self.name, lid)
                try:  # fence and close it, as a new owner would
                    meta = (await client.open_ledger(lid, password=meta.password, recovery=True)).metadata
                except NoSuchLedger:
                    return ReplicationOutcome.REPLICATED
                self._stats["open_ledgers_recovered"] += 1
            else:
                deferred = True
        for first_entry in [seg.first_entry_id for seg in meta.segments]:
            index = next((i for i, s in enumerate(meta.segments) if s.first_entry_id == first_entry), None)
            if index is None:
                continue
            seg = meta.segments[index]
            is_last = index == len(meta.segments) - 1
            if not lost & set(seg.ensemble) or (is_last and not meta.is_closed):
                continue
            end = meta.last_entry_id if is_last else meta.segments[index + 1].first_entry_id - 1
            new_ensemble = await self._copy_fragment(lid, meta, seg, end, lost)
            meta = await self._install(lid, seg, new_ensemble)
            self._stats["fragments_replicated"] += 1
        if deferred:
            return ReplicationOutcome.DEFERRED
        return ReplicationOutcome.REPLICATED

    async def _copy_fragment(
        self, lid: int, meta: LedgerMetadata, seg: Segment, end: int, lost: set[str]
    ) -> tuple[str, ...]:
        client = self._client
        ensemble = seg.ensemble
        lost_idx = {i for i, b in enumerate(ensemble) if b in lost}
        available = await client.ledger_manager.list_bookies()
        new = list(ensemble)
        for i in sorted(lost_idx):
            new[i] = client.placement.replace_bookie(new, i, available, exclude=lost)
        schedule = DistributionSchedule(meta.ensemble_size, meta.write_quorum, meta.ack_quorum)
        key = master_key(meta.password)
        failure: list[BaseException] = []
        window = trio.Semaphore(self._window)

        async def copy(entry_id: int, targets: list[int]) -> None:
            try:
                sources = [ensemble[j] for j in schedule.write_set(entry_id) if j not in lost_idx]
                body = await self._read_any(lid, meta, entry_id, sources)
                for k in targets:
                    await self._copier.write_entry(new[k], lid, entry_id, key, body)
                self._stats["entries_copied"] += 1
                self._stats["bytes_copied"] += len(body) * len(targets)
            except (BKError, MetadataError) as exc:
                if not failure:
                    failure.append(exc)
                nursery.cancel_scope.cancel()
            finally:
                window.release()

        async with trio.open_nursery() as nursery:
            for entry_id in range(seg.first_entry_id, end + 1):
                targets = [k for k in schedule.write_set(entry_id) if k in lost_idx]
                if not targets:
                    continue
                await window.acquire()
                if failure:
                    window.release()
                    break
                await self._rate.acquire()
                nursery.start_soon(copy, entry_id, targets)
        if failure:
            raise failure[0]
        return tuple(new)

    async def _read_any(self, lid: int, meta: LedgerMetadata, entry_id: int, sources: list[str]) -> bytes:
        errors = []
        bookies = self._client.bookie_client
        for bookie in sorted(sources, key=bookies.is_down):  # bookies in reconnect backoff last
            try:
                return await self._copier.read_entry(bookie, lid, entry_id, meta)
            except BKError as exc:
                errors.append(f"{bookie}: {exc}")
        raise ReplicationError(
            f"entry {entry_id} of ledger {lid} has no readable surviving replica "
            f"({'; '.join(errors) or 'every bookie of its write set is lost'})",
            ledger_id=lid,
        )

    async def _install(self, lid: int, old: Segment, new_ensemble: tuple[str, ...]) -> LedgerMetadata:
        """Step 3: CAS ``new_ensemble`` into the segment starting at ``old.first_entry_id``."""
        ledgers = self._client.ledger_manager
        for _ in range(_MAX_CAS_ATTEMPTS):
            meta, version = await ledgers.read(lid)
            segs = list(meta.segments)
            index = next((i for i, s in enumerate(segs) if s.first_entry_id == old.first_entry_id), None)
            if index is None or segs[index].ensemble != old.ensemble:
                if index is not None and segs[index].ensemble == new_ensemble:
                    return meta
                raise ReplicationError(
                    f"segment at entry {old.first_entry_id} of ledger {lid} changed while it was re-replicated",
                    ledger_id=lid,
                )
            segs[index] = Segment(old.first_entry_id, new_ensemble)
            updated = dataclasses.replace(meta, segments=tuple(segs))
            try:
                await ledgers.write(lid, updated, version)
            except MetadataVersionConflict:
                continue
            return updated
        raise ReplicationError(f"ledger {lid}'s metadata kept changing while installing a new ensemble", ledger_id=lid)


def _segments_on(meta: LedgerMetadata, bookies: Iterable[str]) -> bool:
    wanted = set(bookies)
    return any(wanted & set(seg.ensemble) for seg in meta.segments)
