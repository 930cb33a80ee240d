"""Bookie frame codec, sans-IO: ``[length u32 big-endian][protobuf Request or Response]``.

Encoding is a pure function of the message. Decoding is a ``FrameDecoder`` that is fed bytes as
they arrive and hands back whole frames; it never touches a socket. Rules:

1. The 4-byte length prefix counts the protobuf bytes only. A prefix larger than
   ``max_frame_size`` raises ``FrameTooLarge`` as soon as the prefix is seen (before buffering
   the body) and poisons the decoder: the stream cannot be re-synchronised, every later call
   raises the same error, and the caller must close the connection.
2. A frame whose bytes do not parse as the requested message raises ``MalformedFrame``: bad
   wire format, a missing required field, a ``string`` field that is not UTF-8, or (proto2 enums
   are closed) an operation or status number this protocol does not define, which leaves its
   required field unset. The
   frame has been consumed, so the decoder stays usable; the caller decides whether to answer
   (it has no txnId to answer with) or to close.
3. ``next_frame`` / ``next_request`` / ``next_response`` return ``None`` when no whole frame is
   buffered. Decoding many frames from one ``feed`` is linear in the bytes fed: the buffer is a
   ``bytearray`` read at an offset and compacted only when the consumed prefix is large.
4. The decoder holds at most what was fed and not yet taken; callers bound it by draining
   frames after each ``feed`` (at most one partial frame, <= ``max_frame_size`` + 4, remains).
"""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError, EncodeError

from .._errors import FrameTooLarge, MalformedFrame
from .._utf8 import invalid_utf8_field
from . import bookie_protocol_pb2 as pb

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "encode_frame",
    "encode_request",
    "encode_response",
    "parse_request",
    "parse_response",
]

DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024 + 10 * 1024
"""5 MiB + 10 KiB: the ``nettyMaxFrameSizeBytes`` Pulsar ships in its bookkeeper.conf, so that an
entry holding a Pulsar message of ``maxMessageSize`` (5 MiB) plus its metadata fits in one frame
(BookKeeper's own default, exactly 5 MiB, refuses such an entry)."""

_LEN = struct.Struct(">I")
_COMPACT_AT = 64 * 1024


def encode_frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its length; raises ``ValueError`` above 2**32 - 1 bytes."""
    if len(payload) > 0xFFFFFFFF:
        raise ValueError("payload too large for a u32 length prefix")
    return _LEN.pack(len(payload)) + payload


def _serialize(msg: pb.Request | pb.Response) -> bytes:
    try:
        data: bytes = msg.SerializeToString()
    except EncodeError as exc:  # a required field is unset: a caller bug, named clearly
        raise MalformedFrame(f"cannot encode {type(msg).__name__}: {exc}") from exc
    return data


def encode_request(request: pb.Request) -> bytes:
    """One framed ``Request``. Raises ``MalformedFrame`` when a required field is unset."""
    return encode_frame(_serialize(request))


def encode_response(response: pb.Response) -> bytes:
    """One framed ``Response``. Raises ``MalformedFrame`` when a required field is unset."""
    return encode_frame(_serialize(response))


def parse_request(payload: bytes | bytearray | memoryview) -> pb.Request:
    """Parse unframed ``Request`` bytes; raises ``MalformedFrame`` on anything invalid."""
    msg = pb.Request()
    data = bytes(payload)
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise MalformedFrame(f"not a bookie Request: {exc}") from exc
    if not msg.IsInitialized():  # upb does not enforce proto2 `required` on parse
        missing = msg.FindInitializationErrors()  # type: ignore[attr-defined]  # not in the stubs
        raise MalformedFrame(f"bookie Request lacks required fields: {missing}")
    bad = invalid_utf8_field(msg, data)  # nor UTF-8: the field would read as bytes (see _utf8)
    if bad is not None:
        raise MalformedFrame(f"bookie Request field {bad} is not UTF-8")
    return msg


def parse_response(payload: bytes | bytearray | memoryview) -> pb.Response:
    """Parse unframed ``Response`` bytes; raises ``MalformedFrame`` on anything invalid."""
    msg = pb.Response()
    data = bytes(payload)
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise MalformedFrame(f"not a bookie Response: {exc}") from exc
    if not msg.IsInitialized():
        missing = msg.FindInitializationErrors()  # type: ignore[attr-defined]  # not in the stubs
        raise MalformedFrame(f"bookie Response lacks required fields: {missing}")
    bad = invalid_utf8_field(msg, data)
    if bad is not None:
        raise MalformedFrame(f"bookie Response field {bad} is not UTF-8")
    return msg


class FrameDecoder:
    """Incremental frame decoder; see the module rules. Not thread-safe (one per connection)."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size <= 0:
            raise ValueError("max_frame_size must be positive")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._error: FrameTooLarge | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes. Raises the poisoning ``FrameTooLarge`` if one was seen."""
        if self._error is not None:
            raise self._error
        if self._pos >= _COMPACT_AT and self._pos * 2 >= len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next whole frame's payload (without the prefix), or ``None`` if incomplete.

        Raises ``FrameTooLarge`` (rule 1).
        """
        if self._error is not None:
            raise self._error
        avail = len(self._buf) - self._pos
        if avail < 4:
            return None
        (size,) = _LEN.unpack_from(self._buf, self._pos)
        if size > self.max_frame_size:
            self._error = FrameTooLarge(size, self.max_frame_size)
            raise self._error
        if avail < 4 + size:
            return None
        start = self._pos + 4
        payload = bytes(self._buf[start : start + size])
        self._pos = start + size
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return payload

    def next_request(self) -> pb.Request | None:
        """The next whole frame parsed as a ``Request``, or ``None``; raises ``FrameError``."""
        payload = self.next_frame()
        return None if payload is None else parse_request(payload)

    def next_response(self) -> pb.Response | None:
        """The next whole frame parsed as a ``Response``, or ``None``; raises ``FrameError``."""
        payload = self.next_frame()
        return None if payload is None else parse_response(payload)
