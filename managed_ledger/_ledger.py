"""`ManagedLedger`: one topic partition as a chain of BookKeeper ledgers.

States (`ManagedLedgerState`) and their rules:

* Rule 1: INITIALIZING -> LEDGER_OPENED once the list is claimed (rewritten with a
  compare-and-set, so the previous owner can no longer roll into it), the last ledger of the
  previous owner is recovered (fenced, its true last entry and size recorded), a new ledger is
  created and the list is written with a compare-and-set; -> TERMINATED instead when the
  metadata says terminated.
* Rule 2: LEDGER_OPENED -> ROLLING when the current ledger is full (entries, size or age, each
  only once the ledger is ``minimum_rollover_time_s`` old), idle for
  ``inactive_ledger_rollover_time_s``, an add on it failed, or ``rollover()`` was called. Adds
  that arrive while ROLLING queue in order behind the ones in flight.
* Rule 3: ROLLING -> LEDGER_OPENED when the old ledger is closed, the new ledger is in the list
  (CAS) and every queued add -- including adds that failed on the old ledger -- has been reissued
  on it, oldest first. A rolled ledger with 0 entries is removed from the list and deleted.
* Rule 4: ROLLING -> LEDGER_CLOSED when no new ledger could be created: the queued adds fail;
  LEDGER_CLOSED -> ROLLING on the next add.
* Rule 5: ROLLING -> FENCED when the CAS of the list fails: another owner opened the managed
  ledger. FENCED is final: pending and later adds raise `ManagedLedgerFenced`.
* Rule 6: LEDGER_OPENED / LEDGER_CLOSED -> TERMINATED by ``terminate()`` (reads go on, adds
  raise `ManagedLedgerTerminated`); any state -> CLOSED by ``close()`` (final).

Adds complete in the order they were admitted, and a caller is told success only after its entry
and every earlier one are acknowledged by the ack quorum, so the sequence a new owner recovers
contains every acknowledged entry, in order. Bytes in flight are bounded; admission is FIFO.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from bk_client import NoSuchLedger
from bk_client.api import BookKeeperClient, WriteHandle
from managed_ledger._append_pipeline import AppendPipeline
from managed_ledger._cache import EntryCache
from managed_ledger._config import ManagedLedgerConfig
from managed_ledger._cursor import ManagedCursor
from managed_ledger._ledger_cursors import CursorsAndTrimming
from managed_ledger._errors import (
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
)
from managed_ledger._ledger_list import LedgerList
from managed_ledger._reader import LedgerReader
from managed_ledger._types import Entry
from managed_ledger.metrics import ManagedLedgerMetrics
from managed_ledger.protocol import LedgerInfo, ManagedLedgerInfo, Position
from metadata import BadVersionError, NodeExistsError, NoNodeError

if TYPE_CHECKING:
    from metadata import MetadataStore

__all__ = ["ManagedLedger", "ManagedLedgerState", "ML_ROOT"]

log = logging.getLogger(__name__)

ML_ROOT = "/managed-ledgers"
_OPEN_ATTEMPTS = 5
_MAX_ADD_ATTEMPTS = 3  # ledgers one add may fail on before the add fails back to its caller


class _ListChanged(Exception):
    """The ledger list's version moved while opening."""


class ManagedLedgerState(enum.Enum):
    """Lifecycle of a managed ledger; the rules are in the module header."""

    INITIALIZING = "initializing"
    LEDGER_OPENED = "ledger_opened"
    ROLLING = "rolling"
    LEDGER_CLOSED = "ledger_closed"
    TERMINATED = "terminated"
    FENCED = "fenced"
    CLOSED = "closed"


class _Add(enum.Enum):
    QUEUED = "queued"        # admitted, waiting for a writable ledger
    ISSUED = "issued"        # handed to the ledger's write handle
    SUCCEEDED = "succeeded"  # acknowledged by the ledger, not yet completed in order
    FAILED = "failed"        # the ledger refused it; it is reissued after the roll
    DONE = "done"            # completed back to the caller (position or error)


@dataclass(eq=False)
class _AddOp:
    data: bytes
    started: float
    state: _Add = _Add.QUEUED
    gen: int = -1
    attempts: int = 0
    entry_id: int = -1
    position: Position | None = None
    error: BaseException | None = None
    done: trio.Event = field(default_factory=trio.Event)


@dataclass
class _Context:
    """What a managed ledger borrows from its factory."""

    bk: BookKeeperClient
    store: MetadataStore
    config: ManagedLedgerConfig
    clock: Callable[[], float]
    metrics: ManagedLedgerMetrics
    cache: EntryCache
    on_closed: Callable[[str], None]


class ManagedLedger(CursorsAndTrimming):
    """An append-only log of entries over a chain of ledgers, with durable and non-durable cursors.

    Obtain one from `ManagedLedgerFactory.open`; only one broker should own a name at a time
    (opening fences the previous owner). Thread-unsafe; use from one trio run.
    """

    def __init__(self, name: str, ctx: _Context) -> None:
        if not name or name.startswith("/") or name.endswith("/") or "//" in name:
            raise ManagedLedgerError(f"invalid managed ledger name {name!r}")
        self.name = name
        self._ctx = ctx
        self._cfg = ctx.config
        self._path = f"{ML_ROOT}/{name}"
        self.state = ManagedLedgerState.INITIALIZING
        self._ledgers = LedgerList()
        self._info_version = -1
        self._properties: dict[str, str] = {}
        self._terminated_at: Position | None = None
        self._handle: WriteHandle | None = None
        self._gen = 0
        self._ledger_created_at = ctx.clock()
        self._last_add_at = ctx.clock()
        self._pending: deque[_AddOp] = deque()
        self._queued: deque[_AddOp] = deque()
        self._issued_inflight = 0
        self._inflight_bytes = 0
        self._bytes_freed = trio.Event()
        self._op_finished = trio.Event()
        self._admission_lock = trio.Lock()
        self._issuing: deque[tuple[_AddOp, WriteHandle, int]] = deque()
        self._pipeline: AppendPipeline | None = None
        self._meta_lock = trio.Lock()
        self._cursor_lock = trio.Lock()
        self._roll_done = trio.Event()
        self._roll_done.set()
        self._entries_event = trio.Event()
        self._closing = False
        self._terminating = False
        self._nursery: trio.Nursery | None = None
        self._reader = LedgerReader(name, ctx.bk, ctx.cache, self._cfg.max_open_read_handles)
        self._cursors: dict[str, ManagedCursor] = {}
        self._non_durable: set[ManagedCursor] = set()
        self._reader_seq = 0
        self.entries_added_counter = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            nursery.start_soon(self._rollover_loop)
            nursery.start_soon(self._flush_loop)

    async def _initialize(self) -> None:
        # A lost CAS here means the previous owner changed the list while we recovered (it
        # rolled); read it again and recover its newest ledger too.
        for attempt in range(_OPEN_ATTEMPTS):
            try:
                await self._recover_and_take_over()
                break
            except _ListChanged:
                if attempt == _OPEN_ATTEMPTS - 1:
                    raise ManagedLedgerFenced(f"{self.name}: the ledger list kept changing while "
                                              "opening; another owner is active") from None
        await self._load_cursors()

    async def _recover_and_take_over(self) -> None:
        store, bk = self._ctx.store, self._ctx.bk
        try:
            value, stat = await store.get(self._path)
        except NoNodeError:
            try:
                await store.create(self._path, ManagedLedgerInfo().encode(), make_parents=True)
            except NodeExistsError:
                pass
            value, stat = await store.get(self._path)
        # Claim the list before recovering its last ledger: rewriting it moves the version, so
        # the previous owner can no longer add a ledger to it (its roll's CAS fails and it is
        # fenced). Without the claim, an owner that keeps appending rolls to a new ledger after
        # each fenced add and wins the race for the list every time, and the new owner never
        # gets in (seen over real bookies: "the ledger list kept changing").
        try:
            stat = await store.set(self._path, value, version=stat.version)
        except (BadVersionError, NoNodeError) as exc:
            raise _ListChanged() from exc
        info = ManagedLedgerInfo.decode(value)
        self._info_version = stat.version
        self._properties = dict(info.properties)
        self._terminated_at = info.terminated_position
        infos = list(info.ledgers)
        doomed: list[int] = []
        if infos:
            last = infos[-1]
            try:
                # Recovery fences the previous owner's ledger: its next add fails.
                handle = await bk.open_ledger(last.ledger_id, recovery=True)
                # A ledger the previous owner closed and recorded keeps its close time, so that
                # retention time counts from the real close, not from each reopen.
                closed_at = last.timestamp_ms or self._now_ms()
                infos[-1] = LedgerInfo(last.ledger_id, handle.last_add_confirmed + 1, handle.length,
                                       closed_at)
                await handle.close()
            except NoSuchLedger:
                infos.pop()  # deleted behind our back: nothing in it to keep
            except Exception as exc:
                raise ManagedLedgerError(f"{self.name}: cannot recover ledger {last.ledger_id}: {exc}") from exc
            if infos and infos[-1].entries == 0 and (len(infos) > 1 or info.terminated_position is None):
                doomed.append(infos.pop().ledger_id)
        self._ledgers = LedgerList(tuple(infos))
        created = None
        if info.terminated_position is None:
            created = await self._create_ledger()
            self._ledgers.append_current(created.ledger_id)
        try:
            await self._write_info(fence=False)
        except _ListChanged:
            if created is not None:
                await self._delete_quietly(created.ledger_id)
            raise
        if created is None:
            self.state = ManagedLedgerState.TERMINATED
        else:
            self._switch_to(created)
        for lid in doomed:
            await self._delete_quietly(lid)

    async def close(self) -> None:
        """Finish the adds in flight, persist every durable cursor, close the current ledger and
        record it in the list. Later calls raise `ManagedLedgerClosed`. Idempotent."""
        if self.state is ManagedLedgerState.CLOSED or self._closing:
            return
        self._closing = True
        await self._wait_pending_empty()
        for cursor in list(self._cursors.values()) + list(self._non_durable):
            try:
                await cursor.close()
            except ManagedLedgerError as exc:
                log.warning("%s: closing cursor %s: %s", self.name, cursor.name, exc)
        if self.state not in (ManagedLedgerState.FENCED, ManagedLedgerState.TERMINATED):
            try:
                await self._close_current_ledger()
            except ManagedLedgerError as exc:
                log.warning("%s: closing the current ledger: %s", self.name, exc)
        await self._reader.close()
        self.state = ManagedLedgerState.CLOSED
        self._ctx.cache.invalidate(self.name)
        self._notify_readers()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        self._ctx.on_closed(self.name)

    async def terminate(self) -> Position:
        """Stop accepting adds for good; return the last entry's position. Adds in flight finish
        first. Raises `ManagedLedgerClosed` / `ManagedLedgerFenced` in those states."""
        if self.state is ManagedLedgerState.TERMINATED:
            return self.last_confirmed_entry
        self._check_open()
        self._terminating = True  # new adds are refused while we finish the ones in flight
        try:
            await self._wait_pending_empty()
            self._check_open()
            lce = self.last_confirmed_entry
            self._terminated_at = lce
            await self._close_current_ledger()
            self.state = ManagedLedgerState.TERMINATED
        finally:
            self._terminating = False
        self._notify_readers()
        return lce

    async def _close_current_ledger(self) -> None:
        async with self._meta_lock:
            handle, self._handle = self._handle, None
            self._reader.write_ledger = None
            if handle is not None:
                await self._close_handle_quietly(handle)
            closed = self._ledgers.close_current(self._now_ms())
            doomed = None
            if closed is not None and closed.entries == 0 and len(self._ledgers) > 1:
                self._ledgers.remove(closed.ledger_id)
                doomed = closed.ledger_id
            await self._write_info()
        if doomed is not None:
            await self._delete_quietly(doomed)

    # --- properties --------------------------------------------------------------------------

    @property
    def last_confirmed_entry(self) -> Position:
        """The last completed entry, or ``Position(first ledger, -1)`` when there is none."""
        return self._ledgers.last_confirmed()

    @property
    def number_of_entries(self) -> int:
        """Entries over the ledgers still in the list."""
        return self._ledgers.number_of_entries

    @property
    def total_size(self) -> int:
        """Payload bytes over the ledgers still in the list."""
        return self._ledgers.total_size

    @property
    def ledgers(self) -> list[LedgerInfo]:
        """The ledger list, oldest first (the current ledger with its live counts)."""
        return self._ledgers.infos()

    @property
    def cursors(self) -> dict[str, ManagedCursor]:
        """The durable cursors by name (a copy)."""
        return dict(self._cursors)

    @property
    def properties(self) -> dict[str, str]:
        """The managed ledger's string properties (stored with the ledger list)."""
        return dict(self._properties)

    # --- adds --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.state is ManagedLedgerState.CLOSED or (self._closing and self.state is not
                                                       ManagedLedgerState.TERMINATED):
            raise ManagedLedgerClosed(f"managed ledger {self.name} is closed")
        if self.state is ManagedLedgerState.FENCED:
            raise ManagedLedgerFenced(f"managed ledger {self.name} was fenced: another owner opened it")

    def _check_writable(self) -> None:
        self._check_open()
        if self.state is ManagedLedgerState.TERMINATED or self._terminating:
            raise ManagedLedgerTerminated(f"managed ledger {self.name} is terminated")

    async def add_entry(self, data: bytes) -> Position:
        """Append ``data``; return its position once it and every earlier add are durable.

        Concurrent callers get positions in the order they were admitted; admission waits while
        ``max_pending_add_bytes`` are in flight. A failed ledger is rolled and the add retried on
        the next one. Raises `ManagedLedgerFenced`, `ManagedLedgerTerminated`,
        `ManagedLedgerClosed`, or `ManagedLedgerError` when no ledger can be created.
        """
        self._check_writable()
        data = bytes(data)
        op = _AddOp(data, trio.current_time())
        if self._admission_lock.locked() or not self._has_room(len(data)):
            # Slow path: wait for room behind the earlier waiters (the lock is FIFO).
            async with self._admission_lock:
                while not self._has_room(len(data)):
                    await self._bytes_freed.wait()
                    self._check_writable()
                self._check_writable()
                self._admit(op)
        else:
            # Fast path, no schedule point: nobody waits for room, so admitting now keeps the
            # FIFO order, and a burst of adds is admitted in one scheduler round instead of one
            # round per add (taking the lock costs a checkpoint while holding it).
            self._admit(op)
        await op.done.wait()
        if op.error is not None:
            self._ctx.metrics.add_failures.inc()
            raise op.error
        assert op.position is not None
        return op.position

    def _has_room(self, size: int) -> bool:
        return self._inflight_bytes == 0 or self._inflight_bytes + size <= self._cfg.max_pending_add_bytes

    def _admit(self, op: _AddOp) -> None:
        self._inflight_bytes += len(op.data)
        self._pending.append(op)
        self._queued.append(op)
        if self.state is ManagedLedgerState.LEDGER_CLOSED:
            self._request_roll("no_ledger")
        else:
            self._issue_queued()

    def _issue_queued(self) -> None:
        # Real client: one appender task per burst (`AppendPipeline`). Other handles: one task
        # per add, started without waiting for it to run: each task takes the *head* of
        # ``_issuing`` and calls the handle's add_entry, which takes the entry id before its first
        # checkpoint, so ids follow the issue order whatever order trio runs the tasks in.
        assert self._nursery is not None
        while self._queued and self.state is ManagedLedgerState.LEDGER_OPENED and self._handle is not None:
            op = self._queued.popleft()
            op.state, op.gen = _Add.ISSUED, self._gen
            self._issued_inflight += 1
            pipeline = self._pipeline
            if pipeline is not None and pipeline.handle is self._handle:
                pipeline.issue(op)
            else:
                self._issuing.append((op, self._handle, self._gen))
                self._nursery.start_soon(self._run_add)

    async def _run_add(self) -> None:
        op, handle, gen = self._issuing.popleft()
        try:
            entry_id = await handle.add_entry(op.data)
        except Exception as exc:
            self._add_outcome(op, -1, exc)
            return
        self._add_outcome(op, entry_id, None)
        self._complete_in_order()

    def _add_outcome(self, op: _AddOp, entry_id: int, error: BaseException | None) -> None:
        """Record what the ledger said about an issued add (both issue paths)."""
        if error is not None:
            op.state, op.error = _Add.FAILED, error
            op.attempts += 1
            log.info("%s: add on ledger %s failed (%s); rolling over", self.name, self._ledgers.current, error)
            self._op_done_on_ledger()
            if op.gen == self._gen:
                self._request_roll("add_failure")
            return
        op.state, op.entry_id = _Add.SUCCEEDED, entry_id
        self._op_done_on_ledger()

    def _op_done_on_ledger(self) -> None:
        # Only a roll waits, and only for zero: no new Event per add (a hot-path cost).
        self._issued_inflight -= 1
        if self._issued_inflight == 0:
            self._op_finished.set()
            self._op_finished = trio.Event()

    def _complete_in_order(self) -> None:
        pending = self._pending
        if not pending or pending[0].state is not _Add.SUCCEEDED:
            return  # an earlier add's task completes this one (called once per add: keep it cheap)
        metrics, ledgers, cache = self._ctx.metrics, self._ledgers, self._ctx.cache
        now = trio.current_time()
        count = size = 0
        while pending and pending[0].state is _Add.SUCCEEDED:
            op = pending[0]
            if op.gen != self._gen or op.entry_id != ledgers.current_entries:
                # the handle broke FIFO ids or a stale ledger answered: never complete out of order
                op.state = _Add.FAILED
                if op.gen == self._gen:
                    self._request_roll("add_failure")
                break
            pending.popleft()
            lid = ledgers.current
            assert lid is not None
            op.position = Position(lid, op.entry_id)
            ledgers.current_entries += 1
            ledgers.current_size += len(op.data)
            cache.put(self.name, lid, op.entry_id, op.data)
            count += 1
            size += len(op.data)
            metrics.add_latency.observe(max(now - op.started, 0.0))
            self._finish(op)
        if count:
            self.entries_added_counter += count
            metrics.entries_added.inc(count)
            metrics.bytes_added.inc(size)
            self._last_add_at = self._ctx.clock()
        self._notify_readers()
        if self.state is ManagedLedgerState.LEDGER_OPENED:
            reason = self._full_reason()
            if reason is not None:
                self._request_roll(reason)

    def _finish(self, op: _AddOp, error: BaseException | None = None) -> None:
        op.state, op.error = _Add.DONE, error
        self._inflight_bytes -= len(op.data)
        if self._admission_lock.locked():  # someone waits for room (only then: per-add cost)
            self._bytes_freed.set()
            self._bytes_freed = trio.Event()
        op.done.set()

    def _fail_pending(self, error_factory: Callable[[], BaseException]) -> None:
        while self._pending:
            self._finish(self._pending.popleft(), error_factory())
        self._queued.clear()
        self._notify_readers()

    async def _wait_pending_empty(self) -> None:
        while self._pending or not self._roll_done.is_set():
            if not self._roll_done.is_set():
                await self._roll_done.wait()
            elif self._pending:
                await self._pending[-1].done.wait()

    # --- roll-over ---------------------------------------------------------------------------

    def _full_reason(self) -> str | None:
        cfg, ledgers = self._cfg, self._ledgers
        if ledgers.current is None or ledgers.current_entries == 0:
            return None
        age = self._ctx.clock() - self._ledger_created_at
        reason = None
        if ledgers.current_entries >= cfg.max_entries_per_ledger:
            reason = "entries"
        elif ledgers.current_size >= cfg.max_size_per_ledger_bytes:
            reason = "size"
        elif age >= cfg.maximum_rollover_time_s:
            reason = "time"
        if reason is not None and age < cfg.minimum_rollover_time_s:
            return None  # Pulsar's rule: the minimum age holds back every trigger
        return reason

    def check_rollover(self) -> str | None:
        """Apply the time-based rules now (the background loop calls this every
        ``rollover_check_interval_s``); return the reason of the roll started, if any."""
        if self.state is not ManagedLedgerState.LEDGER_OPENED:
            return None
        reason = self._full_reason()
        idle = self._cfg.inactive_ledger_rollover_time_s
        if reason is None and idle > 0 and self._ledgers.current_entries > 0 \
                and self._ctx.clock() - self._last_add_at >= idle:
            reason = "inactive"
        if reason is not None:
            self._request_roll(reason)
        return reason

    async def rollover(self) -> None:
        """Close the current ledger now and continue on a new one (no-op when it is empty)."""
        self._check_writable()
        await self._roll_done.wait()
        if self.state is ManagedLedgerState.LEDGER_OPENED and self._ledgers.current_entries > 0:
            self._request_roll("manual")
        await self._roll_done.wait()

    def _request_roll(self, reason: str) -> None:
        if self.state not in (ManagedLedgerState.LEDGER_OPENED, ManagedLedgerState.LEDGER_CLOSED):
            return
        assert self._nursery is not None
        self.state = ManagedLedgerState.ROLLING
        self._roll_done = trio.Event()
        self._nursery.start_soon(self._roll, reason)

    async def _roll(self, reason: str) -> None:
        try:
            with trio.CancelScope(shield=True):
                await self._do_roll(reason)
        finally:
            self._roll_done.set()

    async def _do_roll(self, reason: str) -> None:
        old = self._handle
        if old is not None:
            while self._issued_inflight > 0:
                await self._op_finished.wait()
            self._complete_in_order()
            # Everything after the first add that did not complete goes to the next ledger,
            # even adds the old ledger accepted later on (that ledger is cut at its count).
            keep: deque[_AddOp] = deque()
            for op in self._pending:
                if op.gen == self._gen and op.state is not _Add.DONE:
                    if op.state is _Add.FAILED and op.attempts >= _MAX_ADD_ATTEMPTS:
                        # storage keeps refusing it: give up on this add (later ones still go)
                        self._finish(op, ManagedLedgerError(
                            f"{self.name}: add failed on {op.attempts} ledgers: {op.error}"))
                        continue
                    op.state, op.error = _Add.QUEUED, None
                keep.append(op)
            self._pending = keep
            self._queued = deque(op for op in self._pending if op.state is _Add.QUEUED)
            await self._close_handle_quietly(old)
        try:
            handle = await self._create_ledger()
        except ManagedLedgerError as exc:
            async with self._meta_lock:
                self._ledgers.close_current(self._now_ms())
                self._handle = None
                self._reader.write_ledger = None
            self.state = ManagedLedgerState.LEDGER_CLOSED
            self._fail_pending(lambda: ManagedLedgerError(str(exc)))
            return
        doomed = None
        async with self._meta_lock:
            closed = self._ledgers.close_current(self._now_ms())
            if closed is not None and closed.entries == 0:
                self._ledgers.remove(closed.ledger_id)
                doomed = closed.ledger_id
            self._ledgers.append_current(handle.ledger_id)
            try:
                await self._write_info()
            except ManagedLedgerFenced:
                await self._delete_quietly(handle.ledger_id)
                return
            self._switch_to(handle)
        self._ctx.metrics.ledger_rolls.labels(reason=reason).inc()
        log.info("%s: rolled to ledger %s (%s)", self.name, handle.ledger_id, reason)
        if doomed is not None:
            self._cursors_follow_removed_ledgers()
            await self._delete_quietly(doomed)
        self._issue_queued()

    def _switch_to(self, handle: WriteHandle) -> None:
        self._handle = handle
        assert self._nursery is not None
        self._pipeline = (AppendPipeline(handle, self._nursery, self._add_outcome, self._complete_in_order)
                          if AppendPipeline.supports(handle) else None)
        self._gen += 1
        self._reader.write_ledger = (handle.ledger_id, handle)
        self._ledger_created_at = self._ctx.clock()
        self._last_add_at = self._ledger_created_at
        self.state = ManagedLedgerState.LEDGER_OPENED

    async def _create_ledger(self) -> WriteHandle:
        cfg = self._cfg
        try:
            return await self._ctx.bk.create_ledger(
                cfg.ensemble_size, cfg.write_quorum, cfg.ack_quorum,
                custom_metadata={"application": b"magnetar", "component": b"managed-ledger",
                                 "pulsar/managed-ledger": self.name.encode()})
        except Exception as exc:
            raise ManagedLedgerError(f"{self.name}: cannot create a ledger: {exc}") from exc

    async def _write_info(self, *, fence: bool = True) -> None:
        """CAS-write the ledger list; on a lost CAS fence this instance and raise
        `ManagedLedgerFenced` (or `_ListChanged` when not ``fence``)."""
        info = ManagedLedgerInfo(self._ledgers.closed_infos(), self._terminated_at, self._properties)
        try:
            stat = await self._ctx.store.set(self._path, info.encode(), version=self._info_version)
        except (BadVersionError, NoNodeError) as exc:
            if not fence:
                raise _ListChanged() from exc
            self._fence(f"the ledger list changed under us ({exc})")
            raise ManagedLedgerFenced(f"managed ledger {self.name} was fenced: {exc}") from exc
        self._info_version = stat.version

    def _fence(self, why: str) -> None:
        if self.state in (ManagedLedgerState.FENCED, ManagedLedgerState.CLOSED):
            return
        log.warning("%s: fenced: %s", self.name, why)
        self.state = ManagedLedgerState.FENCED
        self._handle = None
        self._reader.write_ledger = None
        name = self.name
        self._fail_pending(lambda: ManagedLedgerFenced(
            f"managed ledger {name} was fenced: another owner opened it"))

    async def _delete_quietly(self, ledger_id: int) -> None:
        try:
            await self._ctx.bk.delete_ledger(ledger_id)
        except Exception as exc:
            log.warning("%s: could not delete ledger %s: %s", self.name, ledger_id, exc)

    @staticmethod
    async def _close_handle_quietly(handle: WriteHandle) -> None:
        try:
            await handle.close()
        except Exception:
            pass  # a fenced or failed handle: its ledger was closed by recovery or is cut at our count

    def _now_ms(self) -> int:
        return int(self._ctx.clock() * 1000)

    async def _rollover_loop(self) -> None:
        while True:
            await trio.sleep(self._cfg.rollover_check_interval_s)
            self.check_rollover()

    async def _flush_loop(self) -> None:
        while True:
            await trio.sleep(self._cfg.cursor_persist_interval_s)
            await self.flush_cursors()

    # --- reads -------------------------------------------------------------------------------

    def _notify_readers(self) -> None:
        self._entries_event.set()
        self._entries_event = trio.Event()

    async def read_entry(self, position: Position) -> Entry:
        """The entry at ``position``. Raises `ManagedLedgerError` when there is no such entry."""
        if self.state is ManagedLedgerState.CLOSED:
            raise ManagedLedgerClosed(f"managed ledger {self.name} is closed")
        if not self._ledgers.is_entry(position):
            raise ManagedLedgerError(f"{self.name}: no entry at {position}")
        (entry,) = await self._reader.read(position.ledger_id, position.entry_id, position.entry_id)
        return entry

    async def _read_run(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        if self.state is ManagedLedgerState.CLOSED:
            raise ManagedLedgerClosed(f"managed ledger {self.name} is closed")
        return await self._reader.read(ledger_id, first, last)
