"""Per-ledger last-add-confirmed (LAC) tracking and long-poll waits.

A bookie learns a ledger's LAC from the writer: every entry carries the writer's LAC in its header
(piggybacked), and WRITE_LAC sends it explicitly. The tracker keeps the highest value seen per
ledger and wakes long-poll readers waiting for it to pass a value. Rules:

1. `advance` only raises a ledger's LAC, never lowers it; it wakes every waiter of the ledger.
2. A wait returns as soon as the LAC is above ``previous``, or at its timeout with the current
   value. At most ``max_waiters`` waits are held at once; one more raises `TooManyWaiters`.
3. A ledger the tracker has not seen has no entry here (``known`` returns None): the bookie then
   derives it from storage (the last entry's header and the explicit LAC) and `advance` s it.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .._errors import BookieException

__all__ = ["LacTracker", "TooManyWaiters"]


class TooManyWaiters(BookieException):
    """``max_waiters`` long polls are already waiting."""


class LacTracker:
    """See the module rules. ``on_waiters(n)`` reports the number of waiters (a gauge)."""

    def __init__(self, max_waiters: int, on_waiters: Callable[[int], None] = lambda n: None) -> None:
        self._lac: dict[int, int] = {}
        self._events: dict[int, trio.Event] = {}
        self._max = max_waiters
        self._on_waiters = on_waiters
        self.waiters = 0

    def __len__(self) -> int:
        return len(self._lac)

    def known(self, ledger_id: int) -> int | None:
        """The highest LAC seen for the ledger, None if none was seen yet."""
        return self._lac.get(ledger_id)

    def advance(self, ledger_id: int, lac: int) -> None:
        """Raise the ledger's LAC to ``lac`` (rule 1) and wake its waiters."""
        if lac <= self._lac.get(ledger_id, -2):
            return
        self._lac[ledger_id] = lac
        event = self._events.pop(ledger_id, None)
        if event is not None:
            event.set()

    def forget(self, ledger_id: int) -> None:
        """Drop a deleted ledger's value."""
        self._lac.pop(ledger_id, None)

    async def wait_above(self, ledger_id: int, previous: int, timeout_s: float) -> int:
        """Rule 2: the LAC once above ``previous``, else the current one (-1 if none) at timeout."""
        if self._lac.get(ledger_id, -1) > previous or timeout_s <= 0:
            return self._lac.get(ledger_id, -1)
        if self.waiters >= self._max:
            raise TooManyWaiters(f"{self.waiters} long-poll reads already wait")
        self.waiters += 1
        self._on_waiters(self.waiters)
        try:
            with trio.move_on_after(timeout_s):
                while self._lac.get(ledger_id, -1) <= previous:
                    event = self._events.get(ledger_id)
                    if event is None:
                        event = self._events[ledger_id] = trio.Event()
                    await event.wait()
        finally:
            self.waiters -= 1
            self._on_waiters(self.waiters)
        return self._lac.get(ledger_id, -1)
