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
  on it, oldest first; an add that failed on ``_MAX_ADD_ATTEMPTS`` (3) ledgers fails to its
  caller instead. A rolled ledger with 0 entries is removed from the list and deleted.
* Rule 4: ROLLING -> LEDGER_CLOSED when no new ledger could be created (storage unavailable: too
  few writable bookies): the queued adds fail with `StorageUnavailable`, and so does every add
  for ``_CREATE_RETRY_INTERVAL_S`` after; then LEDGER_CLOSED -> ROLLING on the next add or
  ``ensure_writable``. Opening a managed ledger whose first ledger cannot be created lands here
  too, so its entries and cursors stay readable while storage is read-only.
* Rule 5: ROLLING -> FENCED when the CAS of the list fails: another owner opened the managed
  ledger. FENCED is final: pending and later adds raise `ManagedLedgerFenced`.
* Rule 6: LEDGER_OPENED / LEDGER_CLOSED -> TERMINATED by ``terminate()`` (reads go on, adds
  raise `ManagedLedgerTerminated`); any state -> CLOSED by ``close()`` (final).

Adds complete in the order they were admitted, and a caller is told success only after its entry
and every earlier one are acknowledged by the ack quorum, so the sequence a new owner recovers
contains every acknowledged entry, in order. Bytes in flight are bounded; admission is FIFO.

The add path (admission, issuing through the write handle's ``append``, completion in order, and
the hand-over of unfinished adds in rule 3) is the `AddPath` mixin in ``_ledger_adds``; cursors,
trimming and stats are the `CursorsAndTrimming` mixin in ``_ledger_cursors``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bk_client import NoSuchLedger
from bk_client.api import BookKeeperClient, WriteHandle
from managed_ledger._cache import EntryCache
from managed_ledger._config import ManagedLedgerConfig
from managed_ledger._cursor import ManagedCursor
from managed_ledger._errors import (
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
    StorageUnavailable,
)
from managed_ledger._ledger_adds import AddPath
from managed_ledger._ledger_cursors import CursorsAndTrimming
from managed_ledger._ledger_list import LedgerList
from managed_ledger._reader import LedgerReader
from managed_ledger._types import Entry
from managed_ledger.metrics import ManagedLedgerMetrics
from metadata import BadVersionError, NodeExistsError, NoNodeError
from protocols.managed_ledger import LedgerInfo, ManagedLedgerInfo, Position

if TYPE_CHECKING:
    from metadata import MetadataStore

__all__ = ["ManagedLedger", "ManagedLedgerState", "ML_ROOT"]

log = logging.getLogger(__name__)

ML_ROOT = "/managed-ledgers"
_CREATE_RETRY_INTERVAL_S = 1.0  # after a failed ledger creation, adds fail at once this long
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


class ManagedLedger(AddPath, CursorsAndTrimming):
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
        self._storage_error: str | None = None  # why the last ledger creation failed (Rule 4)
        self._storage_error_at = 0.0  # trio time of that failure
        self._init_adds()
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
            self.state = ManagedLedgerState.TERMINATED
        else:
            self.state = ManagedLedgerState.LEDGER_CLOSED
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

    # --- state checks (the mixins use them too) -----------------------------------------------

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

    def _is_opened(self) -> bool:
        return self.state is ManagedLedgerState.LEDGER_OPENED

    def _is_ledger_closed(self) -> bool:
        return self.state is ManagedLedgerState.LEDGER_CLOSED

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
            await self._requeue_for_next_ledger()
            await self._close_handle_quietly(old)
        try:
            handle = await self._create_ledger()
        except ManagedLedgerError as exc:
            async with self._meta_lock:
                self._ledgers.close_current(self._now_ms())
                self._handle = None
                self._reader.write_ledger = None
            self.state = ManagedLedgerState.LEDGER_CLOSED
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
            self._cursors_follow_removed_ledgers()
            await self._delete_quietly(doomed)
        self._issue_queued()

    def _note_storage_error(self, exc: BaseException) -> str:
        self._storage_error = f"{self.name}: storage unavailable: {exc}"
        self._storage_error_at = trio.current_time()
        log.warning("%s", self._storage_error)
        return self._storage_error

    def _storage_error_is_recent(self) -> bool:
        return (self._storage_error is not None
                and trio.current_time() - self._storage_error_at < _CREATE_RETRY_INTERVAL_S)

    async def ensure_writable(self) -> None:
        """Return once there is a ledger to add to, creating one if storage was unavailable (at
        most once per ``_CREATE_RETRY_INTERVAL_S``; Rule 4). Raises `StorageUnavailable` when no
        ledger can be created now, or the error of a closed, fenced or terminated managed ledger."""
        self._check_writable()
        await self._roll_done.wait()
        if self._is_ledger_closed():
            if not self._storage_error_is_recent():
                self._request_roll("no_ledger")
                await self._roll_done.wait()
        self._check_writable()
        if self._is_ledger_closed():
            raise StorageUnavailable(self._storage_error or f"{self.name}: no ledger to write to")

    @property
    def storage_error(self) -> str | None:
        """Why no ledger could be created, while that lasts (None once a ledger is open)."""
        return self._storage_error if self._is_ledger_closed() else None

    def _switch_to(self, handle: WriteHandle) -> None:
        self._storage_error = None
        self._handle = handle
        self._start_issuing(handle)
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
