"""A connection to another broker over the Pulsar binary protocol: the one client the broker
speaks it with (the replicator's producer on a remote cluster, the transaction coordinator's
END_TXN_ON_* to a topic's owner).

Rules:

* Rule 1 (connect): `connect_broker` opens plain TCP, or TLS with the context given (the server's
  name checked as the host), writes CONNECT with the auth method name and data given (none when
  the method is ``""``) and returns once CONNECTED answers. A failed connect, an ERROR answer (its
  code kept in `BrokerConnectionError.code`) or no answer within the timeout raises
  `BrokerConnectionError`, with the connection closed.
* Rule 2 (answers): `BrokerConnection.request` writes a command carrying a request id from
  `next_id` and returns the answer carrying that id (ERROR included) within its timeout, else
  raises `BrokerConnectionError`.
* Rule 3 (loss): the read loop, a task of the nursery `connect_broker` is given, never raises:
  when the connection drops or sends a bad frame it records why (``closed_with``), fails every
  waiting request with it and calls ``on_lost`` once; every later write raises it. A connection
  closed on purpose (`close`) ends its loop quietly.
* Rule 4 (other commands): PING is answered with PONG; commands that answer no waiting request,
  and the command types in ``events`` even when they carry a request id (a producer's
  CLOSE_PRODUCER), go to ``on_command``.
* Writes are serialised: a frame is never interleaved with another.
"""

from __future__ import annotations

import itertools
import re
import ssl
from collections.abc import Callable, Collection
from typing import Any

import trio

from magnetar.common.tls import open_tls_stream
from protocols.pulsar import (
    BaseCommand,
    FrameDecoder,
    FrameError,
    command_body,
    encode_command,
    make_command,
    type_name,
)

__all__ = [
    "BrokerConnection",
    "BrokerConnectionError",
    "DEFAULT_TIMEOUT_S",
    "connect_broker",
    "error_text",
    "parse_broker_urls",
]

PROTOCOL_VERSION = 20
DEFAULT_TIMEOUT_S = 30.0
"""How long a connect or a request waits for its answer unless told otherwise."""


class BrokerConnectionError(Exception):
    """The other broker refused or dropped the connection, or did not answer in time. ``code`` is
    the ServerError of an ERROR answer to CONNECT, None otherwise."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def parse_broker_urls(url: str) -> list[tuple[str, int]]:
    """``pulsar://h1:p1,h2:p2`` (or ``pulsar+ssl://...``) -> [(h1, p1), (h2, p2)] (6650, or 6651
    for TLS, when a port is left out). Raises ``ValueError`` for another scheme or an empty list."""
    m = re.fullmatch(r"(pulsar|pulsar\+ssl)://(.+?)/?", url.strip())
    if not m:
        raise ValueError(f"a broker's binary protocol URL is pulsar:// or pulsar+ssl://, not {url!r}")
    default = "6651" if m.group(1) == "pulsar+ssl" else "6650"
    hosts = []
    for part in m.group(2).split(","):
        host, _, port = part.strip().rpartition(":")
        if not host:
            host, port = port, default
        hosts.append((host.strip("[]"), int(port)))
    return hosts


def error_text(cmd: BaseCommand) -> str:
    """The command's type and the message of its body, for error messages."""
    body = command_body(cmd)
    message = getattr(body, "message", "") or getattr(body, "error_message", "")
    return f"{type_name(cmd.type)} {message}".strip()


class BrokerConnection:
    """One connection to another broker (module rules). Created by `connect_broker`."""

    def __init__(self, stream: trio.abc.Stream, address: str, events: Collection[int] = ()) -> None:
        self.stream = stream
        self.address = address
        self.decoder = FrameDecoder()
        self._events = frozenset(events)
        self._requests: dict[int, tuple[trio.Event, list[BaseCommand]]] = {}
        self._ids = itertools.count()
        self._send_lock = trio.Lock()
        self._connected = trio.Event()
        self._connected_answer: BaseCommand | None = None
        self.on_command: Callable[[BaseCommand], None] | None = None  # Rule 4
        self.on_lost: Callable[[BrokerConnectionError], None] | None = None  # Rule 3
        self.closed_with: BrokerConnectionError | None = None
        self.closing = False

    def next_id(self) -> int:
        """A request id not used on this connection yet."""
        return next(self._ids)

    async def write(self, data: bytes) -> None:
        """Write bytes; `BrokerConnectionError` when the connection is gone."""
        if self.closed_with is not None:
            raise self.closed_with
        async with self._send_lock:
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise BrokerConnectionError(f"connection to {self.address} lost: {exc}") from None

    async def request(
        self, command: BaseCommand, request_id: int, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> BaseCommand:
        """Write ``command`` and return the answer carrying ``request_id`` (ERROR included);
        `BrokerConnectionError` when the connection fails or nothing answers in time (Rule 2)."""
        event = trio.Event()
        slot: list[BaseCommand] = []
        self._requests[request_id] = (event, slot)
        try:
            await self.write(encode_command(command))
            with trio.move_on_after(timeout_s):
                await event.wait()
        finally:
            self._requests.pop(request_id, None)
        if slot:
            return slot[0]
        if self.closed_with is not None:
            raise self.closed_with
        raise BrokerConnectionError(f"{type_name(command.type)} to {self.address}: no answer in {timeout_s:.0f} s")

    async def close(self) -> None:
        """Close on purpose: the read loop ends without reporting a loss (Rule 3)."""
        self.closing = True
        with trio.CancelScope(shield=True):
            try:
                await self.stream.aclose()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def read_loop(self) -> None:
        """Read and dispatch frames until the connection closes (Rules 3 and 4)."""
        try:
            while True:
                frame = self.decoder.next_frame()
                if frame is not None:
                    await self._dispatch(frame.command)
                    continue
                try:
                    data = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    raise BrokerConnectionError(f"connection to {self.address} lost: {exc}") from None
                if not data:
                    raise BrokerConnectionError(f"{self.address} closed the connection")
                self.decoder.feed(data)
        except (BrokerConnectionError, FrameError) as exc:
            if self.closing:
                return
            if isinstance(exc, BrokerConnectionError):
                lost = exc
            else:
                lost = BrokerConnectionError(f"bad frame from {self.address}: {exc}")
            self.closed_with = lost
            for event, _ in self._requests.values():
                event.set()
            self._connected.set()
            if self.on_lost is not None:
                self.on_lost(lost)

    async def _dispatch(self, cmd: BaseCommand) -> None:
        t = cmd.type
        if t == BaseCommand.PING:
            await self.write(encode_command(make_command("PONG")))
            return
        if t == BaseCommand.PONG:
            return
        if not self._connected.is_set():  # CONNECTED (or ERROR) answers CONNECT, which has no request id
            self._connected_answer = cmd
            self._connected.set()
            return
        body = command_body(cmd)
        request_id = getattr(body, "request_id", None)
        if t not in self._events and request_id is not None and request_id in self._requests:
            event, slot = self._requests[request_id]
            slot.append(cmd)
            event.set()
        elif self.on_command is not None:
            self.on_command(cmd)

    async def _handshake(self, credentials: tuple[str, bytes], client_version: str, timeout_s: float) -> None:
        method, data = credentials
        fields: dict[str, Any] = {"auth_method_name": method, "auth_data": data} if method else {}
        connect = make_command("CONNECT", client_version=client_version, protocol_version=PROTOCOL_VERSION, **fields)
        await self.write(encode_command(connect))
        with trio.move_on_after(timeout_s):
            await self._connected.wait()
        answer = self._connected_answer
        if answer is not None and answer.type == BaseCommand.CONNECTED:
            return
        if answer is not None and answer.type == BaseCommand.ERROR:
            raise BrokerConnectionError(
                f"CONNECT to {self.address} failed: {error_text(answer)}", code=answer.error.error
            )
        why = self.closed_with or (error_text(answer) if answer is not None else "no answer")
        raise BrokerConnectionError(f"CONNECT to {self.address} failed: {why}")


async def connect_broker(
    host: str,
    port: int,
    nursery: trio.Nursery,
    *,
    credentials: tuple[str, bytes] = ("", b""),
    ssl_context: ssl.SSLContext | None = None,
    client_version: str,
    events: Collection[int] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> BrokerConnection:
    """A connection to ``host:port`` that finished CONNECT (Rule 1), read by a task of
    ``nursery`` (Rule 3). The caller closes it."""
    address = f"{host}:{port}"
    try:
        with trio.fail_after(timeout_s):
            if ssl_context is not None:
                stream: trio.abc.Stream = await open_tls_stream(host, port, ssl_context)
            else:
                stream = await trio.open_tcp_stream(host, port)
    except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
        raise BrokerConnectionError(f"cannot connect to {address}: {exc}") from None
    conn = BrokerConnection(stream, address, events)
    nursery.start_soon(conn.read_loop)
    try:
        await conn._handshake(credentials, client_version, timeout_s)
    except BaseException:
        await conn.close()
        raise
    return conn
