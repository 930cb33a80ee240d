"""The network transport (`bk_client._transport.BookieTransport`): one pooled TCP connection per
bookie: request ids, a reader that resolves pending requests, a
writer that batches frames into one ``send_all``, reconnect with backoff, a bounded pending table.

Requests are fire-and-callback so that the hot path (adds) spawns no task per request: ``send``
queues an encoded frame and registers ``callback(arg, response, error)`` under the request id
(``txnId``); the reader task calls it with the response, or every pending callback is called
with a ``BookieUnavailable`` error when the connection is lost. ``call`` wraps that in an await
for the less frequent operations; timeouts are cancel scopes at the caller (cancelling a ``call``
forgets its request, a late answer is dropped).

Connection states (``ConnState``):

* Rule 1: IDLE or BACKOFF whose delay has passed -> CONNECTING on the first ``send``: the
  connection task starts in the pool's nursery, and frames queue until the socket is up.
* Rule 2: CONNECTING -> CONNECTED once TCP connects; queued frames are written then.
* Rule 3: CONNECTING or CONNECTED -> BACKOFF when the connect fails or times out, the peer closes,
  or a read / write / framing error happens: every pending request fails with
  ``BookieUnavailable`` and the next attempt waits ``retry_at`` (the delay doubles from
  ``reconnect_backoff_min_s`` up to ``reconnect_backoff_max_s``; a good connect resets it).
* Rule 4: in BACKOFF before ``retry_at``, ``send`` raises ``BookieUnavailable`` at once: callers
  fail over (reads) or replace the bookie (adds) instead of waiting.
* Rule 5: any state -> CLOSED when the pool closes; pending requests fail with ``ClientClosed``.
  CLOSED is final.

Callbacks run on the event loop inside the reader (or the failing) task and must not block.
A callback may call ``send`` on any connection, this one included.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from magnetar.common.backoff import Backoff
from magnetar.common.tls import client_context, open_tls_stream
from protocols.bookkeeper import FrameDecoder, FrameError, parse_response

from ._config import ClientConfig
from ._errors import BKError, BookieUnavailable, ClientClosed, TooManyRequests
from ._transport import AddCallback, AddRequest, Callback, Response, add_status_callback, call_and_wait
from .metrics import ClientMetrics

__all__ = ["ConnState", "BookieConnection", "ConnectionPool", "Callback"]

log = logging.getLogger(__name__)

_RECV_SIZE = 256 * 1024


class ConnState(enum.Enum):
    """State of one bookie connection (rules in the module docstring)."""

    IDLE = "idle"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"
    CLOSED = "closed"


def parse_bookie_address(bookie_id: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); ``BookieUnavailable`` if the id is not an address."""
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not port.isdigit():
        raise BookieUnavailable(bookie_id, f"bookie id {bookie_id!r} is not host:port")
    return host.strip("[]"), int(port)


async def _parse_address(bookie_id: str) -> tuple[str, int]:
    return parse_bookie_address(bookie_id)


class BookieConnection:
    """The client's one connection to a bookie (see the module docstring for the rules)."""

    def __init__(self, bookie_id: str, pool: ConnectionPool) -> None:
        self.bookie_id = bookie_id
        self._pool = pool
        self._config = pool.config
        self.state = ConnState.IDLE
        self.retry_at = -math.inf
        self._backoff = Backoff(self._config.reconnect_backoff_min_s, self._config.reconnect_backoff_max_s)
        self._pending: dict[int, tuple[Callback, Any]] = {}
        self._out: list[bytes] = []
        self._wake = trio.Event()
        self._scope: trio.CancelScope | None = None
        self.last_error: BKError | None = None

    @property
    def pending_count(self) -> int:
        """Requests sent (or queued) and not yet answered."""
        return len(self._pending)

    @property
    def is_down(self) -> bool:
        """True while in BACKOFF before the retry time: ``send`` would fail at once."""
        return self.state is ConnState.BACKOFF and trio.current_time() < self.retry_at

    # ---- sending ---------------------------------------------------------------------------

    def send(self, txn_id: int, frame: bytes, callback: Callback, arg: Any) -> None:
        """Queue ``frame`` (an encoded request whose txnId is ``txn_id``) and call
        ``callback(arg, response, None)`` on its answer, or ``callback(arg, None, error)`` if the
        connection is lost first.

        Raises at once (without calling ``callback``): ``BookieUnavailable`` in backoff (rule 4),
        ``TooManyRequests`` when the pending table is full, ``ClientClosed`` after close.
        """
        state = self.state
        if state is ConnState.CLOSED:
            raise ClientClosed()
        if state is ConnState.BACKOFF or state is ConnState.IDLE:
            if state is ConnState.BACKOFF and trio.current_time() < self.retry_at:
                raise BookieUnavailable(
                    self.bookie_id, f"bookie {self.bookie_id} is unreachable ({self.last_error}); retrying later"
                )
            self._start()
        if len(self._pending) >= self._config.max_pending_requests_per_bookie:
            raise TooManyRequests(f"{len(self._pending)} requests pending on bookie {self.bookie_id}")
        self._pending[txn_id] = (callback, arg)
        self._out.append(frame)
        if not self._wake.is_set():
            self._wake.set()

    def send_add(self, add: AddRequest, callback: AddCallback, arg: Any) -> None:
        """Contract rule 6 of ``bk_client._transport``: ``send`` the add's frame, its answer's
        status to ``callback``. Raises as ``send`` does."""
        self.send(add.txn_id, add.frame(), add_status_callback, (callback, arg))

    def forget(self, txn_id: int) -> None:
        """Drop a pending request (its caller gave up); a late answer is ignored."""
        self._pending.pop(txn_id, None)

    async def call(self, txn_id: int, frame: bytes) -> Response:
        """Send and wait for the answer. Raises what ``send`` raises, or the connection's
        ``BookieUnavailable`` / ``ClientClosed``. Cancel-safe: a cancelled call forgets its request."""
        return await call_and_wait(self, txn_id, frame)

    # ---- lifecycle -------------------------------------------------------------------------

    def _start(self) -> None:
        self.state = ConnState.CONNECTING
        self._pool.spawn(self._run)

    def _fail_pending(self, error: BKError) -> None:
        pending, self._pending = self._pending, {}
        self._out.clear()
        for callback, arg in pending.values():
            try:
                callback(arg, None, error)
            except Exception:  # a callback bug must not take the other requests down with it
                log.exception("bookie %s: callback failed while failing pending requests", self.bookie_id)

    def _down(self, error: BKError) -> None:
        if self.state is ConnState.CLOSED:
            return
        self.last_error = error
        self.state = ConnState.BACKOFF
        self.retry_at = trio.current_time() + self._backoff.next()
        self._pool.metrics.connect_failures.inc()
        self._fail_pending(error)

    def close(self) -> None:
        """Rule 5: stop the connection task and fail pending requests with ``ClientClosed``."""
        if self.state is ConnState.CLOSED:
            return
        self.state = ConnState.CLOSED
        if self._scope is not None:
            self._scope.cancel()
        self._fail_pending(ClientClosed())

    async def _run(self) -> None:
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                tls = self._pool.ssl_context
                stream: trio.abc.Stream
                with trio.fail_after(self._config.connect_timeout_s):
                    host, port = await self._pool.resolve(self.bookie_id)
                    if tls is None:
                        stream = await trio.open_tcp_stream(host, port)
                    else:  # the handshake fails when the bookie's certificate is not trusted, or it refuses ours
                        stream = await open_tls_stream(host, port, tls)
            except BookieUnavailable as exc:
                self._down(exc)
                return
            except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                self._down(BookieUnavailable(self.bookie_id, f"cannot connect to bookie {self.bookie_id}: {exc!r}"))
                return
            self._pool.metrics.connects.inc()
            self.state = ConnState.CONNECTED
            self._backoff.reset()
            error: list[BKError] = []
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, stream, nursery.cancel_scope, error)
                    await self._reader(stream, error)
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
                if self.state is not ConnState.CLOSED:
                    self._down(
                        error[0]
                        if error
                        else BookieUnavailable(self.bookie_id, f"connection to bookie {self.bookie_id} closed")
                    )

    async def _writer(self, stream: trio.abc.Stream, scope: trio.CancelScope, error: list[BKError]) -> None:
        try:
            while True:
                if not self._out:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    continue
                data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
                self._out.clear()
                await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            error.append(BookieUnavailable(self.bookie_id, f"write to bookie {self.bookie_id} failed: {exc!r}"))
            scope.cancel()

    async def _reader(self, stream: trio.abc.Stream, error: list[BKError]) -> None:
        decoder = FrameDecoder(self._config.max_frame_size)
        pending = self._pending
        try:
            while True:
                data = await stream.receive_some(_RECV_SIZE)
                if not data:
                    return
                decoder.feed(data)
                pending = self._pending  # _fail_pending may have swapped the table
                while (frame := decoder.next_frame()) is not None:
                    response = parse_response(frame)
                    entry = pending.pop(response.header.txnId, None)
                    if entry is None:
                        continue  # the caller gave up on it
                    try:
                        entry[0](entry[1], response, None)
                    except Exception:
                        log.exception("bookie %s: response callback failed", self.bookie_id)
        except FrameError as exc:
            error.append(BookieUnavailable(self.bookie_id, f"bad frame from bookie {self.bookie_id}: {exc}"))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            error.append(BookieUnavailable(self.bookie_id, f"read from bookie {self.bookie_id} failed: {exc!r}"))


class ConnectionPool:
    """The connections of one client, one per bookie id, their tasks in the client's nursery.

    Request ids (``next_txn``) are unique across the pool, so one encoded frame can be sent to
    several bookies.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        config: ClientConfig,
        metrics: ClientMetrics,
        *,
        resolve: Callable[[str], Awaitable[tuple[str, int]]] | None = None,
    ) -> None:
        self._nursery = nursery
        self.config = config
        self.metrics = metrics
        self.resolve = resolve or _parse_address
        """bookie id -> (host, port) to connect to: by default the address the id names; the client
        passes its ledger manager's ``bookie_address`` (the registration's ``bookie-rpc`` endpoint)."""
        # TLS to every bookie (tls_enabled), the context built once from BookKeeper's keys
        self.ssl_context = client_context(config.tls_settings()) if config.tls_enabled else None
        self._conns: dict[str, BookieConnection] = {}
        self._txn = 0
        self._closed = False

    def next_txn(self) -> int:
        """A fresh request id."""
        self._txn += 1
        return self._txn

    def get(self, bookie_id: str) -> BookieConnection:
        """The connection to ``bookie_id`` (created IDLE on first use). ``ClientClosed`` after close."""
        conn = self._conns.get(bookie_id)
        if conn is None:
            if self._closed:
                raise ClientClosed()
            conn = self._conns[bookie_id] = BookieConnection(bookie_id, self)
        return conn

    def is_down(self, bookie_id: str) -> bool:
        """True when the bookie's connection is in backoff (reads try it last)."""
        conn = self._conns.get(bookie_id)
        return conn is not None and conn.is_down

    def spawn(self, fn: Callable[[], Any]) -> None:
        """Run a connection task in the client's nursery."""
        self._nursery.start_soon(fn)

    def close(self) -> None:
        """Close every connection (rule 5); idempotent."""
        self._closed = True
        for conn in self._conns.values():
            conn.close()
