"""One pending add (BookKeeper's ``PendingAddOp``): an entry on its way to its write set.

States (``AddState``):

* Rule 1: an add starts WAITING (queued for in-flight space) with its entry id already fixed, so
  ids follow the order in which ``add_entry`` calls start.
* Rule 2: WAITING -> SENT when admitted; admission is FIFO, so adds are sent in id order.
* Rule 3: SENT -> ACKED when Qa members of its write set acked. An ack from a bookie that is
  then replaced by an ensemble change is forgotten (``AckSet.remove``), which can send the add
  back to SENT while it is re-sent to the replacement.
* Rule 4: ACKED -> DONE when every earlier add is DONE and no ensemble change is in progress:
  the caller gets the entry id. DONE is final.
* Rule 5: WAITING / SENT / ACKED -> FAILED when the handle fails (fenced, closed, no bookies):
  the caller gets the error. FAILED is final.

An add spawns no task: bookie answers arrive as callbacks on the connection's reader task, and
the caller's own task waits on the add's event.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import trio

from ._errors import BKError
from ._quorum import AckSet

if TYPE_CHECKING:
    from ._write_handle import LedgerWriteHandle

__all__ = ["AddState", "PendingAdd", "clone_error"]


def clone_error(error: BKError) -> BKError:
    """A fresh instance of ``error`` (same class, message and attributes) to raise in another
    task, so tracebacks of different callers do not pile onto one exception object."""
    new = type(error).__new__(type(error), *error.args)
    new.__dict__.update(error.__dict__)
    new.__cause__ = error.__cause__
    return new


class AddState(enum.Enum):
    """Where a pending add is (rules in the module docstring)."""

    WAITING = "waiting"
    SENT = "sent"
    ACKED = "acked"
    DONE = "done"
    FAILED = "failed"


class PendingAdd:
    """An add in progress; ``await result()`` returns its entry id once acknowledged (in order).

    Created by ``LedgerWriteHandle.append`` / ``add_entry``; never built by callers.
    """

    __slots__ = (
        "handle",
        "entry_id",
        "payload",
        "length",
        "ack_set",
        "state",
        "body",
        "started",
        "sent_at",
        "completed_at",
        "error",
        "_done",
        "_admitted",
    )

    def __init__(self, handle: LedgerWriteHandle, entry_id: int, payload: bytes, length: int, ack_set: AckSet) -> None:
        self.handle = handle
        self.entry_id = entry_id
        self.payload = payload
        self.length = length  # ledger length including this entry (goes into the digest header)
        self.ack_set = ack_set
        self.state = AddState.WAITING
        self.body: bytes | None = None  # the digest-framed entry, built once at first send
        self.started = trio.current_time()
        self.sent_at = 0.0
        self.completed_at = 0.0  # trio clock when it became DONE (latency = completed_at - started)
        self.error: BKError | None = None
        self._done: trio.Event | None = None  # made only when someone waits (a per-add cost)
        self._admitted: trio.Event | None = None

    @property
    def size(self) -> int:
        """Payload bytes (what the in-flight byte bound counts)."""
        return len(self.payload)

    def admitted(self) -> None:
        """Rule 2 bookkeeping: wake a caller waiting for admission."""
        if self._admitted is not None:
            self._admitted.set()

    async def wait_admitted(self) -> None:
        """Return once the add left WAITING (sent, or already finished)."""
        if self.state is not AddState.WAITING:
            return
        if self._admitted is None:
            self._admitted = trio.Event()
        await self._admitted.wait()

    def complete(self) -> None:
        """Rule 4: DONE; wake the caller."""
        self.state = AddState.DONE
        if self._done is not None:
            self._done.set()
        if self._admitted is not None:
            self._admitted.set()

    def fail(self, error: BKError) -> None:
        """Rule 5: FAILED with (a copy of) ``error``; wake the caller. No-op once DONE or FAILED."""
        if self.state is AddState.DONE or self.state is AddState.FAILED:
            return
        self.state = AddState.FAILED
        self.error = error
        if self._done is not None:
            self._done.set()
        if self._admitted is not None:
            self._admitted.set()

    @property
    def finished(self) -> bool:
        """True once DONE or FAILED."""
        return self.state is AddState.DONE or self.state is AddState.FAILED

    async def wait_finished(self) -> None:
        """Return once the add is DONE or FAILED (``finished``); unlike ``result`` it never raises
        the add's error. Cancelling the wait does not cancel the add. A checkpoint even when
        already finished."""
        if self.finished:
            await trio.lowlevel.checkpoint()
            return
        if self._done is None:
            self._done = trio.Event()
        await self._done.wait()

    async def result(self) -> int:
        """The entry id once acknowledged; raises the handle's error if the add failed.

        Cancelling the wait does not cancel the add (its outcome stays unknown to this caller).
        """
        await self.wait_finished()
        if self.error is not None:
            raise clone_error(self.error)
        return self.entry_id
