"""The add path of a managed ledger (a mixin of `ManagedLedger`, split out to keep modules small;
it uses the managed ledger's state directly): admission, issuing through the write handle's
``append``, completion in admission order, and the hand-over of unfinished adds to the next
ledger when one is rolled (rules 2 and 3 of `managed_ledger._ledger`).

An add (`_AddOp`) goes QUEUED -> ISSUED -> SUCCEEDED -> DONE, or ISSUED -> FAILED -> QUEUED
(reissued on the next ledger) until it has failed on ``_MAX_ADD_ATTEMPTS`` ledgers, after which
it is DONE with an error, and so is every add admitted after it. Every admitted add is in
``_pending`` until DONE, in admission order; only the head of ``_pending`` may complete, so
callers learn their positions - and failures - in that order: no add is stored after an earlier
one failed for good.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from managed_ledger._append_pipeline import AppendPipeline
from managed_ledger._errors import EntryTooLarge, ManagedLedgerError, StorageUnavailable
from protocols.managed_ledger import Position

if TYPE_CHECKING:
    from bk_client.api import WriteHandle

__all__ = ["AddPath"]

log = logging.getLogger("managed_ledger._ledger")

_MAX_ADD_ATTEMPTS = 3  # ledgers one add may fail on before the add fails back to its caller


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


class AddPath:
    """``add_entry`` and the bookkeeping of the adds in flight."""

    def _init_adds(self) -> None:
        self._pending: deque[_AddOp] = deque()
        self._queued: deque[_AddOp] = deque()
        self._issued_inflight = 0
        self._inflight_bytes = 0
        self._bytes_freed = trio.Event()
        self._op_finished = trio.Event()
        self._admission_lock = trio.Lock()
        self._pipeline: AppendPipeline | None = None

    async def add_entry(self, data: bytes) -> Position:
        """Append ``data``; return its position once it and every earlier add are durable.

        Concurrent callers get positions in the order they were admitted; admission waits while
        ``max_pending_add_bytes`` are in flight. A failed ledger is rolled and the add retried on
        the next one. Raises `ManagedLedgerFenced`, `ManagedLedgerTerminated`,
        `ManagedLedgerClosed`, `EntryTooLarge` at once for an entry over ``max_entry_size``, or
        `StorageUnavailable` when no ledger can be created (at once while a creation failed less
        than a second ago: Rule 4 of `managed_ledger._ledger`).
        """
        self._check_writable()
        if self._is_ledger_closed() and self._storage_error_is_recent():
            raise StorageUnavailable(self._storage_error or "storage unavailable")  # Rule 4: fail fast
        if len(data) > self.max_entry_size:
            # Rolling ledgers cannot help an entry no bookie accepts (seen: hundreds of ledgers
            # rolled a minute while the send and every later one hung).
            raise EntryTooLarge(f"{self.name}: entry of {len(data)} bytes exceeds the largest entry "
                                f"storage accepts ({self.max_entry_size} bytes)")
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

    @property
    def max_entry_size(self) -> int:
        """The largest entry ``add_entry`` accepts: what the BookKeeper client can send."""
        return self._ctx.bk.max_entry_size

    def _has_room(self, size: int) -> bool:
        return self._inflight_bytes == 0 or self._inflight_bytes + size <= self._cfg.max_pending_add_bytes

    def _admit(self, op: _AddOp) -> None:
        self._inflight_bytes += len(op.data)
        self._pending.append(op)
        self._queued.append(op)
        if self._is_ledger_closed():
            self._request_roll("no_ledger")
        else:
            self._issue_queued()

    def _start_issuing(self, handle: WriteHandle) -> None:
        """Issue later adds on ``handle`` (the new current ledger's write handle)."""
        assert self._nursery is not None
        self._pipeline = AppendPipeline(handle, self._nursery, self._add_outcome, self._complete_in_order)

    def _issue_queued(self) -> None:
        # One appender task per burst (`AppendPipeline`): the handle's ``append`` fixes the
        # entry id before its first schedule point, so ids follow the issue order.
        pipeline = self._pipeline
        while self._queued and self._is_opened() and self._handle is not None:
            assert pipeline is not None and pipeline.handle is self._handle
            op = self._queued.popleft()
            op.state, op.gen = _Add.ISSUED, self._gen
            self._issued_inflight += 1
            pipeline.issue(op)

    def _add_outcome(self, op: _AddOp, entry_id: int, error: BaseException | None) -> None:
        """Record what the ledger said about an issued add."""
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
            return  # nothing to complete yet (called after every run of outcomes: keep it cheap)
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
        if self._is_opened():
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

    async def _requeue_for_next_ledger(self) -> None:
        """The first half of a roll (rule 3): wait for every add issued on the current ledger
        to be answered, complete the ones that can be, and queue the rest for the next ledger,
        oldest first; an add that failed on ``_MAX_ADD_ATTEMPTS`` ledgers fails to its caller."""
        while self._issued_inflight > 0:
            await self._op_finished.wait()
        self._complete_in_order()
        # Everything after the first add that did not complete goes to the next ledger, even
        # adds the old ledger accepted later on (that ledger is cut at its count).
        keep: deque[_AddOp] = deque()
        given_up: ManagedLedgerError | None = None
        for op in self._pending:
            if given_up is not None:
                # Adds complete in admission order, failures included: storing a later add after
                # giving up on an earlier one would reorder a producer's messages (its client
                # resends the failed one after the later one) or, with deduplication, lose it.
                self._finish(op, ManagedLedgerError(f"{self.name}: an earlier add failed for good, so this "
                                                    f"one fails too ({given_up})"))
                continue
            if op.gen == self._gen and op.state is not _Add.DONE:
                if op.state is _Add.FAILED and op.attempts >= _MAX_ADD_ATTEMPTS:
                    # storage keeps refusing it: give up on this add and on every later one
                    given_up = ManagedLedgerError(f"{self.name}: add failed on {op.attempts} ledgers: {op.error}")
                    self._finish(op, given_up)
                    continue
                op.state, op.error = _Add.QUEUED, None
            keep.append(op)
        self._pending = keep
        self._queued = deque(op for op in self._pending if op.state is _Add.QUEUED)
