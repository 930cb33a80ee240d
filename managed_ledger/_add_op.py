"""`PendingAdd`: one add of a managed ledger, from admission to its outcome.

Created by `ManagedLedger.append` (which ``add_entry`` uses too) and moved only by the managed
ledger's add path (the "adds" section of `managed_ledger._ledger`), as Pulsar's ``OpAddEntry``
is by ``ManagedLedgerImpl`` and BookKeeper's ``PendingAddOp`` by its ledger handle. Callers read
``finished``, ``position`` and ``error`` and wait with ``result()`` or ``wait()``.

States (`AddState`):

* Rule 1: QUEUED on admission, its bytes counted against ``max_pending_add_bytes`` until DONE;
  -> ISSUED when it is handed to the current ledger's write handle, which fixes its entry id.
* Rule 2: ISSUED -> SUCCEEDED when that ledger acknowledged it; SUCCEEDED -> DONE with its
  position once every add admitted before it is DONE: adds finish in admission order.
* Rule 3: ISSUED -> FAILED when the ledger refused it (the managed ledger rolls to a new one).
  When the roll hands the unfinished adds over, a FAILED add and every unfinished add behind it
  (even one the old ledger acknowledged: that ledger is cut at its count) go back to QUEUED and
  are issued again on the new ledger, oldest first. An add that has failed on
  ``_MAX_ADD_ATTEMPTS`` ledgers goes to DONE with an error instead, and so does every add admitted
  after it that is not DONE yet.
* Rule 4: any state -> DONE with an error when the managed ledger gives up on every unfinished add
  at once: it was fenced (another owner opened it) or no new ledger could be created (storage
  unavailable). DONE is final.

So an add that finishes with an error never has an add admitted before that failure, and after
it, stored: whoever resends a failed add (a producer) cannot be overtaken by its own later adds.
"""

from __future__ import annotations

import enum

import trio

from managed_ledger._errors import ManagedLedgerError
from protocols.managed_ledger import Position

__all__ = ["AddState", "PendingAdd"]


class AddState(enum.Enum):
    """Where an add is; the rules are in the module header."""

    QUEUED = "queued"  # admitted, waiting for a writable ledger
    ISSUED = "issued"  # handed to the ledger's write handle
    SUCCEEDED = "succeeded"  # acknowledged by the ledger, not yet finished in order
    FAILED = "failed"  # the ledger refused it; it is issued again after the roll
    DONE = "done"  # finished: ``position`` or ``error`` is final


class PendingAdd:
    """An add admitted by `ManagedLedger.append`; see the module header for its states.

    The contract for callers: ``data``, ``finished``, ``position`` and ``error`` (both final once
    ``finished``), ``wait()`` and ``result()``. The other attributes are the managed ledger's
    bookkeeping and change while the add is in flight.
    """

    __slots__ = (
        "data",
        "started",
        "state",
        "gen",
        "attempts",
        "entry_id",
        "ledger_error",
        "position",
        "error",
        "_done",
    )

    def __init__(self, data: bytes, started: float) -> None:
        self.data = data
        self.started = started  # trio time of admission (the add-latency histogram)
        self.state = AddState.QUEUED
        self.gen = -1  # the write generation (ledger) it was last issued on
        self.attempts = 0  # ledgers that refused it
        self.entry_id = -1  # on the ledger it was last issued on
        self.ledger_error: BaseException | None = None  # why that ledger refused it
        self.position: Position | None = None
        self.error: ManagedLedgerError | None = None
        self._done: trio.Event | None = None  # made only when someone waits (a per-add cost)

    def __repr__(self) -> str:
        return f"<PendingAdd {len(self.data)} bytes {self.state.name} position={self.position} error={self.error!r}>"

    @property
    def finished(self) -> bool:
        """True once the add is stored (``position`` set) or failed (``error`` set); final."""
        return self.state is AddState.DONE

    async def wait(self) -> None:
        """Return once ``finished`` (never raises the add's error). Cancelling the wait does not
        withdraw the add. A checkpoint even when already finished."""
        if self.state is AddState.DONE:
            await trio.lowlevel.checkpoint()
            return
        if self._done is None:
            self._done = trio.Event()
        await self._done.wait()

    async def result(self) -> Position:
        """Wait for the outcome: the entry's position, or raise ``error`` (a `ManagedLedgerError`)."""
        await self.wait()
        if self.error is not None:
            raise self.error
        assert self.position is not None
        return self.position

    def finish(self, error: ManagedLedgerError | None) -> None:
        """DONE (rules 2-4): with ``error``, or stored at ``position`` (set before). Wakes the waiters."""
        self.state, self.error = AddState.DONE, error
        if self._done is not None:
            self._done.set()
