"""Sans-IO framing of the Pulsar binary protocol.

Wire shapes (all integers big-endian)::

    simple   [totalSize u32][cmdSize u32][BaseCommand]
    payload  [totalSize u32][cmdSize u32][BaseCommand]
             ([0x0e02 u16][bemSize u32][BrokerEntryMetadata])?     broker -> consumer only
             ([0x0e01 u16][crc32c u32])?                           absent for protocol < v6
             [metadataSize u32][MessageMetadata][payload]

``totalSize`` counts every byte after itself; the CRC32-C covers everything after the
checksum field, i.e. ``[metadataSize][MessageMetadata][payload]``. That block is what a broker
stores verbatim as one ledger entry, so frames expose it as ``raw_metadata_and_payload`` and
:func:`encode_payload_command_raw` sends it back out with a fresh checksum.

A frame without the 0x0e01 magic is unambiguous: its next field is a metadata size, and a
size starting with the bytes 0x0e01 would exceed any frame limit the decoder accepts.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from crc32c import crc32c
from google.protobuf.message import DecodeError, EncodeError, Message

from .._errors import FrameError, FrameTooLarge, MalformedFrame
from .._utf8 import invalid_utf8_field
from ._errors import ChecksumMismatch
from .pulsar_api_pb2 import BaseCommand, BrokerEntryMetadata, MessageMetadata

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

#: Pulsar's default maxMessageSize (5 MiB) plus the 10 KiB it allows for command and metadata.
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024 + 10 * 1024

# A limit at or above this would make a metadata size starting 0x0e01 indistinguishable from
# the checksum magic.
_MAX_SUPPORTED_FRAME_SIZE = 0x0E01_0000

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_TWO_U32 = struct.Struct(">II")
_MAGIC_U32 = struct.Struct(">HI")

# Keep consumed bytes at the head of the buffer until they are at least this many and at
# least half the buffer, so compaction costs O(1) amortised per byte.
_COMPACT_AT = 64 * 1024


@dataclass(frozen=True, slots=True, eq=False)
class Frame:
    """One decoded frame.

    ``command`` is always a fully initialised BaseCommand (all proto2 ``required`` fields
    present). Every ``string`` field of ``command``, ``metadata`` and ``broker_entry_metadata``
    reads as ``str``: a frame with one that is not UTF-8 is a :class:`MalformedFrame`. For
    payload frames ``metadata`` and ``raw_metadata_and_payload`` are set and the checksum (when
    the frame carried one) has been verified; ``checksum`` is ``None`` when the frame had no
    0x0e01 block. ``size`` is the number of bytes the frame used on the wire.
    """

    command: BaseCommand
    size: int
    metadata: MessageMetadata | None = None
    raw_metadata_and_payload: bytes | None = None
    broker_entry_metadata: BrokerEntryMetadata | None = None
    checksum: int | None = None

    @property
    def type(self) -> int:
        """The ``BaseCommand.Type`` value of the command."""
        return self.command.type

    @property
    def has_payload(self) -> bool:
        """Whether this is a payload frame (SEND, MESSAGE)."""
        return self.raw_metadata_and_payload is not None

    @property
    def payload(self) -> bytes:
        """The message payload after the metadata (a copy); ``b""`` for a simple frame."""
        raw = self.raw_metadata_and_payload
        if raw is None:
            return b""
        (metadata_size,) = _U32.unpack_from(raw, 0)
        return raw[4 + metadata_size :]


class FrameDecoder:
    """Incremental decoder: :meth:`feed` bytes, then call :meth:`next_frame` until ``None``.

    Guarantees: each complete frame is returned exactly once and in order, whatever the way
    the bytes were split across feeds; ``next_frame`` never blocks and never raises anything
    but a :class:`FrameError`; a frame whose totalSize exceeds the limit fails as soon as its
    4-byte size arrives, so the buffer never holds more than one frame plus the last read.
    Work is linear in the bytes fed. After :class:`FrameTooLarge` or a header-level
    :class:`MalformedFrame` the decoder stays failed and re-raises that error.

    The caller drains frames after every feed; the decoder does not bound bytes that are fed
    but never drained.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = DEFAULT_MAX_FRAME_SIZE
        self.set_max_frame_size(max_frame_size)
        self._buf = bytearray()
        self._pos = 0
        self._failed: FrameError | None = None

    def set_max_frame_size(self, max_frame_size: int) -> None:
        """Change the frame limit; it applies from the next call to :meth:`next_frame` on.

        A server starts a connection with a small limit and raises it once the peer has
        authenticated. Frames already returned are unaffected; a buffered partial frame is
        checked against the new limit. Raises ``ValueError`` outside ``[8, 0x0e010000)`` (see
        the module docstring) and leaves the limit unchanged then.
        """
        if not 8 <= max_frame_size < _MAX_SUPPORTED_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be in [8, {_MAX_SUPPORTED_FRAME_SIZE}), got {max_frame_size}")
        self.max_frame_size = max_frame_size

    @property
    def error(self) -> FrameError | None:
        """The error that left the decoder failed for good, or ``None`` while it is usable."""
        return self._failed

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes read from the connection (copies them)."""
        pos, size = self._pos, len(self._buf)
        if pos and (pos == size or (pos >= _COMPACT_AT and pos * 2 >= size)):
            del self._buf[:pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> Frame | None:
        """The next complete frame, or ``None`` when more bytes are needed.

        Raises :class:`FrameTooLarge`, :class:`MalformedFrame` or :class:`ChecksumMismatch`.
        """
        if self._failed is not None:
            raise self._failed
        buf, pos = self._buf, self._pos
        available = len(buf) - pos
        if available < 4:
            return None
        (total,) = _U32.unpack_from(buf, pos)
        if total + 4 > self.max_frame_size:
            return self._fail(FrameTooLarge(total + 4, self.max_frame_size))
        if total < 4:
            return self._fail(MalformedFrame(f"totalSize {total} is smaller than a cmdSize field"))
        if available >= 8:
            (cmd_size,) = _U32.unpack_from(buf, pos + 4)
            if cmd_size > total - 4:
                return self._fail(MalformedFrame(f"cmdSize {cmd_size} does not fit in totalSize {total}"))
        if available < total + 4:
            return None
        end = pos + 4 + total
        self._pos = end  # consume first: a bad frame is skipped, never re-parsed
        # Parse a copy: a view into self._buf would pin it (no resize) for as long as an
        # exception traceback holding that view is alive.
        return _parse_frame(memoryview(buf[pos + 4 : end]), total + 4)

    def _fail(self, error: FrameError) -> NoReturn:
        self._failed = error
        raise error


def _parse_frame(body: memoryview, size: int) -> Frame:
    """Parse ``[cmdSize][BaseCommand][rest]`` (totalSize already stripped)."""
    (cmd_size,) = _U32.unpack_from(body, 0)
    command = _parse_command(body[4 : 4 + cmd_size])
    offset = 4 + cmd_size
    if offset == len(body):
        return Frame(command=command, size=size)

    broker_entry_metadata = None
    if _peek_u16(body, offset) == MAGIC_BROKER_ENTRY_METADATA:
        if offset + 6 > len(body):
            raise MalformedFrame("truncated broker entry metadata header", command=command)
        (bem_size,) = _U32.unpack_from(body, offset + 2)
        start = offset + 6
        if bem_size > len(body) - start:
            raise MalformedFrame(f"broker entry metadata size {bem_size} overruns the frame", command=command)
        broker_entry_metadata = BrokerEntryMetadata()
        _parse_into(broker_entry_metadata, body[start : start + bem_size], "BrokerEntryMetadata", command)
        offset = start + bem_size

    checksum = None
    if _peek_u16(body, offset) == MAGIC_CRC32C:
        if offset + 6 > len(body):
            raise MalformedFrame("truncated checksum field", command=command)
        (checksum,) = _U32.unpack_from(body, offset + 2)
        offset += 6

    raw_view = body[offset:]
    if len(raw_view) < 4:
        raise MalformedFrame(f"payload section of {len(raw_view)} bytes has no metadata size", command=command)
    (metadata_size,) = _U32.unpack_from(raw_view, 0)
    if metadata_size > len(raw_view) - 4:
        raise MalformedFrame(
            f"metadataSize {metadata_size} overruns the frame ({len(raw_view) - 4} bytes left)", command=command
        )
    if checksum is not None:
        actual = crc32c(raw_view)
        if actual != checksum:
            raise ChecksumMismatch(
                f"checksum mismatch: frame says {checksum:#010x}, data has {actual:#010x}", command=command
            )
    raw = bytes(raw_view)
    metadata = MessageMetadata()
    _parse_into(metadata, memoryview(raw)[4 : 4 + metadata_size], "MessageMetadata", command)
    return Frame(
        command=command,
        size=size,
        metadata=metadata,
        raw_metadata_and_payload=raw,
        broker_entry_metadata=broker_entry_metadata,
        checksum=checksum,
    )


def _peek_u16(body: bytes | memoryview, offset: int) -> int | None:
    if offset + 2 > len(body):
        return None
    value: int = _U16.unpack_from(body, offset)[0]
    return value


def _parse_command(data: memoryview) -> BaseCommand:
    command = BaseCommand()
    _parse_into(command, data, "BaseCommand", None)
    return command


def _parse_into(msg: Message, data: memoryview, what: str, command: BaseCommand | None) -> None:
    try:
        msg.ParseFromString(data)  # type: ignore[arg-type]  # stub says bytes; protobuf takes any buffer
    except DecodeError as exc:
        raise MalformedFrame(f"unparsable {what}: {exc}", command=command) from exc
    if not msg.IsInitialized():
        missing = ", ".join(msg.FindInitializationErrors())  # type: ignore[attr-defined]  # not in the stubs
        raise MalformedFrame(f"{what} lacks required fields: {missing}", command=command)
    bad = invalid_utf8_field(msg, data)  # upb would hand this field back as bytes (see _utf8)
    if bad is not None:
        raise MalformedFrame(f"{what} field {bad} is not UTF-8", command=command)


# ---------------------------------------------------------------------------------- encoders


def _serialize(msg: Message, what: str) -> bytes:
    try:
        data: bytes = msg.SerializeToString()
    except EncodeError as exc:
        raise ValueError(f"cannot encode {what}: {exc}") from exc
    return data


def encode_command(command: BaseCommand) -> bytes:
    """Encode a simple frame ``[totalSize][cmdSize][BaseCommand]``.

    Raises ``ValueError`` when the command lacks a required field (the client would reject it).
    """
    cmd = _serialize(command, "BaseCommand")
    return _TWO_U32.pack(len(cmd) + 4, len(cmd)) + cmd


_UINT64 = (1 << 64) - 1
_SEND_RECEIPT = BaseCommand.SEND_RECEIPT


def encode_send_receipt(
    producer_id: int, sequence_id: int, highest_sequence_id: int, ledger_id: int, entry_id: int
) -> bytes:
    """The SEND_RECEIPT frame for a stored SEND, byte for byte what ``encode_command`` writes for
    ``make_command("SEND_RECEIPT", ...)`` with these fields (the ids taken modulo 2^64, so -1
    is written as Pulsar's unsigned -1). One per unbatched message on the broker's publish path,
    so the command is filled field by field: half the cost of the keyword-built ``make_command``.
    Raises ``ValueError`` for an id outside the uint64 range."""
    command = BaseCommand(type=_SEND_RECEIPT)
    receipt = command.send_receipt
    receipt.producer_id = producer_id
    receipt.sequence_id = sequence_id
    receipt.highest_sequence_id = highest_sequence_id
    message_id = receipt.message_id
    message_id.ledgerId = ledger_id & _UINT64
    message_id.entryId = entry_id & _UINT64
    cmd: bytes = command.SerializeToString()
    return _TWO_U32.pack(len(cmd) + 4, len(cmd)) + cmd


_MESSAGE = BaseCommand.MESSAGE


def encode_message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    raw_metadata_and_payload: bytes,
    *,
    partition: int = -1,
    redelivery_count: int = 0,
    ack_set: Sequence[int] | None = None,
) -> bytes:
    """The MESSAGE frame delivering a stored entry, byte for byte what ``encode_payload_command_raw``
    writes for ``make_command("MESSAGE", consumer_id=..., message_id={...}, ...)``: the ids taken
    modulo 2^64, ``partition`` set when >= 0, ``redelivery_count`` when not 0, ``ack_set`` when
    given. One per entry dispatched, so the command is filled field by field rather than built from
    keywords. Raises ``ValueError`` as ``encode_payload_command_raw`` does, or for a field out of
    its range."""
    command = BaseCommand(type=_MESSAGE)
    message = command.message
    message.consumer_id = consumer_id
    message_id = message.message_id
    message_id.ledgerId = ledger_id & _UINT64
    message_id.entryId = entry_id & _UINT64
    if partition >= 0:
        message_id.partition = partition
    if redelivery_count:
        message.redelivery_count = redelivery_count
    if ack_set is not None:
        message.ack_set.extend(ack_set)
    return encode_payload_command_raw(command, raw_metadata_and_payload)


def encode_metadata_and_payload(metadata: MessageMetadata, payload: bytes) -> bytes:
    """Encode the stored-entry block ``[metadataSize][MessageMetadata][payload]``.

    Raises ``ValueError`` when the metadata lacks a required field.
    """
    meta = _serialize(metadata, "MessageMetadata")
    return b"".join((_U32.pack(len(meta)), meta, payload))


def encode_payload_command(
    command: BaseCommand,
    metadata: MessageMetadata,
    payload: bytes,
    *,
    broker_entry_metadata: BrokerEntryMetadata | None = None,
    checksum: bool = True,
) -> bytes:
    """Encode a payload frame (SEND, MESSAGE) from decoded metadata.

    ``checksum=False`` omits the 0x0e01 block, as for peers below protocol v6.
    Raises ``ValueError`` when the command or metadata lacks a required field.
    """
    return encode_payload_command_raw(
        command, encode_metadata_and_payload(metadata, payload), broker_entry_metadata, checksum=checksum
    )


def encode_payload_command_raw(
    command: BaseCommand,
    raw_metadata_and_payload: bytes,
    broker_entry_metadata: BrokerEntryMetadata | None = None,
    *,
    checksum: bool = True,
) -> bytes:
    """Encode a payload frame around a stored ``[metadataSize][metadata][payload]`` block.

    The block is sent verbatim; the CRC32-C is recomputed over it. ``broker_entry_metadata``
    (if given) is inserted before the checksum, which only peers at protocol >= v16 that asked
    for it understand. Raises ``ValueError`` when the command lacks a required field or the
    block's metadata size overruns it (the block is not otherwise parsed).
    """
    raw = raw_metadata_and_payload
    if len(raw) < 4 or _U32.unpack_from(raw, 0)[0] > len(raw) - 4:
        raise ValueError("raw_metadata_and_payload does not start with a valid metadata size")
    cmd = _serialize(command, "BaseCommand")
    parts = [b"", _U32.pack(len(cmd)), cmd]
    if broker_entry_metadata is not None:
        bem = _serialize(broker_entry_metadata, "BrokerEntryMetadata")
        parts.append(_MAGIC_U32.pack(MAGIC_BROKER_ENTRY_METADATA, len(bem)))
        parts.append(bem)
    if checksum:
        parts.append(_MAGIC_U32.pack(MAGIC_CRC32C, crc32c(raw)))
    parts.append(raw)
    total = sum(len(p) for p in parts)
    parts[0] = _U32.pack(total)
    return b"".join(parts)


def stored_entry_block(entry: bytes) -> bytes:
    """The ``[metadataSize][MessageMetadata][payload]`` block of a stored entry.

    Magnetar stores that block alone. Apache Pulsar's broker stores what follows the command in
    the producer's SEND frame, so its entries may start with the producer's ``[0x0e01][crc32c]``
    and, when broker entry metadata interceptors are configured, with
    ``[0x0e02][size][BrokerEntryMetadata]`` before it; both are skipped (the checksum is not
    verified here: the consumer verifies the one sent with the block). An entry without them is
    returned as the same object. Never raises: a header that overruns the entry is left in place
    for the entry's parser to refuse.
    """
    offset = 0
    if _peek_u16(entry, offset) == MAGIC_BROKER_ENTRY_METADATA and len(entry) >= 6:
        (bem_size,) = _U32.unpack_from(entry, 2)
        if bem_size <= len(entry) - 6:
            offset = 6 + bem_size
    if _peek_u16(entry, offset) == MAGIC_CRC32C and len(entry) - offset >= 6:
        offset += 6
    return entry[offset:] if offset else entry


def decode_frame(data: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> Frame:
    """Decode exactly one whole frame (a convenience for tests and stored frames).

    Raises :class:`FrameError` when ``data`` is not exactly one valid frame.
    """
    decoder = FrameDecoder(max_frame_size)
    decoder.feed(data)
    frame = decoder.next_frame()
    if frame is None:
        raise MalformedFrame(f"incomplete frame: {len(data)} bytes")
    if decoder.buffered:
        raise MalformedFrame(f"{decoder.buffered} bytes after the frame")
    return frame


__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "Frame",
    "FrameDecoder",
    "decode_frame",
    "encode_command",
    "encode_metadata_and_payload",
    "encode_payload_command",
    "encode_payload_command_raw",
    "stored_entry_block",
]
