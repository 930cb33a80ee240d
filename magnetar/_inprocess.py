"""The in-process bookie transport: inside ``magnetar standalone`` the BookKeeper client reaches
the bookies of its own process without a socket.

`InProcessTransport` is a `bk_client.BookieTransport` (its contract in ``bk_client._transport``):
requests to a bookie of this process go to that bookie's `bookie.LocalConnection`, which serves
them with the same request handling as its network server (adds acknowledged only after their
journal fsync, fencing, LAC and long polls, recovery reads on the high-priority path, the bookie's
in-flight budget); every other bookie is reached over the network `bk_client.ConnectionPool`, as
without it. Compared with loopback TCP, a request skips the client's frame writer and reader tasks,
the two socket writes and reads, the bookie's frame decoder and the encoding and decoding of the
response. An add (``send_add``, contract rule 6) goes further: its fields are handed to the
bookie as they are and its answer comes back as a status code, so it is never encoded, parsed or
answered with a message. Every other request is still the encoded frame the ledger operations
built, parsed once by the bookie.

Channel states (`_LocalChannel`):

* Rule 1: IDLE -> SERVING on the first request: the local connection's task starts in the
  client's nursery, and requests queue in its inbox meanwhile.
* Rule 2: SERVING -> DOWN when that task ends while the client is open (the bookie stopped, or a
  bug): every pending request fails with ``BookieUnavailable``, and so does every later request
  (a local bookie that stopped does not come back within this process).
* Rule 3: any state -> CLOSED when the transport closes: pending requests fail with
  ``ClientClosed``; CLOSED is final.

Bounds: at most ``max_pending_requests_per_bookie`` requests pending per bookie (``send`` raises
``TooManyRequests`` past it, as the network channel does); the bookie's own in-flight budget then
holds back the ones past its bound in the connection's inbox.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from bk_client import (
    AddCallback,
    AddRequest,
    BKError,
    BookieChannel,
    BookieUnavailable,
    ClientClosed,
    ClientConfig,
    ClientMetrics,
    ConnectionPool,
    TooManyRequests,
    call_and_wait,
)
from bookie import Bookie, LocalConnection
from protocols.bookkeeper import add_response
from protocols.bookkeeper import bookie_protocol_pb2 as pb

__all__ = ["InProcessTransport", "in_process_transport"]

log = logging.getLogger(__name__)

Callback = Callable[[Any, "pb.Response | None", "BKError | None"], None]


class _Kind(enum.Enum):
    """How a pending request was sent: as a frame (``send``: its callback takes the response
    message) or as an add's fields (``send_add``: its callback takes the status code)."""

    FRAME = "frame"
    ADD = "add"


class _State(enum.Enum):
    IDLE = "idle"
    SERVING = "serving"
    DOWN = "down"
    CLOSED = "closed"


class _LocalChannel:
    """Requests to one bookie of this process (rules in the module docstring)."""

    def __init__(self, bookie_id: str, bookie: Bookie, transport: InProcessTransport) -> None:
        self.bookie_id = bookie_id
        self._transport = transport
        self._max_pending = transport.config.max_pending_requests_per_bookie
        # txn -> (callback, arg, kind): how the request was sent says what its callback takes
        self._pending: dict[int, tuple[Any, Any, _Kind]] = {}
        self._conn = LocalConnection(bookie, self._deliver, self._refuse, self._deliver_add)
        self.state = _State.IDLE
        self._scope: trio.CancelScope | None = None

    @property
    def is_down(self) -> bool:
        """True once the bookie's side stopped (rule 2): ``send`` fails at once."""
        return self.state is _State.DOWN

    def send(self, txn_id: int, frame: bytes, callback: Callback, arg: Any) -> None:
        """Contract rule 2 of ``bk_client._transport``: queue the request for the bookie; its
        answer goes to ``callback`` from the bookie's tasks, never from here."""
        self._check_room()
        self._pending[txn_id] = (callback, arg, _Kind.FRAME)
        self._conn.submit(txn_id, memoryview(frame)[4:])  # after the frame's length prefix

    def send_add(self, add: AddRequest, callback: AddCallback, arg: Any) -> None:
        """Contract rule 6 of ``bk_client._transport``: hand the add's fields to the bookie (never
        encoded); its answer's status goes to ``callback`` from the bookie's tasks."""
        self._check_room()
        self._pending[add.txn_id] = (callback, arg, _Kind.ADD)
        self._conn.submit_add(add.txn_id, add.ledger_id, add.entry_id, add.master_key, add.body, add.recovery)

    def _check_room(self) -> None:
        """Rules 1 to 3 for a new request: start serving, or raise when it would fail at once."""
        state = self.state
        if state is not _State.SERVING:
            if state is _State.CLOSED:
                raise ClientClosed()
            if state is _State.DOWN:
                raise BookieUnavailable(self.bookie_id, f"in-process bookie {self.bookie_id} has stopped")
            self._start()
        if len(self._pending) >= self._max_pending:
            raise TooManyRequests(f"{len(self._pending)} requests pending on bookie {self.bookie_id}")

    def forget(self, txn_id: int) -> None:
        """Drop a pending request (its caller gave up); a late answer is ignored."""
        self._pending.pop(txn_id, None)

    async def call(self, txn_id: int, frame: bytes) -> pb.Response:
        """Send and wait for the answer; cancel-safe (a cancelled call forgets its request)."""
        return await call_and_wait(self, txn_id, frame)

    def _deliver(self, response: pb.Response) -> None:
        entry = self._pending.pop(response.header.txnId, None)
        if entry is not None:
            callback, arg, kind = entry
            if kind is _Kind.ADD:  # an add answered with a message: its callback takes the status
                callback(arg, response.status, None)
            else:
                callback(arg, response, None)

    def _deliver_add(self, txn_id: int, status: int, ledger_id: int, entry_id: int) -> None:
        entry = self._pending.pop(txn_id, None)
        if entry is not None:
            callback, arg, kind = entry
            if kind is _Kind.ADD:
                callback(arg, status, None)
            else:  # an add sent as a frame gets the response the network would have brought
                callback(arg, add_response(txn_id, status, ledger_id, entry_id), None)

    def _refuse(self, txn_id: int, reason: str) -> None:
        entry = self._pending.pop(txn_id, None)
        if entry is not None:
            entry[0](
                entry[1],
                None,
                BookieUnavailable(self.bookie_id, f"bookie {self.bookie_id} refused a request: {reason}"),
            )

    def _start(self) -> None:
        self.state = _State.SERVING
        self._transport.spawn(self._run)

    async def _run(self) -> None:
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                await self._conn.run()
            except Exception:
                log.exception("in-process bookie %s: request handling failed", self.bookie_id)
        if self.state is _State.SERVING:  # rule 2: ended while the client is open
            self.state = _State.DOWN
            self._fail_pending(BookieUnavailable(self.bookie_id, f"in-process bookie {self.bookie_id} stopped"))

    def _fail_pending(self, error: BKError) -> None:
        pending, self._pending = self._pending, {}
        for callback, arg, _kind in pending.values():
            try:
                callback(arg, None, error)
            except Exception:  # a callback bug must not take the other requests down with it
                log.exception("bookie %s: callback failed while failing pending requests", self.bookie_id)

    def close(self) -> None:
        """Rule 3: stop serving and fail pending requests with ``ClientClosed``."""
        if self.state is _State.CLOSED:
            return
        self.state = _State.CLOSED
        if self._scope is not None:
            self._scope.cancel()
        self._fail_pending(ClientClosed())


class InProcessTransport:
    """A `bk_client.BookieTransport` that reaches the bookies in ``local`` (bookie id -> the
    running `bookie.Bookie`) in process and every other bookie over the network (module
    docstring). Request ids are unique across both. Its tasks run in the client's nursery."""

    def __init__(
        self,
        nursery: trio.Nursery,
        config: ClientConfig,
        metrics: ClientMetrics,
        *,
        local: Mapping[str, Bookie],
        resolve: Callable[[str], Awaitable[tuple[str, int]]] | None = None,
    ) -> None:
        self._nursery = nursery
        self._network = ConnectionPool(nursery, config, metrics, resolve=resolve)
        self._local = {bookie_id: _LocalChannel(bookie_id, bookie, self) for bookie_id, bookie in local.items()}

    @property
    def config(self) -> ClientConfig:
        """The client's settings."""
        return self._network.config

    def next_txn(self) -> int:
        """A request id unique across this transport (local and network bookies alike)."""
        return self._network.next_txn()

    def get(self, bookie_id: str) -> BookieChannel:
        """The in-process channel of a local bookie, else the network connection."""
        channel = self._local.get(bookie_id)
        if channel is None:
            return self._network.get(bookie_id)
        if channel.state is _State.CLOSED:
            raise ClientClosed()
        return channel

    def is_local(self, bookie_id: str) -> bool:
        """True when requests to ``bookie_id`` stay in this process."""
        return bookie_id in self._local

    def is_down(self, bookie_id: str) -> bool:
        """True while a request to ``bookie_id`` would fail at once."""
        channel = self._local.get(bookie_id)
        return channel.is_down if channel is not None else self._network.is_down(bookie_id)

    def spawn(self, fn: Callable[[], Any]) -> None:
        """Run a channel's task in the client's nursery."""
        self._nursery.start_soon(fn)

    def close(self) -> None:
        """Fail every pending request with ``ClientClosed`` (local and network); final."""
        for channel in self._local.values():
            channel.close()
        self._network.close()


def in_process_transport(
    local: Mapping[str, Bookie],
) -> Callable[[trio.Nursery, ClientConfig, ClientMetrics], InProcessTransport]:
    """The `bk_client.TransportFactory` for `BookKeeper.open` that serves the bookies of
    ``local`` in process (and any other over the network)."""
    local = dict(local)
    return lambda nursery, config, metrics: InProcessTransport(nursery, config, metrics, local=local)
