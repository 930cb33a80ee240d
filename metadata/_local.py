"""The embedded (sqlite, ``embedded:///dir``) and in-memory (``memory://name``) stores.

Sharing rules:

* All stores opened on the same directory (or memory name) in one process share one `_Database`:
  one tree, one watch hub, one worker at a time. Each store is its own session with its own id
  and ephemerals; closing a store deletes its ephemerals and fires the watches of every store.
* The database closes (and the directory lock is released) when its last store closes. A memory
  tree lives as long as at least one store on its name is open.
* Session ids come from a counter kept in the tree, so they never repeat, and on opening a
  directory every ephemeral left behind by an earlier process (crashed or not) is deleted.

Events of a commit are dispatched on the trio thread before the writer's call returns, and in
commit order (the worker queues the dispatch with ``run_sync_soon`` ahead of its own result).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from . import _paths
from ._channel import CoalescingChannel, SessionWatchers
from ._errors import MetadataError, SessionExpiredError
from ._sqlite import SqliteStorage
from ._tree import SESSION_COUNTER, Event, MemoryStorage, Tree, Txn
from ._types import Op, OpResult, SessionState, Stat, WatchEvent, WatchKind

R = TypeVar("R")

# channels by path; an alias, because `set` is a method name inside the store classes
_Watchers = dict[str, set[CoalescingChannel[WatchEvent]]]
_DATA_KINDS = (WatchKind.CREATED, WatchKind.CHANGED, WatchKind.DELETED)
_CHILD_KINDS = (WatchKind.CREATED, WatchKind.DELETED, WatchKind.CHILDREN_CHANGED)


class _Hub:
    """Watch registrations of every store sharing a database, by path."""

    def __init__(self) -> None:
        self.data: _Watchers = {}
        self.children: _Watchers = {}

    def add(self, table: _Watchers, path: str, ch: CoalescingChannel[WatchEvent]) -> None:
        table.setdefault(path, set()).add(ch)

    def remove(self, table: _Watchers, path: str, ch: CoalescingChannel[WatchEvent]) -> None:
        chans = table.get(path)
        if chans is not None:
            chans.discard(ch)
            if not chans:
                del table[path]

    def dispatch(self, events: list[Event]) -> None:
        for kind, path in events:
            event = WatchEvent(kind, path)
            if kind in _DATA_KINDS:
                for ch in tuple(self.data.get(path, ())):
                    ch.push(event)
            if kind in _CHILD_KINDS:
                for ch in tuple(self.children.get(path, ())):
                    ch.push(event)


class _Database:
    """One tree shared by the stores of one process; see the module header."""

    def __init__(self, key: str, make_storage: Callable[[], Any], threaded: bool) -> None:
        self.key = key
        self._make_storage = make_storage
        self._threaded = threaded
        self.refs = 0
        self.ready = trio.Event()
        self.closed = trio.Event()
        self.closing = False
        self.error: BaseException | None = None
        self.hub = _Hub()
        self.token = trio.lowlevel.current_trio_token()
        self._limiter = trio.CapacityLimiter(1)
        self._storage: Any = None
        self._tree: Tree | None = None

    async def open(self) -> None:
        def work() -> None:
            self._storage = self._make_storage()
            self._tree = Tree(self._storage)
            # any ephemeral on disk belongs to a session of a process that is gone
            self._tree.apply(lambda t: t.drop_ephemerals(self._storage.all_ephemerals()))

        if self._threaded:
            await trio.to_thread.run_sync(work, limiter=self._limiter)
        else:
            work()
            await trio.lowlevel.checkpoint()

    async def call(self, fn: Callable[[Txn], R]) -> R:
        """Run ``fn`` atomically; its watch events are dispatched before this returns."""
        tree = self._tree
        assert tree is not None
        if not self._threaded:
            await trio.lowlevel.checkpoint()
            result, events = tree.apply(fn)
            self.hub.dispatch(events)
            return result

        def work() -> R:
            result, events = tree.apply(fn)
            if events:
                self.token.run_sync_soon(self.hub.dispatch, events)
            return result

        # not abandoned on cancel: a commit that started is seen through and its events fire
        return await trio.to_thread.run_sync(work, limiter=self._limiter)

    async def shutdown(self) -> None:
        storage = self._storage
        self._storage = self._tree = None
        if storage is not None and hasattr(storage, "close"):
            await trio.to_thread.run_sync(storage.close, limiter=self._limiter)


_OPEN: dict[str, _Database] = {}


async def _acquire(key: str, make_storage: Callable[[], Any], threaded: bool) -> _Database:
    while True:
        db = _OPEN.get(key)
        if db is None:
            db = _OPEN[key] = _Database(key, make_storage, threaded)
            db.refs += 1
            try:
                await db.open()
            except BaseException as exc:
                db.error = exc
                del _OPEN[key]
                with trio.CancelScope(shield=True):
                    await db.shutdown()  # the open may have finished before a cancellation hit
                db.ready.set()
                db.closed.set()
                raise
            db.ready.set()
            return db
        if db.token is not trio.lowlevel.current_trio_token():
            raise MetadataError(f"metadata store {key} is already open in another trio run of this process")
        if db.closing:
            await db.closed.wait()
            continue
        db.refs += 1
        try:
            await db.ready.wait()
        except BaseException:
            await _release(db)  # shielded inside; we may be the last user by now
            raise
        if db.error is not None:
            db.refs -= 1
            raise MetadataError(f"opening metadata store {key} failed: {db.error}") from db.error
        return db


async def _release(db: _Database) -> None:
    db.refs -= 1
    if db.refs == 0:
        db.closing = True
        try:
            with trio.CancelScope(shield=True):
                await db.shutdown()
        finally:
            if _OPEN.get(db.key) is db:
                del _OPEN[db.key]
            db.closed.set()


class LocalStore:
    """A session on a local tree (embedded or memory). Create with `open_local_store`."""

    def __init__(self, db: _Database, session_id: int, description: str) -> None:
        self._db = db
        self.session_id = session_id
        self.session_state = SessionState.CONNECTED
        self._description = description
        self._channels: set[CoalescingChannel[Any]] = set()
        self._session_watchers = SessionWatchers()

    def __repr__(self) -> str:
        return f"<LocalStore {self._description} session={self.session_id} {self.session_state.name}>"

    def _live(self) -> None:
        if self.session_state is SessionState.CLOSED:
            raise SessionExpiredError(f"metadata store {self._description} session {self.session_id} is closed")

    async def get(self, path: str) -> tuple[bytes, Stat]:
        self._live()
        return await self._db.call(lambda t: t.get(path))

    async def exists(self, path: str) -> Stat | None:
        self._live()
        return await self._db.call(lambda t: t.exists(path))

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        self._live()
        owner = self.session_id if ephemeral else 0
        return await self._db.call(
            lambda t: t.create(path, value, owner, sequential=sequential, make_parents=make_parents)
        )

    async def set(self, path: str, value: bytes, *, version: int) -> Stat:
        self._live()
        return await self._db.call(lambda t: t.set(path, value, version))

    async def delete(self, path: str, *, version: int = -1, recursive: bool = False) -> None:
        self._live()
        await self._db.call(lambda t: t.delete(path, version, recursive))

    async def children(self, path: str) -> list[str]:
        self._live()
        return await self._db.call(lambda t: t.children(path))

    async def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        self._live()
        ops = list(ops)
        return await self._db.call(lambda t: t.transaction(ops, self.session_id))

    @asynccontextmanager
    async def _watch(self, table: _Watchers, path: str) -> AsyncIterator[trio.abc.ReceiveChannel[WatchEvent]]:
        _paths.validate(path)
        self._live()
        ch: CoalescingChannel[WatchEvent] = CoalescingChannel()
        self._db.hub.add(table, path, ch)
        self._channels.add(ch)
        try:
            await trio.lowlevel.checkpoint()
            yield ch
        finally:
            self._db.hub.remove(table, path, ch)
            self._channels.discard(ch)
            ch.finish()

    def watch_data(self, path: str) -> Any:
        return self._watch(self._db.hub.data, path)

    def watch_children(self, path: str) -> Any:
        return self._watch(self._db.hub.children, path)

    def watch_session(self) -> Any:
        return self._session_watchers.watch(self.session_state)

    async def close(self) -> None:
        if self.session_state is SessionState.CLOSED:
            await trio.lowlevel.checkpoint()
            return
        self.session_state = SessionState.CLOSED
        with trio.CancelScope(shield=True):
            try:
                sid = self.session_id
                await self._db.call(lambda t: t.drop_ephemerals(t.storage.owned_by(sid)))
            finally:
                self._session_watchers.close()
                for wch in self._channels:
                    wch.finish()
                self._channels.clear()
                await _release(self._db)


async def open_local_store(kind: str, location: str) -> LocalStore:
    """Open a session on the embedded store in directory ``location`` or the memory tree ``location``.

    Raises StoreLockedError if another process holds the directory.
    """
    if kind == "embedded":
        directory = await trio.to_thread.run_sync(os.path.realpath, location)  # may touch the disk
        key = f"embedded:{directory}"
        db = await _acquire(key, lambda: SqliteStorage(directory), threaded=True)
    elif kind == "memory":
        key = f"memory:{location}"
        db = await _acquire(key, MemoryStorage, threaded=False)
    else:
        raise ValueError(f"unknown local store kind {kind!r}")
    try:
        sid = await db.call(lambda t: t.next_counter(SESSION_COUNTER) + 1)
    except BaseException:
        with trio.CancelScope(shield=True):
            await _release(db)
        raise
    return LocalStore(db, sid, key)
