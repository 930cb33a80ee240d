"""An in-memory BookKeeper for unit tests of the layers above the client.

`MockBookKeeper` implements `bk_client.api.BookKeeperClient` without bookies: every ledger is a
list of byte strings plus a small metadata record, and it keeps the rules listed in
``bk_client.api`` (FIFO ids, in-order completion, fencing on open-with-recovery, a failed handle
stays failed, close records the last acknowledged entry).

Ledger metadata states (the same as BookKeeper's LedgerMetadataFormat):

* Rule 1: ``create_ledger`` makes an OPEN ledger with the next id (ids only increase, never reused).
* Rule 2: ``open_ledger(recovery=True)`` on an OPEN ledger fences it and closes it at the last
  entry its writer had acknowledged (CLOSED); the writer's next add raises ``LedgerFenced``.
  Adds that were still waiting for their delay when the fence came also fail.
* Rule 3: the writer's ``close`` moves OPEN -> CLOSED at its last acknowledged entry; closing a
  ledger that recovery already closed is a no-op.
* Rule 4: ``delete_ledger`` removes the ledger; later opens and reads raise ``NoSuchLedger``.
* Rule 5: ``open_ledger`` with another password than the ledger was created with raises
  ``Unauthorized`` (as the real client checks the password in the ledger's metadata).

Failure injection, in the style of Pulsar's ``PulsarMockBookKeeper`` (``failNow`` / ``failAfter``):
every client operation (create, open, delete, add, read, close) first consults the programmed
failures. ``fail_now(error, count=1)`` makes the next ``count`` operations raise ``error``;
``fail_after(n_ops, error)`` lets ``n_ops`` operations succeed and fails the one after. Both take
an optional ``ops`` filter (for example ``{"add"}``) so only those operation kinds are counted and
failed. An add that fails this way poisons its handle: later adds on it raise the same kind of
error (rule 3 of the client contract). ``add_delay`` (seconds, trio time) delays every add's
acknowledgement, which lets tests have many adds in flight.

Adds go the way they go in the real client: ``append`` fixes the entry id and registers the add
without a schedule point and returns a pending add; one acknowledger task per handle (a trio
system task, started when a burst begins and gone when it drains, like the connection reader
task that completes the real client's adds) completes them in id order once their delay is over.
``add_entry`` is ``append`` plus ``result()`` (and its callers return in id order). So an
injected add failure, like a bookie's write error, arrives on the pending add after the earlier
adds completed; ``append`` itself raises only when the handle already knows it cannot take adds
(failed, fenced or closed). Cancelling a wait for an add does not withdraw the add. The mock has
no in-flight bound: ``append`` never waits for room (it yields once, not cancellably).
"""

from __future__ import annotations

import copy
import enum
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import trio

from bk_client._errors import (
    ClientClosed,
    EntryTooLarge,
    LedgerClosed,
    LedgerFenced,
    NoSuchEntry,
    NoSuchLedger,
    Unauthorized,
)
from bk_client.api import LedgerEntry
from protocols.bookkeeper import DEFAULT_MAX_FRAME_SIZE, MAX_ENTRY_HEADER_SIZE, DigestType, max_add_payload

__all__ = ["MockBookKeeper", "MockLedgerState", "OPS"]

OPS = frozenset({"create", "open", "delete", "add", "read", "close"})
"""The operation kinds failure injection can target."""


class MockLedgerState(enum.Enum):
    """Metadata state of a mock ledger (rules in the module header)."""

    OPEN = "open"
    CLOSED = "closed"


@dataclass
class _Ledger:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    password: bytes
    custom_metadata: dict[str, bytes]
    entries: list[bytes] = field(default_factory=list)
    state: MockLedgerState = MockLedgerState.OPEN
    fenced: bool = False
    lac_changed: trio.Event = field(default_factory=trio.Event)

    @property
    def last_add_confirmed(self) -> int:
        return len(self.entries) - 1

    @property
    def length(self) -> int:
        return sum(len(e) for e in self.entries)

    def notify(self) -> None:
        self.lac_changed.set()
        self.lac_changed = trio.Event()


@dataclass
class _Programmed:
    error: BaseException | type[BaseException]
    skip: int  # operations still allowed to succeed before failing
    count: int  # how many to fail
    ops: frozenset[str]


def _make_error(error: BaseException | type[BaseException]) -> BaseException:
    if isinstance(error, BaseException):
        try:
            return copy.copy(error)
        except TypeError:  # an __init__ with extra required arguments: copy without calling it
            fresh = type(error).__new__(type(error), *error.args)
            fresh.__dict__.update(error.__dict__)
            return fresh
    return error()


class _MockReadHandle:
    """A read handle on a mock ledger (see `bk_client.api.ReadHandle`)."""

    def __init__(self, bk: MockBookKeeper, ledger: _Ledger) -> None:
        self._bk = bk
        self._ledger = ledger
        self._lac = ledger.last_add_confirmed
        self._closed = False

    @property
    def ledger_id(self) -> int:
        return self._ledger.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        if self._ledger.state is MockLedgerState.CLOSED:
            return self._ledger.last_add_confirmed
        return self._lac

    @property
    def is_closed(self) -> bool:
        return self._ledger.state is MockLedgerState.CLOSED

    @property
    def length(self) -> int:
        return sum(len(e) for e in self._ledger.entries[: self.last_add_confirmed + 1])

    def _check(self) -> None:
        if self._bk._ledgers.get(self._ledger.ledger_id) is not self._ledger:
            raise NoSuchLedger(self._ledger.ledger_id)

    async def read(self, first: int, last: int) -> Sequence[LedgerEntry]:
        await trio.lowlevel.checkpoint()
        self._bk._maybe_fail("read")
        self._check()
        # a reader follows what the writer has acknowledged (the bookies' LAC)
        self._lac = max(self._lac, self._ledger.last_add_confirmed)
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        if last > self._ledger.last_add_confirmed:
            raise NoSuchEntry(self._ledger.ledger_id, last)
        return [LedgerEntry(self._ledger.ledger_id, i, self._ledger.entries[i]) for i in range(first, last + 1)]

    async def read_last_add_confirmed(self) -> int:
        await trio.lowlevel.checkpoint()
        self._check()
        self._lac = max(self._lac, self._ledger.last_add_confirmed)
        return self._lac

    async def wait_for_lac(self, previous: int, timeout: float) -> int:  # noqa: ASYNC109 - bk_client.api.ReadHandle's signature
        with trio.move_on_after(timeout):
            while self._ledger.last_add_confirmed <= previous and self._ledger.state is MockLedgerState.OPEN:
                await self._ledger.lac_changed.wait()
        return await self.read_last_add_confirmed()

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()
        self._closed = True


class _MockPendingAdd:
    """An add in progress on a mock handle (see `bk_client.api.PendingAppend`)."""

    __slots__ = ("entry_id", "data", "due", "error", "finished", "_done")

    def __init__(self, entry_id: int, data: bytes, due: float) -> None:
        self.entry_id = entry_id
        self.data = data
        self.due = due  # trio time at which its acknowledgement may come
        self.error: BaseException | None = None
        self.finished = False
        self._done = trio.Event()

    def settle(self, error: BaseException | None) -> None:
        self.error, self.finished = error, True
        self._done.set()

    async def wait_settled(self) -> None:
        """Wait until the add succeeded or failed, without raising."""
        await self._done.wait()

    async def result(self) -> int:
        """The entry id once acknowledged; raises a copy of ``error`` if the add failed."""
        await self._done.wait()
        if self.error is not None:
            raise _make_error(self.error)
        return self.entry_id


class _MockWriteHandle(_MockReadHandle):
    """The writer's handle on a mock ledger (see `bk_client.api.WriteHandle`)."""

    def __init__(self, bk: MockBookKeeper, ledger: _Ledger) -> None:
        super().__init__(bk, ledger)
        self._next_id = 0
        self._error: BaseException | None = None
        self._error_from = 0  # adds with ids from here on fail with _error
        self._writer_closed = False
        self._unacked: deque[_MockPendingAdd] = deque()  # appended, not yet settled, in id order
        self._acking = False
        self._last_returned = trio.Event()  # set once the latest add_entry caller returned
        self._last_returned.set()

    @property
    def last_add_confirmed(self) -> int:
        return self._ledger.last_add_confirmed

    def _fail_state(self, entry_id: int) -> BaseException | None:
        if self._ledger.fenced:
            return LedgerFenced(ledger_id=self._ledger.ledger_id)
        if self._error is not None and entry_id >= self._error_from:
            return _make_error(self._error)
        if self._writer_closed or self._ledger.state is MockLedgerState.CLOSED:
            return LedgerClosed(ledger_id=self._ledger.ledger_id)
        return None

    async def append(self, data: bytes) -> _MockPendingAdd:
        """Start an add (see `bk_client.api.WriteHandle.append` and the module header)."""
        # Everything up to registering the add happens before the first schedule point, so
        # ids follow the order in which the calls start.
        entry_id = self._next_id
        err = self._fail_state(entry_id)
        if err is not None:
            raise err
        if len(data) > self._bk.max_entry_size:
            raise EntryTooLarge(
                f"entry of {len(data)} bytes exceeds {self._bk.max_entry_size}", ledger_id=self._ledger.ledger_id
            )
        self._next_id += 1
        pending = _MockPendingAdd(entry_id, bytes(data), trio.current_time() + self._bk.add_delay)
        try:
            self._bk._maybe_fail("add")
        except BaseException as exc:
            # adds already in flight still complete; this one (settled in turn) and later ones fail
            self._error, self._error_from = exc, entry_id
        self._unacked.append(pending)
        if not self._acking:
            self._acking = True
            trio.lowlevel.spawn_system_task(self._ack_loop, name=f"mock-bk-acks-{self.ledger_id}")
        # A schedule point that cannot cancel: the add is out, and the caller must get it.
        await trio.lowlevel.cancel_shielded_checkpoint()
        return pending

    async def add_entry(self, data: bytes) -> int:
        """Append ``data`` and wait for its entry id (``append`` then ``result``). Callers of
        ``add_entry`` also return in id order, one after the other."""
        previous, mine = self._last_returned, trio.Event()
        self._last_returned = mine
        try:
            pending = await self.append(data)
            await pending.wait_settled()
            # A burst of adds settles in one pass, which wakes its callers in any order; the
            # chain lets each caller run on only after the one before it, as tests expect.
            await previous.wait()
            return await pending.result()
        finally:
            mine.set()

    async def _ack_loop(self) -> None:
        # A system task: it must never raise (that would crash the whole trio run).
        unacked = self._unacked
        try:
            while unacked:
                head = unacked[0]
                if head.due > trio.current_time():
                    await trio.sleep_until(head.due)
                else:
                    await trio.lowlevel.checkpoint()
                now = trio.current_time()
                while unacked and unacked[0].due <= now:
                    self._settle(unacked.popleft())
        finally:
            self._acking = False

    def _settle(self, pending: _MockPendingAdd) -> None:
        err = self._fail_state(pending.entry_id)
        if err is None and len(self._ledger.entries) != pending.entry_id:  # an earlier add failed: rule 3
            err = LedgerClosed(
                f"earlier add failed on ledger {self._ledger.ledger_id}", ledger_id=self._ledger.ledger_id
            )
        if err is None:
            self._ledger.entries.append(pending.data)
            self._ledger.notify()
        pending.settle(err)

    async def close(self) -> None:
        if self._unacked:
            await self._unacked[-1].wait_settled()
        else:
            await trio.lowlevel.checkpoint()
        if self._ledger.ledger_id not in self._bk._ledgers:
            raise NoSuchLedger(self._ledger.ledger_id)
        self._bk._maybe_fail("close")
        self._writer_closed = True
        if self._ledger.state is MockLedgerState.OPEN and not self._ledger.fenced:
            self._ledger.state = MockLedgerState.CLOSED
            self._ledger.notify()


class MockBookKeeper:
    """An in-memory `BookKeeperClient` with failure injection (rules in the module header).

    ``add_delay``: seconds each add waits before it is acknowledged (0 = next checkpoint).
    ``first_ledger_id``: the id of the first ledger created. Several managed-ledger factories may
    share one instance to play several brokers over one BookKeeper cluster. ``max_entry_size``:
    larger adds raise ``EntryTooLarge`` (rule 7); the real client's default unless given.
    """

    def __init__(self, *, add_delay: float = 0.0, first_ledger_id: int = 1, max_entry_size: int | None = None) -> None:
        self.add_delay = add_delay
        self.max_entry_size = (
            max_add_payload(DEFAULT_MAX_FRAME_SIZE, header_size=MAX_ENTRY_HEADER_SIZE)
            if max_entry_size is None
            else max_entry_size
        )
        self._ledgers: dict[int, _Ledger] = {}
        self._next_ledger_id = first_ledger_id
        self._programmed: list[_Programmed] = []
        self._closed = False
        self.deleted_ledgers: list[int] = []
        """Ids passed to a successful ``delete_ledger``, in order (for assertions)."""
        self.created_digest_types: dict[int, DigestType] = {}
        """The digest type each ledger was created with (for assertions)."""

    # --- failure injection -------------------------------------------------------------------

    def fail_now(
        self, error: BaseException | type[BaseException], count: int = 1, *, ops: Collection[str] | None = None
    ) -> None:
        """Make the next ``count`` operations (of the kinds in ``ops``; all kinds when None) raise
        ``error`` (an exception instance, copied per failure, or a class called without args)."""
        self.fail_after(0, error, count=count, ops=ops)

    def fail_after(
        self,
        n_ops: int,
        error: BaseException | type[BaseException],
        *,
        count: int = 1,
        ops: Collection[str] | None = None,
    ) -> None:
        """Let ``n_ops`` operations (of the kinds in ``ops``) succeed, then fail ``count`` of them
        with ``error``."""
        kinds = frozenset(ops) if ops is not None else OPS
        unknown = kinds - OPS
        if unknown:
            raise ValueError(f"unknown operation kinds {sorted(unknown)}; known: {sorted(OPS)}")
        if n_ops < 0 or count < 1:
            raise ValueError("n_ops must be >= 0 and count >= 1")
        self._programmed.append(_Programmed(error, n_ops, count, kinds))

    def clear_failures(self) -> None:
        """Forget every programmed failure that has not fired yet."""
        self._programmed.clear()

    def _maybe_fail(self, op: str) -> None:
        if self._closed:
            raise ClientClosed()
        for prog in self._programmed:
            if op not in prog.ops:
                continue
            if prog.skip > 0:
                prog.skip -= 1
                continue
            prog.count -= 1
            if prog.count <= 0:
                self._programmed.remove(prog)
            raise _make_error(prog.error)

    # --- inspection for tests ----------------------------------------------------------------

    def ledger_ids(self) -> list[int]:
        """Ids of the ledgers that exist, in increasing order."""
        return sorted(self._ledgers)

    def ledger_state(self, ledger_id: int) -> MockLedgerState:
        """The metadata state of a ledger; ``NoSuchLedger`` if it does not exist."""
        return self._get(ledger_id).state

    def ledger_entries(self, ledger_id: int) -> list[bytes]:
        """A copy of the acknowledged entries of a ledger; ``NoSuchLedger`` if it does not exist."""
        return list(self._get(ledger_id).entries)

    def is_fenced(self, ledger_id: int) -> bool:
        """True once a recovery open fenced the ledger."""
        return self._get(ledger_id).fenced

    def _get(self, ledger_id: int) -> _Ledger:
        try:
            return self._ledgers[ledger_id]
        except KeyError:
            raise NoSuchLedger(ledger_id) from None

    # --- BookKeeperClient --------------------------------------------------------------------

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        *,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        digest_type: DigestType = DigestType.CRC32C,
    ) -> _MockWriteHandle:
        """Create an OPEN ledger with the next id and return its write handle. ``digest_type``
        is checked and recorded (``created_digest_types``); the mock keeps payloads, not frames."""
        await trio.lowlevel.checkpoint()
        self._maybe_fail("create")
        if not ensemble_size >= write_quorum >= ack_quorum >= 1:
            raise ValueError("need ensemble_size >= write_quorum >= ack_quorum >= 1")
        ledger = _Ledger(
            self._next_ledger_id, ensemble_size, write_quorum, ack_quorum, password, dict(custom_metadata or {})
        )
        self.created_digest_types[ledger.ledger_id] = DigestType(digest_type)
        self._next_ledger_id += 1
        self._ledgers[ledger.ledger_id] = ledger
        return _MockWriteHandle(self, ledger)

    async def open_ledger(
        self,
        ledger_id: int,
        *,
        password: bytes = b"",
        recovery: bool = True,
    ) -> _MockReadHandle:
        """Open for reading; with ``recovery`` fence and close an OPEN ledger first (rule 2).
        Raises ``NoSuchLedger``."""
        await trio.lowlevel.checkpoint()
        self._maybe_fail("open")
        ledger = self._get(ledger_id)
        if password != ledger.password:
            raise Unauthorized(f"wrong password for ledger {ledger_id}", ledger_id=ledger_id)
        if recovery and ledger.state is MockLedgerState.OPEN:
            ledger.fenced = True
            ledger.state = MockLedgerState.CLOSED
            ledger.notify()
        return _MockReadHandle(self, ledger)

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove a ledger (rule 4); ``NoSuchLedger`` when it does not exist."""
        await trio.lowlevel.checkpoint()
        self._maybe_fail("delete")
        ledger = self._get(ledger_id)
        ledger.fenced = True  # a writer still holding it must not resurrect it
        del self._ledgers[ledger_id]
        ledger.notify()
        self.deleted_ledgers.append(ledger_id)

    async def close(self) -> None:
        """Close the client: every later operation raises ``ClientClosed``."""
        await trio.lowlevel.checkpoint()
        self._closed = True
