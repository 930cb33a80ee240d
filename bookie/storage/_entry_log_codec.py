"""Entry log file format: pure encode/decode functions over bytes (no files, no trio).

An entry log ``{logId:x}.log`` is laid out as::

    [header: 1024 bytes]
        magic  b"MGLO"          4 bytes
        format version          u32
        ledgers map offset      u64   (0 = no map written: the log was not rolled cleanly)
        ledgers map count       u32   (number of ledgers in the map)
        zero padding up to 1024 bytes
    [record]*                    entry records, in the order they were flushed
    [ledgers map record]*        appended when the log is rolled or closed cleanly

    record = [size u32][ledgerId u64][entryId u64][payload]
             size counts ledgerId + entryId + payload (so size = 16 + len(payload))

All integers are big-endian, as in BookKeeper. The ledgers map (ledger -> total bytes of that
ledger's records, counting the 4-byte size prefix too) is stored as ordinary records whose ledger
id is the reserved `INVALID_LEDGER_ID` (2**64-1) and entry id `LEDGERS_MAP_ENTRY_ID`, each
carrying ``[count u32][(ledgerId u64, bytes u64) * count]`` with at most `MAP_CHUNK` ledgers,
so a scanner that does not know about maps simply skips them as records of an unknown ledger.

An entry's location is ``(log_id << 32) | offset`` where offset is the position of the record's
size field; log ids must therefore stay below 2**31 (so locations are positive signed 64-bit
integers that sqlite stores natively).

Torn tails: a crash can leave a partial record at the end of a log (logs are not checksummed: the
payload carries the client's own digest, and only synced records are ever indexed). Scanning stops
cleanly at the first record whose size field is impossible or whose bytes run past the end.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .._errors import BookieException

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "FORMAT_VERSION",
    "INVALID_LEDGER_ID",
    "LEDGERS_MAP_ENTRY_ID",
    "MAP_CHUNK",
    "RECORD_PREFIX_SIZE",
    "MAX_LOG_ID",
    "LogHeader",
    "CorruptLogError",
    "encode_header",
    "decode_header",
    "encode_record",
    "append_record",
    "pack_record_prefix_into",
    "record_prefix",
    "record_size",
    "decode_record_at",
    "iter_records",
    "encode_ledgers_map",
    "decode_ledgers_map",
    "make_location",
    "split_location",
    "log_file_name",
    "parse_log_file_name",
]

HEADER_SIZE = 1024
MAGIC = b"MGLO"
FORMAT_VERSION = 1
INVALID_LEDGER_ID = 2**64 - 1
LEDGERS_MAP_ENTRY_ID = 2**64 - 2
MAP_CHUNK = 10_000
MAX_LOG_ID = 2**31 - 1

_HEADER = struct.Struct(">4sIQI")
_PREFIX = struct.Struct(">IQQ")
_SIZE = struct.Struct(">I")
_MAP_COUNT = struct.Struct(">I")
_MAP_ITEM = struct.Struct(">QQ")
RECORD_PREFIX_SIZE = _PREFIX.size  # 20: size + ledger id + entry id
_MIN_SIZE = 16  # ledger id + entry id with an empty payload


class CorruptLogError(BookieException, ValueError):
    """An entry log header or ledgers map is not in the expected format."""


@dataclass(frozen=True, slots=True)
class LogHeader:
    """The fixed header of an entry log; map offset and count are 0 until the log is rolled."""

    version: int = FORMAT_VERSION
    ledgers_map_offset: int = 0
    ledgers_count: int = 0


def encode_header(header: LogHeader) -> bytes:
    """The 1024-byte header for ``header``."""
    head = _HEADER.pack(MAGIC, header.version, header.ledgers_map_offset, header.ledgers_count)
    return head + bytes(HEADER_SIZE - len(head))


def decode_header(buf: bytes | bytearray | memoryview) -> LogHeader:
    """Parse the first bytes of a log; raises `CorruptLogError` on a short buffer or bad magic/version."""
    if len(buf) < _HEADER.size:
        raise CorruptLogError(f"entry log header truncated ({len(buf)} bytes)")
    magic, version, offset, count = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptLogError(f"bad entry log magic {bytes(magic)!r}")
    if version != FORMAT_VERSION:
        raise CorruptLogError(f"unsupported entry log format version {version}")
    return LogHeader(version, offset, count)


def record_size(payload_len: int) -> int:
    """Bytes a record with a payload of ``payload_len`` takes on disk (prefix included)."""
    return RECORD_PREFIX_SIZE + payload_len


def encode_record(ledger_id: int, entry_id: int, payload: bytes | bytearray | memoryview) -> bytes:
    """One record ``[size][ledgerId][entryId][payload]``."""
    return _PREFIX.pack(_MIN_SIZE + len(payload), ledger_id, entry_id) + bytes(payload)


def append_record(out: bytearray, ledger_id: int, entry_id: int, payload: bytes | bytearray | memoryview) -> None:
    """Append one record to ``out`` (the allocation-light path used to build flush buffers)."""
    out += _PREFIX.pack(_MIN_SIZE + len(payload), ledger_id, entry_id)
    out += payload


def pack_record_prefix_into(
    buf: bytearray | memoryview, offset: int, ledger_id: int, entry_id: int, payload_len: int
) -> None:
    """Write a record's 20-byte prefix into ``buf`` at ``offset`` (the payload follows it)."""
    _PREFIX.pack_into(buf, offset, _MIN_SIZE + payload_len, ledger_id, entry_id)


def record_prefix(ledger_id: int, entry_id: int, payload_len: int) -> bytes:
    """A record's 20-byte prefix."""
    return _PREFIX.pack(_MIN_SIZE + payload_len, ledger_id, entry_id)


def decode_record_at(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int, int, int] | None:
    """Decode the record starting at ``buf[pos]``.

    Returns ``(ledger_id, entry_id, payload_start, record_end)`` or None when the bytes from
    ``pos`` are not a whole record (end of data or a torn tail).
    """
    if pos + RECORD_PREFIX_SIZE > len(buf):
        return None
    size, ledger_id, entry_id = _PREFIX.unpack_from(buf, pos)
    end = pos + 4 + size
    if size < _MIN_SIZE or end > len(buf):
        return None
    return ledger_id, entry_id, pos + RECORD_PREFIX_SIZE, end


def iter_records(
    buf: bytes | bytearray | memoryview, start: int = HEADER_SIZE, end: int | None = None
) -> Iterator[tuple[int, int, int, memoryview]]:
    """Yield ``(offset, ledger_id, entry_id, payload)`` for each whole record in ``buf[start:end]``.

    ``offset`` is relative to ``buf`` (a file read from 0 gives file offsets). Stops silently at a
    torn tail. Ledgers-map records are yielded too (ledger `INVALID_LEDGER_ID`); callers skip them.
    """
    view = memoryview(buf)
    if end is not None:
        view = view[:end]
    pos = start
    while True:
        rec = decode_record_at(view, pos)
        if rec is None:
            return
        ledger_id, entry_id, pstart, rend = rec
        yield pos, ledger_id, entry_id, view[pstart:rend]
        pos = rend


def encode_ledgers_map(ledgers: Mapping[int, int]) -> bytes:
    """The ledgers map as a run of records, `MAP_CHUNK` ledgers per record (empty map: no records)."""
    out = bytearray()
    items = sorted(ledgers.items())
    for i in range(0, len(items), MAP_CHUNK):
        chunk = items[i : i + MAP_CHUNK]
        payload = bytearray(_MAP_COUNT.pack(len(chunk)))
        for ledger_id, size in chunk:
            payload += _MAP_ITEM.pack(ledger_id, size)
        append_record(out, INVALID_LEDGER_ID, LEDGERS_MAP_ENTRY_ID, payload)
    return bytes(out)


def decode_ledgers_map(buf: bytes | bytearray | memoryview, expected_count: int) -> dict[int, int]:
    """Parse a ledgers map written by `encode_ledgers_map` (``buf`` starts at the map offset).

    Raises `CorruptLogError` (and nothing else) when the records are torn, malformed or hold other
    than ``expected_count`` ledgers.
    """
    result: dict[int, int] = {}
    view = memoryview(buf)
    pos = 0
    while len(result) < expected_count:
        rec = decode_record_at(view, pos)
        if rec is None:
            raise CorruptLogError("ledgers map truncated")
        ledger_id, entry_id, pstart, rend = rec
        if ledger_id != INVALID_LEDGER_ID or entry_id != LEDGERS_MAP_ENTRY_ID:
            raise CorruptLogError("ledgers map offset does not point at a map record")
        if rend - pstart < _MAP_COUNT.size:  # else the count would be read from the next record
            raise CorruptLogError("ledgers map record too short for its count")
        (count,) = _MAP_COUNT.unpack_from(view, pstart)
        if pstart + 4 + count * _MAP_ITEM.size != rend:
            raise CorruptLogError("ledgers map record has a bad length")
        for lid, size in _MAP_ITEM.iter_unpack(view[pstart + 4 : rend]):
            result[lid] = size
        pos = rend
    if len(result) != expected_count:
        raise CorruptLogError(f"ledgers map holds {len(result)} ledgers, header says {expected_count}")
    return result


def make_location(log_id: int, offset: int) -> int:
    """``(log_id << 32) | offset``; raises ValueError when either part is out of range."""
    if not 0 <= log_id <= MAX_LOG_ID or not 0 <= offset < 2**32:
        raise ValueError(f"location out of range: log {log_id} offset {offset}")
    return (log_id << 32) | offset


def split_location(location: int) -> tuple[int, int]:
    """``(log_id, offset)`` of a location made by `make_location`."""
    return location >> 32, location & 0xFFFFFFFF


def log_file_name(log_id: int) -> str:
    """``{logId:x}.log``."""
    return f"{log_id:x}.log"


def parse_log_file_name(name: str) -> int | None:
    """The log id of an entry log file name, or None for any other file."""
    if not name.endswith(".log"):
        return None
    try:
        return int(name[:-4], 16)
    except ValueError:
        return None
