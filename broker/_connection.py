"""One client connection: a read loop over the sans-IO decoder, a writer task, keep-alive.

States (rules):

* AWAITING_CONNECT: only CONNECT is accepted (anything else closes the connection); CONNECT is
  answered with CONNECTED (protocol_version = min(client, 20), max_message_size) -> OPEN.
* OPEN: commands are dispatched by type (see `_handlers`). Quick, order-sensitive commands
  (SEND, FLOW, ACK, REDELIVER, PING/PONG) run inline in the read loop; commands that wait on
  storage or metadata run as tasks, at most ``_MAX_CONCURRENT_REQUESTS`` at once (the read loop
  waits for a slot), each answered with its own response type.
* CLOSED: after EOF, a malformed frame or bad checksum that cannot be answered, a keep-alive
  timeout (nothing received for 2 x keepAliveIntervalSeconds; the broker pings after one
  interval of silence) or `close`; producers and consumers are detached. Only this connection
  is affected.

Bounds: the outgoing queue holds at most ``outgoing_queue_bytes`` for senders that wait
(`send`); small control frames (`send_nowait`) may exceed it. While more than
``max_pending_publish_bytes`` / ``max_pending_publish_requests_per_connection`` of SENDs are
waiting for storage, the connection is not read (TCP pushes back on the client).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import trio

from broker.protocol import (ChecksumMismatch, Frame, FrameDecoder, FrameError, encode_command, make_command,
                             type_name)
from broker.protocol import pulsar_api_pb2 as pb

from ._config import MESSAGE_SIZE_FRAME_PADDING
from ._entries import Signal

if TYPE_CHECKING:
    from ._consumer import Consumer
    from ._producer import Producer
    from ._service import BrokerService

__all__ = ["ServerConnection", "ConnectionState"]

log = logging.getLogger(__name__)

_MAX_CONCURRENT_REQUESTS = 256
_WRITE_CHUNK = 256 * 1024


class ConnectionState(enum.Enum):
    """See the module rules."""

    AWAITING_CONNECT = "awaiting-connect"
    OPEN = "open"
    CLOSED = "closed"


class ServerConnection:
    """Serves one accepted stream until it closes; see the module rules."""

    def __init__(self, service: BrokerService, stream: trio.abc.Stream, remote: str = "") -> None:
        self.service = service
        self.config = service.config
        self.stream = stream
        self.remote = remote
        self.state = ConnectionState.AWAITING_CONNECT
        self.protocol_version = 0
        self.client_version = ""
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._out: deque[bytes] = deque()
        self._out_bytes = 0
        self._out_signal = Signal()
        self._space_signal = Signal()
        self._publish_signal = Signal()
        self.pending_publish_bytes = 0
        self.pending_publish_count = 0
        self._requests = trio.Semaphore(_MAX_CONCURRENT_REQUESTS)
        self._last_received = trio.current_time()
        self._nursery: trio.Nursery | None = None
        self.close_reason = ""

    # ------------------------------------------------------------------ lifecycle

    async def serve(self) -> None:
        """Run until the connection closes; always detaches producers/consumers and closes the stream."""
        self.service.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                nursery.start_soon(self._keepalive)
                try:
                    await self._reader()
                    if not self.close_reason:
                        self.close_reason = "client closed the connection"
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self.close_reason = self.close_reason or f"stream error: {exc!r}"
                nursery.cancel_scope.cancel()
        finally:
            self.state = ConnectionState.CLOSED
            self.service.connections.discard(self)
            with trio.CancelScope(shield=True):
                await self._detach_all()
                await trio.aclose_forcefully(self.stream)
            log.info("connection %s closed: %s", self.remote, self.close_reason or "closed")

    def close(self, reason: str) -> None:
        """Close this connection (only this one) with a logged reason."""
        if self.state is ConnectionState.CLOSED:
            return
        if not self.close_reason:
            self.close_reason = reason
            log.warning("closing connection %s: %s", self.remote, reason)
        self.state = ConnectionState.CLOSED
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _detach_all(self) -> None:
        for producer in list(self.producers.values()):
            producer.topic.remove_producer(producer)
        self.producers.clear()
        for consumer in list(self.consumers.values()):
            try:
                await consumer.subscription.remove_consumer(consumer)
            except Exception as exc:  # noqa: BLE001 - detaching the others must go on
                log.warning("detaching consumer %s: %s", consumer.name, exc)
        self.consumers.clear()

    def forget_producer(self, producer_id: int, producer: Producer) -> None:
        """The broker closed a producer: stop routing its commands."""
        if self.producers.get(producer_id) is producer:
            del self.producers[producer_id]

    def forget_consumer(self, consumer_id: int, consumer: Consumer) -> None:
        """The broker closed a consumer: stop routing its commands."""
        if self.consumers.get(consumer_id) is consumer:
            del self.consumers[consumer_id]

    # ------------------------------------------------------------------ output

    @property
    def closed(self) -> bool:
        """Whether the connection is closed."""
        return self.state is ConnectionState.CLOSED

    def send_nowait(self, data: bytes) -> None:
        """Queue a frame without waiting (control frames); dropped when closed."""
        if self.closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        self._out_signal.fire()

    async def send(self, data: bytes) -> None:
        """Queue frames, waiting while the outgoing queue is over its byte bound."""
        while not self.closed and self._out_bytes and self._out_bytes + len(data) > self.config.outgoing_queue_bytes:
            await self._space_signal.current().wait()
        self.send_nowait(data)

    def send_command(self, command: pb.BaseCommand) -> None:
        """Encode and queue a simple command."""
        self.send_nowait(encode_command(command))

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
            self._space_signal.fire()
            try:
                await self.stream.send_all(b"".join(chunks))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.close(f"write failed: {exc!r}")
                return

    # ------------------------------------------------------------------ keep-alive

    async def _keepalive(self) -> None:
        interval = float(self.config.keep_alive_interval_s)
        while True:
            await trio.sleep(interval / 2)
            idle = trio.current_time() - self._last_received
            if idle >= 2 * interval:
                self.close(f"no frame received for {idle:.0f} s (keep-alive timeout)")
                return
            if idle >= interval:
                self.send_command(make_command("PING"))

    # ------------------------------------------------------------------ input

    def publish_started(self, size: int) -> None:
        """A SEND is waiting for storage (counts toward the pending-publish bounds)."""
        self.pending_publish_bytes += size
        self.pending_publish_count += 1

    def publish_done(self, size: int) -> None:
        """A SEND was answered."""
        self.pending_publish_bytes -= size
        self.pending_publish_count -= 1
        self._publish_signal.fire()

    async def _wait_publish_capacity(self) -> None:
        while (self.pending_publish_bytes > self.config.max_pending_publish_bytes
               or self.pending_publish_count >= self.config.max_pending_publish_requests_per_connection):
            await self._publish_signal.current().wait()

    async def _reader(self) -> None:
        from ._handlers import dispatch_frame

        decoder = FrameDecoder(self.config.max_message_size + MESSAGE_SIZE_FRAME_PADDING)
        while not self.closed:
            await self._wait_publish_capacity()
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
                    self.close(f"malformed frame: {exc}")
                    return
                if frame is None:
                    break
                await self._handle(frame, dispatch_frame)

    def _answer_bad_checksum(self, exc: ChecksumMismatch) -> bool:
        cmd = exc.command
        if cmd is None or cmd.type != pb.BaseCommand.SEND or self.state is not ConnectionState.OPEN:
            return False
        self.send_command(make_command("SEND_ERROR", producer_id=cmd.send.producer_id,
                                       sequence_id=cmd.send.sequence_id, error=pb.ChecksumError,
                                       message="checksum mismatch"))
        return True

    async def _handle(self, frame: Frame, dispatch_frame: Any) -> None:
        if self.state is ConnectionState.AWAITING_CONNECT:
            if frame.type != pb.BaseCommand.CONNECT:
                self.close(f"{type_name(frame.type)} before CONNECT")
                return
            self._on_connect(frame.command.connect)
            return
        if frame.type == pb.BaseCommand.CONNECT:
            self.close("second CONNECT on an open connection")
            return
        await dispatch_frame(self, frame)

    def _on_connect(self, connect: pb.CommandConnect) -> None:
        self.client_version = connect.client_version
        self.protocol_version = min(connect.protocol_version, 20)
        from magnetar import __version__

        self.send_command(make_command(
            "CONNECTED", server_version=f"Magnetar-{__version__}", protocol_version=self.protocol_version,
            max_message_size=self.config.max_message_size))
        self.state = ConnectionState.OPEN
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
