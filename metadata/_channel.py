"""A bounded, coalescing, single-consumer channel for watch events and session states.

Why not ``trio.open_memory_channel``: a producer there must either block (which would stall a
ZooKeeper callback thread or a writer) or drop items (which could hide the latest change).
Instead, the pending items form an ordered set: pushing an item that is already pending moves it
to the end instead of adding a second copy. So

* the buffer never holds more than one copy of each distinct item, which bounds it by the
  number of distinct events a watch can produce (a few enum kinds times one path);
* a fast consumer sees exactly one item per push;
* a slow consumer sees fewer items but never misses the most recent one, which is always last.

Consumers react to an event by reading the current state, so coalescing loses nothing they need.
``push`` is synchronous and never blocks; it must be called from the trio thread (ZooKeeper
callbacks hop over with ``TrioToken.run_sync_soon``).

`SessionWatchers` is the session-state side every store shares: ``watch_session`` channels that
get each new state, and all end with CLOSED when the store closes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import trio

from ._types import SessionState

T = TypeVar("T")


class CoalescingChannel(trio.abc.ReceiveChannel[T], Generic[T]):
    """Receive side of a coalescing buffer; the owner pushes with `push` and ends with `finish`."""

    def __init__(self) -> None:
        self._pending: dict[T, None] = {}
        self._ready = trio.Event()
        self._finished = False
        self._closed = False

    def push(self, item: T) -> None:
        """Queue ``item`` (moving it to the end if already pending); a no-op once finished."""
        if self._finished or self._closed:
            return
        self._pending.pop(item, None)
        self._pending[item] = None
        self._ready.set()

    def finish(self) -> None:
        """No more items: the consumer drains what is pending, then gets EndOfChannel."""
        self._finished = True
        self._ready.set()

    def pending(self) -> int:
        """How many items wait to be received (for tests and statistics)."""
        return len(self._pending)

    async def receive(self) -> T:
        """The oldest pending item; raises EndOfChannel after `finish` once drained."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise trio.ClosedResourceError("watch channel was closed")
            if self._pending:
                item = next(iter(self._pending))
                del self._pending[item]
                # shielded: the item is already taken, a cancellation now would lose it
                await trio.lowlevel.cancel_shielded_checkpoint()
                return item
            if self._finished:
                raise trio.EndOfChannel
            self._ready = trio.Event()
            await self._ready.wait()

    async def aclose(self) -> None:
        """Stop receiving; pending and future items are dropped."""
        self._closed = True
        self._pending.clear()
        self._ready.set()
        await trio.lowlevel.checkpoint()


class SessionWatchers:
    """The ``watch_session`` channels of one store.

    `watch` opens a channel (already ended with CLOSED when the store is closed), `publish`
    pushes a new state to every open channel, `close` pushes CLOSED to all of them and ends them.
    """

    def __init__(self) -> None:
        self._channels: set[CoalescingChannel[SessionState]] = set()

    @asynccontextmanager
    async def watch(self, current: SessionState) -> AsyncIterator[trio.abc.ReceiveChannel[SessionState]]:
        """A channel of the states after ``current`` (the store's state now), until the block exits."""
        ch: CoalescingChannel[SessionState] = CoalescingChannel()
        if current is SessionState.CLOSED:
            ch.push(SessionState.CLOSED)
            ch.finish()
        else:
            self._channels.add(ch)
        try:
            await trio.lowlevel.checkpoint()
            yield ch
        finally:
            self._channels.discard(ch)
            ch.finish()

    def publish(self, state: SessionState) -> None:
        """Push ``state`` to every open channel (never blocks)."""
        for ch in tuple(self._channels):
            ch.push(state)

    def close(self) -> None:
        """Push CLOSED to every open channel and end them all."""
        for ch in self._channels:
            ch.push(SessionState.CLOSED)
            ch.finish()
        self._channels.clear()
