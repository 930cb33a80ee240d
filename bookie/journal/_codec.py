"""Journal wire format: records, file header and the lastMark file, as pure functions over bytes.

Nothing here touches a file. The journal writer encodes with these functions; replay decodes with
them; tests exercise every byte of them directly.

Record layout (big-endian)::

    [crc:4][length:4][kind:1][fields...][payload...]

``length`` counts the bytes after itself (kind + fields + payload). ``crc`` is CRC32-C over the
length bytes and the body, so a flipped length is caught as surely as a flipped payload byte.

Kinds and their fields:

    ADD_ENTRY     ledger_id:q  entry_id:q  entry bytes
    FENCE         ledger_id:q
    EXPLICIT_LAC  ledger_id:q  lac:q       opaque explicit-LAC bytes (may be empty)
    MASTER_KEY    ledger_id:q              master key bytes
    PADDING                                zero bytes (fills reserved space)

Decoding rules (why a tail is rejected is always reported):

* 8 zero bytes where a record should start mean "no more records": the rest of a preallocated file
  is zeros. `scan_records` reports ZERO_TAIL if everything after is zero too, else BAD_LENGTH
  (a zeroed hole followed by data is corruption, not the end).
* A length below 1 or above `MAX_RECORD_SIZE` is BAD_LENGTH (garbage; never wait for more bytes).
* Fewer bytes than the length promises: TRUNCATED (only when the caller says the input is final;
  otherwise NEED_MORE so a streaming reader can fetch more).
* A CRC mismatch is BAD_CHECKSUM; an unknown kind or a body too short for its kind is BAD_RECORD.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from crc32c import crc32c

from .._errors import BookieException

__all__ = [
    "AddEntry",
    "FenceLedger",
    "ExplicitLac",
    "MasterKey",
    "Padding",
    "JournalRecord",
    "LogMark",
    "RecordKind",
    "StopReason",
    "DecodeStop",
    "ScanResult",
    "JournalFormatError",
    "encode_record",
    "encode_add_header",
    "decode_record",
    "scan_records",
    "encode_file_header",
    "decode_file_header",
    "decode_file_prev",
    "encode_last_mark",
    "decode_last_mark",
    "FILE_HEADER_SIZE",
    "FLAG_PREV",
    "RECORD_OVERHEAD",
    "MAX_RECORD_SIZE",
    "LAST_MARK_SIZE",
    "FORMAT_VERSION",
]

FORMAT_VERSION = 1
# Large enough for any entry the bookie accepts (nettyMaxFrameSizeBytes is 5 MiB by default).
MAX_RECORD_SIZE = 64 * 1024 * 1024

_PREFIX = struct.Struct(">II")  # crc, length
_ADD = struct.Struct(">IIBqq")  # crc, length, kind, ledger, entry
_ADD_CRC_PART = struct.Struct(">IBqq")  # length, kind, ledger, entry (what the crc covers first)
_LEDGER = struct.Struct(">q")
_LEDGER_LAC = struct.Struct(">qq")
RECORD_OVERHEAD = _PREFIX.size + 1  # bytes every record carries besides its fields/payload


class JournalFormatError(BookieException, ValueError):
    """A file header or lastMark file is not in a format this code understands."""


class RecordKind(enum.IntEnum):
    """The kind byte of a journal record."""

    ADD_ENTRY = 1
    FENCE = 2
    EXPLICIT_LAC = 3
    MASTER_KEY = 4
    PADDING = 5


@dataclass(frozen=True, slots=True)
class AddEntry:
    """An entry added to a ledger."""

    ledger_id: int
    entry_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class FenceLedger:
    """A ledger was fenced: later adds from the old writer must be refused after replay too."""

    ledger_id: int


@dataclass(frozen=True, slots=True)
class ExplicitLac:
    """An explicit last-add-confirmed for a ledger, with its opaque (digest-protected) buffer."""

    ledger_id: int
    lac: int
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class MasterKey:
    """The master key of a ledger, journaled so that fencing and key checks survive a restart."""

    ledger_id: int
    master_key: bytes


@dataclass(frozen=True, slots=True)
class Padding:
    """Filler: `length` is the size of the whole record on disk (at least `RECORD_OVERHEAD`)."""

    length: int


JournalRecord = AddEntry | FenceLedger | ExplicitLac | MasterKey | Padding


@dataclass(frozen=True, slots=True, order=True)
class LogMark:
    """A position in the journal: file id, then byte offset within that file.

    Marks order as tuples. The mark of a record is the offset just past it, so "everything
    before mark M" is exactly the records whose mark is <= M.
    """

    file_id: int
    offset: int


class StopReason(enum.Enum):
    """Why decoding stopped. Only END_OF_DATA and ZERO_TAIL are a clean end."""

    END_OF_DATA = "end of data"
    ZERO_TAIL = "zeroed (preallocated) tail"
    NEED_MORE = "need more bytes"
    TRUNCATED = "truncated record"
    BAD_LENGTH = "bad record length"
    BAD_CHECKSUM = "checksum mismatch"
    BAD_RECORD = "malformed record body"

    @property
    def clean(self) -> bool:
        """True when the data simply ended, False when a record was damaged."""
        return self in (StopReason.END_OF_DATA, StopReason.ZERO_TAIL)


@dataclass(frozen=True, slots=True)
class DecodeStop:
    """Decoding stopped at `offset` (where the bad or missing record starts) for `reason`."""

    reason: StopReason
    offset: int
    detail: str = ""


# ---------------------------------------------------------------------------------------------
# Records


def encode_add_header(ledger_id: int, entry_id: int, data: bytes) -> bytes:
    """The record bytes that precede `data` for an ADD_ENTRY record.

    ``encode_add_header(l, e, d) + d`` is the complete record; the journal keeps the two apart
    so that the entry payload is copied only once, into the batch buffer.
    """
    length = 17 + len(data)
    if length > MAX_RECORD_SIZE:
        raise ValueError(f"entry of {len(data)} bytes exceeds the journal record limit")
    crc = crc32c(data, crc32c(_ADD_CRC_PART.pack(length, RecordKind.ADD_ENTRY, ledger_id, entry_id)))
    return _ADD.pack(crc, length, RecordKind.ADD_ENTRY, ledger_id, entry_id)


def _frame(body: bytes) -> bytes:
    length = len(body)
    if length > MAX_RECORD_SIZE:
        raise ValueError("journal record too large")
    len_bytes = length.to_bytes(4, "big")
    return crc32c(body, crc32c(len_bytes)).to_bytes(4, "big") + len_bytes + body


def encode_record(record: JournalRecord) -> bytes:
    """Encode one record to its complete on-disk bytes. Raises ValueError if it is too large."""
    if isinstance(record, AddEntry):
        return encode_add_header(record.ledger_id, record.entry_id, record.data) + bytes(record.data)
    if isinstance(record, FenceLedger):
        return _frame(bytes([RecordKind.FENCE]) + _LEDGER.pack(record.ledger_id))
    if isinstance(record, ExplicitLac):
        return _frame(
            bytes([RecordKind.EXPLICIT_LAC]) + _LEDGER_LAC.pack(record.ledger_id, record.lac) + bytes(record.data)
        )
    if isinstance(record, MasterKey):
        return _frame(bytes([RecordKind.MASTER_KEY]) + _LEDGER.pack(record.ledger_id) + bytes(record.master_key))
    if isinstance(record, Padding):
        if record.length < RECORD_OVERHEAD:
            raise ValueError(f"padding must be at least {RECORD_OVERHEAD} bytes")
        return _frame(bytes([RecordKind.PADDING]) + bytes(record.length - RECORD_OVERHEAD))
    raise TypeError(f"not a journal record: {record!r}")


def _parse_body(kind: int, body: memoryview, total: int) -> JournalRecord | None:
    """Turn a checksummed body (after the kind byte) into a record; None if malformed."""
    if kind == RecordKind.ADD_ENTRY:
        if len(body) < 16:
            return None
        ledger, entry = _LEDGER_LAC.unpack_from(body)
        return AddEntry(ledger, entry, bytes(body[16:]))
    if kind == RecordKind.FENCE:
        if len(body) != 8:
            return None
        return FenceLedger(_LEDGER.unpack_from(body)[0])
    if kind == RecordKind.EXPLICIT_LAC:
        if len(body) < 16:
            return None
        ledger, lac = _LEDGER_LAC.unpack_from(body)
        return ExplicitLac(ledger, lac, bytes(body[16:]))
    if kind == RecordKind.MASTER_KEY:
        if len(body) < 8:
            return None
        return MasterKey(_LEDGER.unpack_from(body)[0], bytes(body[8:]))
    if kind == RecordKind.PADDING:
        return Padding(total)
    return None


def decode_record(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, final: bool = True
) -> tuple[JournalRecord, int] | DecodeStop:
    """Decode the record starting at `pos`; return ``(record, next_pos)`` or a `DecodeStop`.

    With ``final=False`` an incomplete record yields NEED_MORE instead of TRUNCATED, so a
    streaming reader can append bytes and retry. A zero prefix yields ZERO_TAIL here without
    looking further (`scan_records` checks that the rest is zero). Never raises on bad input.
    """
    view = memoryview(buf)
    avail = len(view) - pos
    if avail <= 0:
        return DecodeStop(StopReason.END_OF_DATA if final else StopReason.NEED_MORE, pos)
    if avail < 8:
        if not final:
            return DecodeStop(StopReason.NEED_MORE, pos)
        if not any(view[pos:]):
            return DecodeStop(StopReason.ZERO_TAIL, pos)
        return DecodeStop(StopReason.TRUNCATED, pos, f"{avail} bytes, shorter than a record prefix")
    crc, length = _PREFIX.unpack_from(view, pos)
    if length == 0 and crc == 0:
        return DecodeStop(StopReason.ZERO_TAIL, pos)
    if length < 1 or length > MAX_RECORD_SIZE:
        return DecodeStop(StopReason.BAD_LENGTH, pos, f"length {length}")
    end = pos + 8 + length
    if end > len(view):
        if not final:
            return DecodeStop(StopReason.NEED_MORE, pos)
        return DecodeStop(StopReason.TRUNCATED, pos, f"record of {length} bytes, {avail - 8} present")
    actual = crc32c(view[pos + 8 : end], crc32c(view[pos + 4 : pos + 8]))
    if actual != crc:
        return DecodeStop(StopReason.BAD_CHECKSUM, pos, f"stored {crc:#010x}, computed {actual:#010x}")
    record = _parse_body(view[pos + 8], view[pos + 9 : end], 8 + length)
    if record is None:
        return DecodeStop(StopReason.BAD_RECORD, pos, f"kind {view[pos + 8]} with a {length}-byte body")
    return record, end


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Every good record before the stop, each with its end offset, and why scanning stopped."""

    records: list[tuple[int, JournalRecord]]
    stop: DecodeStop


def scan_records(buf: bytes | bytearray | memoryview, start: int = 0) -> ScanResult:
    """Decode records from `start` until the first bad or missing one (the whole input is final).

    A ZERO_TAIL stop is only reported if all remaining bytes are zero; a zeroed hole followed by
    data is reported as BAD_LENGTH, because acknowledged data is never written after a hole.
    """
    view = memoryview(buf)
    out: list[tuple[int, JournalRecord]] = []
    pos = start
    while True:
        res = decode_record(view, pos)
        if isinstance(res, DecodeStop):
            if res.reason is StopReason.ZERO_TAIL and any(view[pos:]):
                res = DecodeStop(StopReason.BAD_LENGTH, pos, "zeroed hole followed by non-zero data")
            return ScanResult(out, res)
        record, pos = res
        out.append((pos, record))


# ---------------------------------------------------------------------------------------------
# File header: [magic:4][version:2][flags:2][file_id:8][crc:4], then, when flags has FLAG_PREV,
# [prev_file_id:8][prev_end:8][crc:4] (the predecessor declaration), zero-padded to
# FILE_HEADER_SIZE. The first CRC covers the flags, so the declaration cannot be switched on or
# off by a flipped bit; readers that predate it ignore the bytes after the first CRC.

FILE_MAGIC = b"MGJN"
FILE_HEADER_SIZE = 64
FLAG_PREV = 0x1
_FILE_HEADER = struct.Struct(">4sHHQ")
_FILE_PREV = struct.Struct(">qq")
_PREV_AT = _FILE_HEADER.size + 4


def encode_file_header(file_id: int, prev: LogMark | None = None) -> bytes:
    """The `FILE_HEADER_SIZE` bytes that start journal file `file_id`.

    ``prev`` declares where the journal's history ended before this file: the file and offset
    just past the last record that replay must keep there (see `decode_file_prev`).
    """
    head = _FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, FLAG_PREV if prev is not None else 0, file_id)
    head += crc32c(head).to_bytes(4, "big")
    if prev is not None:
        body = _FILE_PREV.pack(prev.file_id, prev.offset)
        head += body + crc32c(body).to_bytes(4, "big")
    return head + bytes(FILE_HEADER_SIZE - len(head))


def decode_file_header(buf: bytes | bytearray | memoryview) -> int:
    """Check a journal file header and return its file id.

    Raises `JournalFormatError` if it is short, has the wrong magic, a bad checksum or a format
    version this code does not read.
    """
    view = memoryview(buf)
    if len(view) < FILE_HEADER_SIZE:
        raise JournalFormatError(f"file header is {len(view)} bytes, expected {FILE_HEADER_SIZE}")
    magic, version, _flags, file_id = _FILE_HEADER.unpack_from(view)
    if magic != FILE_MAGIC:
        raise JournalFormatError(f"bad journal magic {bytes(magic)!r}")
    stored = int.from_bytes(view[_FILE_HEADER.size : _FILE_HEADER.size + 4], "big")
    if stored != crc32c(view[: _FILE_HEADER.size]):
        raise JournalFormatError("journal file header checksum mismatch")
    if version != FORMAT_VERSION:
        raise JournalFormatError(f"journal format version {version} is not supported")
    return file_id


def decode_file_prev(buf: bytes | bytearray | memoryview) -> LogMark | None:
    """The predecessor a valid header declares, or None when it declares none.

    A declaration ``LogMark(F, E)`` in file G says: when G was created, every record of file F
    that had been acknowledged ended at or before offset E, and no file between F and G held an
    acknowledged record. Call it on a header `decode_file_header` accepted; raises
    `JournalFormatError` when the declaration's own checksum fails.
    """
    view = memoryview(buf)
    (_magic, _version, flags, _file_id) = _FILE_HEADER.unpack_from(view)
    if not flags & FLAG_PREV:
        return None
    end = _PREV_AT + _FILE_PREV.size
    if int.from_bytes(view[end : end + 4], "big") != crc32c(view[_PREV_AT:end]):
        raise JournalFormatError("journal file header: predecessor declaration checksum mismatch")
    prev_id, prev_end = _FILE_PREV.unpack_from(view, _PREV_AT)
    return LogMark(prev_id, prev_end)


# ---------------------------------------------------------------------------------------------
# lastMark file: [magic:4][version:2][flags:2][file_id:8][offset:8][crc:4]

LAST_MARK_MAGIC = b"MGLM"
_LAST_MARK = struct.Struct(">4sHHqq")
LAST_MARK_SIZE = _LAST_MARK.size + 4


def encode_last_mark(mark: LogMark) -> bytes:
    """The bytes of a lastMark file holding `mark`."""
    body = _LAST_MARK.pack(LAST_MARK_MAGIC, FORMAT_VERSION, 0, mark.file_id, mark.offset)
    return body + crc32c(body).to_bytes(4, "big")


def decode_last_mark(buf: bytes | bytearray | memoryview) -> LogMark:
    """Parse a lastMark file; raises `JournalFormatError` if it is damaged or of another format."""
    view = memoryview(buf)
    if len(view) != LAST_MARK_SIZE:
        raise JournalFormatError(f"lastMark is {len(view)} bytes, expected {LAST_MARK_SIZE}")
    magic, version, _flags, file_id, offset = _LAST_MARK.unpack_from(view)
    if magic != LAST_MARK_MAGIC:
        raise JournalFormatError(f"bad lastMark magic {bytes(magic)!r}")
    if int.from_bytes(view[_LAST_MARK.size :], "big") != crc32c(view[: _LAST_MARK.size]):
        raise JournalFormatError("lastMark checksum mismatch")
    if version != FORMAT_VERSION:
        raise JournalFormatError(f"lastMark format version {version} is not supported")
    return LogMark(file_id, offset)
