"""The seam between ledger operations and bookies: how a request reaches a bookie and its answer
comes back. Everything above it (ledger handles, add / read / recovery / close operations, and
the managed ledger over them) sees only these Protocols, so another transport can sit beside the
network one without touching them.

The network implementation is `bk_client._connection.ConnectionPool` (one pooled TCP or TLS
connection per bookie). Inside ``magnetar standalone`` the bookies run in the broker's process,
and ``magnetar._inprocess.InProcessTransport`` hands each encoded request to its bookie's request
core (``bookie.LocalConnection``) and is called back with the response message, skipping the
socket, the frame writer and reader tasks and the response's encoding and decoding. It lives with
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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from protocols.bookkeeper import bookie_protocol_pb2

from ._deadline import wait_within

if TYPE_CHECKING:
    from ._config import ClientConfig
    from ._errors import BKError
    from .metrics import ClientMetrics

__all__ = [
    "BookieChannel",
    "BookieTransport",
    "Callback",
    "Response",
    "TransportFactory",
    "call_and_wait",
    "call_within",
]

Response = bookie_protocol_pb2.Response
Callback = Callable[[Any, "Response | None", "BKError | None"], None]
"""``callback(arg, response, error)``: exactly one of ``response`` and ``error`` is set."""


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
