"""`RequestGuard`: the admin app's ASGI middleware that bounds request bodies and notices clients
that leave.

Hypercorn hands a request body to the app as ``http.request`` messages through a short queue
(``max_app_queue_size`` chunks) and puts ``http.disconnect`` on the same queue when the connection
closes; it never cancels the app. Two consequences shape this module:

* A body is refused by not reading it, yet what is queued must still be read: once the app has
  returned, hypercorn queues ``http.disconnect`` and only then closes the connection. If the queue
  is full of unread chunks and nobody reads it, hypercorn waits forever and the connection and its
  task leak. So the unread rest is drained in the background (in a nursery `serve_admin` owns)
  until that disconnect arrives, which is a few queued chunks, not the rest of the body: hypercorn
  closes the connection right after queuing it.
* Noticing a client that left needs a task that reads the queue once the body is complete: the
  watcher.

States of a request's body (`BodyState`) and the rules:

* Rule 1: a request whose Content-Length exceeds ``max_body`` is answered 413 before any of its
  body is read.
* Rule 2: READING -> the body reaches the app as it arrives. The chunk that takes it past
  ``max_body`` moves it to TOO_LARGE: the app's ``receive`` raises `RestError` 413 (the `endpoint`
  wrapper answers it) and keeps raising; nothing more of the body is given to the app.
* Rule 3: READING -> COMPLETE on the last chunk; the watcher then owns hypercorn's queue, and the
  app's ``receive`` waits for the disconnect as ASGI says. A request that declares no body is
  COMPLETE before the app runs.
* Rule 4: any -> GONE on ``http.disconnect``. Nothing more is sent. If the response has not
  started, the handler of a GET or HEAD request is cancelled at once (a read has nothing worth
  finishing, and a fan-out read must stop loading partitions); a change (PUT, POST, DELETE) runs
  to its end, as in Pulsar, so that a client that gave up and retries finds it either done or not
  started per partition. Once the response has started nothing is cancelled: hypercorn itself
  queues ``http.disconnect`` while it completes a response (the request is over), and
  cancelling its own connection handling half-way would leave the connection open.
* Rule 5: a response to a request whose body was not read to the end carries ``Connection:
  close`` (its rest is never read), and the rest is drained as said above.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

import trio
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._common import RestError

__all__ = ["BodyState", "GuardSettings", "RequestGuard"]

log = logging.getLogger("broker.admin")

_DRAIN_TIMEOUT_S = 30.0
"""How long a drain may wait for hypercorn's disconnect (it comes right after the app returns);
only a stalled connection reaches it."""

_CANCEL_ON_DISCONNECT = frozenset({"GET", "HEAD"})


class BodyState(enum.Enum):
    """Where a request's body stands (see the module rules)."""

    READING = "reading"
    COMPLETE = "complete"
    TOO_LARGE = "too large"
    GONE = "gone"


@dataclass
class GuardSettings:
    """What `RequestGuard` needs: ``max_body`` in bytes (None: no limit) and the nursery that
    drains unread bodies (`serve_admin` sets it while it serves; without one a drain runs inline
    and reads the rest of the body, discarding it)."""

    max_body: int | None
    drain_nursery: trio.Nursery | None = None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _declared_length(scope: Scope) -> int | None:
    raw = _header(scope, b"content-length")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None  # the HTTP parser refuses such a request before the app sees it


class _Exchange:
    """One request as the app sees it through `receive` and `send` (see the module rules)."""

    def __init__(self, receive: Receive, send: Send, max_body: int | None) -> None:
        self._receive = receive
        self._send = send
        self._max_body = max_body
        self.state = BodyState.READING
        self.received = 0
        self._stash: list[Message] = []
        self._gone = trio.Event()
        self.nursery: trio.Nursery | None = None
        self.cancel_on_gone: trio.CancelScope | None = None

    def _too_large(self) -> RestError:
        return RestError(413, f"request body exceeds httpMaxRequestSize ({self._max_body} bytes)")

    def _note(self, message: Message) -> None:
        if message["type"] == "http.request" and self.state is BodyState.READING:
            self.received += len(message.get("body", b""))
            if self._max_body is not None and self.received > self._max_body:
                self.state = BodyState.TOO_LARGE  # Rule 2
            elif not message.get("more_body", False):
                self.state = BodyState.COMPLETE  # Rule 3
                assert self.nursery is not None
                self.nursery.start_soon(self._watch)
        elif message["type"] == "http.disconnect":
            self._set_gone()

    def _set_gone(self) -> None:
        self.state = BodyState.GONE  # Rule 4
        self._gone.set()
        if self.cancel_on_gone is not None:
            self.cancel_on_gone.cancel()

    async def _watch(self) -> None:
        while not self._gone.is_set():
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self._set_gone()
            # ASGI sends nothing but a disconnect after the last chunk: anything else is ignored

    async def read_empty_body(self) -> None:
        """Take the empty body of a request that declares none (Rule 3); the app gets it later."""
        message = await self._receive()
        self._note(message)
        if message["type"] == "http.request":
            self._stash.append(message)

    async def receive(self) -> Message:
        """The app's ``receive`` (Rules 2 and 3)."""
        if self._stash:
            return self._stash.pop()
        if self.state is BodyState.TOO_LARGE:
            raise self._too_large()
        if self.state is not BodyState.READING:
            await self._gone.wait()
            return {"type": "http.disconnect"}
        message = await self._receive()
        self._note(message)
        if self.state is BodyState.TOO_LARGE:
            raise self._too_large()
        return message

    async def send(self, message: Message) -> None:
        """The app's ``send`` (Rules 4 and 5)."""
        if self.state is BodyState.GONE:
            return
        if message["type"] == "http.response.start":
            self.cancel_on_gone = None  # Rule 4: from here on the request runs to its end
            if self.state is not BodyState.COMPLETE:
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
        await self._send(message)


async def _drain(receive: Receive) -> None:
    """Read and discard what is left of a body until its end or the disconnect (never raises)."""
    try:
        with trio.move_on_after(_DRAIN_TIMEOUT_S):
            while True:
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    return
    except Exception as exc:
        log.debug("draining an unread request body: %s", exc)


class RequestGuard:
    """ASGI middleware applying the module rules to every HTTP request of ``app``."""

    def __init__(self, app: ASGIApp, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.settings.max_body
        exchange = _Exchange(receive, send, limit)
        declared = _declared_length(scope)
        if limit is not None and declared is not None and declared > limit:  # Rule 1
            reason = f"request body of {declared} bytes exceeds httpMaxRequestSize ({limit} bytes)"
            await JSONResponse({"reason": reason}, status_code=413)(scope, exchange.receive, exchange.send)
        else:
            await self._serve(scope, exchange)
        if exchange.state in (BodyState.READING, BodyState.TOO_LARGE):  # Rule 5
            if self.settings.drain_nursery is not None:
                self.settings.drain_nursery.start_soon(_drain, receive)
            else:
                await _drain(receive)

    async def _serve(self, scope: Scope, exchange: _Exchange) -> None:
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:
            exchange.nursery = nursery
            try:
                with trio.CancelScope() as handler_scope:
                    if scope.get("method") in _CANCEL_ON_DISCONNECT:
                        exchange.cancel_on_gone = handler_scope
                    chunked = _header(scope, b"transfer-encoding") is not None
                    if not _declared_length(scope) and not chunked:
                        await exchange.read_empty_body()
                    await self.app(scope, exchange.receive, exchange.send)
            except Exception as exc:
                failure = exc
            finally:
                nursery.cancel_scope.cancel()  # the watcher ends with the request
        if failure is not None:
            raise failure
