"""The bookie core: ledger semantics over the journal and the ledger storage.

An add is journaled first and acknowledged only once durable; only then does it enter the
storage's write cache (and become readable). Ledger state (master key, fenced flag, explicit LAC)
changes are journaled too, so a restart replays them from the LastLogMark.

Add path in two halves, so that a server keeps the arrival order of a ledger's adds without a
task per add: `Bookie.submit_add` checks the request and enqueues its journal record(s)
synchronously (journal order = call order); `Bookie.complete_add` waits for durability, puts the
entry into the write cache and tracks the piggybacked LAC. `Bookie.add_entry` does both.

Checkpoint mark. The storage's flush asks `new_checkpoint` for a mark before it swaps the write
cache; everything journaled up to that mark must already be in the cache. Between an add's
journal ack and its cache insert there is a window, so the mark is the journal's durable mark
capped by the durable mark seen when the oldest unfinished add was submitted: a record after
that point may not be in the cache yet, one before it is (its add had finished).

Full disk (see also `bookie._space`, `bookie.journal._journal` "Full disk", `bookie.storage._storage`). The
journal and the storage ask a `SpaceGuard` before they allocate, so the bookie normally turns
read-only (DISK_FULL) before a disk fills. If one still fills, nothing acknowledged is lost and
nothing stops for good: the journal waits in NO_SPACE, a flush keeps its entries in the write
cache, a start-up replay whose checkpoint cannot be written keeps the replayed entries in memory
(`DbLedgerStorage.hold_entry`) and the bookie starts READ_ONLY. When the disk checker sees every
directory below diskUsageLwmThreshold it calls `Bookie.space_available`, which resumes the journal
on a fresh file and checkpoints; the bookie is then writable again by itself.

States (`BookieState`), with the reasons kept in `read_only_reasons`:

Rule 1: READ_ONLY iff at least one `ReadOnlyReason` is set; otherwise WRITABLE.
Rule 2: who sets and who clears each reason:
        MANUAL: `set_manual_read_only` (REST), both ways.
        DISK_FULL: set by the disk checker (a directory above diskUsageThreshold) and, at once, by
          the space guard when an allocation (journal preallocation, write-cache flush) would pass
          that threshold; cleared only by the disk checker, once every directory is below
          diskUsageLwmThreshold.
        STORAGE_ERROR: set by a failed flush or lastMark write (ENOSPC included); cleared by the
          next completed checkpoint (the flush loop retries with backoff, and `space_available`
          retries at once when the disk checker sees space).
        JOURNAL_NO_SPACE: set when the journal stops on ENOSPC / EDQUOT (also at start, when there
          is no room for a journal file); cleared by `space_available` once the journal resumed on
          a fresh file AND a checkpoint completed after that (fences and master keys that only
          reached memory are then in the index before another add is acknowledged).
        JOURNAL_FAILED: set by any other journal write, sync or file-creation error; never cleared
          (the journal cannot continue; restart the bookie).
        Without readOnlyModeEnabled, setting DISK_FULL or JOURNAL_NO_SPACE stops the bookie instead
        (`fatal`), as BookKeeper does.
Rule 3: READ_ONLY refuses adds (EREADONLY) except recovery adds while the journal works (neither
        JOURNAL_FAILED nor JOURNAL_NO_SPACE), and refuses write-LAC; reads, LAC reads, long polls
        and fencing are still served (a fence needs one journal record: with the journal in
        NO_SPACE it fails with EIO until space is back).
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
from prometheus_client import CollectorRegistry

from metadata import MetadataStore
from protocols.bookkeeper import ENTRY_METADATA_SIZE, LAC_METADATA_SIZE, NoSuchEntry, NoSuchLedger, StatusCode

from .._errors import BookieError
from .._space import SpaceGuard
from ..gc import GarbageCollector
from ..journal import (
    AddEntry,
    ExplicitLac,
    FenceLedger,
    Journal,
    JournalDisk,
    JournalError,
    JournalGroup,
    JournalIOError,
    JournalNoSpaceError,
    JournalRecord,
    JournalState,
    JournalTicket,
    LogMark,
    MasterKey,
    Padding,
)
from ..metrics import BookieServerMetrics, JournalMetrics
from ..storage import DbLedgerStorage, StorageIOError, WriteCacheFull
from ._config import BookieConfig
from ._lac import LacTracker, TooManyWaiters

__all__ = ["Bookie", "BookieState", "ReadOnlyReason", "AddTicket", "BookieStatistics", "open_bookie", "KILL_AT_ENV"]

log = logging.getLogger(__name__)

KILL_AT_ENV = "MAGNETAR_BOOKIE_KILL_AT"
"""Crash-test hook: ``before_last_mark:N`` SIGKILLs the process at the N-th checkpoint, after the
storage flush and before LastLogMark is persisted."""

_LAC_IN_ENTRY = struct.Struct(">q")  # the writer's LAC, bytes 16..24 of the entry header
_PADDING_BARRIER = Padding(9)  # smallest record; its ack means every earlier record is durable


class BookieState(enum.Enum):
    """Writable or read-only; the rules are in the module docstring."""

    WRITABLE = "writable"
    READ_ONLY = "read_only"


class ReadOnlyReason(enum.Enum):
    """Why a bookie is read-only (several may hold at once)."""

    MANUAL = "manual"
    DISK_FULL = "disk_full"
    STORAGE_ERROR = "storage_error"
    JOURNAL_NO_SPACE = "journal_no_space"
    JOURNAL_FAILED = "journal_failed"


@dataclass(frozen=True, slots=True)
class BookieStatistics:
    """A snapshot of the core's state."""

    bookie_id: str
    state: BookieState
    read_only_reasons: tuple[str, ...]
    unfinished_adds: int
    long_poll_waiters: int
    ledgers_with_lac: int


class AddTicket:
    """An add whose journal record is enqueued; pass it to `Bookie.complete_add` exactly once."""

    __slots__ = ("ledger_id", "entry_id", "body", "journal_ticket", "token")

    def __init__(self, ledger_id: int, entry_id: int, body: bytes, journal_ticket: JournalTicket, token: int) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.body = body
        self.journal_ticket = journal_ticket
        self.token = token


class _CheckpointSource:
    """The storage's view of the journal (see the module docstring, "Checkpoint mark")."""

    def __init__(self, bookie: Bookie) -> None:
        self._bookie = bookie
        self.replaying = True
        self.completed = 0
        kill_at = os.environ.get(KILL_AT_ENV, "")
        point, _, count = kill_at.partition(":")
        self._kill_before_mark = int(count or 1) if point == "before_last_mark" else 0

    def new_checkpoint(self) -> Any:  # a LogMark, a GroupMark (journalDirectories) or None
        return None if self.replaying else self._bookie._safe_mark()

    async def checkpoint_complete(self, mark: Any) -> None:
        self.completed += 1
        if self._kill_before_mark and self.completed >= self._kill_before_mark:
            log.warning("%s: killing the process before persisting LastLogMark %s", KILL_AT_ENV, mark)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            await self._bookie._journal.persist_last_mark(mark)
        except JournalIOError as exc:
            self._bookie._set_reason(ReadOnlyReason.STORAGE_ERROR, True, str(exc))
            return
        self._bookie._set_reason(ReadOnlyReason.STORAGE_ERROR, False, "checkpoint completed")


class Bookie:
    """Ledger operations of one bookie. Create and run it with `open_bookie`.

    Every request method raises `BookieError` with the protocol status to answer; other
    exceptions are bugs. Methods must be called from the trio run that runs the bookie.
    """

    def __init__(
        self,
        config: BookieConfig,
        journal: Journal | JournalGroup,
        registry: CollectorRegistry,
        metrics: BookieServerMetrics,
        space_guard: SpaceGuard | None = None,
    ) -> None:
        """Use `open_bookie`; this only wires parts together (it attaches the storage). The
        journal's state changes and the guard's reports (``space_guard.on_full``) come here."""
        self.config = config
        self.bookie_id = config.effective_bookie_id
        self.registry = registry
        self.metrics = metrics
        self._journal = journal
        self._storage: DbLedgerStorage = None  # type: ignore[assignment]  # attached by open_bookie
        self.gc: GarbageCollector | None = None  # attached and started by open_bookie after replay
        self._source = _CheckpointSource(self)
        self._reasons: set[ReadOnlyReason] = set()
        self._state_changed = trio.Event()
        self._closing = False
        self._inflight: dict[int, Any] = {}  # token -> durable mark (LogMark or GroupMark) when submitted
        self._next_token = 0
        self._lacs = LacTracker(config.long_poll_max_waiters, metrics.long_poll_waiters.set)
        # separate read paths: ordinary reads and high-priority ones (fencing, recovery) each have
        # their own disk-read threads, so recovery never waits for a catch-up read's thread
        self._reads = trio.CapacityLimiter(config.num_read_worker_threads)
        self._priority_reads = trio.CapacityLimiter(config.num_high_priority_worker_threads)
        self._fences: dict[int, JournalTicket] = {}  # ledger -> journal ticket of its fence record
        # ledgers fenced in memory whose fence record failed (journal out of space): the next
        # fence journals it again instead of answering from memory
        self._fences_not_durable: set[int] = set()
        # Fast path of the add check: ledgers known to have this master key and not be fenced.
        # Fencing removes the ledger; `forget_ledger` (GC) too.
        self._writable_keys: dict[int, bytes] = {}
        self.fatal_error: str | None = None
        self.fatal = trio.Event()
        self._ready = False
        self.requests_in_flight = 0  # kept by the server; a gauge update per request costs too much
        metrics.server_status.set(1)
        metrics.in_flight_requests.set_function(lambda: self.requests_in_flight)
        journal.on_state_change = self._journal_state_changed
        if space_guard is not None:
            space_guard.on_full = self._allocation_would_fill

    # ------------------------------------------------------------------ state

    @property
    def journal(self) -> Journal | JournalGroup:
        """The journal, or the group of journals with ``journalDirectories`` (for statistics and
        tests)."""
        return self._journal

    @property
    def storage(self) -> DbLedgerStorage:
        """The ledger storage (for GC, statistics and tests)."""
        return self._storage

    @property
    def state(self) -> BookieState:
        """The current `BookieState`."""
        return BookieState.READ_ONLY if self._reasons else BookieState.WRITABLE

    @property
    def read_only_reasons(self) -> frozenset[ReadOnlyReason]:
        """The reasons that hold the bookie read-only (empty when writable)."""
        return frozenset(self._reasons)

    @property
    def ready(self) -> bool:
        """Whether the bookie can serve (REST ``/api/v1/bookie/is_ready``): set by whoever runs it
        (`serve_bookie_process`: serving and, with a metadata store, registered) with `set_ready`;
        never while closing or after a fatal error."""
        return self._ready and not self._closing and not self.fatal.is_set()

    def set_ready(self, ready: bool) -> None:
        """Mark the bookie ready to serve, or no longer ready (shutting down)."""
        self._ready = ready

    async def wait_state_change(self) -> None:
        """Return after the next change of `state`."""
        await self._state_changed.wait()

    def set_manual_read_only(self, read_only: bool) -> None:
        """Set or clear the MANUAL read-only reason (REST ``PUT /api/v1/bookie/state``)."""
        self._set_reason(ReadOnlyReason.MANUAL, read_only, "set by an operator")

    def set_disk_full(self, full: bool, detail: str = "") -> None:
        """Set or clear DISK_FULL (the disk checker). Without readOnlyModeEnabled, sets `fatal`."""
        if full and not self.config.read_only_mode_enabled and ReadOnlyReason.DISK_FULL not in self._reasons:
            self.fail_fatally(f"disks full and readOnlyModeEnabled is false: {detail}")
        self._set_reason(ReadOnlyReason.DISK_FULL, full, detail)

    def _allocation_would_fill(self, detail: str) -> None:
        """The space guard: an allocation would pass diskUsageThreshold (rule 2, DISK_FULL)."""
        if ReadOnlyReason.DISK_FULL not in self._reasons:
            self.metrics.disk_full_early.inc()
        self.set_disk_full(True, detail)

    def _journal_state_changed(self, state: JournalState) -> None:
        if state is JournalState.NO_SPACE:
            self._journal_no_space(str(self._journal.error))
        elif state is JournalState.FAILED:
            self._set_reason(ReadOnlyReason.JOURNAL_FAILED, True, str(self._journal.error))
        # back to SERVING after resume: JOURNAL_NO_SPACE clears in space_available (rule 2)

    def _journal_no_space(self, detail: str) -> None:
        if ReadOnlyReason.JOURNAL_NO_SPACE in self._reasons:
            return
        if not self.config.read_only_mode_enabled:
            self.fail_fatally(f"journal out of space and readOnlyModeEnabled is false: {detail}")
        self._set_reason(ReadOnlyReason.JOURNAL_NO_SPACE, True, detail)

    async def space_available(self) -> None:
        """The disk checker found every directory below diskUsageLwmThreshold: undo what a full
        disk stopped (rule 2).

        Resumes a NO_SPACE journal on a fresh file, then checkpoints (the write cache, and ledger
        state that only reached memory, go to the entry logs and the index); JOURNAL_NO_SPACE
        clears after that checkpoint, STORAGE_ERROR with it. Recreates the journal's reserve file
        if it was spent. Never raises for a disk error: the reasons stay and the next check
        tries again.
        """
        no_space = ReadOnlyReason.JOURNAL_NO_SPACE in self._reasons
        if not no_space and ReadOnlyReason.STORAGE_ERROR not in self._reasons:
            await self._journal.ensure_reserve()
            return
        if no_space and not await self._journal.resume():
            log.warning("bookie %s: the journal still cannot resume (%s)", self.bookie_id, self._journal.error)
            return
        try:
            await self._storage.flush()
        except StorageIOError as exc:
            self._on_flush_error(exc)
            log.warning("bookie %s: checkpoint after the disk had space again failed: %s", self.bookie_id, exc)
            return
        if no_space and ReadOnlyReason.STORAGE_ERROR not in self._reasons:
            self._set_reason(ReadOnlyReason.JOURNAL_NO_SPACE, False, "journal resumed on a fresh file; checkpoint done")
        await self._journal.ensure_reserve()

    def fail_fatally(self, message: str) -> None:
        """Ask the owner to shut the bookie down (`fatal` is set; `fatal_error` says why)."""
        log.error("bookie must stop: %s", message)
        self.fatal_error = message
        self.fatal.set()

    def _set_reason(self, reason: ReadOnlyReason, present: bool, detail: str = "") -> None:
        before = self.state
        if present:
            if reason in self._reasons:
                return
            self._reasons.add(reason)
        else:
            if reason not in self._reasons:
                return
            self._reasons.discard(reason)
        self.metrics.read_only_reasons.labels(reason.value).set(1 if present else 0)
        after = self.state
        log.warning(
            "bookie %s: read-only reason %s %s (%s); state %s",
            self.bookie_id,
            reason.value,
            "set" if present else "cleared",
            detail,
            after.value,
        )
        if after is not before:
            self.metrics.server_status.set(1 if after is BookieState.WRITABLE else 0)
            self.metrics.state_changes.inc()
            self._state_changed.set()
            self._state_changed = trio.Event()

    def _journal_failed(self, exc: BaseException) -> BookieError:
        if isinstance(exc, JournalNoSpaceError):
            self._journal_no_space(str(exc))
            return BookieError(StatusCode.EIO, f"journal out of space: {exc}")
        if isinstance(exc, JournalIOError):
            self._set_reason(ReadOnlyReason.JOURNAL_FAILED, True, str(exc))
            return BookieError(StatusCode.EIO, f"journal failed: {exc}")
        return BookieError(StatusCode.EIO, f"journal not accepting records: {exc}")

    def _on_flush_error(self, exc: StorageIOError) -> None:
        self._set_reason(ReadOnlyReason.STORAGE_ERROR, True, str(exc))

    def _safe_mark(self) -> Any:
        # a LogMark, or one per journal (a GroupMark) with journalDirectories
        mark: Any = self._journal.current_mark()
        for first in self._inflight.values():  # insertion order = submission order = lowest mark
            return self._journal.earliest(mark, first)
        return mark

    # ------------------------------------------------------------------ journal helpers

    def _submit(self, record: JournalRecord) -> JournalTicket:
        """Enqueue a record now. Raises trio.WouldBlock (queue full) or BookieError (journal failed)."""
        try:
            if isinstance(record, AddEntry):
                return self._journal.submit_add_entry(record.ledger_id, record.entry_id, record.data)
            return self._journal.submit(record)
        except JournalError as exc:
            raise self._journal_failed(exc) from None

    async def _submit_waiting(self, record: JournalRecord) -> JournalTicket:
        while True:
            try:
                return self._submit(record)
            except trio.WouldBlock:
                await self.wait_for_journal_space()

    async def _durable(self, ticket: JournalTicket) -> None:
        try:
            if not ticket.done:
                await ticket.wait()
            ticket.result()
        except JournalError as exc:
            raise self._journal_failed(exc) from None

    def _key_needed(self, ledger_id: int, master_key: bytes) -> bool:
        """Check ``master_key`` against the ledger's; True when the ledger has none recorded yet."""
        st = self._storage
        if st.ledger_exists(ledger_id):
            key = st.master_key(ledger_id)
            if key:
                if key != master_key:
                    raise BookieError(StatusCode.EUA, f"wrong master key for ledger {ledger_id}")
                return False
        return True

    async def _record_key(self, ledger_id: int, master_key: bytes) -> JournalTicket | None:
        if not self._key_needed(ledger_id, master_key):
            return None
        ticket = await self._submit_waiting(MasterKey(ledger_id, master_key))
        self._storage.set_master_key(ledger_id, master_key)
        return ticket

    # ------------------------------------------------------------------ adds

    def submit_add(
        self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *, recovery: bool = False
    ) -> AddTicket:
        """Check an add and enqueue its journal record(s) now, without waiting.

        Raises BookieError: EREADONLY (read-only, rule 3), EBADREQ (body shorter than an entry
        header), EUA (wrong master key), EFENCED (fenced and not a recovery add), EIO (journal
        failed or closing). Raises ``trio.WouldBlock`` when the journal queue is full: await
        ``bookie.wait_for_journal_space()`` and submit again. The first add of a ledger records
        its master key (journaled before the entry).
        """
        if self._closing:
            raise BookieError(StatusCode.EIO, "bookie is shutting down")
        if self._reasons and (
            not recovery
            or ReadOnlyReason.JOURNAL_FAILED in self._reasons
            or ReadOnlyReason.JOURNAL_NO_SPACE in self._reasons
        ):
            raise BookieError(StatusCode.EREADONLY, f"bookie is read-only ({self._reason_text()})")
        if len(body) < ENTRY_METADATA_SIZE:  # any digest type: the bookie reads only the ids and LAC
            raise BookieError(StatusCode.EBADREQ, f"entry of {len(body)} bytes is shorter than its header")
        journal = self._journal
        start = journal.current_mark()
        if self._writable_keys.get(ledger_id) != master_key:  # not the fast path: check fully
            key_needed = self._key_needed(ledger_id, master_key)
            fenced = not key_needed and self._storage.is_fenced(ledger_id)
            if fenced and not recovery:
                raise BookieError(StatusCode.EFENCED, f"ledger {ledger_id} is fenced")
            if key_needed:
                self._submit(MasterKey(ledger_id, master_key))
                self._storage.set_master_key(ledger_id, master_key)
            if not fenced:
                self._writable_keys[ledger_id] = master_key
        try:
            jt = journal.submit_add_entry(ledger_id, entry_id, body)
        except JournalError as exc:
            raise self._journal_failed(exc) from None
        token = self._next_token
        self._next_token = token + 1
        self._inflight[token] = start
        return AddTicket(ledger_id, entry_id, body, jt, token)

    async def wait_for_journal_space(self) -> None:
        """Return when the journal queue may have room for another submission (EIO if it failed)."""
        try:
            await self._journal.wait_for_space()
        except JournalError as exc:
            raise self._journal_failed(exc) from None

    def forget_ledger(self, ledger_id: int) -> None:
        """Drop what the core caches about a ledger (call after the storage deleted it)."""
        self._writable_keys.pop(ledger_id, None)
        self._fences_not_durable.discard(ledger_id)
        self._lacs.forget(ledger_id)

    def abandon_add(self, ticket: AddTicket) -> None:
        """Forget a submitted add that will never be completed (its connection closed). It was
        not acknowledged; it may still become durable in the journal."""
        self._inflight.pop(ticket.token, None)

    def finish_add(self, ticket: AddTicket) -> bool:
        """`complete_add` without waiting, for an add whose journal ticket is done (the server's
        hot path: no coroutine per add). True when the add completed; False when the write cache
        has no room now (nothing changed: await `complete_add` then). Raises BookieError EIO when
        the journal failed it (the add was not acknowledged), RuntimeError if not done yet.
        """
        jt = ticket.journal_ticket
        if not jt.done:
            raise RuntimeError("finish_add before the journal record is done")
        if jt.failed:
            self._inflight.pop(ticket.token, None)
            try:
                jt.result()
            except JournalError as exc:
                raise self._journal_failed(exc) from None
        body = ticket.body
        if not self._storage.try_add_entry(ticket.ledger_id, ticket.entry_id, body):
            return False
        self._inflight.pop(ticket.token, None)
        self._lacs.advance(ticket.ledger_id, _LAC_IN_ENTRY.unpack_from(body, 16)[0])
        return True

    async def complete_add(self, ticket: AddTicket) -> None:
        """Wait until the add is durable, then make it readable and track its piggybacked LAC.

        Raises BookieError: EIO (journal or storage failure; the add was not acknowledged),
        ETOOMANYREQUESTS (the write cache stayed full for dbStorage_maxThrottleTimeMs).
        """
        try:
            jt = ticket.journal_ticket
            try:  # inlined `_durable`: this runs once per add
                if not jt.done:
                    await jt.wait()
                if jt.failed:
                    jt.result()
            except JournalError as exc:
                raise self._journal_failed(exc) from None
            try:
                await self._storage.add_entry(ticket.ledger_id, ticket.entry_id, ticket.body)
            except WriteCacheFull as exc:
                raise BookieError(StatusCode.ETOOMANYREQUESTS, str(exc)) from None
            except StorageIOError as exc:
                raise BookieError(StatusCode.EIO, str(exc)) from None
        finally:
            self._inflight.pop(ticket.token, None)
        (lac,) = _LAC_IN_ENTRY.unpack_from(ticket.body, 16)
        self._lacs.advance(ticket.ledger_id, lac)

    async def add_entry(
        self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *, recovery: bool = False
    ) -> None:
        """`submit_add` (waiting for journal space) then `complete_add`; same errors."""
        while True:
            try:
                ticket = self.submit_add(ledger_id, entry_id, master_key, body, recovery=recovery)
                break
            except trio.WouldBlock:
                await self.wait_for_journal_space()
        await self.complete_add(ticket)

    # ------------------------------------------------------------------ reads

    async def read_entry(self, ledger_id: int, entry_id: int, *, high_priority: bool = False) -> bytes:
        """The stored entry (``entry_id == -1``: the last one). ENOLEDGER, ENOENTRY or EIO.
        A disk read takes a thread of the high-priority pool (``num_high_priority_worker_threads``)
        or of the ordinary one (``num_read_worker_threads``)."""
        limiter = self._priority_reads if high_priority else self._reads
        try:
            return await self._storage.get_entry(ledger_id, entry_id, limiter=limiter)
        except NoSuchLedger:
            raise BookieError(StatusCode.ENOLEDGER, f"no ledger {ledger_id}") from None
        except NoSuchEntry:
            raise BookieError(StatusCode.ENOENTRY, f"no entry {entry_id} in ledger {ledger_id}") from None
        except StorageIOError as exc:
            raise BookieError(StatusCode.EIO, str(exc)) from None

    async def fence(self, ledger_id: int, master_key: bytes) -> None:
        """Fence a ledger durably (journal record, then the index at the next checkpoint).

        Returns once the fence is durable, also when it was fenced already (a concurrent fence
        still in the journal is waited for). Creates the ledger with ``master_key`` if unknown.
        Raises BookieError EUA (wrong key) or EIO (journal failed).
        """
        key_ticket = await self._record_key(ledger_id, master_key)
        ticket = self._fences.get(ledger_id)
        self._writable_keys.pop(ledger_id, None)
        if ticket is None and (ledger_id in self._fences_not_durable or not self._storage.is_fenced(ledger_id)):
            ticket = await self._submit_waiting(FenceLedger(ledger_id))
            self._storage.set_fenced(ledger_id)  # at once: adds after this point are refused
            self._fences[ledger_id] = ticket
        try:
            if key_ticket is not None:
                await self._durable(key_ticket)
            if ticket is not None:
                try:
                    await self._durable(ticket)
                except BookieError:
                    self._fences_not_durable.add(ledger_id)
                    raise
                self._fences_not_durable.discard(ledger_id)
        finally:
            if ticket is not None and self._fences.get(ledger_id) is ticket and ticket.done:
                del self._fences[ledger_id]

    async def lac(self, ledger_id: int) -> int:
        """The highest LAC known for the ledger (piggybacked or explicit; -1 if none). ENOLEDGER."""
        known = self._lacs.known(ledger_id)
        if known is not None:
            return known
        st = self._storage
        if not st.ledger_exists(ledger_id):
            raise BookieError(StatusCode.ENOLEDGER, f"no ledger {ledger_id}")
        lac = -1
        explicit = st.explicit_lac(ledger_id)
        if explicit is not None and len(explicit) >= LAC_METADATA_SIZE:  # its code depends on the digest type
            (lac,) = _LAC_IN_ENTRY.unpack_from(explicit, 8)
        try:
            last = await st.get_entry(ledger_id, -1)
            if len(last) >= ENTRY_METADATA_SIZE:
                lac = max(lac, _LAC_IN_ENTRY.unpack_from(last, 16)[0])
        except (NoSuchEntry, NoSuchLedger):
            pass
        except StorageIOError as exc:
            raise BookieError(StatusCode.EIO, str(exc)) from None
        self._lacs.advance(ledger_id, lac)
        return self._lacs.known(ledger_id)  # type: ignore[return-value]

    async def wait_lac(self, ledger_id: int, previous: int, timeout_s: float) -> int:
        """Long poll: return the LAC once it is above ``previous``, or the current one after
        ``timeout_s`` (capped by long_poll_max_timeout_ms). Raises BookieError ETOOMANYREQUESTS
        when long_poll_max_waiters polls already wait; ENOLEDGER for an unknown ledger."""
        await self.lac(ledger_id)
        try:
            return await self._lacs.wait_above(
                ledger_id, previous, min(timeout_s, self.config.long_poll_max_timeout_ms / 1000)
            )
        except TooManyWaiters as exc:
            raise BookieError(StatusCode.ETOOMANYREQUESTS, str(exc)) from None

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes, body: bytes) -> None:
        """Record an explicit LAC (``body`` is the digest-framed LAC) durably.

        Raises BookieError EREADONLY, EUA or EIO.
        """
        if self._reasons:
            raise BookieError(StatusCode.EREADONLY, f"bookie is read-only ({self._reason_text()})")
        key_ticket = await self._record_key(ledger_id, master_key)
        ticket = await self._submit_waiting(ExplicitLac(ledger_id, lac, body))
        if key_ticket is not None:
            await self._durable(key_ticket)
        await self._durable(ticket)
        self._storage.set_explicit_lac(ledger_id, body)
        await self.lac(ledger_id)  # load what storage knows first, then raise it
        self._lacs.advance(ledger_id, lac)

    async def read_lac(self, ledger_id: int) -> tuple[bytes | None, bytes | None]:
        """``(explicit LAC body, last entry)`` of a ledger, each None if absent.

        Raises BookieError ENOLEDGER (unknown ledger), ENOENTRY (neither exists) or EIO."""
        st = self._storage
        if not st.ledger_exists(ledger_id):
            raise BookieError(StatusCode.ENOLEDGER, f"no ledger {ledger_id}")
        explicit = st.explicit_lac(ledger_id)
        try:
            last: bytes | None = await st.get_entry(ledger_id, -1)
        except (NoSuchEntry, NoSuchLedger):
            last = None
        except StorageIOError as exc:
            raise BookieError(StatusCode.EIO, str(exc)) from None
        if explicit is None and last is None:
            raise BookieError(StatusCode.ENOENTRY, f"ledger {ledger_id} has no entry and no explicit LAC")
        return explicit, last

    async def force_ledger(self, ledger_id: int) -> None:
        """Return once every record journaled before this call is durable. EIO if the journal failed."""
        await self._durable(await self._submit_waiting(_PADDING_BARRIER))

    def disk_space(self) -> tuple[int, int]:
        """``(total, free)`` bytes over the distinct file systems of the ledger directories."""
        seen: set[int] = set()
        total = free = 0
        for d in self.config.ledger_dirs:
            st = os.statvfs(d)
            dev = os.stat(d).st_dev
            if dev in seen:
                continue
            seen.add(dev)
            total += st.f_blocks * st.f_frsize
            free += st.f_bavail * st.f_frsize
        return total, free

    # ------------------------------------------------------------------ replay and lifecycle

    async def _replay(self) -> None:
        st = self._storage
        half = self.config.write_cache_max_mb * 1024 * 1024 // 2
        buffered = 0
        hold = False  # a flush failed (full disk): keep the rest in memory (`hold_entry`)

        async def apply(mark: LogMark, record: JournalRecord) -> None:
            nonlocal buffered, hold
            if isinstance(record, AddEntry):
                if buffered + len(record.data) > half and buffered and not hold:
                    try:
                        await st.flush()  # no checkpoint completes while replaying (the mark is None)
                        buffered = 0
                    except StorageIOError as exc:
                        hold = True
                        self._on_flush_error(exc)
                        log.warning(
                            "journal replay cannot flush (%s): keeping the replayed entries in "
                            "memory until the disk has space again",
                            exc,
                        )
                if hold:
                    st.hold_entry(record.ledger_id, record.entry_id, record.data)
                else:
                    await st.add_entry(record.ledger_id, record.entry_id, record.data)
                buffered += len(record.data)
                if len(record.data) >= ENTRY_METADATA_SIZE:
                    (lac,) = _LAC_IN_ENTRY.unpack_from(record.data, 16)
                    self._lacs.advance(record.ledger_id, lac)
            elif isinstance(record, FenceLedger):
                st.set_fenced(record.ledger_id)
            elif isinstance(record, MasterKey):
                st.set_master_key(record.ledger_id, record.master_key)
            elif isinstance(record, ExplicitLac):
                st.set_explicit_lac(record.ledger_id, record.data)
                self._lacs.advance(record.ledger_id, record.lac)

        report = await self._journal.replay(apply)
        if report.stop is not None:
            log.warning("journal replay stopped early at %s", report.stop)
        self._source.replaying = False
        try:  # checkpoint: replayed entries into entry logs, then LastLogMark = replay end
            await st.flush()
        except StorageIOError as exc:
            self._on_flush_error(exc)
            log.error(
                "bookie %s: checkpoint after replay failed (%s); starting read-only, the write cache "
                "and the journal keep the data",
                self.bookie_id,
                exc,
            )
        log.info(
            "bookie %s: replayed %d journal records; LastLogMark %s",
            self.bookie_id,
            report.records,
            self._journal.persisted_mark,
        )

    def _reason_text(self) -> str:
        return ", ".join(sorted(r.value for r in self._reasons))

    def statistics(self) -> BookieStatistics:
        """A snapshot of the core's state."""
        return BookieStatistics(
            self.bookie_id,
            self.state,
            tuple(sorted(r.value for r in self._reasons)),
            len(self._inflight),
            self._lacs.waiters,
            len(self._lacs),
        )


@asynccontextmanager
async def open_bookie(
    config: BookieConfig,
    *,
    registry: CollectorRegistry | None = None,
    journal_disk: JournalDisk | None = None,
    file_ops: Any = None,
    background: Callable[[Bookie, trio.Nursery], None] | None = None,
    store: MetadataStore | None = None,
    space_guard: SpaceGuard | None = None,
) -> AsyncIterator[Bookie]:
    """Open the directories, replay the journal, checkpoint, and run the bookie until exit.

    Yields a serving `Bookie`; its journal, storage and garbage-collector loops run in a nursery
    owned here. GC (`Bookie.gc`, from `BookieConfig.gc_config`) starts after the replay; it
    compares local ledgers with ``store`` under ``metadata_root``, and without a store deletes
    no ledger (it still reclaims the logs of ledgers deleted otherwise). On exit
    (also on cancellation) it stops accepting adds, lets the journal write and sync what it
    accepted, checkpoints (flush + LastLogMark) and closes the files. Cookies are not checked
    here (see `check_cookies`). ``space_guard`` (default: one at diskUsageThreshold over the
    real file systems) is asked before the journal and the storage allocate. A disk too full for
    the replay's checkpoint or for a journal file does not stop the start: the bookie comes up
    read-only (module docstring, "Full disk"). ``journal_disk`` / ``file_ops`` inject failures in tests;
    ``background(bookie, nursery)`` may start more tasks that are cancelled on exit.
    Raises ConfigError, OSError, or the journal's errors if the directories cannot be used.
    """
    config.validate()
    registry = registry if registry is not None else CollectorRegistry()
    metrics = BookieServerMetrics(registry)
    guard = space_guard if space_guard is not None else SpaceGuard(config.disk_usage_threshold)
    journal: Journal | JournalGroup
    if len(config.journal_directories) > 1:  # journalDirectories: one journal per directory
        if journal_disk is not None:
            raise ValueError("journal_disk (a test seam) needs a single journal directory")
        journal = await JournalGroup.open(
            config.journal_directories,
            config.ledger_dirs,
            config.journal_config(),
            metrics=JournalMetrics(registry),
            space_guard=guard,
        )
    else:
        journal = await Journal.open(
            config.journal_dir,
            config.ledger_dirs,
            config.journal_config(),
            disk=journal_disk,
            metrics=JournalMetrics(registry),
            space_guard=guard,
        )
    bookie = Bookie(config, journal, registry, metrics, space_guard=guard)
    mib = 1024 * 1024
    bookie._storage = storage = await DbLedgerStorage.open(
        config.ledger_dirs,
        log_size_limit=config.log_size_limit,
        write_cache_max_bytes=config.write_cache_max_mb * mib,
        read_cache_max_bytes=config.read_cache_max_mb * mib,
        read_ahead_batch_size=config.read_ahead_batch_size,
        max_throttle_time_ms=config.max_throttle_time_ms,
        flush_interval_ms=config.flush_interval_ms,
        flush_entrylog_bytes=config.flush_entrylog_bytes,
        flush_pace_fraction=config.flush_pace_fraction,
        entry_log_per_ledger=config.entry_log_per_ledger_enabled,
        max_active_entry_logs=config.maximum_number_of_active_entry_logs,
        checkpoint_source=bookie._source,
        on_flush_error=bookie._on_flush_error,
        registry=registry,
        file_ops=file_ops,
        space_guard=guard,
    )
    # compaction holds its syncs back while a journal sync is in flight (bookie._io_priority)
    for j in journal.journals if isinstance(journal, JournalGroup) else (journal,):
        j.sync_priority = storage.sync_priority
    try:
        await bookie._replay()
        bookie.gc = gc = GarbageCollector(
            storage,
            config.gc_config(),
            store=store,
            metadata_root=config.metadata_root,
            bookie_id=bookie.bookie_id,
            registry=registry,
            on_ledger_deleted=bookie.forget_ledger,
        )
        gc_scope = trio.CancelScope()

        async def run_gc(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with gc_scope:
                await gc.run(task_status=task_status)

        async with trio.open_nursery() as nursery:
            await nursery.start(journal.serve)
            await nursery.start(storage.run)
            await nursery.start(run_gc)
            if background is not None:
                background(bookie, nursery)
            try:
                yield bookie
            finally:
                with trio.CancelScope(shield=True):
                    bookie._closing = True
                    gc_scope.cancel()  # no compaction chunk competes with the final checkpoint
                    await journal.aclose()
                    try:  # safe after a journal failure too: the mark covers acknowledged adds only
                        await storage.flush()
                    except (StorageIOError, JournalError) as exc:
                        log.error("final checkpoint failed (the journal still holds the data): %s", exc)
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await storage.aclose()
