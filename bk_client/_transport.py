"""The seam between ledger operations and bookies: how a request reaches a bookie and its answer
comes back. Everything above it (ledger handles, add / read / recovery / close operations, and
the managed ledger over them) sees only these Protocols, so another transport can sit beside the
network one without touching them.

The network implementation is `bk_client._connection.ConnectionPool` (one pooled TCP or TLS
connection per bookie). Inside ``magnetar standalone`` the bookies run in the broker's process,
and ``magnetar._inprocess.InProcessTransport`` hands each request to its bookie's request core
(``bookie.LocalConnection``) and is called back with the response message, skipping the socket,
the frame writer and reader tasks and the response's encoding and decoding; an add is handed over
by its fields and answered with its status (rule 6), so it is not encoded at all. It lives with
the composer (it needs both ``bk_client`` and ``bookie``, which may not import each other) and is
passed to `BookKeeper.open` as its ``transport`` factory; the managed ledger does not change.

Contract (what the operations rely on, and what any transport keeps):

1. Requests carry their own id (``txnId``); `BookieTransport.next_txn` hands out ids unique across
   the transport, so one encoded frame may be sent to several bookies.
2. `BookieChannel.send` either raises at once (``BookieUnavailable`` while the bookie is known to
   be unreachable, ``TooManyRequests`` when its pending requests are at their bound,
   ``ClientClosed`` after close) or calls ``callback(arg, response, None)`` exactly once with the
   answer, or ``callback(arg, None, error)`` when the answer cannot come (the connection is
   lost: ``BookieUnavailable``; the transport closed: ``ClientClosed``). Callbacks run on the
   event loop, never inside ``send`` itself, must not block, and may call ``send`` again.
3. `BookieChannel.forget` drops a pending request whose caller gave up: its callback is not
   called afterwards. `BookieChannel.call` is ``send`` plus waiting for the answer, cancel-safe.
4. Requests to one bookie are answered in any order; a channel never reorders the requests it
   sends.
5. `BookieTransport.is_down` says whether a request to that bookie would fail at once (reads try
   such bookies last); `BookieTransport.close` fails every pending request with ``ClientClosed``
   and is final.
6. Adds go through `BookieChannel.send_add` with an `AddRequest` (its ``txn_id`` from
   ``next_txn``; one request object may go to every bookie of a write set). Rules 2 to 4 hold
   for it as for ``send``, except that the callback gets the answer's status code,
   ``callback(arg, status, None)`` (``StatusCode.EOK`` once the bookie holds the entry
   durably), in place of the response message. A channel over a wire sends `AddRequest.frame`
   (encoded once per request, whatever the number of bookies); a channel to a bookie of this
   process may hand the request's fields over as they are, so an add is never encoded, parsed
   or answered with a message inside one process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from protocols.bookkeeper import AddRequestEncoder, bookie_protocol_pb2

from ._deadline import wait_within

if TYPE_CHECKING:
    from ._config import ClientConfig
    from ._errors import BKError
    from .metrics import ClientMetrics

__all__ = [
    "AddCallback",
    "AddRequest",
    "BookieChannel",
    "BookieTransport",
    "Callback",
    "Response",
    "TransportFactory",
    "add_status_callback",
    "call_and_wait",
    "call_within",
]

Response = bookie_protocol_pb2.Response
Callback = Callable[[Any, "Response | None", "BKError | None"], None]
"""``callback(arg, response, error)``: exactly one of ``response`` and ``error`` is set."""
AddCallback = Callable[[Any, "int | None", "BKError | None"], None]
"""``callback(arg, status, error)`` for `BookieChannel.send_add`: exactly one of ``status`` (the
bookie's answer, a ``StatusCode``) and ``error`` is set."""


class AddRequest:
    """One ADD_ENTRY request as a write handle hands it to its bookies' channels (contract rule 6):
    the request's fields, and `frame` to encode it once for the channels that send bytes.
    ``body`` is the digest-framed entry; ``encoder`` frames this ledger's adds (it was made with
    the same ledger id, master key and recovery flag). Read-only once sent."""

    __slots__ = ("txn_id", "ledger_id", "entry_id", "master_key", "body", "recovery", "_encoder", "_frame")

    def __init__(
        self,
        txn_id: int,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        recovery: bool,
        encoder: AddRequestEncoder,
    ) -> None:
        self.txn_id = txn_id
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.master_key = master_key
        self.body = body
        self.recovery = recovery
        self._encoder = encoder
        self._frame: bytes | None = None

    def frame(self) -> bytes:
        """The framed request (``[length u32][Request]``), encoded on first use and kept."""
        frame = self._frame
        if frame is None:
            frame = self._frame = self._encoder.encode(self.txn_id, self.entry_id, self.body)
        return frame


def add_status_callback(pair: tuple[AddCallback, Any], response: Response | None, error: BKError | None) -> None:
    """The ``send`` callback of an add sent as a frame (``arg``: the add's own callback and its
    argument): hands on the status of the answer's ``addResponse`` (or of the response itself when
    the bookie refused the request before reading the add), or the error."""
    callback, arg = pair
    if response is None:
        callback(arg, None, error)
    else:
        callback(arg, response.addResponse.status if response.HasField("addResponse") else response.status, None)


class _Waiter:
    __slots__ = ("event", "response", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: Response | None = None
        self.error: BKError | None = None

    @staticmethod
    def resolve(waiter: _Waiter, response: Response | None, error: BKError | None) -> None:
        waiter.response = response
        waiter.error = error
        waiter.event.set()


async def call_and_wait(channel: BookieChannel, txn_id: int, frame: bytes) -> Response:
    """`BookieChannel.call` over the channel's ``send`` and ``forget``: send ``frame`` and wait for
    its answer; raises what ``send`` raises or the failure the callback gets. Cancel-safe: a
    cancelled call forgets its request, so a late answer is dropped."""
    waiter = _Waiter()
    channel.send(txn_id, frame, _Waiter.resolve, waiter)
    try:
        await waiter.event.wait()
    except BaseException:
        channel.forget(txn_id)
        raise
    if waiter.error is not None:
        raise waiter.error
    assert waiter.response is not None
    return waiter.response


async def call_within(channel: BookieChannel, txn_id: int, frame: bytes, timeout: float) -> Response | None:  # noqa: ASYNC109
    """`call_and_wait` for at most ``timeout`` seconds (`bk_client._deadline.wait_within`: a stall of
    the event loop is not the bookie's silence); None when no answer came in time, the request then
    forgotten. Cancel-safe like `call_and_wait`."""
    waiter = _Waiter()
    channel.send(txn_id, frame, _Waiter.resolve, waiter)
    try:
        answered = await wait_within(waiter.event, timeout)
    except BaseException:
        channel.forget(txn_id)
        raise
    if not answered:
        channel.forget(txn_id)
        return None
    if waiter.error is not None:
        raise waiter.error
    assert waiter.response is not None
    return waiter.response


class BookieChannel(Protocol):
    """Requests to one bookie (contract rules 2 to 4)."""

    def send(self, txn_id: int, frame: bytes, callback: Callback, arg: Any) -> None:
        """Send ``frame`` (an encoded request whose ``txnId`` is ``txn_id``); its answer or failure
        goes to ``callback(arg, ...)``."""
        ...

    def send_add(self, add: AddRequest, callback: AddCallback, arg: Any) -> None:
        """Send the add ``add`` (contract rule 6); its answer's status or failure goes to
        ``callback(arg, ...)``."""
        ...

    def forget(self, txn_id: int) -> None:
        """Drop a pending request; a late answer is ignored."""
        ...

    async def call(self, txn_id: int, frame: bytes) -> Response:
        """Send and wait for the answer; raises what ``send`` raises or the failure."""
        ...


class BookieTransport(Protocol):
    """The bookies as one client reaches them (contract rules 1 and 5)."""

    @property
    def config(self) -> ClientConfig:
        """The client's settings (timeouts the operations apply around their requests)."""
        ...

    def next_txn(self) -> int:
        """A request id unique across this transport."""
        ...

    def get(self, bookie_id: str) -> BookieChannel:
        """The channel to ``bookie_id``; ``ClientClosed`` after close."""
        ...

    def is_down(self, bookie_id: str) -> bool:
        """True while a request to ``bookie_id`` would fail at once."""
        ...

    def close(self) -> None:
        """Fail every pending request with ``ClientClosed``; idempotent and final."""
        ...


TransportFactory = Callable[[trio.Nursery, "ClientConfig", "ClientMetrics"], BookieTransport]
"""How `BookKeeper.open` builds its transport: from the client's nursery (for the transport's
tasks), config and metrics. The default is `bk_client._connection.ConnectionPool`."""
