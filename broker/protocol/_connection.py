"""One client connection: a read loop over the sans-IO decoder, a writer task, a watchdog.

States (rules):

* AWAITING_CONNECT: only CONNECT is accepted; anything else, a CONNECT without its ``connect``
  body, a frame over ``HANDSHAKE_MAX_FRAME_SIZE`` or no CONNECT within ``handshake_timeout_s`` of
  the accept closes the connection (so an unauthenticated peer holds at most one small frame plus
  one read, for a bounded time, however it trickles bytes). CONNECT is answered with CONNECTED
  (protocol_version = min(client, 20), max_message_size); the frame limit becomes
  maxMessageSize + ``MESSAGE_SIZE_FRAME_PADDING`` -> OPEN. With ``authenticationEnabled`` the
  CONNECT must authenticate first, and expiring credentials are refreshed or the connection
  closed (`._auth_session.AuthSession`).
* OPEN: commands are dispatched by type (see `_handlers`, which also says what a malformed or
  misdirected command gets). Quick, order-sensitive commands (SEND, FLOW, ACK, REDELIVER,
  PING/PONG) run inline in the read loop; commands that wait on storage or metadata run as tasks,
  at most ``_MAX_CONCURRENT_REQUESTS`` at once (the read loop waits for a slot), each answered
  with its own response type. A second CONNECT closes the connection (Pulsar's broker too).
* CLOSED: after EOF, a malformed frame or bad checksum that cannot be answered, a protocol
  violation (see `_handlers`), a keep-alive timeout (nothing received for 2 x
  keepAliveIntervalSeconds; the broker pings after one interval of silence) or `close`;
  producers and consumers are detached. Only this connection is affected, and every close is
  logged with its reason.

Producers the broker closed (CLOSE_PRODUCER sent) stay "recently closed" for one keep-alive
interval: SENDs the client had already written for them are dropped, not treated as SENDs for
an unknown producer (which close the connection; see `_handlers_producer`), as in Pulsar.

Back-pressure (the connection's memory is bounded whatever the client does; Pulsar's broker does
the same by turning the channel's auto-read off):

* Rule B1 (publish window): a SEND counts against ``max_pending_publish_bytes`` and
  ``max_pending_publish_requests_per_connection`` from its arrival until its SEND_RECEIPT (or
  SEND_ERROR) has been *written* to the socket, not merely queued: a client that pipelines SENDs
  and never reads its receipts holds its window, and the connection is not read while the window
  is full (TCP pushes back on the client).
* Rule B2 (writability): the bytes queued for writing (including the chunk being written) make the
  connection *unwritable* once they exceed ``write_buffer_high_water_mark``
  (``pulsarChannelWriteBufferHighWaterMark``), and writable again once they drop to
  ``write_buffer_low_water_mark``. While unwritable the connection is not read, so requests
  cannot pile up answers the client does not take; after each return to writable at least one
  read is made, so a connection whose consumers keep it busy still takes in its client's frames.
* Rule B3 (dispatch): MESSAGE frames go through `send`, which waits while the connection is
  unwritable; dispatchers do not pick consumers of an unwritable connection (`Consumer.writable`)
  and are woken when it turns writable. The queue therefore holds at most the high water mark
  plus one dispatch round and the answers of the requests already read.
* Rule B4 (keep-alive while paused): while the connection is not read (Rules B1, B2) the
  keep-alive neither pings nor times out, as Pulsar skips its timeout while auto-read is off: the
  client's frames wait unread in the socket. Reading again counts as hearing from the client.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import trio

from magnetar.common.version import VERSION
from protocols.pulsar import ChecksumMismatch, Frame, FrameDecoder, FrameError, encode_command, make_command, type_name
from protocols.pulsar import pulsar_api_pb2 as pb

from .._config import MESSAGE_SIZE_FRAME_PADDING
from ..topics._entries import Signal
from ._auth_session import AuthSession
from ._handlers import dispatch_frame

if TYPE_CHECKING:
    from .._service import BrokerService
    from ..topics._consumer import Consumer
    from ..topics._producer import Producer

__all__ = ["ServerConnection", "ConnectionState", "PauseReason", "HANDSHAKE_MAX_FRAME_SIZE"]

log = logging.getLogger(__name__)

_MAX_CONCURRENT_REQUESTS = 256
_WRITE_CHUNK = 256 * 1024

HANDSHAKE_MAX_FRAME_SIZE = 64 * 1024
"""The largest frame accepted before CONNECT completed.

A CONNECT is about a hundred bytes plus its ``auth_data``; the largest credentials clients send
there are Kerberos/SASL tokens, which Windows caps at 48,000 bytes (MaxTokenSize), and JWTs of a
few KiB. 64 KiB fits those with room, while an unauthenticated peer can no longer make the broker
hold a maxMessageSize frame (5 MiB by default, 80 times more) per connection."""


class ConnectionState(enum.Enum):
    """See the module rules."""

    AWAITING_CONNECT = "awaiting-connect"
    OPEN = "open"
    CLOSED = "closed"


class PauseReason(enum.Enum):
    """Why a connection is not read right now (the back-pressure rules of the module)."""

    PUBLISH_WINDOW = "publish-window"  # Rule B1
    UNWRITABLE = "unwritable"  # Rule B2


class ServerConnection:
    """Serves one accepted stream until it closes; see the module rules."""

    def __init__(self, service: BrokerService, stream: trio.abc.Stream, remote: str = "") -> None:
        self.service = service
        self.config = service.config
        self.stream = stream
        self.remote = remote
        self._decoder = FrameDecoder(min(HANDSHAKE_MAX_FRAME_SIZE, self._max_frame_size()))
        self._connected = trio.Event()
        # producer id -> trio time until which SENDs for it are dropped quietly (see the module rules)
        self._recently_closed_producers: dict[int, float] = {}
        self.state = ConnectionState.AWAITING_CONNECT
        self.protocol_version = 0
        self.client_version = ""
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._out: deque[bytes] = deque()
        self._out_bytes = 0  # queued in ``_out``
        self._writing_bytes = 0  # taken by the writer, not yet accepted by the socket
        self._queued_total = 0  # every byte ever queued (receipt release positions count in it)
        self._written_total = 0  # every byte the socket accepted
        # (end of a receipt in ``_queued_total``, its SEND's size): Rule B1 releases on write
        self._receipt_releases: deque[tuple[int, int]] = deque()
        self._writable = True  # Rule B2
        self._out_signal = Signal()
        self._writable_signal = Signal()
        self._publish_signal = Signal()
        self.pending_publish_bytes = 0
        self.pending_publish_count = 0
        self.paused: PauseReason | None = None  # why the read loop waits now (Rules B1, B2)
        self._requests = trio.Semaphore(_MAX_CONCURRENT_REQUESTS)
        self._last_received = trio.current_time()
        self._nursery: trio.Nursery | None = None
        self.close_reason = ""
        self.auth_session = AuthSession(self)  # the client's role and its credentials' refresh

    # ------------------------------------------------------------------ lifecycle

    def _max_frame_size(self) -> int:
        return self.config.max_message_size + MESSAGE_SIZE_FRAME_PADDING

    async def serve(self) -> None:
        """Run until the connection closes; always detaches producers/consumers and closes the stream.

        The connection is in ``service.connections`` from the start until its stream is closed
        (the last step), so a caller that counts connections sees a slot free only once it is.
        """
        self.service.connections.add(self)
        self.service.metrics.connection_opened()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                nursery.start_soon(self._watchdog)
                try:
                    await self._reader()
                    if not self.close_reason:
                        self.close_reason = "client closed the connection"
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self.close_reason = self.close_reason or f"stream error: {exc!r}"
                nursery.cancel_scope.cancel()
        finally:
            self.state = ConnectionState.CLOSED
            self._writable_signal.fire()  # a dispatcher waiting in `send` goes on (and drops)
            try:
                with trio.CancelScope(shield=True):
                    await self._detach_all()
                    await trio.aclose_forcefully(self.stream)
            finally:
                self.service.connections.discard(self)
                self.service.metrics.connection_closed()
            log.info("connection %s closed: %s", self.remote, self.close_reason or "closed")

    def close(self, reason: str) -> None:
        """Close this connection (only this one) with a logged reason."""
        if self.state is ConnectionState.CLOSED:
            return
        if not self.close_reason:
            self.close_reason = reason
            log.warning("closing connection %s: %s", self.remote, reason)
        self.state = ConnectionState.CLOSED
        self._writable_signal.fire()  # a dispatcher waiting in `send` goes on (and drops)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _detach_all(self) -> None:
        for producer in list(self.producers.values()):
            producer.topic.remove_producer(producer)
        self.producers.clear()
        for consumer in list(self.consumers.values()):
            try:
                await consumer.subscription.remove_consumer(consumer)
            except Exception as exc:
                log.warning("detaching consumer %s: %s", consumer.name, exc)
        self.consumers.clear()

    def forget_producer(self, producer_id: int, producer: Producer) -> None:
        """The broker closed a producer: stop routing its commands; it is recently closed for a while."""
        if self.producers.get(producer_id) is producer:
            del self.producers[producer_id]
            now = trio.current_time()
            # prune on insert: the map holds only the producers closed within one interval
            self._recently_closed_producers = {
                pid: until for pid, until in self._recently_closed_producers.items() if until > now
            }
            self._recently_closed_producers[producer_id] = now + self.config.keep_alive_interval_s

    def producer_recently_closed(self, producer_id: int) -> bool:
        """Whether the broker closed this producer within the last keep-alive interval.

        The client may have written SENDs for it before it read CLOSE_PRODUCER; after the
        interval it has read it, and a SEND for the id is a protocol error.
        """
        until = self._recently_closed_producers.get(producer_id)
        return until is not None and trio.current_time() < until

    def forget_consumer(self, consumer_id: int, consumer: Consumer) -> None:
        """The broker closed a consumer: stop routing its commands."""
        if self.consumers.get(consumer_id) is consumer:
            del self.consumers[consumer_id]

    # ------------------------------------------------------------------ output

    @property
    def closed(self) -> bool:
        """Whether the connection is closed."""
        return self.state is ConnectionState.CLOSED

    @property
    def queued_bytes(self) -> int:
        """Bytes queued for writing, including the chunk the socket has not accepted yet (Rule B2)."""
        return self._out_bytes + self._writing_bytes

    @property
    def writable(self) -> bool:
        """Whether the outgoing queue is below its high water mark (Rule B2): a dispatcher sends
        to this connection's consumers only while it is, and a sender that must not wait (a
        non-persistent topic's dispatcher) drops instead."""
        return self._writable

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        self._queued_total += len(data)
        if self._writable and self.queued_bytes > self.config.write_buffer_high_water_mark:
            self._writable = False
        self._out_signal.fire()

    def send_nowait(self, data: bytes) -> None:
        """Queue a frame without waiting (answers and control frames); dropped when closed."""
        if self.closed:
            return
        self._queue(data)

    def send_receipt(self, data: bytes, publish_size: int) -> None:
        """Queue a SEND's answer; its ``publish_size`` bytes stay counted against the publish
        window until the answer is written (Rule B1)."""
        if self.closed:
            self.publish_done(publish_size)
            return
        self._queue(data)
        self._receipt_releases.append((self._queued_total, publish_size))

    async def send(self, data: bytes) -> None:
        """Queue frames (a dispatch round), first waiting while the connection is unwritable (Rule B3)."""
        while not self.closed and not self._writable:
            await self._writable_signal.current().wait()
        self.send_nowait(data)

    def send_command(self, command: pb.BaseCommand) -> None:
        """Encode and queue a simple command."""
        self.send_nowait(encode_command(command))

    def _written(self, size: int) -> None:
        """The socket accepted ``size`` more bytes: release the receipts among them (Rule B1) and
        turn writable again at the low water mark (Rule B2)."""
        self._writing_bytes = 0
        self._written_total += size
        releases = self._receipt_releases
        while releases and releases[0][0] <= self._written_total:
            self.publish_done(releases.popleft()[1])
        if not self._writable and self.queued_bytes <= self.config.write_buffer_low_water_mark:
            self._writable = True
            self._writable_signal.fire()
            for consumer in list(self.consumers.values()):
                dispatcher = consumer.subscription.dispatcher
                if dispatcher is not None:
                    dispatcher.wake()

    async def _writer(self) -> None:
        while True:
            if not self._out:
                await self._out_signal.current().wait()
                continue
            if self._out_bytes < _WRITE_CHUNK:
                # One more scheduler round lets the other tasks woken in this one (receipts of a
                # group of adds, MESSAGE frames) queue theirs: one send for many small frames.
                await trio.lowlevel.checkpoint()
            chunks, size = [], 0
            while self._out and size < _WRITE_CHUNK:
                data = self._out.popleft()
                chunks.append(data)
                size += len(data)
            self._out_bytes -= size
            self._writing_bytes = size
            try:
                await self.stream.send_all(b"".join(chunks))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.close(f"write failed: {exc!r}")
                return
            self._written(size)

    def statistics(self) -> dict[str, Any]:
        """A snapshot of the back-pressure state (for metrics and tests)."""
        return {
            "queued_bytes": self.queued_bytes,
            "writable": self._writable,
            "paused": None if self.paused is None else self.paused.value,
            "pending_publish_bytes": self.pending_publish_bytes,
            "pending_publish_count": self.pending_publish_count,
        }

    # ------------------------------------------------------------------ watchdog

    async def _watchdog(self) -> None:
        # Handshake deadline first: it runs from the accept whatever the peer sends, so trickled
        # bytes cannot keep an unauthenticated connection (and its buffer) alive.
        timeout = self.config.handshake_timeout_s
        with trio.move_on_after(timeout):
            await self._connected.wait()
        if not self._connected.is_set():
            self.close(f"no CONNECT within {timeout:g} s of the accept (handshake timeout)")
            return
        # Then keep-alive, only once CONNECTED went out (the client accepts nothing before it).
        interval = float(self.config.keep_alive_interval_s)
        while True:
            await trio.sleep(interval / 2)
            if self.paused is not None:
                continue  # Rule B4: the client's frames wait unread, its silence is ours
            idle = trio.current_time() - self._last_received
            if idle >= 2 * interval:
                self.close(f"no frame received for {idle:.0f} s (keep-alive timeout)")
                return
            if idle >= interval:
                self.send_command(make_command("PING"))

    # ------------------------------------------------------------------ input

    def publish_started(self, size: int) -> None:
        """A SEND arrived: it counts against the publish window until its answer is written (Rule B1)."""
        self.pending_publish_bytes += size
        self.pending_publish_count += 1

    def publish_done(self, size: int) -> None:
        """A SEND's answer was written, or will never be (Rule B1): give its share of the window back."""
        self.pending_publish_bytes -= size
        self.pending_publish_count -= 1
        self._publish_signal.fire()

    def _publish_window_full(self) -> bool:
        return (
            self.pending_publish_bytes > self.config.max_pending_publish_bytes
            or self.pending_publish_count >= self.config.max_pending_publish_requests_per_connection
        )

    async def _wait_readable(self) -> None:
        """Return once the connection may be read (Rules B1, B2); ``paused`` says why it waits."""
        waited_for_writable = False
        while not self.closed:
            if self._publish_window_full():
                self.paused = PauseReason.PUBLISH_WINDOW
                await self._publish_signal.current().wait()
            elif not self._writable and not waited_for_writable:
                self.paused = PauseReason.UNWRITABLE
                await self._writable_signal.current().wait()
                waited_for_writable = True  # Rule B2: one read at least before pausing again
            else:
                break
        if self.paused is not None:
            self.paused = None
            self._last_received = trio.current_time()  # Rule B4

    async def _reader(self) -> None:
        decoder = self._decoder
        while not self.closed:
            await self._wait_readable()
            data = await self.stream.receive_some(65536)
            if not data:
                return
            self._last_received = trio.current_time()
            decoder.feed(data)
            while not self.closed:
                try:
                    frame = decoder.next_frame()
                except ChecksumMismatch as exc:
                    if not self._answer_bad_checksum(exc):
                        self.close(f"checksum mismatch: {exc}")
                        return
                    continue
                except FrameError as exc:
                    phase = " before CONNECT" if self.state is ConnectionState.AWAITING_CONNECT else ""
                    self.close(f"malformed frame{phase}: {exc}")
                    return
                if frame is None:
                    break
                await self._handle(frame)

    def _answer_bad_checksum(self, exc: ChecksumMismatch) -> bool:
        cmd = exc.command
        if cmd is None or cmd.type != pb.BaseCommand.SEND or self.state is not ConnectionState.OPEN:
            return False
        self.send_command(
            make_command(
                "SEND_ERROR",
                producer_id=cmd.send.producer_id,
                sequence_id=cmd.send.sequence_id,
                error=pb.ChecksumError,
                message="checksum mismatch",
            )
        )
        return True

    async def _handle(self, frame: Frame) -> None:
        if self.state is ConnectionState.AWAITING_CONNECT:
            if frame.type != pb.BaseCommand.CONNECT:
                self.close(f"{type_name(frame.type)} before CONNECT")
                return
            if not frame.command.HasField("connect"):
                self.close("CONNECT without its connect body")
                return
            if await self.auth_session.on_connect(frame.command.connect):
                self._on_connect(frame.command.connect)
            return
        if frame.type == pb.BaseCommand.CONNECT:
            self.close("second CONNECT on an open connection")
            return
        await dispatch_frame(self, frame)

    def _on_connect(self, connect: pb.CommandConnect) -> None:
        self.client_version = connect.client_version
        self.protocol_version = min(connect.protocol_version, 20)

        self.send_command(
            make_command(
                "CONNECTED",
                server_version=f"Magnetar-{VERSION}",
                protocol_version=self.protocol_version,
                max_message_size=self.config.max_message_size,
            )
        )
        self.state = ConnectionState.OPEN
        # the next frame (even one already buffered behind CONNECT) gets the full limit
        self._decoder.set_max_frame_size(self._max_frame_size())
        self._connected.set()
        if self.service.auth.enabled:
            assert self._nursery is not None
            self._nursery.start_soon(self.auth_session.refresher)
        log.info("connection %s: client %s, protocol v%d", self.remote, self.client_version, self.protocol_version)

    async def spawn_request(self, fn: Any, *args: Any) -> None:
        """Run a request handler as a task, waiting for one of the bounded slots."""
        await self._requests.acquire()
        assert self._nursery is not None

        async def run() -> None:
            try:
                await fn(*args)
            finally:
                self._requests.release()

        self._nursery.start_soon(run)
