"""The decoder fuzzer's engine, shared by its command line (bench/fuzz_decoders.py, which
describes what is fed and the verdicts) and the fixed-seed slice the test suite runs
(tests/test_fuzz_decoders.py): the input generators, every target (a decoder of bytes from
outside the process with its properties), and `Runner`, which feeds inputs and classifies
outcomes. Inputs derive from ``(seed, target, index)`` only, so any one can be replayed.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import struct
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from crc32c import crc32c

_U32 = struct.Struct(">I")
_MAX_INPUT = 64 * 1024
_DIGITS = re.compile(r"0x[0-9a-fA-F]+|-?\d+")
_MAX_OUTCOMES = 200_000


class PropertyViolation(AssertionError):
    """A decoder returned without error but broke a promise (chunking, round trip, contract)."""


def _norm(text: str, limit: int = 60) -> str:
    return _DIGITS.sub("#", text)[:limit]


def _err_key(exc: BaseException) -> str:
    return f"{type(exc).__name__}:{_norm(str(exc))}"


def _check(ok: object, what: str) -> None:
    if not ok:
        raise PropertyViolation(what)


# ============================================================================ input generation

_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x0E, 0x02, 0x08, 0x0A, 0x10, 0x12, 0x1A)
# Tokens that text and number parsers trip on: non-ASCII digits ("²".isdigit() is True, int() of
# it fails), surrogates and overlong forms (not UTF-8), separators of the text formats.
_TOKENS = (
    "²".encode(),
    "٣".encode(),
    "１".encode(),
    b"\xed\xa0\x80",
    b"\xc0\x80",
    b"\xff",
    b"\t",
    b"\n",
    b"\r\n",
    b'"',
    b"\\",
    b":",
    b"/",
    b"-1",
    b"9" * 20,
    b" ",
    b"\x00",
    b"1_0",
    b"0x10",
    b"NaN",
)
_INTS = (
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    15,
    16,
    17,
    20,
    36,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x3FF,
    0x400,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    0x0E01_0000,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFE,
    0xFFFF_FFFF,
    0x7FFF_FFFF_FFFF_FFFF,
    0x8000_0000_0000_0000,
    0xFFFF_FFFF_FFFF_FFFF,
)


class Gen:
    """Mutations of byte strings, all drawn from one ``random.Random`` (so inputs replay)."""

    def __init__(self, rng: random.Random, seeds: Sequence[bytes]) -> None:
        self.rng = rng
        self.seeds = seeds

    # -------------------------------------------------------------- single mutations

    def _pos(self, buf: bytearray, bounds: Sequence[int]) -> int:
        rng = self.rng
        r = rng.random()
        if bounds and r < 0.45:
            return min(len(buf), rng.choice(bounds) + rng.choice((0, 0, 0, 1, 2, 4, 6, 8)))
        if r < 0.7:
            return rng.randrange(min(len(buf), 40) + 1)
        return rng.randrange(len(buf) + 1)

    def _flip(self, buf: bytearray, bounds: Sequence[int]) -> None:
        if buf:
            for _ in range(self.rng.choice((1, 1, 2, 3, 8))):
                i = self.rng.randrange(len(buf))
                buf[i] ^= 1 << self.rng.randrange(8)

    def _set_byte(self, buf: bytearray, bounds: Sequence[int]) -> None:
        if buf:
            i = min(self._pos(buf, bounds), len(buf) - 1)
            buf[i] = self.rng.choice(_BYTES) if self.rng.random() < 0.6 else self.rng.randrange(256)

    def _set_int(self, buf: bytearray, bounds: Sequence[int]) -> None:
        rng = self.rng
        width = rng.choice((1, 2, 4, 4, 4, 8))
        off = self._pos(buf, bounds)
        r = rng.random()
        if r < 0.45:  # a length that is right, or off by a few: reaches the parser behind it
            value = len(buf) - off - width + rng.choice((0, 0, -1, 1, -4, 4, -8, 8, rng.randint(-64, 64)))
        elif r < 0.85:
            value = rng.choice(_INTS)
        else:
            value = rng.getrandbits(width * 8)
        value &= (1 << (width * 8)) - 1
        buf[off : off + width] = value.to_bytes(width, "big")

    def _truncate(self, buf: bytearray, bounds: Sequence[int]) -> None:
        del buf[self.rng.randrange(len(buf) + 1) :]

    def _delete(self, buf: bytearray, bounds: Sequence[int]) -> None:
        a = self._pos(buf, bounds)
        del buf[a : a + self.rng.choice((1, 2, 4, 8, self.rng.randint(1, 256)))]

    def _insert(self, buf: bytearray, bounds: Sequence[int]) -> None:
        a = self._pos(buf, bounds)
        buf[a:a] = self.rng.randbytes(self.rng.choice((1, 2, 4, 8, self.rng.randint(1, 64))))

    def _duplicate(self, buf: bytearray, bounds: Sequence[int]) -> None:
        if buf:
            a = self.rng.randrange(len(buf))
            b = min(len(buf), a + self.rng.randint(1, 128))
            at = self.rng.randrange(len(buf) + 1)
            buf[at:at] = buf[a:b] * self.rng.choice((1, 1, 2, 16))

    def _splice(self, buf: bytearray, bounds: Sequence[int]) -> None:
        other = self.rng.choice(self.seeds)
        a = self._pos(buf, bounds)
        buf[a:] = other[self.rng.randrange(len(other) + 1) :]

    def _varint(self, buf: bytearray, bounds: Sequence[int]) -> None:
        a = self._pos(buf, bounds)
        n = self.rng.choice((1, 5, 9, 10, 11, 12))
        tail = () if self.rng.random() < 0.5 else (self.rng.randrange(128),)
        buf[a:a] = bytes([self.rng.choice((0xFF, 0x80))] * n + list(tail))

    def _zero(self, buf: bytearray, bounds: Sequence[int]) -> None:
        a = self._pos(buf, bounds)
        n = self.rng.choice((1, 4, 8, 64, 4096))
        if self.rng.random() < 0.5:
            buf[a : a + n] = bytes(len(buf[a : a + n]))
        else:
            buf[a:] = bytes(min(n, _MAX_INPUT - a) if a < _MAX_INPUT else 0)

    def _token(self, buf: bytearray, bounds: Sequence[int]) -> None:
        a = self._pos(buf, bounds) if self.rng.random() < 0.5 else self.rng.randrange(len(buf) + 1)
        token = self.rng.choice(_TOKENS)
        if self.rng.random() < 0.5:
            buf[a:a] = token
        else:
            buf[a : a + len(token)] = token

    def _extend(self, buf: bytearray, bounds: Sequence[int]) -> None:
        n = self.rng.randint(1, 64)
        buf += self.rng.randbytes(n) if self.rng.random() < 0.6 else bytes(n)

    _OPS = (
        "_flip",
        "_flip",
        "_set_byte",
        "_set_int",
        "_set_int",
        "_set_int",
        "_truncate",
        "_delete",
        "_insert",
        "_duplicate",
        "_splice",
        "_varint",
        "_zero",
        "_extend",
        "_token",
        "_token",
    )

    # -------------------------------------------------------------- composite

    def mutate(self, data: bytes | bytearray, bounds: Sequence[int] = (), rounds: int | None = None) -> bytes:
        """``data`` under 1-8 stacked mutations (``rounds`` of them when given), capped in size."""
        buf = bytearray(data)
        for _ in range(rounds if rounds is not None else self.rng.choice((1, 1, 1, 2, 2, 3, 4, 8))):
            getattr(self, self.rng.choice(self._OPS))(buf, bounds)
        del buf[_MAX_INPUT:]
        return bytes(buf)

    def maybe(self, data: bytes, p: float = 0.5) -> bytes:
        """``data`` mutated with probability ``p``, else unchanged."""
        return self.mutate(data) if self.rng.random() < p else data

    def random_bytes(self) -> bytes:
        rng = self.rng
        return rng.randbytes(
            rng.choice((rng.randrange(16), rng.randrange(64), rng.randrange(512), rng.randrange(4096)))
        )


def chunk_plan(rng: random.Random, n: int) -> list[int]:
    """Random positive chunk sizes summing to ``n``: whole, 1-byte, few-byte or arbitrary pieces."""
    if n == 0:
        return []
    mode = rng.randrange(6)
    if mode == 0:
        return [n]
    sizes: list[int] = []
    left = n
    while left:
        if mode == 1 and n <= 600:
            s = 1
        elif mode <= 2:
            s = rng.randint(1, 9)
        elif mode == 3:
            s = rng.randint(1, 64)
        elif mode == 4:
            s = rng.choice((3, 4, 5, 7, 8, 9, 1024, 4096))
        else:
            s = rng.randint(1, n)
        s = min(s, left)
        sizes.append(s)
        left -= s
    return sizes


# ============================================================================ targets


@dataclass(frozen=True)
class Target:
    """One fuzzed decoder (or a few decoders of the same bytes).

    ``setup()`` returns a context with ``seeds`` (valid encodings) and whatever ``build`` needs;
    ``run(ctx, data, rng)`` feeds one input and returns an outcome key; it raises only
    ``expected`` errors (an outcome too) unless it found a crash. ``build(ctx, gen)`` makes a
    structure-aware input; ``fixup(buf)`` recomputes checksums in place after a mutation.
    """

    name: str
    decoders: str
    expected: tuple[type[BaseException], ...]
    setup: Callable[[], Any]
    run: Callable[[Any, bytes, random.Random], str]
    stream: bool = False
    build: Callable[[Any, Gen], bytes] | None = None
    fixup: Callable[[bytearray], None] | None = None


def generate(target: Target, ctx: Any, rng: random.Random) -> bytes:
    """One input for ``target``, a pure function of ``rng``'s state (see the module docstring)."""
    gen = Gen(rng, ctx.seeds)
    r = rng.random()
    if r < 0.08:
        return gen.random_bytes()
    if target.build is not None and r >= 0.56:
        return target.build(ctx, gen)[:_MAX_INPUT]
    pieces = [rng.choice(ctx.seeds) for _ in range(rng.choice((1, 1, 2, 3, 4, 6)) if target.stream else 1)]
    if r < 0.12:
        return b"".join(pieces)
    bounds, at = [], 0
    for p in pieces:
        bounds.append(at)
        at += len(p)
    data = gen.mutate(b"".join(pieces), bounds)
    if target.fixup is not None and rng.random() < 0.5:
        buf = bytearray(data)
        target.fixup(buf)
        data = bytes(buf)
    return data


# ---------------------------------------------------------------------------- Pulsar frames


def _pulsar_common() -> SimpleNamespace:
    from protocols.pulsar import (
        BrokerEntryMetadata,
        MessageMetadata,
        build_batch,
        encode_command,
        encode_metadata_and_payload,
        encode_payload_command,
        encode_payload_command_raw,
        make_command,
    )
    from protocols.pulsar import pulsar_api_pb2 as pb

    topic = "persistent://public/default/fuzz"
    kv = [{"key": "k", "value": "v"}]
    commands = [
        make_command("CONNECT", client_version="fuzz-1.0", protocol_version=21),
        make_command("CONNECTED", server_version="magnetar", protocol_version=21, max_message_size=5 << 20),
        make_command("PING"),
        make_command("PONG"),
        make_command("PRODUCER", topic=topic, producer_id=1, request_id=2, metadata=kv),
        make_command(
            "SUBSCRIBE",
            topic=topic,
            subscription="s",
            subType=pb.CommandSubscribe.Key_Shared,
            consumer_id=3,
            request_id=4,
            keySharedMeta={"keySharedMode": 0},
        ),
        make_command("FLOW", consumer_id=3, messagePermits=1000),
        make_command(
            "ACK",
            consumer_id=3,
            ack_type=pb.CommandAck.Individual,
            message_id=[{"ledgerId": 5, "entryId": 6, "ack_set": [-2, 7], "batch_size": 10}],
        ),
        make_command("LOOKUP", topic=topic, request_id=9, authoritative=True),
        make_command("SEND_RECEIPT", producer_id=1, sequence_id=2, message_id={"ledgerId": 5, "entryId": 6}),
        make_command("ERROR", request_id=1, error=pb.ServiceNotReady, message="not ready"),
        make_command("CLOSE_PRODUCER", producer_id=1, request_id=3),
    ]
    send = make_command("SEND", producer_id=1, sequence_id=7, num_messages=1)
    send3 = make_command("SEND", producer_id=1, sequence_id=8, num_messages=3, highest_sequence_id=10)
    message = make_command("MESSAGE", consumer_id=3, message_id={"ledgerId": 5, "entryId": 6}, redelivery_count=1)
    singles = [
        pb.SingleMessageMetadata(properties=[pb.KeyValue(key="a", value="b")], partition_key="key-a", payload_size=3),
        pb.SingleMessageMetadata(payload_size=4, event_time=17, sequence_id=9),
        pb.SingleMessageMetadata(payload_size=0, compacted_out=True, null_value=True, ordering_key=b"o"),
    ]
    batch = build_batch([(singles[0], b"one"), (singles[1], b"two!"), (singles[2], b"")])
    md = MessageMetadata(
        producer_name="p",
        sequence_id=7,
        publish_time=1_700_000_000_000,
        properties=[pb.KeyValue(key="a", value="b")],
        partition_key="k",
        event_time=5,
    )
    bmd = MessageMetadata(
        producer_name="p",
        sequence_id=8,
        publish_time=1_700_000_000_001,
        num_messages_in_batch=3,
        highest_sequence_id=10,
    )
    zmd = MessageMetadata(
        producer_name="p",
        sequence_id=9,
        publish_time=1_700_000_000_002,
        num_messages_in_batch=3,
        compression=pb.ZLIB,
        uncompressed_size=len(batch),
    )
    marker = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, marker_type=3)
    delayed = MessageMetadata(
        producer_name="p",
        sequence_id=2,
        publish_time=2,
        deliver_at_time=10**13,
        ordering_key=b"ok",
        schema_version=b"\0\0\0\0\0\0\0\1",
    )
    encrypted = MessageMetadata(
        producer_name="p",
        sequence_id=3,
        publish_time=3,
        encryption_algo="RSA",
        encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")],
    )
    lz4 = MessageMetadata(
        producer_name="p",
        sequence_id=4,
        publish_time=4,
        compression=pb.LZ4,
        uncompressed_size=len(batch),
        num_messages_in_batch=3,
    )
    huge = MessageMetadata(
        producer_name="p",
        sequence_id=5,
        publish_time=5,
        compression=pb.ZLIB,
        uncompressed_size=2**32 - 1,
        num_messages_in_batch=3,
    )
    bem = BrokerEntryMetadata(broker_timestamp=1_700_000_000_003, index=42)
    entries = [  # stored entries: [metadataSize][MessageMetadata][payload], with their kind
        ("plain", encode_metadata_and_payload(md, b"hello")),
        ("batch", encode_metadata_and_payload(bmd, batch)),
        ("zlib", encode_metadata_and_payload(zmd, zlib.compress(batch))),
        ("plain", encode_metadata_and_payload(marker, b"")),
        ("plain", encode_metadata_and_payload(delayed, b"x" * 40)),
    ]
    frames = [encode_command(c) for c in commands] + [
        encode_payload_command(send, md, b"hello"),
        encode_payload_command(send3, bmd, batch),
        encode_payload_command(send, md, b"x" * 100, checksum=False),
        encode_payload_command_raw(message, entries[1][1], bem),
        encode_payload_command_raw(message, entries[2][1], bem, checksum=False),
    ]
    return SimpleNamespace(
        seeds=frames,
        commands=[c.SerializeToString() for c in [*commands, send, send3, message]],
        metadatas=[
            md.SerializeToString(),
            bmd.SerializeToString(),
            zmd.SerializeToString(),
            marker.SerializeToString(),
            delayed.SerializeToString(),
            encrypted.SerializeToString(),
            lz4.SerializeToString(),
            huge.SerializeToString(),
        ],
        singles=[s.SerializeToString() for s in singles],
        batch_parts=[
            (singles[0].SerializeToString(), b"one"),
            (singles[1].SerializeToString(), b"two!"),
            (singles[2].SerializeToString(), b""),
        ],
        entries=entries,
        bem=bem.SerializeToString(),
        plain_md=md.SerializeToString(),
    )


def _build_batch(ctx: Any, gen: Gen) -> tuple[bytes, int]:
    """A batch payload with coherent or deliberately wrong sizes, and its true message count."""
    rng = gen.rng
    parts = []
    n = rng.choice((1, 2, 3, 5))
    for _ in range(n):
        meta, payload = rng.choice(ctx.batch_parts)
        meta = gen.maybe(meta, 0.4)
        payload = gen.maybe(payload, 0.2)
        size = len(meta) if rng.random() < 0.9 else rng.choice(_INTS) & 0xFFFF_FFFF
        parts += (_U32.pack(size), meta, payload)
    return b"".join(parts), n


def _build_entry(ctx: Any, gen: Gen) -> bytes:
    """A stored entry whose metadata and payload were mutated inside a correct size prefix."""
    rng = gen.rng
    kind, _ = rng.choice(ctx.entries)
    md = ctx.metadatas[{"plain": 0, "batch": 1, "zlib": 2}[kind]] if rng.random() < 0.8 else rng.choice(ctx.metadatas)
    md = gen.maybe(md, 0.5)
    if kind == "plain":
        payload = gen.maybe(b"hello world", 0.3)
    else:
        payload, _ = _build_batch(ctx, gen)
        if kind == "zlib":
            payload = zlib.compress(payload)
            if rng.random() < 0.3:
                payload = gen.mutate(payload)
    size = len(md) if rng.random() < 0.9 else rng.choice(_INTS) & 0xFFFF_FFFF
    data = _U32.pack(size) + md + payload
    return gen.mutate(data) if rng.random() < 0.15 else data


def _pulsar_wrap(cmd: bytes, raw: bytes | None, bem: bytes | None, checksum: bool) -> bytes:
    parts = [_U32.pack(len(cmd)), cmd]
    if raw is not None:
        if bem is not None:
            parts += (struct.pack(">HI", 0x0E02, len(bem)), bem)
        if checksum:
            parts.append(struct.pack(">HI", 0x0E01, crc32c(raw)))
        parts.append(raw)
    body = b"".join(parts)
    return _U32.pack(len(body)) + body


# what can follow a command when the frame ends early: part of a broker-entry-metadata header, of
# a checksum field, of a metadata size
_PULSAR_TAILS = (
    b"\x0e\x02",
    b"\x0e\x02\x00\x00",
    b"\x0e\x02\x00\x00\x00\x00",
    b"\x0e\x01",
    b"\x0e\x01\x00\x00",
    b"\x0e\x01\x00\x00\x00\x00",
    b"\x00",
    b"\x00\x00\x00",
    b"\x0e\x02\x00\x00\x00\x00\x0e\x01\x00",
)


def _pulsar_build(ctx: Any, gen: Gen) -> bytes:
    rng = gen.rng
    frames = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        cmd = gen.maybe(rng.choice(ctx.commands), 0.5)
        if rng.random() < 0.1:
            body = _U32.pack(len(cmd)) + cmd + rng.choice(_PULSAR_TAILS)
            frames.append(_U32.pack(len(body)) + body)
            continue
        raw = bem = None
        if rng.random() < 0.6:
            raw = _build_entry(ctx, gen)
            if rng.random() < 0.3:
                bem = gen.maybe(ctx.bem, 0.5)
        frame = _pulsar_wrap(cmd, raw, bem, rng.random() < 0.8)
        frames.append(gen.mutate(frame, (0, 4)) if rng.random() < 0.15 else frame)
    return b"".join(frames)


_PULSAR_LIMITS = (5 * 1024 * 1024 + 10 * 1024, 5 * 1024 * 1024 + 10 * 1024, 65536, 512, 64, 8)


def _pulsar_events(data: bytes, chunks: list[int], limit: int, notes: list[str] | None) -> list[tuple]:
    """Feed ``data`` in ``chunks`` and drain after each feed, as the broker does; every frame and
    error in order. Continues past errors that leave the decoder usable."""
    from protocols.pulsar import FrameDecoder, FrameError

    dec = FrameDecoder(limit)
    events: list[tuple] = []
    at = 0
    for n in chunks:
        dec.feed(data[at : at + n])
        at += n
        while True:
            try:
                frame = dec.next_frame()
            except FrameError as exc:
                events.append(("E", type(exc).__name__, str(exc)))
                if dec.error is not None:
                    try:  # promised: a failed decoder stays failed and re-raises that error
                        dec.next_frame()
                    except FrameError as again:
                        _check(again is exc, "a failed decoder raised another error")
                    else:
                        raise PropertyViolation("a failed decoder returned a frame")
                    return events
                _check(dec.buffered <= len(data), "buffered more than fed")
                continue
            if frame is None:
                break
            events.append(
                (
                    "F",
                    frame.size,
                    frame.command.SerializeToString(),
                    frame.raw_metadata_and_payload,
                    frame.checksum,
                    frame.broker_entry_metadata is not None,
                )
            )
            if notes is not None:
                notes.append(_use_pulsar_frame(frame))
    events.append(("end", dec.buffered))
    return events


def _use_pulsar_frame(frame: Any) -> str:
    """What the broker and clients do with a decoded frame; checks the frame's promises."""
    from broker.topics._entries import entry_info, entry_metadata
    from protocols.pulsar import (
        MalformedBatch,
        command_body,
        decode_frame,
        encode_command,
        encode_payload_command_raw,
        split_batch,
        type_name,
    )

    name = type_name(frame.type)
    command_body(frame.command)
    _check(frame.command.IsInitialized(), "frame command lacks required fields")
    if not frame.has_payload:
        again = decode_frame(encode_command(frame.command))
        _check(again.command == frame.command and not again.has_payload, "simple frame round trip")
        return name
    raw = frame.raw_metadata_and_payload
    md = frame.metadata
    _check(md is not None and md.IsInitialized(), "payload frame without initialised metadata")
    _check(entry_metadata(raw) == md, "entry_metadata disagrees with the frame's metadata")
    entry_info(raw)
    note = name + "+payload"
    payload = frame.payload
    if md.HasField("num_messages_in_batch") and md.compression == 0:
        try:
            split_batch(payload, md.num_messages_in_batch)
            note += "+batch"
        except MalformedBatch as exc:
            note += "+" + _err_key(exc)
    again = decode_frame(
        encode_payload_command_raw(frame.command, raw, frame.broker_entry_metadata, checksum=frame.checksum is not None)
    )
    _check(
        again.command == frame.command
        and again.raw_metadata_and_payload == raw
        and again.broker_entry_metadata == frame.broker_entry_metadata,
        "payload frame round trip",
    )
    return note


def _run_pulsar_frames(ctx: Any, data: bytes, rng: random.Random) -> str:
    limit = rng.choice(_PULSAR_LIMITS)
    whole = _pulsar_events(data, [len(data)] if data else [], limit, None)
    notes: list[str] = []
    chunks = chunk_plan(rng, len(data))
    split = _pulsar_events(data, chunks, limit, notes)
    _check(split == whole, f"events depend on chunking ({len(chunks)} chunks)")
    return _summary(whole, notes)


def _summary(events: list[tuple], notes: list[str]) -> str:
    parts = []
    for ev in events[:4]:
        parts.append(
            "F" if ev[0] == "F" else f"{ev[1]}:{_norm(ev[2], 40)}" if ev[0] == "E" else f"end{'+' if ev[1] else ''}"
        )
    tail = "/" + ",".join(sorted(set(notes))) if notes else ""
    return "|".join(parts) + ("|..." if len(events) > 4 else "") + tail


def _run_pulsar_batch(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.pulsar import build_batch, split_batch

    if len(data) < 4:
        count = None
        payload = data
    else:
        (raw_count,) = struct.unpack_from(">i", data)
        count = None if raw_count == -1 else raw_count
        payload = data[4:]
    out = split_batch(payload, count)
    _check(count is None or len(out) == count, "split_batch returned another count than asked")
    again = split_batch(build_batch(out), len(out))
    _check([(m.payload_size, p) for m, p in again] == [(len(p), p) for _, p in out], "batch round trip")
    return f"ok:{min(len(out), 9)}"


def _pulsar_batch_setup() -> SimpleNamespace:
    ctx = _pulsar_common()
    batch = b"".join(_U32.pack(len(m)) + m + p for m, p in ctx.batch_parts)
    one_meta = ctx.batch_parts[1][0]
    ctx.seeds = [
        struct.pack(">i", 3) + batch,
        struct.pack(">i", -1) + batch,
        struct.pack(">i", 1) + _U32.pack(len(one_meta)) + one_meta + b"two!",
    ]
    return ctx


def _pulsar_batch_build(ctx: Any, gen: Gen) -> bytes:
    payload, n = _build_batch(ctx, gen)
    count = gen.rng.choice((n, n, n, -1, n + 1, n - 1, 0, -5, 2**31 - 1))
    return struct.pack(">i", count) + payload


def _entry_setup() -> SimpleNamespace:
    ctx = _pulsar_common()
    ctx.seeds = [e for _, e in ctx.entries]
    return ctx


def _run_pulsar_entry(ctx: Any, data: bytes, rng: random.Random) -> str:
    from broker.topics._entries import entry_info, entry_metadata

    info = entry_info(data)  # promised never to raise
    _check(info.num_messages >= 1, "entry_info counts fewer than one message")
    md = entry_metadata(data)
    return f"ok:batch={info.is_batch}:delay={info.deliver_at_ms is not None}:{md.HasField('partition_key')}"


# ---------------------------------------------------------------------------- Spark rows


def _run_spark_rows(ctx: Any, data: bytes, rng: random.Random) -> str:
    from sinks.spark._rows import rows_from_entry

    rows = rows_from_entry("persistent://public/default/fuzz", 0, 5, 6, data)
    for row in rows:
        _check(len(row) == 8 and isinstance(row[1], bytes), "malformed row")
    return f"ok:{min(len(rows), 9)}"


def _spark_values_setup() -> SimpleNamespace:
    import io

    import fastavro

    from sinks.spark._decode import decoder, value_schema_from_info

    definition = {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "age", "type": "int"},
            {"name": "score", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "long"}},
            {"name": "nick", "type": ["null", "string"]},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "raw", "type": {"type": "fixed", "name": "Raw", "size": 4}},
        ],
    }
    record = {
        "name": "ann",
        "age": 41,
        "score": 2.5,
        "tags": ["x", "yy"],
        "attrs": {"a": 1, "b": -7},
        "nick": None,
        "kind": "B",
        "raw": b"\0\1\2\3",
    }
    json_schema = value_schema_from_info({"type": "JSON", "data": json.dumps(definition)})
    avro_schema = value_schema_from_info({"type": "AVRO", "data": json.dumps(definition)})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(definition), record)
    jrec = dict(record, raw="AAECAw==")
    return SimpleNamespace(
        seeds=[
            json.dumps(jrec).encode(),
            out.getvalue(),
            json.dumps({"name": "x", "tags": [[[1]]]}).encode(),
            b"[" * 10 + b"]" * 10,
        ],
        json=decoder(json_schema),
        avro=decoder(avro_schema),
        width=len(json_schema.columns),
    )


def _spark_values_build(ctx: Any, gen: Gen) -> bytes:
    """Deeply nested JSON (a recursion-depth attack), or an Avro value with huge counts."""
    rng = gen.rng
    if rng.random() < 0.5:
        depth = rng.choice((10, 500, 999, 1000, 5000, 20000))
        opener, closer = rng.choice(((b"[", b"]"), (b'{"a":', b"}"), (b'{"tags":[', b"]}")))
        return opener * depth + rng.choice((b"1", b"", b"[]")) + closer * rng.choice((depth, 0, depth // 2))
    value = bytearray(rng.choice(ctx.seeds[1:2]))
    gen._set_int(value, (0, 4, 8, 16))
    return gen.mutate(bytes(value)) if rng.random() < 0.5 else bytes(value)


def _run_spark_values(ctx: Any, data: bytes, rng: random.Random) -> str:
    a = ctx.json(data)
    b = ctx.avro(data)
    _check(len(a) == ctx.width and len(b) == ctx.width, "decoded row has the wrong width")
    return f"json:{sum(v is not None for v in a)}/avro:{sum(v is not None for v in b)}"


# ---------------------------------------------------------------------------- bookie frames


def _bookie_common() -> SimpleNamespace:
    from protocols.bookkeeper import (
        OperationType,
        StatusCode,
        add_request,
        add_response,
        encode_entry,
        encode_lac,
        encode_request,
        encode_response,
        error_response,
        force_ledger_request,
        force_ledger_response,
        get_bookie_info_request,
        get_bookie_info_response,
        read_lac_request,
        read_lac_response,
        read_request,
        read_response,
        write_lac_request,
        write_lac_response,
    )
    from protocols.bookkeeper import bookie_protocol_pb2 as pb

    entry = encode_entry(5, 6, 5, 70, b"payload bytes")
    lac = encode_lac(5, 6)
    key = b"master-key"
    auth = pb.Request()
    auth.header.version, auth.header.operation, auth.header.txnId = 3, OperationType.AUTH, 11
    auth.authRequest.authPluginName, auth.authRequest.payload = "plugin", b"token"
    tls = pb.Request()
    tls.header.version, tls.header.operation, tls.header.txnId = 3, OperationType.START_TLS, 12
    tls.startTLSRequest.SetInParent()
    entries_of = pb.Request()
    entries_of.header.version, entries_of.header.operation = 3, OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER
    entries_of.header.txnId = 13
    entries_of.getListOfEntriesOfLedgerRequest.ledgerId = 5
    requests = [
        add_request(1, 5, 6, key, entry, context=[("k", "v")]),
        add_request(2, 5, 7, key, entry, recovery=True, write_flags=1, priority=1),
        read_request(3, 5, 6),
        read_request(4, 5, -1, fence=True, master_key=key),
        read_request(5, 5, 7, piggyback=True, previous_lac=6, timeout_ms=100),
        read_lac_request(6, 5),
        write_lac_request(7, 5, 6, key, lac),
        force_ledger_request(8, 5),
        get_bookie_info_request(9),
        auth,
        tls,
        entries_of,
    ]
    responses = [
        add_response(1, StatusCode.EOK, 5, 6),
        add_response(2, StatusCode.EFENCED, 5, 7),
        read_response(3, StatusCode.EOK, 5, 6, body=entry, max_lac=6, lac_update_timestamp=1),
        read_response(4, StatusCode.ENOENTRY, 5, 9),
        read_lac_response(6, StatusCode.EOK, 5, lac_body=lac, last_entry_body=entry),
        write_lac_response(7, StatusCode.EOK, 5),
        force_ledger_response(8, StatusCode.EOK, 5),
        get_bookie_info_response(9, StatusCode.EOK, total_disk_capacity=1 << 40, free_disk_space=1 << 39),
        error_response(auth, StatusCode.EBADREQ),
        error_response(entries_of, StatusCode.EBADREQ),
    ]
    return SimpleNamespace(
        request_bytes=[r.SerializeToString() for r in requests],
        response_bytes=[r.SerializeToString() for r in responses],
        request_seeds=[encode_request(r) for r in requests],
        response_seeds=[encode_response(r) for r in responses],
    )


def _bookie_requests_setup() -> SimpleNamespace:
    ctx = _bookie_common()
    ctx.seeds, ctx.bodies = ctx.request_seeds, ctx.request_bytes
    return ctx


def _bookie_responses_setup() -> SimpleNamespace:
    ctx = _bookie_common()
    ctx.seeds, ctx.bodies = ctx.response_seeds, ctx.response_bytes
    return ctx


def _bookie_build(ctx: Any, gen: Gen) -> bytes:
    rng = gen.rng
    frames = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        body = gen.maybe(rng.choice(ctx.bodies), 0.8)
        size = len(body) if rng.random() < 0.9 else rng.choice(_INTS) & 0xFFFF_FFFF
        frames.append(_U32.pack(size) + body)
    return b"".join(frames)


_BOOKIE_LIMITS = (5 * 1024 * 1024, 5 * 1024 * 1024, 4096, 64, 1)


def _bookie_frames(data: bytes, chunks: list[int], limit: int) -> list[tuple]:
    """Frames (payloads) and errors of ``data`` fed in ``chunks``, as both bookie ends read them."""
    from protocols.bookkeeper import FrameDecoder, FrameError

    dec = FrameDecoder(limit)
    events: list[tuple] = []
    at = 0
    try:
        for n in chunks:
            dec.feed(data[at : at + n])
            at += n
            while (payload := dec.next_frame()) is not None:
                events.append(("F", payload))
    except FrameError as exc:  # FrameTooLarge: the decoder is poisoned for good
        events.append(("E", type(exc).__name__, str(exc)))
        for call in (lambda: dec.feed(b"\0"), dec.next_frame):  # promised: every later call raises it
            try:
                call()
            except FrameError as again:
                _check(again is exc, "a poisoned decoder raised another error")
            else:
                raise PropertyViolation("a poisoned decoder accepted a call")
        return events
    events.append(("end", dec.buffered_bytes))
    return events


def _bookie_messages(data: bytes, limit: int, requests: bool) -> list[str]:
    """Outcomes of ``next_request`` / ``next_response`` on ``data``, fed whole, going on after a
    message that does not parse (the frame is consumed)."""
    from protocols.bookkeeper import FrameDecoder, FrameError, MalformedFrame

    dec = FrameDecoder(limit)
    dec.feed(data)
    out = []
    while True:
        try:
            msg = dec.next_request() if requests else dec.next_response()
        except MalformedFrame as exc:
            out.append(_err_key(exc))
            continue
        except FrameError:
            return out
        if msg is None:
            return out
        out.append("ok")


def _run_bookie(ctx: Any, data: bytes, rng: random.Random, parse: Callable[[bytes], str]) -> str:
    limit = rng.choice(_BOOKIE_LIMITS)
    whole = _bookie_frames(data, [len(data)] if data else [], limit)
    split = _bookie_frames(data, chunk_plan(rng, len(data)), limit)
    _check(split == whole, "bookie frames depend on chunking")
    notes = [parse(ev[1]) for ev in whole if ev[0] == "F"]
    parsed = _bookie_messages(data, limit, parse is _parse_request)
    _check(
        [n if n.startswith("MalformedFrame") else "ok" for n in notes] == parsed,
        "next_request/next_response differ from next_frame + parse",
    )
    return _summary([ev if ev[0] != "F" else ("F",) for ev in whole], notes)


def _parse_request(payload: bytes) -> str:
    """The bookie server's path: parse, find the sub-request, answer EBADREQ when it cannot serve."""
    from protocols.bookkeeper import (
        DigestMismatch,
        MalformedFrame,
        StatusCode,
        encode_response,
        error_response,
        operation_of,
        parse_request,
        request_body,
    )
    from protocols.bookkeeper import bookie_protocol_pb2 as pb

    try:
        req = parse_request(payload)
    except MalformedFrame as exc:
        return _err_key(exc)
    body = request_body(req)
    op = operation_of(req)
    encode_response(error_response(req, StatusCode.EBADREQ))  # must always encode
    note = f"op{int(op)}:{'body' if body is not None else 'nobody'}"
    if isinstance(body, pb.AddRequest):
        from protocols.bookkeeper import decode_entry

        try:
            decode_entry(body.body, body.ledgerId, body.entryId)
        except DigestMismatch as exc:
            note += ":" + _err_key(exc)
    return note


def _parse_response(payload: bytes) -> str:
    """The client's path: parse, find the sub-response, verify bodies it carries."""
    from protocols.bookkeeper import (
        DigestMismatch,
        MalformedFrame,
        decode_entry,
        decode_lac,
        operation_of,
        parse_response,
        response_body,
    )

    try:
        resp = parse_response(payload)
    except MalformedFrame as exc:
        return _err_key(exc)
    body = response_body(resp)
    note = f"op{int(operation_of(resp))}:{'body' if body is not None else 'nobody'}"
    try:
        if resp.HasField("readResponse") and resp.readResponse.HasField("body"):
            decode_entry(resp.readResponse.body, resp.readResponse.ledgerId, resp.readResponse.entryId)
        if resp.HasField("readLacResponse"):
            r = resp.readLacResponse
            if r.HasField("lacBody"):
                decode_lac(r.lacBody, r.ledgerId)
            if r.HasField("lastEntryBody"):
                decode_entry(r.lastEntryBody, r.ledgerId)
    except DigestMismatch as exc:
        note += ":" + _err_key(exc)
    return note


# ---------------------------------------------------------------------------- digests


def _digest_setup() -> SimpleNamespace:
    from protocols.bookkeeper import encode_entry, encode_lac

    entries = [
        encode_entry(1, 0, -1, 5, b"hello"),
        encode_entry(2**40, 7, 6, 100, b"x" * 64),
        encode_entry(0, 0, -1, 0, b""),
        encode_entry(-1, -1, -1, -1, b"\0" * 20),
    ]
    return SimpleNamespace(seeds=[*entries, encode_lac(5, 4), encode_lac(2**62, -1)])


def _digest_fixup(buf: bytearray) -> None:
    if len(buf) == 20:
        buf[16:20] = _U32.pack(crc32c(bytes(buf[:16])))
    elif len(buf) >= 36:
        buf[32:36] = _U32.pack(crc32c(bytes(buf[36:]), crc32c(bytes(buf[:32]))))


def _run_digest(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.bookkeeper import (
        DigestMismatch,
        decode_entry,
        decode_lac,
        encode_entry,
        encode_lac,
        peek_entry_header,
    )

    out = []
    try:
        h = peek_entry_header(data)
        out.append("hdr")
    except DigestMismatch as exc:
        h = None
        out.append(_err_key(exc))
    try:
        d = decode_entry(data)
        _check(h is not None and (d.ledger_id, d.entry_id) == (h.ledger_id, h.entry_id), "decode vs peek")
        _check(
            encode_entry(d.ledger_id, d.entry_id, d.last_add_confirmed, d.length, d.payload) == data, "entry round trip"
        )
        for ledger_id, entry_id in ((d.ledger_id, d.entry_id + 1), (d.ledger_id ^ 1, d.entry_id)):
            try:
                decode_entry(data, ledger_id, entry_id)
                raise PropertyViolation("decode_entry accepted the wrong ids")
            except DigestMismatch:
                pass
        out.append("entry")
    except DigestMismatch as exc:
        out.append(_err_key(exc))
    try:
        lac = decode_lac(data)
        ledger_id = struct.unpack_from(">q", data)[0]
        _check(encode_lac(ledger_id, lac) == data, "LAC round trip")
        try:
            decode_lac(data, ledger_id ^ 1)
            raise PropertyViolation("decode_lac accepted the wrong ledger")
        except DigestMismatch:
            pass
        out.append("lac")
    except DigestMismatch as exc:
        out.append(_err_key(exc))
    return "|".join(out)


# ---------------------------------------------------------------------------- ledger metadata, cookies


def _ledger_metadata_setup() -> SimpleNamespace:
    from protocols.bookkeeper import DigestType, LedgerMetadata, LedgerState, Segment

    a = LedgerMetadata(
        3,
        2,
        2,
        (Segment(0, ("b1:3181", "b2:3181", "b3:3181")),),
        password=b"pw",
        ctime_ms=1_700_000_000_000,
        custom_metadata={"application": b"pulsar", "component": b"ml"},
    )
    b = a.with_segment(10, ("b1:3181", "b4:3181", "b3:3181")).closed(20, 4096)
    c = LedgerMetadata(1, 1, 1, (Segment(0, ("b1:3181",)),), state=LedgerState.IN_RECOVERY, digest_type=DigestType.HMAC)
    seeds = [m.encode() for m in (a, b, c)]
    return SimpleNamespace(seeds=seeds, bodies=[s[s.index(b"\n") + 1 :] for s in seeds])


_LM_VERSIONS = (*(b"3\n",) * 6, b"2\n", b"03\n", b"x\n", b"12345678901\n", b"3")
_LM_HEADERS = (*(b"BookieMetadataFormatVersion\t" + v for v in _LM_VERSIONS), b"BookieMetadataFormat\t3\n")


def _random_ledger_metadata(rng: random.Random) -> bytes:
    """A LedgerMetadataFormat with small random values: most break an invariant."""
    from protocols.bookkeeper import ledger_metadata_pb2 as lpb

    pick = rng.choice
    fmt = lpb.LedgerMetadataFormat(
        quorumSize=pick((0, 1, 2, 3)),
        ensembleSize=pick((0, 1, 2, 3)),
        length=pick((0, 0, 100, -1)),
        state=pick((1, 2, 3, 3)),
        lastEntryId=pick((-2, -1, -1, 0, 5, 100)),
        password=b"pw",
    )
    if rng.random() < 0.7:
        fmt.ackQuorumSize = pick((0, 1, 2, 3))
    if rng.random() < 0.5:
        fmt.digestType = pick((1, 2, 3, 4))
    bookies = ("b1:1", "b2:1", "b3:1")
    for _ in range(pick((0, 1, 1, 2, 3))):
        # mostly an ensemble of the right size (so that the later invariants are reached)
        size = fmt.ensembleSize if rng.random() < 0.7 else pick((0, 1, 2, 3))
        members = rng.sample(bookies, size) if rng.random() < 0.8 else [pick(bookies) for _ in range(size)]
        fmt.segment.add(firstEntryId=pick((0, 0, 1, 5, 5, 10, 200, -1)), ensembleMember=members)
    if rng.random() < 0.3:
        fmt.customMetadata.add(key=pick(("k", "application")), value=rng.randbytes(3))
    return fmt.SerializePartialToString()


def _ledger_metadata_build(ctx: Any, gen: Gen) -> bytes:
    if gen.rng.random() < 0.5:
        body = _random_ledger_metadata(gen.rng)
        size = max(0, len(body) + gen.rng.choice((0, 0, 0, 0, 1, -1)))
        prefix = _wire_varint(size) if gen.rng.random() < 0.95 else b"\xff" * gen.rng.choice((1, 10, 11))
        return gen.rng.choice(_LM_HEADERS) + prefix + body
    body = gen.rng.choice(ctx.bodies)
    i = 1 if body[0] < 0x80 else 2  # skip the varint length prefix
    body = gen.mutate(body[i:])
    prefix = bytearray()
    n = len(body)
    while n >= 0x80:
        prefix.append((n & 0x7F) | 0x80)
        n >>= 7
    prefix.append(n)
    return b"BookieMetadataFormatVersion\t3\n" + bytes(prefix) + body


def _run_ledger_metadata(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.bookkeeper import LedgerMetadata

    md = LedgerMetadata.decode(data)
    _check(LedgerMetadata.decode(md.encode()) == md, "ledger metadata round trip")
    return f"ok:{md.state.name}:{len(md.segments)}"


def _cookie_setup() -> SimpleNamespace:
    from protocols.bookkeeper import Cookie
    from protocols.bookkeeper import ledger_metadata_pb2 as lpb

    cookies = [Cookie("bookie-1:3181", "/data/journal", ("/data/l1", "/data/l2"), "inst-1"), Cookie("b", "/j", ())]
    seeds = [c.encode() for c in cookies]  # BookKeeper's text form
    bodies = [
        lpb.CookieFormat(
            bookieHost=c.bookie_id,
            journalDir=c.journal_dir,
            ledgerDirs="\t".join([str(len(c.ledger_dirs)), *c.ledger_dirs]),
        ).SerializeToString()
        for c in cookies
    ]  # earlier Magnetar's binary form
    seeds += [b"MagnetarCookieVersion\t1\n" + b for b in bodies] + [b"3\nb:1\n/j\n1\t/l\n"]
    return SimpleNamespace(seeds=seeds, bodies=bodies, texts=[s[2:] for s in seeds[:2]])


# what a decimal count or id field may hold instead of ASCII digits
_COUNTS = ("0", "1", "2", "01", "-1", "+1", " 1", "1 ", "", "²", "٣", "１", "1_0", "9" * 20)


def _registration_setup() -> SimpleNamespace:
    from protocols.bookkeeper import BOOKIE_RPC, BookieServiceInfo, Endpoint

    info = BookieServiceInfo(
        (
            Endpoint("bookie", "10.0.0.1", 3181, BOOKIE_RPC, ("a",), ("tls",)),
            Endpoint("httpserver", "10.0.0.1", 8000, "http"),
        ),
        {"k": "v"},
    )
    return SimpleNamespace(seeds=[info.encode(), b"", b'{"host": "h", "port": 1, "httpUrls": ["http://0.0.0.0:8"]}'])


def _run_registration(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.bookkeeper import BookieServiceInfo

    info = BookieServiceInfo.decode(data, "b:1")
    if info.endpoints or info.properties:  # an empty one encodes to b"": the id's address, as in BookKeeper
        _check(BookieServiceInfo.decode(info.encode(), "b:1") == info, "service info round trip")
    return f"ok:{len(info.endpoints)}:{info.rpc_address() is not None}"


def _v2_setup() -> SimpleNamespace:
    import struct

    from protocols.bookkeeper import encode_entry

    def header(op: int, flags: int) -> bytes:
        return struct.pack(">i", 2 << 24 | op << 16 | flags)

    key = bytes(20)
    return SimpleNamespace(
        seeds=[
            header(1, 2) + key + encode_entry(1, 2, 1, 9, b"p"),
            header(2, 0) + struct.pack(">qq", 1, -1),
            header(2, 1) + struct.pack(">qq", 1, -1) + key,
        ]
    )


def _run_v2(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.bookkeeper import parse_v2_request

    req = parse_v2_request(data)
    return f"ok:{req.op.name}:{int(req.flags)}"


def _cookie_build(ctx: Any, gen: Gen) -> bytes:
    from protocols.bookkeeper import ledger_metadata_pb2 as lpb

    rng = gen.rng
    if rng.random() < 0.5:  # the ledger dirs field: "<count>\t<dir>\t<dir>..."
        dirs = ["/d1", "/d2", "", "/d\t3"][: rng.choice((0, 1, 2, 4))]
        ledger_dirs = "\t".join([rng.choice(_COUNTS), *dirs])
        fmt = lpb.CookieFormat(bookieHost="b:1", journalDir="/j", ledgerDirs=ledger_dirs)
        if rng.random() < 0.5:
            from google.protobuf import text_format

            return f"{rng.choice(('5', '4', '3', '2', '05', 'x'))}\n{text_format.MessageToString(fmt)}".encode()
        return b"MagnetarCookieVersion\t1\n" + fmt.SerializeToString()
    if rng.random() < 0.5:
        return b"5\n" + gen.mutate(rng.choice(ctx.texts))
    return b"MagnetarCookieVersion\t1\n" + gen.mutate(rng.choice(ctx.bodies))


def _run_cookie(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.bookkeeper import Cookie

    c = Cookie.decode(data)
    _check(Cookie.decode(c.encode()) == c, "cookie round trip")
    return f"ok:{len(c.ledger_dirs)}:{bool(c.instance_id)}"


# ---------------------------------------------------------------------------- journal


def _journal_setup() -> SimpleNamespace:
    from bookie.journal import AddEntry, ExplicitLac, FenceLedger, MasterKey, Padding
    from bookie.journal._codec import encode_record

    recs = [
        AddEntry(5, 6, b"entry-bytes" * 3),
        AddEntry(5, 7, b""),
        FenceLedger(5),
        ExplicitLac(5, 6, b"lac-body"),
        ExplicitLac(9, -1),
        MasterKey(5, b"key"),
        Padding(9),
        Padding(40),
    ]
    return SimpleNamespace(seeds=[encode_record(r) for r in recs] + [bytes(24)])


def _journal_build(ctx: Any, gen: Gen) -> bytes:
    """Records whose kind and body length disagree (or whose kind is unknown), checksummed."""
    rng = gen.rng
    out = bytearray()
    for _ in range(rng.choice((1, 2, 3, 4))):
        if rng.random() < 0.5:
            out += rng.choice(ctx.seeds)
            continue
        kind = rng.choice((1, 2, 3, 4, 5, 0, 6, 255))
        body = bytes([kind]) + rng.randbytes(rng.choice((0, 7, 8, 9, 15, 16, 17, 40)))
        size = len(body).to_bytes(4, "big")
        out += crc32c(body, crc32c(size)).to_bytes(4, "big") + size + body
    if rng.random() < 0.3:
        out += bytes(rng.choice((1, 7, 8, 64)))  # a preallocated tail
    return bytes(out)


def _journal_fixup(buf: bytearray) -> None:
    """Recompute the CRC of every record whose length fits, so that mutations of kinds and bodies
    get past the checksum."""
    pos = 0
    while pos + 8 <= len(buf):
        (length,) = _U32.unpack_from(buf, pos + 4)
        if not 1 <= length <= len(buf) - pos - 8:
            return
        end = pos + 8 + length
        buf[pos : pos + 4] = _U32.pack(crc32c(bytes(buf[pos + 8 : end]), crc32c(bytes(buf[pos + 4 : pos + 8]))))
        pos = end


def _journal_stream(data: bytes, chunks: list[int]) -> tuple[list, Any]:
    """Journal replay's streaming loop (``bookie.journal._files._scan_file``) over memory."""
    from bookie.journal._codec import DecodeStop, StopReason, decode_record

    buf = bytearray()
    base = pos = at = 0
    eof = False
    out = []
    sizes = iter(chunks)
    while True:
        res = decode_record(buf, pos, final=eof)
        if not isinstance(res, DecodeStop):
            record, pos = res
            out.append((base + pos, record))
            continue
        if res.reason is StopReason.NEED_MORE:
            _check(not eof, "NEED_MORE on final input")
            del buf[:pos]
            base += pos
            pos = 0
            n = next(sizes, 0)
            if n:
                buf += data[at : at + n]
                at += n
            else:
                eof = True
            continue
        if res.reason is StopReason.ZERO_TAIL and (any(buf[pos:]) or any(data[at:])):
            res = DecodeStop(StopReason.BAD_LENGTH, pos, "zeroed hole followed by non-zero data")
        return out, (res.reason, base + res.offset)


def _run_journal(ctx: Any, data: bytes, rng: random.Random) -> str:
    from bookie.journal import Padding
    from bookie.journal._codec import encode_record, scan_records

    whole = scan_records(data)
    records, stop = _journal_stream(data, chunk_plan(rng, len(data)))
    _check(
        records == whole.records and stop == (whole.stop.reason, whole.stop.offset),
        "streaming replay differs from scan_records",
    )
    start = 0
    for end, record in whole.records:
        _check(start < end <= len(data), "record offsets out of order")
        if not isinstance(record, Padding):
            _check(encode_record(record) == data[start:end], "journal record round trip")
        start = end
    _check(whole.stop.offset == start, "stop offset is not where the last record ended")
    kinds = sorted({type(r).__name__ for _, r in whole.records})
    return f"{whole.stop.reason.name}:{min(len(whole.records), 5)}:{','.join(kinds)}"


def _journal_headers_setup() -> SimpleNamespace:
    from bookie.journal import LogMark
    from bookie.journal._codec import encode_file_header, encode_last_mark

    return SimpleNamespace(
        seeds=[
            encode_file_header(0x18F0_0000_0001),
            encode_file_header(0),
            encode_file_header(0x18F0_0000_0002, LogMark(0x18F0_0000_0001, 4096)),
            encode_last_mark(LogMark(0x18F0_0000_0001, 4096)),
            encode_last_mark(LogMark(0, 0)),
        ]
    )


def _journal_headers_fixup(buf: bytearray) -> None:
    if len(buf) == 28:
        buf[24:28] = _U32.pack(crc32c(bytes(buf[:24])))
    elif len(buf) >= 20:
        buf[16:20] = _U32.pack(crc32c(bytes(buf[:16])))
        if len(buf) >= 40 and buf[20] & 1:  # the predecessor declaration, half of the time
            buf[36:40] = _U32.pack(crc32c(bytes(buf[20:36])))


def _run_journal_headers(ctx: Any, data: bytes, rng: random.Random) -> str:
    from bookie.journal import JournalFormatError
    from bookie.journal._codec import decode_file_header, decode_file_prev, decode_last_mark, encode_last_mark

    out = []
    try:
        out.append(f"file:{decode_file_header(data) & 0xF}")
        prev = decode_file_prev(data)  # only on a header decode_file_header accepted
        out.append("prev" if prev is not None else "noprev")
    except JournalFormatError as exc:
        out.append(_err_key(exc))
    try:
        mark = decode_last_mark(data)
        _check(decode_last_mark(encode_last_mark(mark)) == mark, "lastMark round trip")
        out.append("mark")
    except JournalFormatError as exc:
        out.append(_err_key(exc))
    return "|".join(out)


# ---------------------------------------------------------------------------- entry logs


def _entry_log_setup() -> SimpleNamespace:
    from bookie.storage._entry_log_codec import HEADER_SIZE, LogHeader, encode_header, encode_ledgers_map, encode_record

    records = encode_record(5, 0, b"a" * 30) + encode_record(5, 1, b"") + encode_record(7, 0, b"bb" * 9)
    ledgers = {5: 20 + 30 + 20, 7: 20 + 18}
    rolled = (
        encode_header(LogHeader(1, HEADER_SIZE + len(records), len(ledgers))) + records + encode_ledgers_map(ledgers)
    )
    crashed = encode_header(LogHeader()) + records + encode_record(9, 3, b"torn")[:-2]
    empty_map = encode_header(LogHeader(1, HEADER_SIZE, 0))
    return SimpleNamespace(seeds=[rolled, crashed, empty_map, records, encode_ledgers_map({1: 2, 3: 4, 5: 6})])


def _entry_log_build(ctx: Any, gen: Gen) -> bytes:
    """A rolled log whose ledgers-map records have mutated counts, items and sizes."""
    from bookie.storage._entry_log_codec import (
        HEADER_SIZE,
        INVALID_LEDGER_ID,
        LEDGERS_MAP_ENTRY_ID,
        LogHeader,
        encode_header,
        encode_record,
    )

    rng = gen.rng
    records = ctx.seeds[3]
    maps = []
    total = 0
    for _ in range(rng.choice((1, 1, 2, 3))):
        n = rng.choice((0, 1, 2, 3))
        payload = _U32.pack(n if rng.random() < 0.8 else rng.choice(_INTS) & 0xFFFF_FFFF)
        payload += b"".join(struct.pack(">QQ", rng.randrange(1, 50), rng.randrange(100)) for _ in range(n))
        total += n
        if rng.random() < 0.3:
            payload = payload[: rng.randrange(len(payload) + 1)]
        maps.append(encode_record(INVALID_LEDGER_ID, LEDGERS_MAP_ENTRY_ID, payload))
    count = total if rng.random() < 0.7 else rng.choice((0, 1, total + 1, 2**32 - 1))
    offset = HEADER_SIZE + len(records) + (0 if rng.random() < 0.8 else rng.randint(-30, 30))
    data = encode_header(LogHeader(1, max(0, offset), count)) + records + b"".join(maps)
    return gen.mutate(data, (0, 8, 16, HEADER_SIZE + len(records))) if rng.random() < 0.3 else data


def _entry_log_scan(data: bytes, end: int | None, chunks: list[int]) -> list[tuple]:
    """The bookie's log scan loop (``EntryLogger._scan``) over memory, records as it yields them."""
    from bookie.storage._entry_log_codec import HEADER_SIZE, decode_record_at

    buf = bytearray()
    base = HEADER_SIZE
    at = HEADER_SIZE
    out = []
    sizes = iter(chunks)
    while True:
        n = next(sizes, 0)
        piece = data[at : at + n]
        at += n
        if not piece:
            return out
        buf += piece
        pos = 0
        while True:
            if end is not None and base + pos >= end:
                return out
            rec = decode_record_at(buf, pos)
            if rec is None:
                break
            lid, eid, pstart, rend = rec
            out.append((base + pos, lid, eid, bytes(buf[pstart:rend])))
            pos = rend
        del buf[:pos]
        base += pos


def _run_entry_log(ctx: Any, data: bytes, rng: random.Random) -> str:
    from bookie.storage import CorruptLogError
    from bookie.storage._entry_log_codec import (
        HEADER_SIZE,
        MAGIC,
        decode_header,
        decode_ledgers_map,
        decode_record_at,
        iter_records,
    )

    notes = []
    if data[:4] != MAGIC:  # a bare run of records (or a map read at its offset)
        try:
            decode_header(data)
            raise PropertyViolation("decode_header accepted a log without its magic")
        except CorruptLogError as exc:
            notes.append(_err_key(exc))
        recs = list(iter_records(data, 0))
        rec = decode_record_at(data, rng.randrange(len(data) + 2))
        _check(rec is None or rec[3] <= len(data), "record past the end")
        try:
            decode_ledgers_map(data, rng.choice((0, 1, 2, 3, len(recs), 2**32 - 1)))
            notes.append("map")
        except CorruptLogError as exc:
            notes.append(_err_key(exc))
        return f"records:{min(len(recs), 5)}|" + "|".join(notes)
    try:
        header = decode_header(data)
    except CorruptLogError as exc:
        return _err_key(exc)
    end = header.ledgers_map_offset or None
    recs = [(off, lid, eid, bytes(p)) for off, lid, eid, p in iter_records(data, HEADER_SIZE, end)]
    scanned = _entry_log_scan(data, end, chunk_plan(rng, max(0, len(data) - HEADER_SIZE)))
    # The bookie's scan checks the map offset only where a record starts, so with a header whose
    # map offset cuts a record it also yields that record; iter_records stops before it.
    straddles = (
        end is not None
        and len(scanned) == len(recs) + 1
        and scanned[-1][0] < end
        and scanned[-1][0] + 20 + len(scanned[-1][3]) > end
    )
    _check(recs == (scanned[:-1] if straddles else scanned), "chunked log scan differs from iter_records")
    if straddles:
        notes.append("straddles-map-offset")
    if header.ledgers_map_offset:
        try:
            ledgers = decode_ledgers_map(data[header.ledgers_map_offset :], header.ledgers_count)
            _check(len(ledgers) == header.ledgers_count, "ledgers map count")
            notes.append("map")
        except CorruptLogError as exc:
            notes.append(_err_key(exc))
    return f"log:{min(len(recs), 5)}|" + "|".join(notes)


# ---------------------------------------------------------------------------- managed-ledger records


def _ml_info_setup() -> SimpleNamespace:
    from protocols.managed_ledger import LedgerInfo, ManagedLedgerInfo, Position

    seeds = [
        ManagedLedgerInfo(
            (LedgerInfo(3, 100, 4096, 1_700_000_000_000), LedgerInfo(9, 0, 0, 0)),
            Position(9, 5),
            {"a": "b", "pulsar.dedup": "on"},
        ).encode(),
        ManagedLedgerInfo().encode(),
        ManagedLedgerInfo((LedgerInfo(1),)).encode(),
    ]
    return SimpleNamespace(seeds=seeds)


def _ml_info_build(ctx: Any, gen: Gen) -> bytes:
    """A ledger list with ledgers out of order, repeated or with negative counts."""
    from protocols.managed_ledger import managed_ledger_pb2 as mpb

    rng = gen.rng
    msg = mpb.ManagedLedgerInfo()
    for _ in range(rng.choice((0, 1, 2, 3))):
        msg.ledgerInfo.add(
            ledgerId=rng.choice((1, 2, 2, 5, -1)),
            entries=rng.choice((0, 3, -1)),
            size=rng.choice((0, 10, -5)),
            timestamp=rng.choice((0, 1)),
        )
    if rng.random() < 0.3:
        msg.terminatedPosition.ledgerId = rng.choice((1, 5))
        msg.terminatedPosition.entryId = rng.choice((-1, 3))
    data = msg.SerializePartialToString()
    return gen.mutate(data) if rng.random() < 0.2 else data


def _run_ml_info(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.managed_ledger import ManagedLedgerInfo

    info = ManagedLedgerInfo.decode(data)
    _check(ManagedLedgerInfo.decode(info.encode()) == info, "ManagedLedgerInfo round trip")
    return f"ok:{min(len(info.ledgers), 5)}:{info.terminated_position is not None}"


def _ml_cursor_setup() -> SimpleNamespace:
    from protocols.managed_ledger import CursorInfo, Position, PositionRange, indexes_to_words

    ranges = (PositionRange(Position(3, 12), Position(3, 15)), PositionRange(Position(4, 0), Position(4, 9)))
    full = CursorInfo(
        Position(3, 10),
        ranges,
        {"pulsar.seq": 41},
        1_700_000_000_000,
        {Position(3, 11): indexes_to_words([0, 2, 63, 64])},
        {"owner": "b1"},
    )
    return SimpleNamespace(seeds=[full.encode(), CursorInfo(Position(-1, -1)).encode()])


def _ml_cursor_build(ctx: Any, gen: Gen) -> bytes:
    """A cursor with ranges that are empty, unsorted or overlapping, and odd batch words."""
    from protocols.managed_ledger import managed_ledger_pb2 as mpb

    rng = gen.rng
    pick = rng.choice
    msg = mpb.ManagedCursorInfo(cursorsLedgerId=-1)
    if rng.random() < 0.8:
        msg.markDeleteLedgerId, msg.markDeleteEntryId = pick((3, 4, -1)), pick((0, 5, -1))
    for _ in range(pick((0, 1, 2, 3))):
        r = msg.individualDeletedMessages.add()
        r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId = pick((3, 4)), pick((0, 5, 9))
        r.upperEndpoint.ledgerId, r.upperEndpoint.entryId = pick((3, 4)), pick((0, 5, 9))
    for _ in range(pick((0, 1, 2))):
        b = msg.batchedEntryDeletionIndexInfo.add()
        b.position.ledgerId, b.position.entryId = pick((3, 4)), pick((1, 2))
        b.deleteSet.extend(pick((-1, 0, 1, 2**63 - 1, -(2**63))) for _ in range(pick((0, 1, 3))))
    data = msg.SerializePartialToString()
    return gen.mutate(data) if rng.random() < 0.2 else data


def _run_ml_cursor(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.managed_ledger import CursorInfo, Position, words_to_indexes

    info = CursorInfo.decode(data)
    _check(CursorInfo.decode(info.encode()) == info, "CursorInfo round trip")
    info.is_deleted(Position(rng.randrange(-2, 20), rng.randrange(-2, 20)))
    for words in list(info.batch_deletes.values())[:4]:
        if len(words) <= 64:
            words_to_indexes(words)
    return f"ok:{min(len(info.individual_deleted), 5)}:{len(info.batch_deletes) > 0}"


# ---------------------------------------------------------------------------- metadata records and paths


def _ur_setup() -> SimpleNamespace:
    from autorecovery._underreplication import encode_ur_record

    return SimpleNamespace(
        seeds=[
            encode_ur_record(["b1:3181", 'q"uo\\te'], 1_700_000_000_000),
            encode_ur_record(["b2:3181"]),
            b'replica: "x"\nunknown: 7\n',
        ]
    )


def _ur_build(ctx: Any, gen: Gen) -> bytes:
    """A lock name (``urL<digits>``, what the auditor lists) in front of a record."""
    rng = gen.rng
    name = ("urL" + rng.choice(_COUNTS) + rng.choice(("", "0", "7"))).encode()
    return name[:24].ljust(24, b"\n") + gen.maybe(rng.choice(ctx.seeds), 0.3)


def _run_ur(ctx: Any, data: bytes, rng: random.Random) -> str:
    from autorecovery._underreplication import _ledger_id_of, decode_ur_record, encode_ur_record

    name = data[:24].decode("utf-8", "replace").rstrip("\n")  # child names come as text
    try:  # returns an id or None for any name: ValueError here is not the record's documented error
        lid = _ledger_id_of(name)
    except Exception as exc:
        raise PropertyViolation(f"the ledger id of lock name {name!r} raised {exc!r}") from exc
    missing, ctime = decode_ur_record(data)
    _check(decode_ur_record(encode_ur_record(missing, ctime)) == (missing, ctime), "UR record round trip")
    return f"ok:{min(len(missing), 3)}:{ctime is not None}:{lid is not None}"


def _paths_setup() -> SimpleNamespace:
    from protocols.bookkeeper import ledger_path, short_ledger_path

    paths = [
        ledger_path("", 0),
        ledger_path("/bk", 1234567890123),
        ledger_path("", 2**63 - 1),
        short_ledger_path("", 1234567890),
        short_ledger_path("/bk", 0),
    ]
    return SimpleNamespace(seeds=[p.encode() for p in paths])


def _run_paths(ctx: Any, data: bytes, rng: random.Random) -> str:
    from protocols.bookkeeper import (
        id_range_of,
        ledger_id_from_path,
        ledger_ids_in,
        ledger_level_children,
        ledger_path,
        short_ledger_id,
        short_ledger_path,
    )

    path = data.decode("utf-8", "replace")
    root = "/bk" if path.startswith("/bk/") else ""
    out = []
    for decode, encode in ((ledger_id_from_path, ledger_path), (short_ledger_id, short_ledger_path)):
        try:
            lid = decode(root, path)
            _check(encode(root, lid) == path, "ledger path round trip")
            out.append("id")
        except ValueError as exc:
            out.append(_err_key(exc))
    names = [n for n in path.split("/") if n][1:]
    for level in range(-1, 6):
        try:
            ledger_level_children(level, names)
        except ValueError:
            _check(not 0 <= level < 5, "a valid level was refused")
    try:
        id_range_of(names[:6])
        out.append("range")
    except ValueError:
        out.append("norange")
    try:
        ledger_ids_in(names[:4], names[4:])
    except ValueError:
        pass
    return "|".join(out)


# ---------------------------------------------------------------------------- UTF-8 twins


def _utf8_setup() -> SimpleNamespace:
    """Serialized messages of every protocol package, each prefixed with its class's index."""
    from protocols.bookkeeper import Cookie, bookie_protocol_pb2, ledger_metadata_pb2
    from protocols.managed_ledger import managed_ledger_pb2
    from protocols.pulsar import pulsar_api_pb2

    pulsar, bookie, ledger_md = _pulsar_common(), _bookie_common(), _ledger_metadata_setup()
    samples = [(pulsar_api_pb2.BaseCommand, c) for c in pulsar.commands]
    samples += [(pulsar_api_pb2.MessageMetadata, m) for m in pulsar.metadatas]
    samples += [(pulsar_api_pb2.SingleMessageMetadata, m) for m in pulsar.singles]
    samples += [(bookie_protocol_pb2.Request, r) for r in bookie.request_bytes]
    samples += [(bookie_protocol_pb2.Response, r) for r in bookie.response_bytes]
    samples += [
        (ledger_metadata_pb2.LedgerMetadataFormat, b[1 if b[0] < 0x80 else 2 :])  # past the size
        for b in ledger_md.bodies
    ]
    samples += [
        (ledger_metadata_pb2.CookieFormat, c.encode()[24:])
        for c in (Cookie("bookie-1:3181", "/data/journal", ("/l1", "/l2"), "inst"),)
    ]
    samples += [(managed_ledger_pb2.ManagedLedgerInfo, s) for s in _ml_info_setup().seeds]
    samples += [(managed_ledger_pb2.ManagedCursorInfo, s) for s in _ml_cursor_setup().seeds]
    classes = sorted({cls for cls, _ in samples}, key=lambda c: c.DESCRIPTOR.full_name)
    return SimpleNamespace(classes=classes, seeds=[bytes([classes.index(cls)]) + data for cls, data in samples])


def _wire_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# valid (empty, ASCII, 2-4 byte sequences, NUL) and invalid: a lone byte, a surrogate, an overlong
# NUL, past U+10FFFF, truncated, a 5-byte form
_TEXTS = (
    b"",
    b"plain",
    "clé ключ 値 😀".encode(),
    b"\x00",
    b"\xff",
    b"\xed\xa0\x80",
    b"\xc0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"ok\xf8\x88\x80\x80\x80",
)


def _wire_occurrence(desc: Any, rng: random.Random, depth: int) -> bytes:
    """One wire occurrence of a field of ``desc`` that is or holds a string, with text that is
    valid, non-ASCII or not UTF-8 at all; empty when ``desc`` has no such field."""
    fields = [f for f in desc.fields if f.type == f.TYPE_STRING or (f.message_type is not None and depth < 4)]
    if not fields:
        return b""
    f = rng.choice(fields)
    if f.type == f.TYPE_STRING:
        body = rng.choice(_TEXTS) if rng.random() < 0.8 else rng.randbytes(rng.randrange(8))
    else:
        parts = rng.choice((1, 1, 2))
        body = b"".join(_wire_occurrence(f.message_type, rng, depth + 1) for _ in range(parts))
    return _wire_varint(f.number << 3 | 2) + _wire_varint(len(body)) + body


def _utf8_build(ctx: Any, gen: Gen) -> bytes:
    """A valid message of a random type with string occurrences appended (a later occurrence
    overrides a singular field and merges into a singular message)."""
    rng = gen.rng
    index = rng.randrange(len(ctx.classes))
    bodies = [s[1:] for s in ctx.seeds if s[0] == index]
    data = rng.choice(bodies) if bodies and rng.random() < 0.8 else b""
    desc = ctx.classes[index].DESCRIPTOR
    for _ in range(rng.choice((1, 1, 2, 3))):
        data += _wire_occurrence(desc, rng, 0)
    return bytes([index]) + (gen.mutate(data) if rng.random() < 0.1 else data)


def _bytes_string_oracle(msg: Any) -> bool:
    """Whether any string field of ``msg``, at any depth, reads as bytes: the plain walk the
    twins replace, kept here as the reference they are checked against."""
    for fd, value in msg.ListFields():
        values = value if fd.is_repeated else (value,)
        if fd.type == fd.TYPE_STRING:
            if any(type(v) is bytes for v in values):
                return True
        elif fd.message_type is not None and any(_bytes_string_oracle(v) for v in values):
            return True
    return False


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _wire_oracle(desc: Any, data: bytes) -> bool:
    """Whether any occurrence of a known string field on the wire, at any depth, is not UTF-8
    (what upb checks for a twin, occurrences that a later one overrides included). ``data``
    parsed without error, so the wire format is well formed."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            size, pos = _varint(data, pos)
            chunk, pos = data[pos : pos + size], pos + size
            field_ = desc.fields_by_number.get(number)
            if field_ is not None and field_.type == field_.TYPE_STRING:
                try:
                    chunk.decode("utf-8")
                except UnicodeDecodeError:
                    return True
            elif field_ is not None and field_.type == field_.TYPE_MESSAGE and _wire_oracle(field_.message_type, chunk):
                return True
        elif wire_type == 3:  # an unknown group: skip to its end
            depth = 1
            while depth:
                key, pos = _varint(data, pos)
                wt = key & 7
                depth += 1 if wt == 3 else -1 if wt == 4 else 0
                if wt == 0:
                    _, pos = _varint(data, pos)
                elif wt == 1:
                    pos += 8
                elif wt == 5:
                    pos += 4
                elif wt == 2:
                    size, pos = _varint(data, pos)
                    pos += size
        else:
            raise PropertyViolation(f"wire type {wire_type} in a message that parsed")
    return False


def _run_utf8(ctx: Any, data: bytes, rng: random.Random) -> str:
    import importlib

    from google.protobuf.message import DecodeError

    if not data:
        return "empty"
    cls = ctx.classes[data[0] % len(ctx.classes)]
    body = data[1:]
    msg = cls()
    try:
        msg.ParseFromString(body)
    except DecodeError:
        return f"unparsable:{cls.__name__}"
    utf8 = importlib.import_module("protocols._utf8")
    verdict = utf8.invalid_utf8_field(msg, body)
    reads_bytes = _bytes_string_oracle(msg)
    _check(verdict is not None or not reads_bytes, f"a {cls.__name__} field reads as bytes, the twin passes")
    _check(
        (verdict is not None) == _wire_oracle(cls.DESCRIPTOR, body),
        f"UTF-8 twin says {verdict!r} for a {cls.__name__}, the wire walk disagrees",
    )
    return f"{cls.__name__}:{'ok' if verdict is None else 'bytes' if reads_bytes else 'overridden'}"


# ---------------------------------------------------------------------------- the table


def all_targets() -> dict[str, Target]:
    from autorecovery._underreplication import decode_ur_record  # noqa: F401 - fail early if moved
    from bookie.journal import JournalFormatError
    from bookie.storage import CorruptLogError
    from protocols.bookkeeper import CookieFormatError, DigestMismatch, MetadataFormatError, RegistrationFormatError
    from protocols.bookkeeper import FrameError as BookieFrameError
    from protocols.managed_ledger import MLFormatError
    from protocols.pulsar import FrameError, MalformedBatch

    def with_run(
        f: Callable[[Any, bytes, random.Random, Callable[[bytes], str]], str], parse: Callable[[bytes], str]
    ) -> Callable[[Any, bytes, random.Random], str]:
        return lambda ctx, data, rng: f(ctx, data, rng, parse)

    def pulsar_fixup(buf: bytearray) -> None:
        # one frame's checksum: find the 0x0e01 magic after the command and re-sum what follows it
        if len(buf) >= 8:
            (total,) = _U32.unpack_from(buf, 0)
            (cmd,) = _U32.unpack_from(buf, 4)
            end = min(len(buf), 4 + total)
            at = 8 + cmd
            if at + 6 <= end and buf[at : at + 2] == b"\x0e\x02":
                at += 6 + _U32.unpack_from(buf, at + 2)[0]
            if at + 6 <= end and buf[at : at + 2] == b"\x0e\x01":
                buf[at + 2 : at + 6] = _U32.pack(crc32c(bytes(buf[at + 6 : end])))

    targets = [
        Target(
            "pulsar_frames",
            "protocols.pulsar FrameDecoder + decode_frame, then command_body, "
            "Frame.payload, entry_metadata, split_batch, re-encode",
            (FrameError,),
            _pulsar_common,
            _run_pulsar_frames,
            stream=True,
            build=_pulsar_build,
            fixup=pulsar_fixup,
        ),
        Target(
            "pulsar_batch",
            "protocols.pulsar split_batch (SingleMessageMetadata)",
            (MalformedBatch,),
            _pulsar_batch_setup,
            _run_pulsar_batch,
            build=_pulsar_batch_build,
        ),
        Target(
            "pulsar_entry",
            "broker.topics._entries entry_metadata / entry_info of stored entries",
            (ValueError,),
            _entry_setup,
            _run_pulsar_entry,
            build=_build_entry,
        ),
        Target(
            "bookie_requests",
            "protocols.bookkeeper FrameDecoder + parse_request, request_body, "
            "error_response, decode_entry of add bodies",
            (BookieFrameError,),
            _bookie_requests_setup,
            with_run(_run_bookie, _parse_request),
            stream=True,
            build=_bookie_build,
        ),
        Target(
            "bookie_responses",
            "protocols.bookkeeper FrameDecoder + parse_response, response_body, "
            "decode_entry / decode_lac of read bodies",
            (BookieFrameError,),
            _bookie_responses_setup,
            with_run(_run_bookie, _parse_response),
            stream=True,
            build=_bookie_build,
        ),
        Target(
            "bookie_digest",
            "protocols.bookkeeper decode_entry, decode_lac, peek_entry_header",
            (DigestMismatch,),
            _digest_setup,
            _run_digest,
            fixup=_digest_fixup,
        ),
        Target(
            "ledger_metadata",
            "protocols.bookkeeper LedgerMetadata.decode",
            (MetadataFormatError,),
            _ledger_metadata_setup,
            _run_ledger_metadata,
            build=_ledger_metadata_build,
        ),
        Target(
            "cookie",
            "protocols.bookkeeper Cookie.decode",
            (CookieFormatError,),
            _cookie_setup,
            _run_cookie,
            build=_cookie_build,
        ),
        Target(
            "journal_records",
            "bookie.journal._codec decode_record (streaming replay) + scan_records",
            (),
            _journal_setup,
            _run_journal,
            stream=True,
            build=_journal_build,
            fixup=_journal_fixup,
        ),
        Target(
            "journal_headers",
            "bookie.journal._codec decode_file_header, decode_file_prev, decode_last_mark",
            (JournalFormatError,),
            _journal_headers_setup,
            _run_journal_headers,
            fixup=_journal_headers_fixup,
        ),
        Target(
            "entry_log",
            "bookie.storage._entry_log_codec decode_header, decode_record_at, iter_records "
            "(chunked scan), decode_ledgers_map",
            (CorruptLogError,),
            _entry_log_setup,
            _run_entry_log,
            build=_entry_log_build,
        ),
        Target(
            "ml_ledger_info",
            "protocols.managed_ledger ManagedLedgerInfo.decode",
            (MLFormatError,),
            _ml_info_setup,
            _run_ml_info,
            build=_ml_info_build,
        ),
        Target(
            "ml_cursor_info",
            "protocols.managed_ledger CursorInfo.decode",
            (MLFormatError,),
            _ml_cursor_setup,
            _run_ml_cursor,
            build=_ml_cursor_build,
        ),
        Target(
            "spark_rows",
            "sinks.spark._rows rows_from_entry (readMode=bookies)",
            (ValueError,),
            _entry_setup,
            _run_spark_rows,
            build=_build_entry,
        ),
        Target(
            "spark_values",
            "sinks.spark._decode JSON and Avro value decoders (never raise)",
            (),
            _spark_values_setup,
            _run_spark_values,
            build=_spark_values_build,
        ),
        Target(
            "ur_record",
            "autorecovery._underreplication decode_ur_record, ledger id of a lock name",
            (ValueError,),
            _ur_setup,
            _run_ur,
            build=_ur_build,
        ),
        Target(
            "utf8_check",
            "the UTF-8 twins of protocols._utf8 (the "
            "string check of every protobuf decoder) against a wire walk and a message walk",
            (),
            _utf8_setup,
            _run_utf8,
            build=_utf8_build,
        ),
        Target(
            "bookie_registration",
            "protocols.bookkeeper BookieServiceInfo.decode (service info, JSON)",
            (RegistrationFormatError,),
            _registration_setup,
            _run_registration,
        ),
        Target(
            "bookie_v2_requests",
            "protocols.bookkeeper parse_v2_request (BookKeeper's v2 packets)",
            (BookieFrameError,),
            _v2_setup,
            _run_v2,
        ),
        Target(
            "ledger_paths",
            "protocols.bookkeeper ledger_id_from_path, short_ledger_id, id_range_of, "
            "ledger_level_children, ledger_ids_in",
            (ValueError,),
            _paths_setup,
            _run_paths,
        ),
    ]
    return {t.name: t for t in targets}


# ============================================================================ running


@dataclass
class Stats:
    """What fuzzing one target found; ``crashes`` holds (signature, index, file, detail)."""

    name: str
    inputs: int = 0
    outcomes: Counter = field(default_factory=Counter)
    crashes: list = field(default_factory=list)
    hangs: list = field(default_factory=list)
    slowest: float = 0.0
    slowest_index: int = -1
    elapsed: float = 0.0

    def merge(self, other: Stats) -> None:
        self.inputs += other.inputs
        for key, n in other.outcomes.items():
            if key in self.outcomes or len(self.outcomes) < _MAX_OUTCOMES:
                self.outcomes[key] += n
        self.crashes += other.crashes
        self.hangs += other.hangs
        if other.slowest > self.slowest:
            self.slowest, self.slowest_index = other.slowest, other.slowest_index
        self.elapsed += other.elapsed


def input_rng(seed: int, name: str, index: int) -> random.Random:
    """The generator of input ``index`` of target ``name``: inputs depend on nothing else."""
    return random.Random(f"{seed}/{name}/{index}")


def _signature(exc: BaseException) -> str:
    if isinstance(exc, PropertyViolation):
        return f"property: {_norm(str(exc), 80)}"
    tb = traceback.extract_tb(exc.__traceback__)
    where = next(
        (f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb) if "fuzz_decoders" not in f.filename), "?"
    )
    return f"{type(exc).__name__} at {where}"


class Runner:
    """Feeds inputs of one target in this process; saves crashing inputs under ``crash_dir``."""

    def __init__(self, target: Target, seed: int, hang_s: float, crash_dir: Path | None, ctx: Any = None) -> None:
        self.target = target
        self.seed = seed
        self.hang_s = hang_s
        self.crash_dir = crash_dir
        self.ctx = ctx if ctx is not None else target.setup()
        self.saved: Counter = Counter()
        for seed_input in self.ctx.seeds:  # warm up: first-call imports must not count as slow inputs
            self.one(seed_input, random.Random(0))

    def input(self, index: int) -> tuple[bytes, random.Random]:
        rng = input_rng(self.seed, self.target.name, index)
        return generate(self.target, self.ctx, rng), rng

    def one(self, data: bytes, rng: random.Random) -> tuple[str, BaseException | None]:
        """(outcome, crash) of one input; the crash is any exception the target does not document."""
        try:
            return self.target.run(self.ctx, data, rng), None
        except self.target.expected as exc:
            return "!" + _err_key(exc), None
        except Exception as exc:
            return "CRASH", exc

    def save(self, kind: str, signature: str, index: int, data: bytes, detail: str) -> str:
        """Write the input and its story; at most three per signature (also across restarts)."""
        if self.crash_dir is None or self.saved[signature] >= 3:
            return ""
        d = self.crash_dir / self.target.name
        d.mkdir(parents=True, exist_ok=True)
        tag = hashlib.sha1(signature.encode()).hexdigest()[:10]
        self.saved[signature] = max(self.saved[signature], len(list(d.glob(f"{kind}-{tag}-*.bin")))) + 1
        if self.saved[signature] > 3:
            return ""
        path = d / f"{kind}-{tag}-{index}.bin"
        path.write_bytes(data)
        path.with_suffix(".txt").write_text(
            f"target: {self.target.name}\nkind: {kind}\nsignature: {signature}\n"
            f"seed: {self.seed}\nindex: {index}\n"
            f"replay: .venv/bin/python bench/fuzz_decoders.py --seed {self.seed} "
            f"--replay {self.target.name}:{index}\n\n{detail}\n"
        )
        return str(path)

    def run(
        self,
        start: int,
        stop: int,
        stats: Stats,
        progress: Any = None,
        report: Callable[[Stats], None] | None = None,
        every: int = 2000,
    ) -> Stats:
        t_start = time.perf_counter()
        for index in range(start, stop):
            if progress is not None:
                progress.value = index
            data, rng = self.input(index)
            state = rng.getstate()
            t0 = time.perf_counter()
            key, crash = self.one(data, rng)
            dt = time.perf_counter() - t0
            if dt > 0.005 and (dt > stats.slowest or dt > self.hang_s):
                # Re-time a new maximum, keep the fastest of three: a busy machine, a GC pause or
                # the other worker must make neither a hang nor the "slowest input" figure.
                for _ in range(2):
                    rng.setstate(state)
                    t0 = time.perf_counter()
                    self.one(data, rng)
                    dt = min(dt, time.perf_counter() - t0)
                if dt > self.hang_s:
                    sig = f"slow input ({dt:.2f} s)"
                    path = self.save("hang", "hang", index, data, f"took {dt:.3f} s (minimum of 3 runs)")
                    stats.hangs.append((sig, index, path, ""))
            if dt > stats.slowest:
                stats.slowest, stats.slowest_index = dt, index
            if crash is not None:
                sig = _signature(crash)
                detail = "".join(traceback.format_exception(crash))
                path = self.save(
                    "property" if isinstance(crash, PropertyViolation) else "crash", sig, index, data, detail
                )
                stats.crashes.append((sig, index, path, detail))
            if key in stats.outcomes or len(stats.outcomes) < _MAX_OUTCOMES:
                stats.outcomes[key] += 1
            stats.inputs += 1
            if report is not None and stats.inputs % every == 0:
                stats.elapsed = time.perf_counter() - t_start
                report(stats)
        stats.elapsed = time.perf_counter() - t_start
        return stats


def fuzz_inline(
    name: str, count: int, seed: int = 1, start: int = 0, hang_s: float = 1.0, crash_dir: Path | None = None
) -> Stats:
    """Fuzz ``name`` for ``count`` inputs in this process (no watchdog): for tests and replays."""
    target = all_targets()[name]
    return Runner(target, seed, hang_s, crash_dir).run(start, start + count, Stats(name))
