"""The bookie's garbage collector: a supervised loop running ledger GC, dead-log deletion and
minor/major compaction (BookKeeper's GarbageCollectorThread over ScanAndCompareGarbageCollector).

A run (`GarbageCollector.run_once`), every ``gcWaitTime`` or when triggered (REST):

1. Ledger GC (needs a metadata store). Snapshot the local ledgers, then walk the hierarchical
   metadata layout range by range, descending only into nodes that can hold a local ledger. A
   local ledger whose node is missing is a candidate. If any listing fails (or the ledgers root
   itself is missing) nothing is deleted this run. Each candidate's absence is checked once more
   right before `DbLedgerStorage.delete_ledger`. Optionally (``delete_overreplicated_ledgers``,
   every ``gcOverreplicatedLedgerWaitTime``) a local ledger whose CLOSED metadata lists this bookie
   in no ensemble is deleted too.
1b. A forced run flushes the write cache (a checkpoint, `FlushReason.GC`), so the entries the
   cache held are in entry logs and counted before the next step decides.
1c. Early roll (`DbLedgerStorage.roll_entry_logs`, decided by `roll_reason`): a current entry log
   whose live share is below the threshold of the compaction this run does (or that holds no
   live data), or that is older than ``gc_roll_current_log_after_s``, is rolled now, so steps 2
   and 3 of this same run can delete or compact it instead of waiting for ``logSizeLimit``.
2. Entry-log GC (`EntryLogTracker`): re-measure rolled logs, delete the dead ones. This runs even
   when the disk is full: it only frees space.
3. Compaction, when one is due or forced: major if enabled and due (or forced), else minor.
   Candidate logs under the kind's threshold are compacted lowest usage first (`compact_log`), within
   the kind's max time, throttled, each only when its directory has free space for its live bytes
   plus ``compaction_free_space_reserve_bytes``. A major run also resets the minor clock.

Never silent: an error on one log is logged with the log id, the log is skipped for
``error_skip_period_ms`` and the run goes on; an error that stops a phase is logged and the
run's result is ``partial``; the loop itself survives everything but cancellation. Metrics:
`GcMetrics`. Why a log is still on disk: `GarbageCollector.explain`.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
from prometheus_client import CollectorRegistry

from metadata import MetadataStore, NoNodeError
from protocols.bookkeeper import (
    LedgerLayout,
    LedgerMetadata,
    LedgerState,
    flat_ledger_ids,
    ledger_level_children,
    ledger_path,
    ledgers_root,
    level_name,
    trees,
)

from .._errors import BookieException
from ..metrics import GcMetrics
from ..storage import CurrentLogInfo, DbLedgerStorage, FlushReason
from ._compaction import CompactionKind, CompactionTimeout, RateLimiter, compact_log, kill_point
from ._config import GcConfig
from ._explain import GcExplanation, GcSchedule, LedgerPin, explain_log, lookup_ledgers, roll_reason
from ._logs import EntryLogTracker, SkipList

__all__ = ["GarbageCollector", "GcStatus", "GcRunResult", "MetadataListingError"]

log = logging.getLogger(__name__)


class MetadataListingError(BookieException):
    """Listing ledger metadata failed; ledger GC deleted nothing this run."""


@dataclass(frozen=True, slots=True)
class GcStatus:
    """BookKeeper's GarbageCollectionStatus plus Magnetar's reclaimed bytes (``gc_details``)."""

    force_compacting: bool
    major_compacting: bool
    minor_compacting: bool
    last_major_compaction_time: int
    last_minor_compaction_time: int
    major_compaction_counter: int
    minor_compaction_counter: int
    reclaimed_deletion_bytes: int
    reclaimed_compaction_bytes: int
    last_run_time: int | None
    last_result: str | None
    last_error: str | None

    def to_json(self) -> dict[str, Any]:
        """BookKeeper's JSON field names (camelCase) plus the Magnetar fields."""
        return {
            "forceCompacting": self.force_compacting,
            "majorCompacting": self.major_compacting,
            "minorCompacting": self.minor_compacting,
            "lastMajorCompactionTime": self.last_major_compaction_time,
            "lastMinorCompactionTime": self.last_minor_compaction_time,
            "majorCompactionCounter": self.major_compaction_counter,
            "minorCompactionCounter": self.minor_compaction_counter,
            "reclaimedSpaceViaDeletion": self.reclaimed_deletion_bytes,
            "reclaimedSpaceViaCompaction": self.reclaimed_compaction_bytes,
            "lastRunTime": self.last_run_time,
            "lastResult": self.last_result,
            "lastError": self.last_error,
        }


@dataclass(frozen=True, slots=True)
class GcRunResult:
    """What one run did."""

    result: str  # "ok", "partial" or "error"
    deleted_ledgers: int
    deleted_logs: int
    reclaimed_deletion: int
    compaction: CompactionKind | None
    compacted_logs: int
    reclaimed_compaction: int
    errors: tuple[str, ...]
    rolled_logs: int = 0  # current logs rolled early for this run (step 1c)


@dataclass(slots=True)
class _Request:
    force: bool
    allow_major: bool
    allow_minor: bool


def _default_free_space(directory: str) -> int:
    return shutil.disk_usage(directory).free


class GarbageCollector:
    """GC of one `DbLedgerStorage` (module docstring).

    ``store``/``metadata_root`` enable ledger GC (without a store only logs of ledgers already
    deleted locally are reclaimed); ``bookie_id`` enables the not-in-any-ensemble check.
    ``free_space(directory)`` (blocking) returns free bytes; ``clock()`` wall-clock ms (tests).
    ``on_ledger_deleted(ledger_id)`` is called after the storage deleted a ledger (the bookie
    passes `Bookie.forget_ledger`, which drops its cached key and LAC for it).
    Start it after journal replay, in the bookie's nursery: ``await nursery.start(gc.run)``.
    GC never looks at the bookie's writable/read-only state: a bookie read-only for a full disk
    still deletes dead logs (that only frees space); compaction waits for headroom per log.
    """

    def __init__(
        self,
        storage: DbLedgerStorage,
        config: GcConfig | None = None,
        *,
        store: MetadataStore | None = None,
        metadata_root: str = "",
        bookie_id: str = "",
        registry: CollectorRegistry | None = None,
        free_space: Callable[[str], int] = _default_free_space,
        clock: Callable[[], float] = lambda: time.time() * 1000,
        on_ledger_deleted: Callable[[int], None] | None = None,
    ) -> None:
        self.config = config or GcConfig()
        self.config.validate()
        self._storage = storage
        self._store = store
        self._root = metadata_root
        self._layout = self.config.ledger_layout
        self._bookie_id = bookie_id
        self._free_space = free_space
        self._clock = clock
        self._on_ledger_deleted = on_ledger_deleted
        self.metrics = GcMetrics(registry)
        self.metrics.bind(active_ledgers=lambda: len(storage.ledgers()))
        self._skips = SkipList(self.config.error_skip_period_ms, clock)
        self._tracker = EntryLogTracker(storage, self._skips)
        self._headroom: dict[int, tuple[int, int]] = {}
        # logs rolled early by GC and still on disk -> why; kept in the index too (restarts),
        # read from it on first use (`_load_rolled`)
        self._rolled: dict[int, str] = {}
        self._rolled_loaded = False
        now = int(clock())
        self._last_major = self._last_minor = now
        self._major_count = self._minor_count = 0
        self._compacting: CompactionKind | None = None
        self._forced_running = False
        self._reclaimed_deletion = self._reclaimed_compaction = 0
        self._last_run: int | None = None
        self._last_result: str | None = None
        self._last_error: str | None = None
        self._last_overreplicated = -math.inf
        self._run_lock = trio.Lock()
        self._wake = trio.Event()
        self._pending: _Request | None = None

    # ------------------------------------------------------------------ loop and triggers

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run GC every ``gcWaitTime`` and whenever `trigger` is called, until cancelled. A failed
        run is logged and counted; the loop never ends on its own."""
        task_status.started()
        wait_s = self.config.gc_wait_time_ms / 1000
        while True:
            with trio.move_on_after(wait_s):
                await self._wake.wait()
            self._wake = trio.Event()
            req, self._pending = self._pending, None
            try:
                if req is None:
                    await self.run_once()
                else:
                    await self.run_once(force=req.force, allow_major=req.allow_major, allow_minor=req.allow_minor)
            except Exception:
                log.exception("GC run failed")

    def trigger(self, *, force: bool = True, allow_major: bool = True, allow_minor: bool = True) -> None:
        """Ask the loop for a run now (BookKeeper's forceGC). ``force`` compacts without waiting for
        the intervals; ``allow_major``/``allow_minor`` say which compaction a forced run may do.
        Requests made before the run starts are merged."""
        p = self._pending
        if p is None:
            self._pending = _Request(force, allow_major, allow_minor)
        else:
            p.force |= force
            p.allow_major |= allow_major
            p.allow_minor |= allow_minor
        self._wake.set()

    @property
    def in_force_gc(self) -> bool:
        """A forced run is pending or in progress."""
        return self._forced_running or (self._pending is not None and self._pending.force)

    # ------------------------------------------------------------------ one run

    async def run_once(self, *, force: bool = False, allow_major: bool = True, allow_minor: bool = True) -> GcRunResult:
        """One GC run (module docstring). Never raises except on cancellation; problems are in the
        result, the log and the metrics."""
        async with self._run_lock:
            self._forced_running = force
            self.metrics.forced.set(1 if force else 0)
            try:
                return await self._run(force, allow_major, allow_minor)
            finally:
                self._forced_running = False
                self.metrics.forced.set(0)
                self._compacting = None

    async def _load_rolled(self) -> None:
        """Read the early-roll records a previous process left in the index (once)."""
        if self._rolled_loaded:
            return
        try:
            stored = await trio.to_thread.run_sync(self._storage.index.rolled_logs)
        except Exception as exc:  # informational only: explain then lacks the reason
            log.warning("GC: could not read the early-roll records from the index: %s", exc)
            stored = {}
        self._rolled = {**stored, **self._rolled}
        self._rolled_loaded = True

    async def _run(self, force: bool, allow_major: bool, allow_minor: bool) -> GcRunResult:
        m = self.metrics
        await self._load_rolled()
        t_start = trio.current_time()
        errors: list[str] = []
        deleted_ledgers = deleted_logs = reclaimed_del = 0
        compacted = reclaimed_comp = 0
        kind: CompactionKind | None = None
        fatal = False
        # 1. ledgers
        t0 = trio.current_time()
        try:
            deleted_ledgers = await self._gc_ledgers()
        except Exception as exc:
            m.errors.labels("ledgers").inc()
            log.error("GC: ledger GC stopped, nothing more deleted this run: %s", exc)
            errors.append(f"ledgers: {exc}")
        m.runtime.labels("ledgers").observe(trio.current_time() - t0)
        # 1b. a forced run checkpoints first, 1c. early rolls for the compaction this run plans
        if force:
            try:
                await self._storage.flush(FlushReason.GC)
            except Exception as exc:
                m.errors.labels("entry_logs").inc()
                log.error("GC: flushing the write cache before a forced run failed: %s", exc)
                errors.append(f"flush: {exc}")
        planned = self._due(force, allow_major, allow_minor)
        rolled = await self._roll_current(planned, errors)
        # 2. entry logs
        t0 = trio.current_time()
        try:
            for err in await self._tracker.refresh():
                m.errors.labels("entry_logs").inc()
                m.logs_skipped.labels("error").inc()
                errors.append(f"entry log {err.log_id:x}: {err.message}")
            deleted_logs, reclaimed_del, del_errors = await self._tracker.delete_dead()
            for err in del_errors:
                m.errors.labels("entry_logs").inc()
                m.logs_skipped.labels("error").inc()
                errors.append(f"entry log {err.log_id:x}: {err.message}")
            self._reclaimed_deletion += reclaimed_del
            m.reclaimed_deletion.inc(reclaimed_del)
            m.deleted_logs.labels("deleted").inc(deleted_logs)
            infos = self._tracker.logs
            m.set_usage_distribution(i.usage for i in infos.values())
            m.active_logs.set(len(infos) + len(self._tracker.current))
            m.active_log_bytes.set(sum(i.file_size for i in infos.values()))
            self._headroom = {k: v for k, v in self._headroom.items() if k in infos}
        except Exception as exc:
            m.errors.labels("entry_logs").inc()
            log.error("GC: entry log GC failed: %s", exc)
            errors.append(f"entry_logs: {exc}")
            fatal = True
        m.runtime.labels("entry_logs").observe(trio.current_time() - t0)
        # 3. compaction
        if not fatal:
            kind = planned
        if kind is not None:
            t0 = trio.current_time()
            try:
                compacted, reclaimed_comp = await self._compact(kind, errors)
            except Exception as exc:
                m.errors.labels("compaction").inc()
                log.error("GC: %s compaction failed: %s", kind.value, exc)
                errors.append(f"compaction: {exc}")
            m.runtime.labels("compaction").observe(trio.current_time() - t0)
        if self._rolled:
            on_disk = set(await trio.to_thread.run_sync(self._storage.entry_logger.list_logs))
            gone = [k for k in self._rolled if k not in on_disk]
            if gone:
                for k in gone:
                    del self._rolled[k]
                await self._persist_rolled(forget=gone)
        m.runtime.labels("total").observe(trio.current_time() - t_start)
        result = "error" if fatal else ("partial" if errors else "ok")
        now = int(self._clock())
        self._last_run = now
        self._last_result = result
        self._last_error = errors[-1] if errors else None
        m.record_result(result, now / 1000)
        return GcRunResult(
            result, deleted_ledgers, deleted_logs, reclaimed_del, kind, compacted, reclaimed_comp, tuple(errors), rolled
        )

    # ------------------------------------------------------------------ 1c. early rolls

    def _threshold(self, kind: CompactionKind | None) -> float | None:
        if kind is None:
            return None
        c = self.config
        return c.major_compaction_threshold if kind is CompactionKind.MAJOR else c.minor_compaction_threshold

    def _roll_decision(self, info: CurrentLogInfo, kind: CompactionKind | None) -> tuple[str, str] | None:
        c = self.config
        exists = self._storage.ledger_exists
        live = sum(n for lid, n in info.ledgers.items() if exists(lid))
        return roll_reason(
            total_bytes=info.total,
            live_bytes=live,
            age_s=info.age_s,
            kind=kind.value if kind is not None else None,
            threshold=self._threshold(kind),
            roll_dead=c.gc_roll_dead_current_log,
            max_age_s=c.gc_roll_current_log_after_s,
        )

    async def _roll_current(self, kind: CompactionKind | None, errors: list[str]) -> int:
        """Step 1c: roll the current logs this run should take; returns how many were rolled."""
        c = self.config
        if not c.gc_roll_dead_current_log and c.gc_roll_current_log_after_s <= 0:
            return 0
        whys: dict[int, str] = {}

        def choose(logs: list[CurrentLogInfo]) -> dict[int, str]:
            out: dict[int, str] = {}
            for info in logs:
                decision = self._roll_decision(info, kind)
                if decision is not None:
                    whys[info.log_id] = decision[0]
                    out[info.log_id] = decision[1]
            return out

        try:
            rolled = await self._storage.roll_entry_logs(choose)
        except Exception as exc:
            self.metrics.errors.labels("entry_logs").inc()
            log.error("GC: rolling a current entry log early failed: %s", exc)
            errors.append(f"roll: {exc}")
            return 0
        if rolled:
            kill_point("after_roll")
        for log_id, detail in rolled.items():
            log.info("GC: rolled current entry log %x early: %s", log_id, detail)
            self.metrics.early_rolls.labels(whys[log_id]).inc()
            self._rolled[log_id] = detail
        if rolled:
            await self._persist_rolled(record=rolled)
        return len(rolled)

    async def _persist_rolled(self, *, record: dict[int, str] | None = None, forget: list[int] | None = None) -> None:
        """Keep the index's early-roll records in step with ``_rolled``; a failure is only logged
        (the records explain, nothing depends on them)."""
        index = self._storage.index
        try:
            if record:
                await trio.to_thread.run_sync(index.record_rolled, record)
            if forget:
                await trio.to_thread.run_sync(index.forget_rolled, forget)
        except Exception as exc:
            log.warning("GC: could not update the early-roll records in the index: %s", exc)

    # ------------------------------------------------------------------ 1. ledger GC

    async def _gc_ledgers(self) -> int:
        if self._store is None:
            return 0
        local = self._storage.ledgers()  # snapshot BEFORE listing: a ledger created later is not a candidate
        if not local:
            return 0
        absent: list[int] = []
        present: list[int] = []
        try:
            if self._layout is LedgerLayout.FLAT:
                await self._walk([], (), local, absent, present)
            else:
                for levels, ids in trees(self._layout):
                    mine = [lid for lid in local if lid in ids]
                    if mine:
                        await self._walk([], levels, mine, absent, present)
        except NoNodeError as exc:
            raise MetadataListingError(f"ledgers root {ledgers_root(self._root)!r} is missing") from exc
        except Exception as exc:
            raise MetadataListingError(f"listing ledger metadata failed: {exc}") from exc
        deleted = 0
        for lid in absent:
            try:
                still_absent = await self._store.exists(ledger_path(self._root, lid, self._layout)) is None
            except Exception as exc:
                log.warning("GC: cannot re-check ledger %d, keeping it: %s", lid, exc)
                continue
            if not still_absent:
                continue
            if await self._delete_ledger(lid, "no_metadata"):
                deleted += 1
        if self.config.delete_overreplicated_ledgers and self._bookie_id:
            now = self._clock()
            if now - self._last_overreplicated >= self.config.gc_overreplicated_ledger_wait_time_ms:
                self._last_overreplicated = now
                deleted += await self._gc_overreplicated(present)
        return deleted

    async def _walk(
        self, parents: list[str], levels: tuple[int, ...], ledgers: list[int], absent: list[int], present: list[int]
    ) -> None:
        """Compare ``ledgers`` (all under the node ``parents`` of the tree with ``levels``) with that
        node's children."""
        assert self._store is not None
        level = len(parents)
        path = "/".join([ledgers_root(self._root), *parents])
        try:
            children = await self._store.children(path)
        except NoNodeError:
            if level == 0:
                raise
            children = []  # removed since its parent was listed: absent (re-checked before deleting)
        if self._layout is LedgerLayout.FLAT:  # every ledger is a child of the ledgers root
            existing = set(flat_ledger_ids(children))
            for lid in ledgers:
                (present if lid in existing else absent).append(lid)
            return
        names = set(ledger_level_children(level, children, levels))
        groups: dict[str, list[int]] = {}
        for lid in ledgers:
            groups.setdefault(level_name(lid, level, levels), []).append(lid)
        for name, ids in groups.items():
            if name not in names:
                absent.extend(ids)
            elif level == len(levels) - 1:
                present.extend(ids)
            else:
                await self._walk([*parents, name], levels, ids, absent, present)

    async def _delete_ledger(self, lid: int, reason: str) -> bool:
        try:
            await self._storage.delete_ledger(lid)
        except Exception as exc:
            self.metrics.errors.labels("ledgers").inc()
            log.error("GC: deleting ledger %d failed: %s", lid, exc)
            return False
        log.info("GC: deleted ledger %d (%s)", lid, reason)
        self.metrics.deleted_ledgers.labels(reason).inc()
        if self._on_ledger_deleted is not None:
            try:
                self._on_ledger_deleted(lid)
            except Exception:
                log.exception("GC: on_ledger_deleted(%d) failed", lid)
        return True

    async def _not_in_ensemble(self, lid: int) -> bool:
        assert self._store is not None
        data, _ = await self._store.get(ledger_path(self._root, lid, self._layout))
        md = LedgerMetadata.decode(data)
        return md.state is LedgerState.CLOSED and all(self._bookie_id not in s.ensemble for s in md.segments)

    async def _gc_overreplicated(self, present: list[int]) -> int:
        deleted = 0
        for lid in present:
            try:
                if not await self._not_in_ensemble(lid):
                    continue
                if self.config.verify_metadata_on_gc and not await self._not_in_ensemble(lid):
                    continue
            except Exception as exc:
                log.debug("GC: over-replication check of ledger %d skipped: %s", lid, exc)
                continue
            if await self._delete_ledger(lid, "not_in_ensemble"):
                deleted += 1
        return deleted

    # ------------------------------------------------------------------ 3. compaction

    def _due(self, force: bool, allow_major: bool, allow_minor: bool) -> CompactionKind | None:
        c = self.config
        now = self._clock()
        if force:
            if allow_major and c.major_compaction_threshold > 0:
                return CompactionKind.MAJOR
            if allow_minor and c.minor_compaction_threshold > 0:
                return CompactionKind.MINOR
            return None
        if c.major_enabled and now - self._last_major >= c.major_compaction_interval_s * 1000:
            return CompactionKind.MAJOR
        if c.minor_enabled and now - self._last_minor >= c.minor_compaction_interval_s * 1000:
            return CompactionKind.MINOR
        return None

    async def _compact(self, kind: CompactionKind, errors: list[str]) -> tuple[int, int]:
        c, m = self.config, self.metrics
        major = kind is CompactionKind.MAJOR
        threshold = c.major_compaction_threshold if major else c.minor_compaction_threshold
        max_ms = c.major_compaction_max_time_ms if major else c.minor_compaction_max_time_ms
        deadline = trio.current_time() + max_ms / 1000 if max_ms > 0 else math.inf
        limiter = RateLimiter(c.compaction_rate_by_bytes if c.throttle_by_bytes else c.compaction_rate_by_entries)
        # small chunks under a byte throttle: each holds the write lock and syncs once, so a
        # checkpoint (and the adds behind it) never waits long
        chunk = max(64 << 10, min(256 << 10, c.compaction_rate_by_bytes // 8)) if c.throttle_by_bytes else 1 << 20
        candidates = sorted(
            (i for i in self._tracker.logs.values() if not i.dead and i.usage < threshold),
            key=lambda i: (i.usage, i.log_id),
        )
        self._compacting = kind
        compacted = reclaimed = 0
        try:
            for info in candidates:
                if trio.current_time() > deadline:
                    m.logs_skipped.labels("time_bound").inc()
                    log.info(
                        "GC: %s compaction reached its time bound; %s left for the next run",
                        kind.value,
                        f"{info.log_id:x} and later logs",
                    )
                    break
                if self._skips.get(info.log_id) is not None:
                    m.logs_skipped.labels("error").inc()
                    continue
                need = info.remaining + c.compaction_free_space_reserve_bytes
                free = await trio.to_thread.run_sync(self._free_space, info.directory)
                if free < need:
                    self._headroom[info.log_id] = (need, free)
                    m.logs_skipped.labels("no_headroom").inc()
                    log.warning(
                        "GC: not compacting entry log %x: needs %d free bytes, %d free", info.log_id, need, free
                    )
                    continue
                self._headroom.pop(info.log_id, None)
                try:
                    res = await compact_log(
                        self._storage,
                        info.log_id,
                        limiter=limiter,
                        by_bytes=c.throttle_by_bytes,
                        deadline=deadline,
                        chunk_bytes=chunk,
                    )
                except CompactionTimeout:
                    m.logs_skipped.labels("time_bound").inc()
                    log.info("GC: %s compaction reached its time bound inside entry log %x", kind.value, info.log_id)
                    break
                except Exception as exc:
                    msg = f"{type(exc).__name__}: {exc}"
                    log.error(
                        "GC: compacting entry log %x failed, skipping it for %d ms: %s",
                        info.log_id,
                        c.error_skip_period_ms,
                        msg,
                    )
                    self._skips.add(info.log_id, f"compaction failed: {msg}")
                    m.errors.labels("compaction").inc()
                    m.logs_skipped.labels("error").inc()
                    errors.append(f"entry log {info.log_id:x}: {msg}")
                    continue
                self._tracker.forget(info.log_id)
                compacted += 1
                reclaimed += res.reclaimed
                m.compaction_read_bytes.inc(res.bytes_read)
                m.compaction_written_bytes.inc(res.bytes_written)
                m.compaction_entries.inc(res.entries_copied)
                m.reclaimed_compaction.inc(res.reclaimed)
                m.deleted_logs.labels("compacted").inc()
                log.info(
                    "GC: compacted entry log %x (usage %.1f%%): copied %d bytes, reclaimed %d",
                    info.log_id,
                    info.usage * 100,
                    res.bytes_written,
                    res.reclaimed,
                )
        finally:
            self._reclaimed_compaction += reclaimed
            now = int(self._clock())
            if major:
                self._last_major = self._last_minor = now
                self._major_count += 1
                m.major_compactions.inc()
            else:
                self._last_minor = now
                self._minor_count += 1
                m.minor_compactions.inc()
        return compacted, reclaimed

    # ------------------------------------------------------------------ status and explain

    def status(self) -> GcStatus:
        """The ``gc_details`` snapshot."""
        return GcStatus(
            force_compacting=self._forced_running and self._compacting is not None,
            major_compacting=self._compacting is CompactionKind.MAJOR,
            minor_compacting=self._compacting is CompactionKind.MINOR,
            last_major_compaction_time=self._last_major,
            last_minor_compaction_time=self._last_minor,
            major_compaction_counter=self._major_count,
            minor_compaction_counter=self._minor_count,
            reclaimed_deletion_bytes=self._reclaimed_deletion,
            reclaimed_compaction_bytes=self._reclaimed_compaction,
            last_run_time=self._last_run,
            last_result=self._last_result,
            last_error=self._last_error,
        )

    def schedule(self) -> GcSchedule:
        """When the next minor and major compactions are due."""
        c = self.config
        return GcSchedule(
            now_ms=int(self._clock()),
            minor_enabled=c.minor_enabled,
            major_enabled=c.major_enabled,
            minor_threshold=c.minor_compaction_threshold,
            major_threshold=c.major_compaction_threshold,
            next_minor_ms=self._last_minor + c.minor_compaction_interval_s * 1000 if c.minor_enabled else None,
            next_major_ms=self._last_major + c.major_compaction_interval_s * 1000 if c.major_enabled else None,
        )

    async def explain(self, *, lookup_metadata: bool = True, max_ledgers_per_log: int = 20) -> GcExplanation:
        """Why each entry log is still on disk (`explain_log`), as of the last run's measurements
        for rolled logs and live for current ones. Lists at most ``max_ledgers_per_log`` pinning
        ledgers per log (the largest); reads their metadata when a store is configured."""
        logger = self._storage.entry_logger
        schedule = self.schedule()
        exists = self._storage.ledger_exists
        await self._load_rolled()

        def gather() -> tuple[
            list[tuple[int, str, int, int, dict[int, int], bool, str | None]], dict[int, CurrentLogInfo]
        ]:
            rows: list[tuple[int, str, int, int, dict[int, int], bool, str | None]] = []
            current = logger.current_log_ids()
            current_infos = {i.log_id: i for i in logger.current_logs()}
            known = self._tracker.logs
            for log_id in logger.list_logs():
                try:
                    path = logger.log_path(log_id)
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue  # removed meanwhile
                if log_id in known and log_id not in current:
                    info = known[log_id]
                    live = {k: v for k, v in info.ledgers.items() if exists(k)}
                    rows.append((log_id, info.directory, size, info.total, live, False, None))
                    continue
                try:
                    usage = logger.usage(log_id)
                except FileNotFoundError:
                    continue
                except Exception as exc:
                    rows.append((log_id, str(path.parent), size, 0, {}, False, f"{type(exc).__name__}: {exc}"))
                    continue
                live = {k: v for k, v in usage.ledgers.items() if exists(k)}
                rows.append((log_id, str(path.parent), size, usage.total_size, live, log_id in current, None))
            return rows, current_infos

        rows, current_infos = await trio.to_thread.run_sync(gather)
        top: dict[int, list[tuple[int, int]]] = {}
        wanted: set[int] = set()
        for log_id, _d, _s, _t, live, _c, _e in rows:
            best = sorted(live.items(), key=lambda kv: (-kv[1], kv[0]))[:max_ledgers_per_log]
            top[log_id] = best
            wanted.update(lid for lid, _ in best)
        meta: dict[int, tuple[str, str | None, str | None]] = {}
        if lookup_metadata and self._store is not None and wanted:
            meta = await lookup_ledgers(self._store, self._root, sorted(wanted), layout=self._layout)
        out = []
        for log_id, directory, size, total, live, current, error in rows:
            pins = tuple(LedgerPin(lid, n, *meta.get(lid, ("not_looked_up", None, None))) for lid, n in top[log_id])
            out.append(
                explain_log(
                    log_id=log_id,
                    directory=directory,
                    size_bytes=size,
                    total_bytes=total,
                    live=live,
                    current=current,
                    schedule=schedule,
                    skipped=self._skips.get(log_id),
                    headroom=self._headroom.get(log_id),
                    pins=pins,
                    other_ledgers=len(live) - len(pins),
                    error=error,
                    roll_due=self._roll_due(current_infos.get(log_id), schedule) if current else None,
                    rolled_for_gc=self._rolled.get(log_id),
                )
            )
        placement = "per-ledger" if logger.per_ledger else "interleaved"
        return GcExplanation(schedule, self._last_run, self._last_result, tuple(out), placement)

    def _roll_due(self, info: CurrentLogInfo | None, schedule: GcSchedule) -> tuple[str, int | None] | None:
        """For explain: whether (and when) a GC run rolls this current log early."""
        if info is None:
            return None
        soon = self._roll_decision(info, None)  # dead or old: any run rolls it
        if soon is not None:
            return f"{soon[1]}; the next GC run rolls it so its space can come back", None
        c = self.config
        kind = (
            CompactionKind.MAJOR
            if c.major_compaction_threshold > 0
            else (CompactionKind.MINOR if c.minor_compaction_threshold > 0 else None)
        )
        later = self._roll_decision(info, kind)
        if kind is None or later is None:
            return None
        when = schedule.next_major_ms if kind is CompactionKind.MAJOR else schedule.next_minor_ms
        at = f", or the {kind.value} compaction due at {_fmt_ms(when)}," if when is not None else ""
        return f"{later[1]}; a forced GC run{at} rolls and compacts it", when


def _fmt_ms(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
