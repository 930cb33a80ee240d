"""``magnetar perf --engine native``: a load generator that speaks the Pulsar protocol itself.

The official client spends several microseconds of Python per message, so it cannot drive a broker
past its limit (issue 15's table: 31,000 msg/s batched, whatever the broker). This engine removes
the client from the measurement:

* **Pre-encoded SEND frames.** A :class:`SendTemplate` encodes one SEND frame (command, checksum,
  metadata, batch payload) once. The per-frame fields (the command's and the metadata's sequence
  ids, ``highest_sequence_id`` and ``publish_time``) are written as fixed-width (10-byte, padded)
  protobuf varints, which every protobuf parser accepts, so each frame is the template with those
  bytes and the CRC32-C patched in place: no protobuf work per frame.
* **Pipelined sends.** Each connection keeps up to ``--max-pending`` frames unreceipted and writes
  every frame that is due in one ``send_all``.
* **Several connections and worker processes.** ``--connections`` per worker, ``--workers``
  processes (each its own trio loop), topics and partitions spread round-robin.
* **Latency with coordinated-omission correction.** At a fixed ``--rate`` each frame has an
  intended send time on an absolute schedule, and latency is measured from that time to the
  receipt: a broker that stalls is charged for every frame the stall delayed, not only for the
  one in flight. Without a rate, latency is actual send -> receipt.

The parent process merges each worker's per-second report (message, byte and error counts and a
:class:`LatencyHistogram`) and prints the same lines and summary as the official-client engine,
plus the broker's CPU seconds per million messages when it can read them (see
:func:`read_broker_cpu_seconds`).

Layout of the module: frame templates (pure), the connection (trio), the workers
(multiprocessing), and the parent's driver.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import re
import signal
import ssl
import struct
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from crc32c import crc32c

from protocols.pulsar import (
    MAGIC_CRC32C,
    BaseCommand,
    FrameDecoder,
    MessageMetadata,
    SingleMessageMetadata,
    encode_command,
    make_command,
)

from ._perf import LatencyHistogram

__all__ = [
    "SendTemplate",
    "NativeProduceOptions",
    "NativeConsumeOptions",
    "run_native_produce",
    "run_native_consume",
    "read_broker_cpu_seconds",
    "padded_varint",
    "parse_service_url",
]

_U32 = struct.Struct(">I")
_VARINT_WIDTH = 10  # a uint64 varint never needs more than 10 bytes, so any value fits in place


# ---------------------------------------------------------------------------------- templates

# Each 14-bit group of a value as two varint bytes with their continuation bits set: a padded
# varint is then four table lookups and a last pair (the per-frame cost of the unbatched engine).
_PAIRS = [bytes(((x & 0x7F) | 0x80, (x >> 7) | 0x80)) for x in range(1 << 14)]


def padded_varint(value: int) -> bytes:
    """``value`` (0 <= value < 2**63) as a protobuf varint of exactly 10 bytes.

    Continuation bits are set on every byte but the last, so the encoding is longer than minimal
    but decodes to the same value in every conforming protobuf parser.
    """
    if not 0 <= value < 1 << 63:
        raise ValueError(f"{value} does not fit a 10-byte varint of a signed 64-bit value")
    pairs = _PAIRS
    top = value >> 56  # 7 bits: one byte with continuation, then a last byte of 0
    return b"".join(
        (
            pairs[value & 0x3FFF],
            pairs[(value >> 14) & 0x3FFF],
            pairs[(value >> 28) & 0x3FFF],
            pairs[(value >> 42) & 0x3FFF],
            bytes((top | 0x80, 0)),
        )
    )


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field_number: int, wire_type: int) -> bytes:
    return _varint(field_number << 3 | wire_type)


@dataclass
class SendTemplate:
    """One SEND frame of ``messages`` messages of ``size`` bytes, patched in place per frame.

    ``messages == 1`` with ``batched=False`` sends a plain message; otherwise the payload is a
    batch of ``messages`` single messages (``num_messages_in_batch`` set). :meth:`frame` returns
    the frame for a first sequence id and publish time; it is a view of an internal buffer that
    the next call overwrites, so the caller copies it (``bytearray +=``) before the next call.
    Guarantees: the frame decodes (``FrameDecoder``) to a SEND of ``producer_id`` with
    ``sequence_id = first``, ``highest_sequence_id = first + messages - 1`` (batches) and
    ``num_messages = messages``, a valid CRC32-C, and metadata with the same sequence id and
    publish time.
    """

    producer_id: int
    producer_name: str
    messages: int
    size: int
    batched: bool = True
    payload_byte: int = 0x61
    buffer: bytearray = field(init=False, repr=False)
    _offsets: tuple[int, int, int, int, int] = field(init=False, repr=False)  # cmd seq, cmd high, meta seq, time, crc
    _crc_from: int = field(init=False, repr=False)
    _published: int = field(init=False, repr=False, default=-1)

    def __post_init__(self) -> None:
        if self.messages < 1 or (self.messages > 1 and not self.batched):
            raise ValueError("an unbatched frame holds exactly one message")
        if self.size < 0:
            raise ValueError("size must be >= 0")
        body = bytes([self.payload_byte]) * self.size
        if self.batched:
            single = SingleMessageMetadata(payload_size=self.size).SerializeToString()
            payload = (_U32.pack(len(single)) + single + body) * self.messages
        else:
            payload = body
        # the command: fixed fields, then the two patched varints at the end of CommandSend
        send_fixed = make_command(
            "SEND", producer_id=self.producer_id, num_messages=self.messages
        ).send.SerializePartialToString()
        send_tail_seq = _key(2, 0)
        send_tail_high = _key(6, 0)
        send_len = len(send_fixed) + len(send_tail_seq) + _VARINT_WIDTH + len(send_tail_high) + _VARINT_WIDTH
        base = BaseCommand(type=BaseCommand.SEND).SerializePartialToString()
        cmd_head = base + _key(6, 2) + _varint(send_len) + send_fixed
        cmd_len = send_len + len(cmd_head) - len(send_fixed)
        # the metadata: fixed fields, then sequence id and publish time
        meta = MessageMetadata(producer_name=self.producer_name)
        if self.batched:
            meta.num_messages_in_batch = self.messages
        meta_fixed = meta.SerializePartialToString()
        meta_len = len(meta_fixed) + len(_key(2, 0)) + _VARINT_WIDTH + len(_key(3, 0)) + _VARINT_WIDTH
        total = 4 + cmd_len + 6 + 4 + meta_len + len(payload)
        buf = bytearray()
        buf += _U32.pack(total) + _U32.pack(cmd_len) + cmd_head
        buf += send_tail_seq
        cmd_seq = len(buf)
        buf += bytes(_VARINT_WIDTH) + send_tail_high
        cmd_high = len(buf)
        buf += bytes(_VARINT_WIDTH)
        buf += struct.pack(">H", MAGIC_CRC32C)
        crc_at = len(buf)
        buf += bytes(4)
        self._crc_from = len(buf)
        buf += _U32.pack(meta_len) + meta_fixed + _key(2, 0)
        meta_seq = len(buf)
        buf += bytes(_VARINT_WIDTH) + _key(3, 0)
        pub = len(buf)
        buf += bytes(_VARINT_WIDTH) + payload
        assert len(buf) == total + 4
        self.buffer = buf
        self._offsets = (cmd_seq, cmd_high, meta_seq, pub, crc_at)

    def frame(self, first_sequence_id: int, publish_time_ms: int) -> memoryview:
        """The frame for messages ``first_sequence_id ..`` published at ``publish_time_ms``."""
        buf = self.buffer
        cmd_seq, cmd_high, meta_seq, pub, crc_at = self._offsets
        seq = padded_varint(first_sequence_id)
        buf[cmd_seq : cmd_seq + _VARINT_WIDTH] = seq
        buf[cmd_high : cmd_high + _VARINT_WIDTH] = (
            seq if self.messages == 1 else padded_varint(first_sequence_id + self.messages - 1)
        )
        buf[meta_seq : meta_seq + _VARINT_WIDTH] = seq
        if publish_time_ms != self._published:
            self._published = publish_time_ms
            buf[pub : pub + _VARINT_WIDTH] = padded_varint(publish_time_ms)
        view = memoryview(buf)
        _U32.pack_into(buf, crc_at, crc32c(view[self._crc_from :]))
        return view


def parse_service_url(url: str) -> tuple[str, int, bool]:
    """``pulsar://host:port`` or ``pulsar+ssl://host:port`` -> (host, port, tls).

    Raises ``ValueError`` for anything else (several hosts included: give one broker).
    """
    m = re.fullmatch(r"(pulsar|pulsar\+ssl)://([^:/,]+|\[[0-9a-fA-F:]+\])(?::(\d+))?/?", url.strip())
    if not m:
        raise ValueError(f"not a single-broker pulsar:// or pulsar+ssl:// URL: {url!r}")
    tls = m.group(1) == "pulsar+ssl"
    port = int(m.group(3)) if m.group(3) else (6651 if tls else 6650)
    return m.group(2).strip("[]"), port, tls


# ------------------------------------------------------------------------------ connection


class ProtocolFailure(Exception):
    """The broker refused or broke the conversation (the message says what it answered)."""


@dataclass
class _Conn:
    stream: trio.abc.Stream
    decoder: FrameDecoder
    send_lock: trio.Lock
    request_id: int = 0

    def next_request_id(self) -> int:
        self.request_id += 1
        return self.request_id

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        async with self.send_lock:
            await self.stream.send_all(data)

    async def next_frame(self) -> Any:
        """The next frame that is not a keep-alive (PINGs are answered here)."""
        while True:
            frame = self.decoder.next_frame()
            if frame is None:
                data = await self.stream.receive_some(256 * 1024)
                if not data:
                    raise ProtocolFailure("the broker closed the connection")
                self.decoder.feed(data)
                continue
            if frame.type == BaseCommand.PING:
                await self.send(encode_command(make_command("PONG")))
                continue
            if frame.type == BaseCommand.PONG:
                continue
            return frame

    async def expect(self, *types: int) -> Any:
        frame = await self.next_frame()
        if frame.type == BaseCommand.ERROR:
            raise ProtocolFailure(f"broker error {frame.command.error.error}: {frame.command.error.message}")
        if frame.type not in types:
            raise ProtocolFailure(f"unexpected {BaseCommand.Type.Name(frame.type)}")
        return frame


async def _open(url: str, token: str | None, tls_trust: str | None) -> _Conn:
    host, port, tls = parse_service_url(url)
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    if tls:
        ctx = ssl.create_default_context(cafile=tls_trust) if tls_trust else ssl.create_default_context()
        stream = trio.SSLStream(stream, ctx, server_hostname=host)
        await stream.do_handshake()
    conn = _Conn(stream, FrameDecoder(), trio.Lock())
    fields: dict[str, Any] = {"client_version": "magnetar-perf", "protocol_version": 20}
    if token:
        fields.update(auth_method_name="token", auth_data=token.encode())
    await conn.send(encode_command(make_command("CONNECT", **fields)))
    await conn.expect(BaseCommand.CONNECTED)
    return conn


async def _partitions(conn: _Conn, topic: str) -> int:
    await conn.send(
        encode_command(make_command("PARTITIONED_METADATA", topic=topic, request_id=conn.next_request_id()))
    )
    frame = await conn.expect(BaseCommand.PARTITIONED_METADATA_RESPONSE)
    resp = frame.command.partitionMetadataResponse
    if resp.HasField("response") and resp.response != 0:
        raise ProtocolFailure(f"partitioned metadata of {topic}: {resp.error} {resp.message}")
    return int(resp.partitions)


async def _connect_to_owner(url: str, topic: str, token: str | None, tls_trust: str | None) -> _Conn:
    """A connection to the broker that serves ``topic``, following lookup redirects (20 at most)."""
    authoritative = False
    for _ in range(20):
        conn = await _open(url, token, tls_trust)
        await conn.send(
            encode_command(
                make_command("LOOKUP", topic=topic, request_id=conn.next_request_id(), authoritative=authoritative)
            )
        )
        resp = (await conn.expect(BaseCommand.LOOKUP_RESPONSE)).command.lookupTopicResponse
        target = (
            resp.brokerServiceUrlTls
            if parse_service_url(url)[2] and resp.brokerServiceUrlTls
            else resp.brokerServiceUrl
        )
        if resp.response == 2:
            raise ProtocolFailure(f"lookup of {topic} failed: {resp.error} {resp.message}")
        if resp.response == 1 and (
            not target or resp.proxy_through_service_url or parse_service_url(target)[:2] == parse_service_url(url)[:2]
        ):
            return conn
        await conn.stream.aclose()
        url, authoritative = target, bool(resp.authoritative)
    raise ProtocolFailure(f"lookup of {topic}: more than 20 redirects")


# ------------------------------------------------------------------------------- producing


@dataclass(frozen=True)
class NativeProduceOptions:
    """What ``perf produce --engine native`` was asked to do (all validated by the caller)."""

    service_url: str
    topics: tuple[str, ...]
    size: int
    batch_messages: int  # 1 with batched=False: unbatched
    batched: bool
    rate: float  # messages/s in total, 0 = as fast as possible
    num_messages: int  # in total, 0 = no limit
    duration: float  # seconds, 0 = no limit
    workers: int
    connections: int  # per worker
    max_pending: int  # frames in flight per connection
    token: str | None = None
    tls_trust_cert: str | None = None


@dataclass
class _Stats:
    """What a worker has to report since its previous report."""

    messages: int = 0
    bytes: int = 0
    errors: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    failures: list[str] = field(default_factory=list)

    def take(self) -> tuple[int, int, int, LatencyHistogram, list[str]]:
        out = (self.messages, self.bytes, self.errors, self.latency, self.failures)
        self.messages = self.bytes = self.errors = 0
        self.latency = LatencyHistogram()
        self.failures = []
        return out


async def _produce_connection(
    opts: NativeProduceOptions,
    topic: str,
    quota: int,
    rate: float,
    stats: _Stats,
    stopping: trio.Event,
    producer_name: str,
) -> None:
    """One producer on one connection: send ``quota`` messages (0 = until ``stopping``)."""
    conn = await _connect_to_owner(opts.service_url, topic, opts.token, opts.tls_trust_cert)
    async with conn.stream:
        await conn.send(
            encode_command(
                make_command(
                    "PRODUCER",
                    topic=topic,
                    producer_id=1,
                    request_id=conn.next_request_id(),
                    producer_name=producer_name,
                )
            )
        )
        ok = (await conn.expect(BaseCommand.PRODUCER_SUCCESS)).command.producer_success
        seq = ok.last_sequence_id + 1 if ok.last_sequence_id >= 0 else 0
        per_frame = opts.batch_messages
        templates: dict[int, SendTemplate] = {}

        def template(n: int) -> SendTemplate:
            t = templates.get(n)
            if t is None:
                t = templates[n] = SendTemplate(1, ok.producer_name, n, opts.size, batched=opts.batched)
            return t

        in_flight: deque[tuple[int, int, int]] = deque()  # (first seq, messages, t0 ns)
        window = trio.Semaphore(opts.max_pending)
        all_receipted = trio.Event()
        remaining = quota
        interval_ns = int(per_frame / rate * 1e9) if rate else 0
        next_due = time.perf_counter_ns()
        sent_all = False

        async def read_receipts() -> None:
            while True:
                frame = await conn.next_frame()
                t = frame.type
                if t == BaseCommand.SEND_RECEIPT:
                    r = frame.command.send_receipt
                    if not in_flight or in_flight[0][0] != r.sequence_id:
                        raise ProtocolFailure(f"receipt for sequence id {r.sequence_id} out of order")
                    _, n, t0 = in_flight.popleft()
                    stats.latency.record((time.perf_counter_ns() - t0) / 1000.0, n)
                    stats.messages += n
                    stats.bytes += n * opts.size
                    window.release()
                elif t == BaseCommand.SEND_ERROR:
                    e = frame.command.send_error
                    raise ProtocolFailure(f"send error {e.error}: {e.message}")
                elif t == BaseCommand.CLOSE_PRODUCER:
                    raise ProtocolFailure("the broker closed the producer (topic unloaded or moved)")
                if sent_all and not in_flight:
                    all_receipted.set()
                    return

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_receipts)
                out = bytearray()
                while not stopping.is_set() and (quota == 0 or remaining > 0):
                    await window.acquire()
                    if interval_ns:
                        now = time.perf_counter_ns()
                        if next_due > now:
                            with trio.move_on_at(trio.current_time() + (next_due - now) / 1e9):
                                await stopping.wait()
                            if stopping.is_set():
                                window.release()
                                break
                    # every frame that is due and fits the window goes out in one write
                    out.clear()
                    now = time.perf_counter_ns()
                    wall_ms = int(time.time() * 1000)
                    count = 0
                    while True:
                        n = per_frame if quota == 0 else min(per_frame, remaining)
                        t0 = next_due if interval_ns else now
                        out += template(n).frame(seq, wall_ms)
                        in_flight.append((seq, n, t0))
                        seq += n
                        remaining -= n
                        count += 1
                        if interval_ns:
                            next_due += interval_ns
                        if (
                            count >= 64
                            or len(out) >= 1 << 20
                            or (quota and remaining <= 0)
                            or (interval_ns and next_due > now)
                            or not window.value
                        ):
                            break
                        window.acquire_nowait()
                    await conn.send(out)
                    if not interval_ns:
                        await trio.lowlevel.checkpoint()
                sent_all = True
                if not in_flight:
                    all_receipted.set()
                with trio.move_on_after(30):
                    await all_receipted.wait()
                if in_flight:
                    stats.failures.append(f"{topic}: {len(in_flight)} frames not receipted within 30 s")
                    stats.errors += sum(n for _, n, _ in in_flight)
                    in_flight.clear()
                nursery.cancel_scope.cancel()
        except BaseException:
            # whatever ended this connection, what it had in flight was not receipted
            stats.errors += sum(n for _, n, _ in in_flight)
            raise


def _start_producers(
    nursery: trio.Nursery,
    opts: NativeProduceOptions,
    index: int,
    topics: list[str],
    stats: _Stats,
    stopping: trio.Event,
) -> None:
    conns = opts.workers * opts.connections
    for c in range(opts.connections):
        g = index * opts.connections + c  # global connection number: topics and quotas go round-robin
        quota = 0
        if opts.num_messages:
            quota = opts.num_messages // conns + (1 if g < opts.num_messages % conns else 0)
            if quota == 0:
                continue
        nursery.start_soon(
            _guarded,
            _produce_connection,
            stats,
            opts,
            topics[g % len(topics)],
            quota,
            opts.rate / conns,
            stats,
            stopping,
            f"perf-{os.getpid()}-{c}",
        )


def _produce_worker(opts: NativeProduceOptions, index: int, reports: Any, stop: Any) -> None:
    """A worker process of ``opts.connections`` producers (module docstring)."""
    _run_worker(opts, index, reports, stop, _start_producers)


def _run_worker(
    opts: NativeProduceOptions | NativeConsumeOptions, index: int, reports: Any, stop: Any, start: Callable[..., None]
) -> None:
    """The body of a worker process: resolve partitions, ``start`` the connections, put a
    ``("stats", ...)`` report on ``reports`` every 0.5 s and a last one plus ``("done", index)``
    at the end. The connections stop sending once the parent sets ``stop``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which sets ``stop``
    stats = _Stats()

    async def main() -> None:
        stopping = trio.Event()

        async def watch_stop() -> None:
            # polled: a thread blocked in multiprocessing.Event.wait() that dies with this process
            # stays counted as a sleeper, and the parent's stop.set() then waits for it forever
            while not stop.is_set():  # noqa: ASYNC110 - see above
                await trio.sleep(0.05)
            stopping.set()

        async def report() -> None:
            while True:
                await trio.sleep(0.5)
                reports.put(("stats", *stats.take()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_stop)
            nursery.start_soon(report)
            topics = await _resolve_partitions(opts)
            async with trio.open_nursery() as connections:
                start(connections, opts, index, topics, stats, stopping)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    except Exception as exc:
        stats.failures.append(f"worker {index}: {type(exc).__name__}: {exc}")
    finally:
        reports.put(("stats", *stats.take()))
        reports.put(("done", index))


async def _guarded(fn: Callable[..., Any], stats: _Stats, *args: Any) -> None:
    """Run one connection; a failure is reported, not raised, so the other connections go on."""
    try:
        await fn(*args)
    except (ProtocolFailure, OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
        stats.failures.append(f"{type(exc).__name__}: {exc}")
        stats.errors += 1


async def _resolve_partitions(opts: NativeProduceOptions | NativeConsumeOptions) -> list[str]:
    """The topics to spread connections over: each partitioned topic becomes its partitions."""
    conn = await _open(opts.service_url, opts.token, opts.tls_trust_cert)
    out: list[str] = []
    async with conn.stream:
        for topic in opts.topics:
            n = await _partitions(conn, topic)
            out += [f"{topic}-partition-{i}" for i in range(n)] if n else [topic]
    return out


# ------------------------------------------------------------------------------- consuming


@dataclass(frozen=True)
class NativeConsumeOptions:
    """What ``perf consume --engine native`` was asked to do."""

    service_url: str
    topics: tuple[str, ...]
    subscription: str
    subscription_type: int  # CommandSubscribe.SubType value
    earliest: bool
    num_messages: int
    duration: float
    workers: int
    connections: int
    receiver_queue_size: int
    token: str | None = None
    tls_trust_cert: str | None = None


async def _consume_connection(
    opts: NativeConsumeOptions, topic: str, stats: _Stats, stopping: trio.Event, name: str
) -> None:
    """One consumer: FLOW permits, count every message (batches by their size), ack every 100 ms."""
    conn = await _connect_to_owner(opts.service_url, topic, opts.token, opts.tls_trust_cert)
    async with conn.stream:
        await conn.send(
            encode_command(
                make_command(
                    "SUBSCRIBE",
                    topic=topic,
                    subscription=opts.subscription,
                    subType=opts.subscription_type,
                    consumer_id=1,
                    request_id=conn.next_request_id(),
                    consumer_name=name,
                    initialPosition=1 if opts.earliest else 0,
                )
            )
        )
        await conn.expect(BaseCommand.SUCCESS)
        queue_size = opts.receiver_queue_size
        await conn.send(encode_command(make_command("FLOW", consumer_id=1, messagePermits=queue_size)))
        cumulative = opts.subscription_type in (0, 2)
        to_ack: list[tuple[int, int]] = []
        used = 0

        async def acker() -> None:
            while True:
                await trio.sleep(0.1)
                if not to_ack:
                    continue
                ids = [to_ack[-1]] if cumulative else list(to_ack)
                to_ack.clear()
                await conn.send(
                    encode_command(
                        make_command(
                            "ACK",
                            consumer_id=1,
                            ack_type=1 if cumulative else 0,
                            message_id=[{"ledgerId": lid, "entryId": eid} for lid, eid in ids],
                        )
                    )
                )

        async def stop_when_asked(scope: trio.CancelScope) -> None:
            await stopping.wait()
            await trio.sleep(0.15)  # one more round of the acker for the last acks
            scope.cancel()  # the connection closes next, so a frame cut short here does no harm

        # no timeout around a read: a cancel that lands in a send (FLOW, PONG) would cut a frame
        # on a connection that is still in use
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acker)
            nursery.start_soon(stop_when_asked, nursery.cancel_scope)
            while True:
                frame = await conn.next_frame()
                if frame.type == BaseCommand.MESSAGE:
                    meta = frame.metadata
                    n = meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") else 1
                    raw = frame.raw_metadata_and_payload
                    stats.latency.record((time.time() * 1000.0 - meta.publish_time) * 1000.0, n)
                    stats.messages += n
                    stats.bytes += len(raw) - 4 - _U32.unpack_from(raw, 0)[0]
                    mid = frame.command.message.message_id
                    to_ack.append((mid.ledgerId, mid.entryId))
                    used += n
                    if used >= queue_size // 2:
                        await conn.send(encode_command(make_command("FLOW", consumer_id=1, messagePermits=used)))
                        used = 0
                elif frame.type == BaseCommand.CLOSE_CONSUMER:
                    raise ProtocolFailure("the broker closed the consumer (topic unloaded or moved)")


def _start_consumers(
    nursery: trio.Nursery,
    opts: NativeConsumeOptions,
    index: int,
    topics: list[str],
    stats: _Stats,
    stopping: trio.Event,
) -> None:
    for c in range(opts.connections):
        g = index * opts.connections + c
        if opts.subscription_type == 0 and g >= len(topics):
            continue  # an Exclusive subscription takes one consumer per topic
        nursery.start_soon(
            _guarded,
            _consume_connection,
            stats,
            opts,
            topics[g % len(topics)],
            stats,
            stopping,
            f"perf-{os.getpid()}-{c}",
        )


def _consume_worker(opts: NativeConsumeOptions, index: int, reports: Any, stop: Any) -> None:
    """A worker process of ``opts.connections`` consumers."""
    _run_worker(opts, index, reports, stop, _start_consumers)


# ---------------------------------------------------------------------------------- driver


def read_broker_cpu_seconds(metrics_url: str | None, pid: int | None) -> float | None:
    """The broker process's CPU seconds so far: from ``/proc/<pid>/stat`` when ``pid`` is given,
    else ``process_cpu_seconds_total`` at ``metrics_url``; ``None`` when neither can be read."""
    if pid:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None
    if not metrics_url:
        return None
    try:
        with urllib.request.urlopen(metrics_url, timeout=3) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    m = re.search(r"^process_cpu_seconds_total(?:\{[^}]*\})? ([0-9.eE+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def _drive(
    target: Callable[..., None],
    opts: Any,
    workers: int,
    duration: float,
    num_messages: int,
    add: Callable[[int, int, int, LatencyHistogram], None],
) -> list[str]:
    ctx = multiprocessing.get_context("spawn")
    reports = ctx.Queue(maxsize=10_000)
    stop = ctx.Event()
    procs = [ctx.Process(target=target, args=(opts, i, reports, stop), daemon=True) for i in range(workers)]
    for p in procs:
        p.start()
    failures: list[str] = []
    done = 0
    deadline = time.monotonic() + duration if duration else float("inf")
    total = 0
    try:
        while done < workers:
            if time.monotonic() >= deadline or (num_messages and total >= num_messages):
                stop.set()
            try:
                item = reports.get(timeout=0.2)
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and reports.empty():
                    failures.append("a worker process exited without reporting")
                    break
                continue
            if item[0] == "done":
                done += 1
                continue
            _, messages, nbytes, errors, hist, worker_failures = item
            total += messages
            add(messages, nbytes, errors, hist)
            failures += worker_failures
    except KeyboardInterrupt:
        stop.set()
        failures.append("interrupted")
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=40)
            if p.is_alive():
                p.kill()
    return failures


def run_native_produce(opts: NativeProduceOptions, add: Callable[[int, int, int, LatencyHistogram], None]) -> list[str]:
    """Run the produce workers to completion; ``add`` receives each report (from this process).
    Returns the failures the workers reported (empty when every frame was receipted)."""
    return _drive(_produce_worker, opts, opts.workers, opts.duration, 0, add)


def run_native_consume(opts: NativeConsumeOptions, add: Callable[[int, int, int, LatencyHistogram], None]) -> list[str]:
    """Run the consume workers until ``num_messages`` arrived in total or ``duration`` passed."""
    return _drive(_consume_worker, opts, opts.workers, opts.duration, opts.num_messages, add)
