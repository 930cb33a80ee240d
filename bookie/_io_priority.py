"""`SyncPriority`: the journal's syncs go to the device before background (compaction) syncs.

Journal and entry logs usually share a device, and an fdatasync queues behind whatever the
device is already writing back. An add waits for its journal sync, so a compaction sync (its
copied records, then the index commit) issued while a journal sync is in flight makes that add
wait for the compaction's bytes too. The rule:

* the journal marks each of its syncs (`foreground`) for as long as the worker thread runs it;
* compaction, before each sync or index commit, awaits `background_turn`: it returns at once when
  no journal sync is in flight, else once the in-flight ones finished, but after at most
  ``max_wait_s`` (a journal syncing without pause must not starve compaction forever: it then
  proceeds, as it did before this rule).

Only the trio thread touches it (the journal marks around its ``to_thread`` call), so no lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["SyncPriority"]


class SyncPriority:
    """Gate between foreground (journal) and background (compaction) syncs (module docstring).

    Guarantees: `background_turn` never waits longer than its bound and never raises except on
    cancellation; `foreground` always leaves the count as it found it, whatever the body raises.
    """

    def __init__(self) -> None:
        self._in_flight = 0
        self._quiet = trio.Event()
        self._quiet.set()
        self.background_waits = 0  # how often background work yielded to a journal sync
        self.background_wait_s = 0.0

    @property
    def foreground_busy(self) -> bool:
        """Whether a journal sync is in flight now."""
        return self._in_flight > 0

    @contextmanager
    def foreground(self) -> Iterator[None]:
        """Mark a journal sync in flight for the duration of the block."""
        if self._in_flight == 0:
            self._quiet = trio.Event()
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._quiet.set()

    async def background_turn(self, max_wait_s: float = 0.05) -> None:
        """Wait (at most ``max_wait_s``) until no journal sync is in flight; always a checkpoint."""
        if self._in_flight == 0:
            await trio.lowlevel.checkpoint()
            return
        self.background_waits += 1
        start = trio.current_time()
        with trio.move_on_after(max_wait_s):
            await self._quiet.wait()
        self.background_wait_s += trio.current_time() - start
