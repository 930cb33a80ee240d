"""The ZooKeeper store: kazoo underneath, trio on top, and no kazoo call on the event loop.

Bridging: every data call uses kazoo's ``*_async`` form. The returned AsyncResult completes on
kazoo's callback thread, which only does ``TrioToken.run_sync_soon(event.set)`` (never blocks);
the trio task waits on that Event and then reads the result. The few calls with no async form
(start, stop, close) run in ``trio.to_thread``. Kazoo exceptions are mapped to ours
(`_map_error`), each naming the path.

Watches: ZooKeeper watches fire once. A watch channel (`_ZkWatchChannel`) keeps the last state
it saw of its node (creation zxid plus the modification zxid, or the child version for a children
watch). A fired watch only sets a flag; the consumer's next ``receive`` re-arms the watch with
the same read that returns the current state, and emits the difference to the last state
(CREATED, DELETED, CHANGED / CHILDREN_CHANGED, or DELETED + CREATED for a re-created node).
So no change is missed between firing and re-arming, several changes made while the consumer was
busy coalesce into one event, nothing is buffered, and no background task is needed. After a
reconnection (same session or a new one) every watch channel re-arms and compares in the same way.

Session state comes from kazoo's connection listener (CONNECTED / SUSPENDED / LOST), hopped onto
the trio thread in order with ``run_sync_soon``. After LOST, kazoo opens a new session by itself;
``session_id`` then changes and the store is CONNECTED again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio
from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.states import ZnodeStat
from kazoo.security import CREATOR_ALL_ACL

from . import _paths
from ._channel import SessionWatchers
from ._errors import (
    BadVersionError,
    ConnectionLossError,
    InvalidPathError,
    MetadataError,
    NoAuthError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    TransactionFailedError,
)
from ._security import ZkSecurity
from ._types import Check, Create, Delete, Op, OpResult, SessionState, SetData, Stat, WatchEvent, WatchKind
from ._zk_tls import ZkTls

_CONNECTION_ERRORS = (kz.ConnectionLoss, kz.ConnectionClosedError, kz.ConnectionDropped, kz.OperationTimeoutError)
_RECURSIVE_DELETE_ATTEMPTS = 5


def _map_error(exc: BaseException, path: str, doing: str, version: int = -1) -> BaseException:
    """Our exception for a kazoo one (other exceptions are returned unchanged)."""
    if isinstance(exc, kz.NoNodeError):
        return NoNodeError(path, doing)
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError(path)
    if isinstance(exc, kz.BadVersionError):
        return BadVersionError(path, version)
    if isinstance(exc, kz.NotEmptyError):
        return NotEmptyError(path)
    if isinstance(exc, kz.NoChildrenForEphemeralsError):
        return NoChildrenForEphemeralsError(path)
    if isinstance(exc, (kz.NoAuthError, kz.AuthFailedError)):
        return NoAuthError(
            f"{doing} {path}: ZooKeeper refused it (the node's ACL does not allow this session's credentials)", path
        )
    if isinstance(exc, kz.SessionExpiredError):
        return SessionExpiredError(f"{doing} {path}: the ZooKeeper session expired", path)
    if isinstance(exc, _CONNECTION_ERRORS):
        return ConnectionLossError(f"{doing} {path}: connection to ZooKeeper lost ({exc!r})", path)
    if isinstance(exc, kz.BadArgumentsError):
        return InvalidPathError(path, f"ZooKeeper refused {doing}: {exc!r}")
    if isinstance(exc, kz.KazooException):
        return MetadataError(f"{doing} {path}: ZooKeeper error {exc!r}", path)
    return exc


def _stat(s: ZnodeStat) -> Stat:
    return Stat(s.version, s.cversion, s.ctime, s.mtime, s.ephemeralOwner, s.numChildren)


# A watch channel's view of its node: None (absent) or (creation zxid, change marker).
_State = tuple[int, int] | None


def _diff(old: _State, new: _State, change: WatchKind) -> list[WatchKind]:
    if old == new:
        return []
    if old is None:
        return [WatchKind.CREATED]
    if new is None:
        return [WatchKind.DELETED]
    if old[0] != new[0]:
        return [WatchKind.DELETED, WatchKind.CREATED]
    return [change]


class _ZkWatchChannel(trio.abc.ReceiveChannel[WatchEvent]):
    """A re-arming watch on one node; see the module header. One consumer at a time."""

    def __init__(self, store: ZooKeeperStore, path: str, children: bool) -> None:
        self._store = store
        self._path = path
        self._children = children
        self._known: _State = None
        self._pending: list[WatchEvent] = []
        self._wake = trio.Event()
        self._finished = False
        self._receiving = False

    def fired(self, _event: Any) -> None:
        """Kazoo's watch callback (kazoo thread): just wake the channel, never block."""
        if not self._finished:
            self._store._soon(self.wake)

    def wake(self) -> None:
        self._wake.set()

    def finish(self) -> None:
        self._finished = True
        self._wake.set()

    async def arm(self) -> None:
        """Set the ZooKeeper watch and record the node's state (no event)."""
        self._known = await self._read_and_watch()

    async def _read_and_watch(self) -> _State:
        store, path = self._store, self._path
        client = store._client
        if not self._children:
            stat = await store._bridge(lambda: client.exists_async(path, watch=self.fired), path, "watch")
            return None if stat is None else (stat.czxid, stat.mzxid)
        while True:
            try:
                _, stat = await store._bridge(
                    lambda: client.get_children_async(path, watch=self.fired, include_data=True),
                    path,
                    "watch children of",
                )
                return (stat.czxid, stat.cversion)
            except NoNodeError:
                # a children watch cannot be set on a missing node: watch for its creation
                stat = await store._bridge(lambda: client.exists_async(path, watch=self.fired), path, "watch")
                if stat is None:
                    return None

    async def receive(self) -> WatchEvent:
        if self._receiving:
            raise trio.BusyResourceError("another task is already receiving from this watch")
        self._receiving = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            while not self._pending:
                if self._finished:
                    raise trio.EndOfChannel
                await self._wake.wait()
                if self._finished:
                    continue
                self._wake = trio.Event()
                try:
                    new = await self._read_and_watch()
                except (ConnectionLossError, SessionExpiredError):
                    continue  # the store wakes every watch when a session is connected again
                except BaseException:
                    self._wake.set()  # cancelled mid re-arm: re-arm on the next receive
                    raise
                change = WatchKind.CHILDREN_CHANGED if self._children else WatchKind.CHANGED
                self._pending.extend(WatchEvent(k, self._path) for k in _diff(self._known, new, change))
                self._known = new
            return self._pending.pop(0)
        finally:
            self._receiving = False

    async def aclose(self) -> None:
        self.finish()
        await trio.lowlevel.checkpoint()


class ZooKeeperStore:
    """A ZooKeeper session through kazoo. Create with `open_zookeeper_store`."""

    def __init__(self, client: KazooClient, description: str, token: trio.lowlevel.TrioToken) -> None:
        self._client = client
        self._description = description
        self._token = token
        self._closing = False
        self.session_id = 0
        self.session_state = SessionState.CONNECTED
        self._watches: set[_ZkWatchChannel] = set()
        self._session_watchers = SessionWatchers()

    def __repr__(self) -> str:
        return f"<ZooKeeperStore {self._description} session={self.session_id:#x} {self.session_state.name}>"

    # -- bridging --------------------------------------------------------------------------------
    def _soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` on the trio thread, from any thread, without blocking."""
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass

    async def _bridge(self, start: Callable[[], Any], path: str, doing: str, version: int = -1) -> Any:
        """Start a kazoo async call and wait for it without blocking the loop."""
        if self.session_state is SessionState.CLOSED:
            raise SessionExpiredError(f"{doing} {path}: metadata store {self._description} is closed", path)
        done = trio.Event()

        def completed(_result: Any) -> None:
            self._soon(done.set)

        try:
            # a kazoo error may come from starting the call or from its result: mapped the same way
            result = start()
            result.rawlink(completed)
            try:
                await done.wait()
            finally:
                result.unlink(completed)
            return result.get_nowait()
        except Exception as exc:
            mapped = _map_error(exc, path, doing, version)
            if mapped is exc:
                raise
            raise mapped from exc

    def _listener(self, state: KazooState) -> None:
        """Kazoo's connection listener (kazoo thread): hop to trio, in order."""
        self._soon(self._on_state, state)

    def _on_state(self, state: KazooState) -> None:
        if self._closing:
            return
        if state == KazooState.CONNECTED:
            client_id = self._client.client_id
            if client_id:
                self.session_id = client_id[0]
            new = SessionState.CONNECTED
            for w in tuple(self._watches):
                w.wake()
        elif state == KazooState.SUSPENDED:
            new = SessionState.SUSPENDED
        else:
            new = SessionState.LOST
        if new is not self.session_state:
            self.session_state = new
            self._session_watchers.publish(new)

    # -- operations ------------------------------------------------------------------------------
    async def get(self, path: str) -> tuple[bytes, Stat]:
        _paths.validate(path)
        data, stat = await self._bridge(lambda: self._client.get_async(path), path, "get")
        return data, _stat(stat)

    async def exists(self, path: str) -> Stat | None:
        _paths.validate(path)
        stat = await self._bridge(lambda: self._client.exists_async(path), path, "exists")
        return None if stat is None else _stat(stat)

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        _paths.validate(path + "0" if sequential else path)
        try:
            return await self._bridge(
                lambda: self._client.create_async(
                    path, bytes(value), ephemeral=ephemeral, sequence=sequential, makepath=make_parents
                ),
                path,
                "create",
            )
        except NoNodeError as exc:
            parent = _paths.parent(path + "0" if sequential else path)
            raise NoNodeError(parent, f"create {path}") from exc

    async def set(self, path: str, value: bytes, *, version: int) -> Stat:
        _paths.validate(path)
        stat = await self._bridge(lambda: self._client.set_async(path, bytes(value), version), path, "set", version)
        return _stat(stat)

    async def delete(self, path: str, *, version: int = -1, recursive: bool = False) -> None:
        _paths.validate(path)
        if path == _paths.ROOT:
            raise InvalidPathError(path, "the root cannot be deleted")
        if not recursive:
            await self._bridge(lambda: self._client.delete_async(path, version), path, "delete", version)
            return
        # check the version first so that a conflict deletes nothing
        stat = await self.exists(path)
        if stat is None:
            raise NoNodeError(path, "delete")
        if version != -1 and stat.version != version:
            raise BadVersionError(path, version, stat.version)
        for attempt in range(_RECURSIVE_DELETE_ATTEMPTS):
            for kid in await self.children(path):
                await self._delete_subtree(_paths.join(path, kid))
            try:
                await self._bridge(lambda: self._client.delete_async(path, version), path, "delete", version)
                return
            except NotEmptyError:
                if attempt == _RECURSIVE_DELETE_ATTEMPTS - 1:
                    raise  # someone keeps adding children

    async def _delete_subtree(self, path: str) -> None:
        try:
            for kid in await self.children(path):
                await self._delete_subtree(_paths.join(path, kid))
            await self._bridge(lambda: self._client.delete_async(path), path, "delete")
        except NoNodeError:
            pass  # deleted concurrently: the goal is reached

    async def children(self, path: str) -> list[str]:
        _paths.validate(path)
        return sorted(await self._bridge(lambda: self._client.get_children_async(path), path, "children"))

    async def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        ops = list(ops)
        if not ops:
            await trio.lowlevel.checkpoint()
            return []
        tx = self._client.transaction()
        for op in ops:
            if isinstance(op, Create):
                _paths.validate(op.path + "0" if op.sequential else op.path)
                tx.create(op.path, bytes(op.value), ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetData):
                tx.set_data(_paths.validate(op.path), bytes(op.value), op.version)
            elif isinstance(op, Delete):
                tx.delete(_paths.validate(op.path), op.version)
            elif isinstance(op, Check):
                tx.check(_paths.validate(op.path), op.version)
            else:
                raise TypeError(f"not a metadata op: {op!r}")
        results = await self._bridge(tx.commit_async, ops[0].path, "transaction")
        failed = [
            (i, r) for i, r in enumerate(results) if isinstance(r, Exception) and not isinstance(r, kz.RolledBackError)
        ]
        if failed:
            i, exc = failed[0]
            op = ops[i]
            cause = _map_error(exc, op.path, type(op).__name__, getattr(op, "version", -1))
            if isinstance(cause, NoNodeError) and isinstance(op, Create):
                cause = NoNodeError(_paths.parent(op.path), f"create {op.path}")
            if not isinstance(cause, MetadataError):
                raise cause
            raise TransactionFailedError(i, op, cause)
        out = []
        for op, r in zip(ops, results, strict=False):
            if isinstance(op, Create):
                out.append(OpResult(op, r))
            elif isinstance(op, SetData):
                out.append(OpResult(op, op.path, _stat(r)))
            else:
                out.append(OpResult(op, op.path))
        return out

    # -- watches ---------------------------------------------------------------------------------
    @asynccontextmanager
    async def _watch(self, path: str, children: bool) -> AsyncIterator[trio.abc.ReceiveChannel[WatchEvent]]:
        _paths.validate(path)
        ch = _ZkWatchChannel(self, path, children)
        await ch.arm()
        self._watches.add(ch)
        try:
            yield ch
        finally:
            # ZooKeeper cannot unset a watch; a late firing finds the channel finished and is ignored
            self._watches.discard(ch)
            ch.finish()

    def watch_data(self, path: str) -> Any:
        return self._watch(path, children=False)

    def watch_children(self, path: str) -> Any:
        return self._watch(path, children=True)

    def watch_session(self) -> Any:
        return self._session_watchers.watch(self.session_state)

    async def close(self) -> None:
        if self._closing:
            await trio.lowlevel.checkpoint()
            return
        self._closing = True
        self.session_state = SessionState.CLOSED
        self._session_watchers.close()
        for w in self._watches:
            w.finish()
        self._watches.clear()
        with trio.CancelScope(shield=True):
            # stop() sends closeSession, so the server deletes our ephemerals at once
            await trio.to_thread.run_sync(self._client.stop)
            await trio.to_thread.run_sync(self._client.close)


def _new_client(
    hosts: str, session_timeout_s: float, security: ZkSecurity | None = None, tls: ZkTls | None = None
) -> KazooClient:
    auth: dict[str, Any] = {}
    if security is not None:
        # kazoo adds the credential on every (re)connect before any request, and uses the ACL for
        # every node it creates (parents made by makepath and transaction creates included)
        auth = {"auth_data": [("digest", security.digest)], "default_acl": CREATOR_ALL_ACL}
    if tls is not None:
        # kazoo loads the certificate only when given both files: the PEM key store holds both
        auth.update(
            use_ssl=True,
            verify_certs=True,
            check_hostname=tls.hostname_verification,
            ca=tls.truststore or None,
            certfile=tls.keystore or None,
            keyfile=tls.keystore or None,
            keyfile_password=tls.keystore_password or None,
        )
    return KazooClient(
        hosts=hosts,
        timeout=session_timeout_s,
        # the default backoff grows to an hour; reconnect attempts should stay frequent
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
        **auth,
    )


async def open_zookeeper_store(
    hosts: str,
    chroot: str,
    *,
    session_timeout_s: float = 10.0,
    connect_timeout_s: float = 10.0,
    security: ZkSecurity | None = None,
    tls: ZkTls | None = None,
) -> ZooKeeperStore:
    """Connect to ``hosts`` (``h:p,h:p``) under ``chroot`` (created if missing; "" for none).

    With ``security`` the session authenticates with its digest credential and every node it
    creates (the chroot too) gets the CREATOR_ALL ACL (see ``_security``). With ``tls`` it
    connects over TLS, verifying the server's certificate (see ``_zk_tls``).
    Raises ConnectionLossError if no server answers within ``connect_timeout_s``.
    """
    token = trio.lowlevel.current_trio_token()

    def start(client: KazooClient) -> None:
        try:
            client.start(timeout=connect_timeout_s)
        except Exception as exc:
            client.stop()
            client.close()
            raise ConnectionLossError(f"cannot connect to ZooKeeper at {hosts}: {exc!r}") from exc

    if chroot and chroot != _paths.ROOT:
        _paths.validate(chroot)

        def make_chroot() -> None:
            boot = _new_client(hosts, session_timeout_s, security, tls)
            start(boot)
            try:
                boot.ensure_path(chroot)
            finally:
                boot.stop()
                boot.close()

        await trio.to_thread.run_sync(make_chroot)
    else:
        chroot = ""
    client = _new_client(hosts + chroot, session_timeout_s, security, tls)
    store = ZooKeeperStore(client, f"zk://{hosts}{chroot}", token)
    client.add_listener(store._listener)
    await trio.to_thread.run_sync(start, client)
    store.session_id = client.client_id[0] if client.client_id else 0
    return store
