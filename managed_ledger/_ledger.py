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
  on it, oldest first. An add that failed on ``_MAX_ADD_ATTEMPTS`` (3) ledgers is given up: it
  fails to its caller, and so does every add admitted after it that has not completed, so that
  no add is stored after an earlier one failed for good. A rolled ledger with 0 entries is
  removed from the list and deleted.
* Rule 4: ROLLING -> LEDGER_CLOSED when no new ledger could be created (storage unavailable: too
  few writable bookies): the queued adds fail with `StorageUnavailable`, and so does every add
  for ``_CREATE_RETRY_INTERVAL_S`` after; then LEDGER_CLOSED -> ROLLING on the next add or
  ``ensure_writable``. Opening a managed ledger whose first ledger cannot be created lands here
  too, so its entries and cursors stay readable while storage is read-only.
* Rule 5: any state but CLOSED -> FENCED when a compare-and-set of the list fails (another owner
  opened the managed ledger) or of a cursor node fails, whatever the managed ledger was doing.
  FENCED is final but for close: pending and later adds raise `ManagedLedgerFenced`.
* Rule 6: LEDGER_OPENED / LEDGER_CLOSED -> TERMINATED by ``terminate()`` (reads go on, adds
  raise `ManagedLedgerTerminated`); any state -> CLOSED by ``close()`` (final).

`TRANSITIONS` holds these rules as data, each transition with the rule that allows it; every
change of state goes through ``_set_state``, which logs one the table does not allow (it never
stops the change: the table checks the code, it is not the logic), and the managed-ledger tests
fail on such a log.

Adds complete in the order they were admitted, and a caller is told success only after its entry
and every earlier one are acknowledged by the ack quorum, so the sequence a new owner recovers
contains every acknowledged entry, in order. Bytes in flight are bounded; admission is FIFO. An
entry larger than storage accepts fails at once with `EntryTooLarge` (before admission: rolling
cannot help it, and later adds are unaffected).

Where things live: each add is a `PendingAdd` (``_add_op``, the states of one add); this module
moves them (the "adds" section: admission, issuing through `AppendPipeline`, completion in order,
the hand-over of rule 3), because the add path and the roll are one state machine. The cursors
are a `CursorRegistry` (``_cursor_registry``) and reach the managed ledger only through the
`CursorHost` it gives them (`_CursorSide`).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from bk_client import NoSuchLedger
from bk_client.api import BookKeeperClient, WriteHandle
from managed_ledger._add_op import AddState, PendingAdd
from managed_ledger._append_pipeline import AppendPipeline
from managed_ledger._cache import EntryCache
from managed_ledger._config import ManagedLedgerConfig
from managed_ledger._cursor import ManagedCursor
from managed_ledger._cursor_registry import CursorRegistry
from managed_ledger._errors import (
    EntryTooLarge,
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
    StorageUnavailable,
)
from managed_ledger._ledger_list import LedgerList
from managed_ledger._offload import (
    BookieSource,
    OffloadInProgress,
    OffloadPoliciesResolver,
    OffloadRunStatus,
    Offloads,
    OffloadStatus,
)
from managed_ledger._reader import LedgerReader, open_with_passwords
from managed_ledger._types import Entry, InitialPosition
from managed_ledger.metrics import ManagedLedgerMetrics
from metadata import BadVersionError, NodeExistsError, NoNodeError
from protocols.managed_ledger import LedgerInfo, ManagedLedgerInfo, OffloadContext, Position
from tiered_storage import OffloadedLedger, ReadPriority, TieredStorage

if TYPE_CHECKING:
    from metadata import MetadataStore

__all__ = [
    "ManagedLedger",
    "ManagedLedgerState",
    "ML_ROOT",
    "OffloadInProgress",
    "OffloadStatus",
    "TRANSITIONS",
    "allowed_transition",
]

log = logging.getLogger(__name__)

ML_ROOT = "/managed-ledgers"
_CREATE_RETRY_INTERVAL_S = 1.0  # after a failed ledger creation, adds fail at once this long (Rule 4)
_MAX_ADD_ATTEMPTS = 3  # ledgers one add may fail on before it is given up (Rule 3)
_OPEN_ATTEMPTS = 5


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


_S = ManagedLedgerState
_ANY_BUT_CLOSED = frozenset(set(_S) - {_S.CLOSED})

TRANSITIONS: tuple[tuple[str, frozenset[ManagedLedgerState], ManagedLedgerState], ...] = (
    ("1", frozenset({_S.INITIALIZING}), _S.LEDGER_OPENED),
    ("1", frozenset({_S.INITIALIZING}), _S.TERMINATED),
    ("2", frozenset({_S.LEDGER_OPENED}), _S.ROLLING),
    ("3", frozenset({_S.ROLLING}), _S.LEDGER_OPENED),
    ("4", frozenset({_S.ROLLING, _S.INITIALIZING}), _S.LEDGER_CLOSED),
    ("4", frozenset({_S.LEDGER_CLOSED}), _S.ROLLING),
    ("5", _ANY_BUT_CLOSED - {_S.FENCED}, _S.FENCED),
    ("6", frozenset({_S.LEDGER_OPENED, _S.LEDGER_CLOSED}), _S.TERMINATED),
    ("6", _ANY_BUT_CLOSED, _S.CLOSED),
)
"""(rule, from states, to state): every change of state the module header's rules allow."""

_ALLOWED = {(old, new) for _rule, olds, new in TRANSITIONS for old in olds}


def allowed_transition(old: ManagedLedgerState, new: ManagedLedgerState) -> bool:
    """Whether `TRANSITIONS` allows ``old -> new``."""
    return (old, new) in _ALLOWED


def _illegal_transition(name: str, old: ManagedLedgerState, new: ManagedLedgerState) -> None:
    """Report a change of state the rules do not allow (a bug in this module)."""
    log.error("%s: state change %s -> %s is not in the managed ledger's transition table", name, old.name, new.name)


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
    tier: TieredStorage | None = None
    offload_resolver: OffloadPoliciesResolver | None = None
    read_transform: Callable[[bytes], bytes] | None = None


class ManagedLedger:
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
        self.state = ManagedLedgerState.INITIALIZING  # the one assignment outside _set_state
        self._ledgers = LedgerList()
        self._info_version = -1
        self._properties: dict[str, str] = {}
        self._terminated_at: Position | None = None
        self._handle: WriteHandle | None = None
        self._gen = 0  # write generation: bumped each time a new ledger becomes current
        self._ledger_created_at = ctx.clock()
        self._last_add_at = ctx.clock()
        self._storage_error: str | None = None  # why the last ledger creation failed (Rule 4)
        self._storage_error_at = 0.0  # trio time of that failure
        self._meta_lock = trio.Lock()
        self._roll_done = trio.Event()
        self._roll_done.set()
        self._entries_event = trio.Event()
        self._closing = False
        self._terminating = False
        self._nursery: trio.Nursery | None = None
        self._reader = LedgerReader(
            name,
            ctx.bk,
            ctx.cache,
            self._cfg.max_open_read_handles,
            self._cfg.read_passwords,
            _TierSide(self) if ctx.tier is not None else None,
            ctx.read_transform,
        )
        self._offloads: Offloads | None = None  # created with the nursery (`_run`) when there is a tier
        self._cursors = CursorRegistry(_CursorSide(self))
        self.entries_added_counter = 0
        # the add path (see the "adds" section)
        self._pending: deque[PendingAdd] = deque()  # admitted and not DONE, in admission order
        self._queued: deque[PendingAdd] = deque()  # QUEUED, waiting for a writable ledger
        self._issued_inflight = 0  # ISSUED on the current ledger and not answered yet
        self._inflight_bytes = 0  # bytes of the adds in ``_pending``
        self._bytes_freed = trio.Event()  # fired when bytes are freed while someone waits for room
        self._op_finished = trio.Event()  # fired when ``_issued_inflight`` drops to 0
        self._admission_lock = trio.Lock()  # the FIFO of adds waiting for room
        self._pipeline: AppendPipeline | None = None  # issues on the current ledger's handle

    # ==========================================================================================
    # Lifecycle: open (Rule 1), close, terminate (Rule 6)
    # ==========================================================================================

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            ctx = self._ctx
            if ctx.tier is not None:
                tier = ctx.tier
                resolver = ctx.offload_resolver

                async def broker_level(_name: str) -> Any:
                    return tier.broker_policies

                self._offloads = Offloads(
                    _OffloadSide(self), tier, resolver or broker_level, nursery, retries=tier.config.offload_retries
                )
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
                    raise ManagedLedgerFenced(
                        f"{self.name}: the ledger list kept changing while opening; another owner is active"
                    ) from None
        await self._cursors.load()

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
        if infos and infos[-1].offloaded:
            pass  # a closed, offloaded last ledger (terminated, or no ledger could be created): keep it
        elif infos:
            last = infos[-1]
            try:
                # Recovery fences the previous owner's ledger: its next add fails.
                handle = await open_with_passwords(bk, last.ledger_id, self._cfg.read_passwords, recovery=True)
                # A ledger the previous owner closed and recorded keeps its close time, so that
                # retention time counts from the real close, not from each reopen.
                closed_at = last.timestamp_ms or self._now_ms()
                infos[-1] = LedgerInfo(
                    last.ledger_id, handle.last_add_confirmed + 1, handle.length, closed_at, last.offload
                )
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
            try:
                created = await self._create_ledger()
            except ManagedLedgerError as exc:
                # Open anyway (Rule 4): the entries and cursors are readable without a new ledger.
                self._note_storage_error(exc)
            else:
                self._ledgers.append_current(created.ledger_id)
        try:
            await self._write_info(fence=False)
        except _ListChanged:
            if created is not None:
                await self._delete_quietly(created.ledger_id)
            raise
        if created is not None:
            self._switch_to(created)
        elif info.terminated_position is not None:
            self._set_state(ManagedLedgerState.TERMINATED)
        else:
            self._set_state(ManagedLedgerState.LEDGER_CLOSED)
        for lid in doomed:
            await self._delete_quietly(lid)

    async def close(self) -> None:
        """Finish the adds in flight, persist every durable cursor, close the current ledger and
        record it in the list. Later calls raise `ManagedLedgerClosed`. Idempotent."""
        if self.state is ManagedLedgerState.CLOSED or self._closing:
            return
        self._closing = True
        await self._wait_pending_empty()
        for cursor in self._cursors.all():
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
        self._set_state(ManagedLedgerState.CLOSED)
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
            self._set_state(ManagedLedgerState.TERMINATED)
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

    # ==========================================================================================
    # Properties
    # ==========================================================================================

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
    def current_ledger_created_ms(self) -> int:
        """When the current (last, open) ledger became current, in ms of the factory's clock
        (Pulsar's ``lastLedgerCreatedTimestamp``)."""
        return int(self._ledger_created_at * 1000)

    @property
    def cursors(self) -> dict[str, ManagedCursor]:
        """The durable cursors by name (a copy)."""
        return dict(self._cursors.durable)

    @property
    def properties(self) -> dict[str, str]:
        """The managed ledger's string properties (stored with the ledger list)."""
        return dict(self._properties)

    async def set_property(self, key: str, value: str) -> None:
        """Store one string property with the ledger list (a compare-and-set write of the list, as
        every change of it; a lost CAS fences this instance and raises `ManagedLedgerFenced`)."""
        self._check_open()
        async with self._meta_lock:
            before = dict(self._properties)
            self._properties[key] = value
            try:
                await self._write_info()
            except BaseException:
                self._properties = before
                raise

    # ==========================================================================================
    # State checks
    # ==========================================================================================

    def _set_state(self, new: ManagedLedgerState) -> None:
        """Change state, checking the change against `TRANSITIONS`."""
        if not allowed_transition(self.state, new):
            _illegal_transition(self.name, self.state, new)
        self.state = new

    def _check_open(self) -> None:
        if self.state is ManagedLedgerState.CLOSED or (
            self._closing and self.state is not ManagedLedgerState.TERMINATED
        ):
            raise ManagedLedgerClosed(f"managed ledger {self.name} is closed")
        if self.state is ManagedLedgerState.FENCED:
            raise ManagedLedgerFenced(f"managed ledger {self.name} was fenced: another owner opened it")

    def _check_writable(self) -> None:
        self._check_open()
        if self.state is ManagedLedgerState.TERMINATED or self._terminating:
            raise ManagedLedgerTerminated(f"managed ledger {self.name} is terminated")

    def _is_opened(self) -> bool:
        return self.state is ManagedLedgerState.LEDGER_OPENED

    def _is_ledger_closed(self) -> bool:
        return self.state is ManagedLedgerState.LEDGER_CLOSED

    # ==========================================================================================
    # Adds: admission, issuing, completion in order, the hand-over of Rule 3
    #
    # Every admitted `PendingAdd` is in ``_pending`` until DONE, in admission order; only the head
    # of ``_pending`` may complete, so callers learn their positions - and failures - in that
    # order (the states of one add are in ``_add_op``).
    # ==========================================================================================

    async def append(self, data: bytes) -> PendingAdd:
        """Admit ``data`` as the next add and return it without waiting for storage; its
        `PendingAdd` reports the outcome (``await pending.result()`` gives the position).

        Guarantees:

        * Order: adds are admitted in the order ``append`` calls start (FIFO), take positions in
          that order and finish in that order; an add finishes successfully only once it and
          every add admitted before it are durable (acknowledged by the ack quorum).
        * Failures stop the sequence: when an add finishes with an error, every add admitted
          after it that has not finished fails too (Rule 3 and ``_add_op``), so nothing admitted
          before that failure is stored after the failed add. A failed ledger is rolled and the
          add issued again on the next one; it fails only after ``_MAX_ADD_ATTEMPTS`` ledgers,
          when the managed ledger is fenced (`ManagedLedgerFenced`) or when no ledger can be
          created (`StorageUnavailable`).
        * Cheap: when nobody waits for room the add is admitted and issued without a schedule
          point, so one task can admit a burst of adds in one scheduler round.
        * Bounded: waits (FIFO) while ``max_pending_add_bytes`` are in flight; cancelling that
          wait admits nothing.

        Raises at once, admitting nothing: `ManagedLedgerClosed`, `ManagedLedgerFenced`,
        `ManagedLedgerTerminated`, `EntryTooLarge` for an entry over ``max_entry_size``, and
        `StorageUnavailable` while a ledger creation failed less than
        ``_CREATE_RETRY_INTERVAL_S`` ago (Rule 4).
        """
        self._check_writable()
        if self._is_ledger_closed() and self._storage_error_is_recent():
            raise StorageUnavailable(self._storage_error or "storage unavailable")  # Rule 4: fail fast
        if len(data) > self.max_entry_size:
            # Rolling ledgers cannot help an entry no bookie accepts (seen: hundreds of ledgers
            # rolled a minute while the send and every later one hung).
            raise EntryTooLarge(
                f"{self.name}: entry of {len(data)} bytes exceeds the largest entry "
                f"storage accepts ({self.max_entry_size} bytes)"
            )
        op = PendingAdd(bytes(data), trio.current_time())
        size = len(op.data)
        if self._admission_lock.locked() or not self._has_room(size):
            # Slow path: wait for room behind the earlier waiters (the lock is FIFO).
            async with self._admission_lock:
                while not self._has_room(size):
                    await self._bytes_freed.wait()
                    self._check_writable()
                self._check_writable()
                self._admit(op)
        else:
            # Fast path, no schedule point: nobody waits for room, so admitting now keeps the
            # FIFO order, and a burst of adds is admitted in one scheduler round instead of one
            # round per add (taking the lock costs a checkpoint while holding it).
            self._admit(op)
        return op

    async def add_entry(self, data: bytes) -> Position:
        """Append ``data``; return its position once it and every earlier add are durable.

        ``append`` followed by ``result()``, with the same guarantees: concurrent callers get
        positions in the order they were admitted, admission waits while
        ``max_pending_add_bytes`` are in flight, and a failed ledger is rolled and the add retried
        on the next one. Raises what ``append`` raises at once (`ManagedLedgerFenced`,
        `ManagedLedgerTerminated`, `ManagedLedgerClosed`, `EntryTooLarge`, `StorageUnavailable`),
        or the add's error (a `ManagedLedgerError`: given up after ``_MAX_ADD_ATTEMPTS`` ledgers,
        fenced, or `StorageUnavailable` when no new ledger could be created).
        """
        return await (await self.append(data)).result()

    @property
    def max_entry_size(self) -> int:
        """The largest entry ``add_entry`` accepts: what the BookKeeper client can send."""
        return self._ctx.bk.max_entry_size

    def _has_room(self, size: int) -> bool:
        return self._inflight_bytes == 0 or self._inflight_bytes + size <= self._cfg.max_pending_add_bytes

    def _admit(self, op: PendingAdd) -> None:
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
            op.state, op.gen = AddState.ISSUED, self._gen
            self._issued_inflight += 1
            pipeline.issue(op)

    def _add_outcome(self, op: PendingAdd, entry_id: int, error: BaseException | None) -> None:
        """Record what the ledger said about an issued add (called in issue order)."""
        if error is not None:
            op.state, op.ledger_error = AddState.FAILED, error
            op.attempts += 1
            log.info("%s: add on ledger %s failed (%s); rolling over", self.name, self._ledgers.current, error)
            self._op_done_on_ledger()
            if op.gen == self._gen:
                self._request_roll("add_failure")
            return
        op.state, op.entry_id = AddState.SUCCEEDED, entry_id
        self._op_done_on_ledger()

    def _op_done_on_ledger(self) -> None:
        # Only a roll waits, and only for zero: no new Event per add (a hot-path cost).
        self._issued_inflight -= 1
        if self._issued_inflight == 0:
            self._op_finished.set()
            self._op_finished = trio.Event()

    def _complete_in_order(self) -> None:
        pending = self._pending
        if not pending or pending[0].state is not AddState.SUCCEEDED:
            return  # nothing to complete yet (called after every run of outcomes: keep it cheap)
        metrics, ledgers, cache = self._ctx.metrics, self._ledgers, self._ctx.cache
        now = trio.current_time()
        count = size = 0
        latencies: list[float] = []
        while pending and pending[0].state is AddState.SUCCEEDED:
            op = pending[0]
            if op.gen != self._gen or op.entry_id != ledgers.current_entries:
                # the handle broke FIFO ids or a stale ledger answered: never complete out of order
                op.state = AddState.FAILED
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
            latencies.append(max(now - op.started, 0.0))
            self._finish(op)
        if count:
            metrics.add_latency.observe_many(latencies)
            self.entries_added_counter += count
            metrics.entries_added.inc(count)
            metrics.bytes_added.inc(size)
            self._last_add_at = self._ctx.clock()
        self._notify_readers()
        if self._is_opened():
            reason = self._full_reason()
            if reason is not None:
                self._request_roll(reason)

    def _finish(self, op: PendingAdd, error: ManagedLedgerError | None = None) -> None:
        self._inflight_bytes -= len(op.data)
        if self._admission_lock.locked():  # someone waits for room (only then: per-add cost)
            self._bytes_freed.set()
            self._bytes_freed = trio.Event()
        if error is not None:
            self._ctx.metrics.add_failures.inc()
        op.finish(error)

    def _fail_pending(self, error_factory: Callable[[], ManagedLedgerError]) -> None:
        """Rule 4 / Rule 5: every unfinished add fails, oldest first."""
        while self._pending:
            self._finish(self._pending.popleft(), error_factory())
        self._queued.clear()
        self._notify_readers()

    async def _wait_pending_empty(self) -> None:
        while self._pending or not self._roll_done.is_set():
            if not self._roll_done.is_set():
                await self._roll_done.wait()
            elif self._pending:
                await self._pending[-1].wait()

    async def _requeue_for_next_ledger(self) -> None:
        """The first half of a roll (Rule 3): wait for every add issued on the current ledger
        to be answered, complete the ones that can be, and queue the rest for the next ledger,
        oldest first; an add that failed on ``_MAX_ADD_ATTEMPTS`` ledgers fails to its caller,
        and so does every add after it."""
        while self._issued_inflight > 0:
            await self._op_finished.wait()
        self._complete_in_order()
        # Everything after the first add that did not complete goes to the next ledger, even
        # adds the old ledger accepted later on (that ledger is cut at its count).
        keep: deque[PendingAdd] = deque()
        given_up: ManagedLedgerError | None = None
        for op in self._pending:
            if given_up is not None:
                # Adds complete in admission order, failures included: storing a later add after
                # giving up on an earlier one would reorder a producer's messages (its client
                # resends the failed one after the later one) or, with deduplication, lose it.
                self._finish(
                    op,
                    ManagedLedgerError(
                        f"{self.name}: an earlier add failed for good, so this one fails too ({given_up})"
                    ),
                )
                continue
            if op.gen == self._gen and op.state is not AddState.DONE:
                if op.state is AddState.FAILED and op.attempts >= _MAX_ADD_ATTEMPTS:
                    # storage keeps refusing it: give up on this add and on every later one
                    given_up = ManagedLedgerError(
                        f"{self.name}: add failed on {op.attempts} ledgers: {op.ledger_error}"
                    )
                    self._finish(op, given_up)
                    continue
                op.state, op.ledger_error = AddState.QUEUED, None
            keep.append(op)
        self._pending = keep
        self._queued = deque(op for op in self._pending if op.state is AddState.QUEUED)

    # ==========================================================================================
    # Roll-over (Rules 2 and 3)
    # ==========================================================================================

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
        if (
            reason is None
            and idle > 0
            and self._ledgers.current_entries > 0
            and self._ctx.clock() - self._last_add_at >= idle
        ):
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
        self._set_state(ManagedLedgerState.ROLLING)
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
            await self._requeue_for_next_ledger()
            await self._close_handle_quietly(old)
        try:
            handle = await self._create_ledger()
        except ManagedLedgerError as exc:
            async with self._meta_lock:
                self._ledgers.close_current(self._now_ms())
                self._handle = None
                self._reader.write_ledger = None
            self._set_state(ManagedLedgerState.LEDGER_CLOSED)
            error = self._note_storage_error(exc)
            self._fail_pending(lambda: StorageUnavailable(error))
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
            self._cursors.ledgers_removed()
            await self._delete_quietly(doomed)
        self._issue_queued()

    # ==========================================================================================
    # Storage unavailable (Rule 4)
    # ==========================================================================================

    def _note_storage_error(self, exc: BaseException) -> str:
        self._storage_error = f"{self.name}: storage unavailable: {exc}"
        self._storage_error_at = trio.current_time()
        log.warning("%s", self._storage_error)
        return self._storage_error

    def _storage_error_is_recent(self) -> bool:
        return (
            self._storage_error is not None and trio.current_time() - self._storage_error_at < _CREATE_RETRY_INTERVAL_S
        )

    async def ensure_writable(self) -> None:
        """Return once there is a ledger to add to, creating one if storage was unavailable (at
        most once per ``_CREATE_RETRY_INTERVAL_S``; Rule 4). Raises `StorageUnavailable` when no
        ledger can be created now, or the error of a closed, fenced or terminated managed ledger."""
        self._check_writable()
        await self._roll_done.wait()
        if self._is_ledger_closed() and not self._storage_error_is_recent():
            self._request_roll("no_ledger")
            await self._roll_done.wait()
        self._check_writable()
        if self._is_ledger_closed():
            raise StorageUnavailable(self._storage_error or f"{self.name}: no ledger to write to")

    @property
    def storage_error(self) -> str | None:
        """Why no ledger could be created, while that lasts (None once a ledger is open)."""
        return self._storage_error if self._is_ledger_closed() else None

    # ==========================================================================================
    # Ledgers and metadata
    # ==========================================================================================

    def _switch_to(self, handle: WriteHandle) -> None:
        self._storage_error = None
        self._handle = handle
        self._start_issuing(handle)
        self._gen += 1
        self._reader.write_ledger = (handle.ledger_id, handle)
        self._ledger_created_at = self._ctx.clock()
        self._last_add_at = self._ledger_created_at
        self._set_state(ManagedLedgerState.LEDGER_OPENED)

    async def _create_ledger(self) -> WriteHandle:
        cfg = self._cfg
        try:
            return await self._ctx.bk.create_ledger(
                cfg.ensemble_size,
                cfg.write_quorum,
                cfg.ack_quorum,
                password=cfg.ledger_password,
                digest_type=cfg.ledger_digest_type,
                custom_metadata={
                    "application": b"magnetar",
                    "component": b"managed-ledger",
                    "pulsar/managed-ledger": self.name.encode(),
                },
            )
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
        self._set_state(ManagedLedgerState.FENCED)
        self._handle = None
        self._reader.write_ledger = None
        name = self.name
        self._fail_pending(lambda: ManagedLedgerFenced(f"managed ledger {name} was fenced: another owner opened it"))

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

    # ==========================================================================================
    # Cursors (kept by `CursorRegistry`)
    # ==========================================================================================

    async def open_cursor(
        self,
        name: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
    ) -> ManagedCursor:
        """The durable cursor ``name``; created at ``initial_position`` (and persisted) if missing,
        reopened if closed. Raises `ManagedLedgerClosed` / `ManagedLedgerFenced`, or
        `ManagedLedgerError` for a name that cannot name a cursor (empty or with ``/``)."""
        self._check_open()
        return await self._cursors.open(name, initial_position)

    def new_non_durable_cursor(
        self, start: Position | InitialPosition = InitialPosition.LATEST, inclusive: bool = True
    ) -> ManagedCursor:
        """A cursor that is never persisted and does not hold back trimming (for readers).
        ``start`` is a position (read from it, or after it when not ``inclusive``) or an
        initial position."""
        self._check_open()
        return self._cursors.new_non_durable(start, inclusive)

    async def delete_cursor(self, name: str) -> None:
        """Remove a durable cursor and its metadata node. Raises `CursorNotFound`."""
        self._check_open()
        await self._cursors.delete(name)

    async def flush_cursors(self) -> None:
        """Persist every durable cursor whose state changed since its last persist (failures are
        logged; the cursor is retried by the next flush)."""
        await self._cursors.flush()

    # ==========================================================================================
    # Trimming
    # ==========================================================================================

    def trimmable_ledgers(self) -> list[LedgerInfo]:
        """Closed ledgers whose every entry is at or before the slowest durable cursor's
        mark-delete position (every closed ledger when there is no durable cursor). Never the
        current ledger, nor the last ledger of the list."""
        slowest = self._cursors.slowest_mark_delete()
        if slowest is None:
            slowest = self.last_confirmed_entry
        out = []
        for info in self._ledgers.infos()[:-1]:
            if info.ledger_id == self._ledgers.current:
                break
            if Position(info.ledger_id, info.entries - 1) > slowest:
                break
            out.append(info)
        return out

    async def trim(self, ledger_ids: Iterable[int]) -> list[int]:
        """Remove the given ledgers from the list (CAS) and then delete them in BookKeeper.
        Ids that are not trimmable right now are skipped; returns the ids trimmed."""
        self._check_open()
        async with self._meta_lock:
            allowed = {i.ledger_id for i in self.trimmable_ledgers()}
            ids = sorted(set(ledger_ids) & allowed)
            if not ids:
                return []
            infos = {lid: self._ledgers.info(lid) for lid in ids}
            for lid in ids:
                self._ledgers.remove(lid)
            self._cursors.ledgers_removed()
            await self._write_info()
        for lid in ids:
            await self._reader.forget(lid)
            info = infos[lid]
            if info.on_bookies:
                await self._delete_quietly(lid)
            if info.offload is not None and self._offloads is not None:
                await self._offloads.delete_tier_copy(info)  # Rule O6 of ``_offload``
        self._ctx.metrics.ledgers_trimmed.inc(len(ids))
        return ids

    # ==========================================================================================
    # Tiered storage (the rules are ``_offload``'s)
    # ==========================================================================================

    def _require_offloads(self) -> Offloads:
        self._check_open()
        if self._offloads is None:
            raise ManagedLedgerError(f"{self.name}: no tiered storage is configured for this broker")
        return self._offloads

    @property
    def tiered_storage(self) -> bool:
        """Whether this managed ledger can offload (its factory has a tier)."""
        return self._offloads is not None

    def start_offload(self, up_to: Position) -> None:
        """Start offloading every closed ledger before ``up_to``'s ledger, in the background
        (``offload_status`` follows it). Raises `OffloadInProgress` while one runs, or
        `ManagedLedgerError` when there is no tier."""
        self._require_offloads().start(up_to)

    async def offload_prefix(self, up_to: Position) -> Position:
        """Offload every closed ledger before ``up_to``'s ledger now; returns the first position
        still only on bookies. Raises `OffloadInProgress` or `ManagedLedgerError` (the reason)."""
        return await self._require_offloads().offload_prefix(up_to)

    @property
    def offload_status(self) -> OffloadRunStatus:
        """The status of the last offload run on this broker (NOT_RUN when none)."""
        return self._offloads.status if self._offloads is not None else OffloadRunStatus()

    async def wait_offload(self) -> OffloadRunStatus:
        """Wait for the running offload, if any; its status."""
        if self._offloads is None:
            return OffloadRunStatus()
        return await self._offloads.wait()

    async def check_offload(self, *, wait: bool = False) -> dict[str, Any]:
        """Apply the offload policies now (threshold offload, bookie copies past the deletion lag);
        what was done. A no-op without a tier."""
        if self._offloads is None or self.state in (ManagedLedgerState.CLOSED, ManagedLedgerState.FENCED):
            return {}
        return await self._offloads.check(wait=wait)

    @property
    def offloaded_size(self) -> int:
        """Bytes of the ledgers whose tier copy is complete (Pulsar's ``offloadedStorageSize``)."""
        return sum(i.size for i in self._ledgers.infos() if i.offloaded)

    def offload_stats(self) -> dict[str, int]:
        """``lastOffloadLedgerId``, ``lastOffloadSuccessTimeStamp``, ``lastOffloadFailureTimeStamp``."""
        o = self._offloads
        return {
            "lastOffloadLedgerId": o.last_offloaded_ledger if o else 0,
            "lastOffloadSuccessTimeStamp": o.last_success_ms if o else 0,
            "lastOffloadFailureTimeStamp": o.last_failure_ms if o else 0,
        }

    async def refresh_offload_policies(self) -> None:
        """Resolve the offload policies now (explain and reads use the last resolved ones)."""
        if self._offloads is not None:
            await self._offloads.resolve_policies()

    def explain_offload(self, info: LedgerInfo) -> dict[str, Any]:
        """Where a ledger lives (bookies, tier, both), its offload state, and why its bookie copy is
        or is not deleted yet."""
        if self._offloads is None:
            return {
                "state": "NONE",
                "location": "bookies",
                "bookieCopy": "no tiered storage is configured: the bookie copy is the only one",
            }
        return self._offloads.explain(info, self._now_ms())

    async def _record_offload(self, ledger_id: int, expected: OffloadContext | None, new: OffloadContext) -> bool:
        self._check_open()
        async with self._meta_lock:
            if ledger_id not in self._ledgers or ledger_id == self._ledgers.current:
                return False
            if self._ledgers.info(ledger_id).offload != expected:
                return False
            self._ledgers.set_offload(ledger_id, new)
            await self._write_info()  # a lost CAS fences this instance: the new owner decides
        if new.bookkeeper_deleted:
            await self._reader.forget_bookie_handle(ledger_id)
        return True

    # ==========================================================================================
    # Stats
    # ==========================================================================================

    def internal_stats(self) -> dict[str, Any]:
        """A snapshot in the shape of Pulsar's ``stats-internal``."""
        ledgers = self._ledgers
        return {
            "entriesAddedCounter": self.entries_added_counter,
            "numberOfEntries": self.number_of_entries,
            "totalSize": self.total_size,
            "currentLedgerEntries": ledgers.current_entries if ledgers.current is not None else 0,
            "currentLedgerSize": ledgers.current_size if ledgers.current is not None else 0,
            "lastLedgerCreatedTimestamp": self.current_ledger_created_ms,
            "pendingAddEntriesCount": len(self._pending),
            "lastConfirmedEntry": str(self.last_confirmed_entry),
            "state": self.state.name,
            "ledgers": [
                {
                    "ledgerId": i.ledger_id,
                    "entries": i.entries,
                    "size": i.size,
                    "timestamp": i.timestamp_ms,
                    "offloaded": i.offloaded,
                }
                for i in ledgers.infos()
            ],
            "cursors": self._cursors.stats(),
        }

    # ==========================================================================================
    # Reads
    # ==========================================================================================

    def _notify_readers(self) -> None:
        self._entries_event.set()
        self._entries_event = trio.Event()

    def has_entry(self, position: Position) -> bool:
        """True when the ledger list holds an entry at ``position`` (it may still fail to read
        while storage is unavailable; False means it never existed or its ledger is gone)."""
        return self._ledgers.is_entry(position)

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


class _TierSide:
    """The `TierRoute` of a managed ledger's reader."""

    __slots__ = ("_ml",)

    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml

    def offload_of(self, ledger_id: int) -> OffloadContext | None:
        ledgers = self._ml._ledgers
        if ledger_id not in ledgers or ledger_id == ledgers.current:
            return None
        ctx = ledgers.info(ledger_id).offload
        return ctx if ctx is not None and ctx.complete else None

    def tier_first(self, ctx: OffloadContext) -> bool:
        offloads = self._ml._offloads
        if ctx.bookkeeper_deleted or offloads is None:
            return True
        return offloads.read_priority is ReadPriority.TIERED_STORAGE_FIRST

    async def open(self, ledger_id: int, ctx: OffloadContext) -> OffloadedLedger:
        offloads = self._ml._offloads
        if offloads is None:
            raise ManagedLedgerError(f"{self._ml.name}: ledger {ledger_id} is offloaded but no tier is configured")
        return await offloads.offloader_for(ctx).open(ledger_id, ctx.uid, namespace=offloads.namespace)


class _OffloadSide:
    """The `OffloadHost` a managed ledger gives its offload runs."""

    __slots__ = ("_ml",)

    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml

    @property
    def name(self) -> str:
        return self._ml.name

    def ledger_infos(self) -> list[LedgerInfo]:
        return self._ml._ledgers.infos()

    @property
    def current_ledger(self) -> int | None:
        return self._ml._ledgers.current

    async def record_offload(self, ledger_id: int, expected: OffloadContext | None, new: OffloadContext) -> bool:
        return await self._ml._record_offload(ledger_id, expected, new)

    async def bookie_source(self, ledger_id: int) -> BookieSource:
        ml = self._ml
        try:
            handle = await open_with_passwords(ml._ctx.bk, ledger_id, ml._cfg.read_passwords, recovery=False)
        except Exception as exc:
            raise ManagedLedgerError(f"{ml.name}: cannot open ledger {ledger_id} to offload it: {exc}") from exc
        return BookieSource(ledger_id, handle)

    async def delete_bookie_copy(self, ledger_id: int) -> None:
        try:
            await self._ml._ctx.bk.delete_ledger(ledger_id)
        except NoSuchLedger:
            pass  # gone already (an earlier attempt deleted it before it could record so)

    def now_ms(self) -> int:
        return self._ml._now_ms()


class _CursorSide:
    """The `CursorHost` a managed ledger gives its cursors (and their registry): the few things
    they may use of it. The ledger list, the readers' event and the state are read through on
    each use; the rest never changes."""

    __slots__ = ("_ml", "name", "store", "node_path", "metrics", "max_unacked_ranges_to_persist")

    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml
        self.name = ml.name
        self.store = ml._ctx.store
        self.node_path = ml._path
        self.metrics = ml._ctx.metrics
        self.max_unacked_ranges_to_persist = ml._cfg.max_unacked_ranges_to_persist

    @property
    def ledgers(self) -> LedgerList:
        return self._ml._ledgers

    @property
    def entries_event(self) -> trio.Event:
        return self._ml._entries_event

    @property
    def terminated(self) -> bool:
        return self._ml.state is ManagedLedgerState.TERMINATED

    def check_open(self) -> None:
        self._ml._check_open()

    async def read(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        return await self._ml._read_run(ledger_id, first, last)

    def now_ms(self) -> int:
        return self._ml._now_ms()

    def fence(self, why: str) -> None:
        self._ml._fence(why)

    def cursor_closed(self, cursor: ManagedCursor) -> None:
        self._ml._cursors.forget(cursor)
        self._ml._notify_readers()
