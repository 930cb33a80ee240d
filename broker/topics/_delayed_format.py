"""Delayed-delivery index snapshots: pure encoders and decoders, and how an index is cut into segments.

An index entry says "deliver the entry at (ledger, entry) at time ts" (milliseconds since the
epoch). Entries are ordered by ``(ts, ledger, entry)``. In memory a run of ordered entries is an
`IndexRun` (three int64 arrays, 24 bytes an entry); a single entry can be packed into one int
(`pack`) whose integer order is that same order.

A bucket (see `broker.topics._delayed`) is stored as one side ledger, written once::

    entry 0 .. n-1   segment i:  "MDXS" [count u32] [ts i64]*count [ledger i64]*count [entry i64]*count
    entry n          footer:     "MDXF" [version u16 = 1] [0 u16]
                                 [start ledger i64] [start entry i64] [end ledger i64] [end entry i64]
                                 [segments u32] then per segment [count u32] [min ts i64] [max ts i64]

all big-endian. Segments follow each other in index order; a segment holds at most
``max_indexes`` entries, spans at most ``time_step_ms`` of due times (from its first entry, as
Pulsar cuts its snapshot segments) and fits in ``max_bytes``. The cursor property
``#pulsar.internal.delayed.bucket_{L}:{E}_{L}:{E}`` (the bucket's first and last position, Pulsar's
bucket key with positions for ledger ids) holds the ledger id in decimal.

Every decoder raises `DelayedIndexFormatError` (a ``ValueError``) for bytes that are not what its
encoder writes.
"""

from __future__ import annotations

import itertools
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from protocols.managed_ledger import Position

__all__ = [
    "BUCKET_KEY_PREFIX",
    "DelayedIndexFormatError",
    "IndexRun",
    "SegmentInfo",
    "BucketFooter",
    "pack",
    "unpack",
    "MAX_FIELD",
    "INDEX_BYTES",
    "encode_segment",
    "decode_segment",
    "encode_footer",
    "decode_footer",
    "bucket_key",
    "parse_bucket_key",
    "SegmentCutter",
    "cut_keys",
]

BUCKET_KEY_PREFIX = "#pulsar.internal.delayed.bucket"
"""Cursor property prefix of bucket keys (Pulsar's ``DELAYED_BUCKET_KEY_PREFIX``)."""

MAX_FIELD = (1 << 63) - 1
"""Largest ts, ledger id or entry id an index entry holds (they are non-negative int64)."""

INDEX_BYTES = 24
"""Bytes of one index entry in an `IndexRun` and in a stored segment."""

_SEGMENT_MAGIC = b"MDXS"
_FOOTER_MAGIC = b"MDXF"
_FOOTER_VERSION = 1
_SEG_HEAD = struct.Struct(">4sI")
_FOOTER_HEAD = struct.Struct(">4sHHqqqqI")
_SEG_INFO = struct.Struct(">Iqq")
_SWAP = sys.byteorder == "little"
_ENTRY_BITS = 63
_LEDGER_SHIFT = 63
_TS_SHIFT = 126
_MASK = (1 << 63) - 1


class DelayedIndexFormatError(ValueError):
    """Bytes that are not a segment, a footer or a bucket key of this format."""


def pack(ts: int, ledger_id: int, entry_id: int) -> int:
    """One int whose order is the order of ``(ts, ledger_id, entry_id)`` (each in 0..MAX_FIELD)."""
    return (ts << _TS_SHIFT) | (ledger_id << _LEDGER_SHIFT) | entry_id


def unpack(key: int) -> tuple[int, int, int]:
    """``(ts, ledger_id, entry_id)`` of a `pack` result."""
    return key >> _TS_SHIFT, (key >> _LEDGER_SHIFT) & _MASK, key & _MASK


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What a footer says of one segment: its entry count and its first and last due times."""

    count: int
    min_ts: int
    max_ts: int


@dataclass(frozen=True, slots=True)
class BucketFooter:
    """The footer of a bucket ledger: the positions it covers and its segment table."""

    start: Position
    end: Position
    segments: tuple[SegmentInfo, ...]

    @property
    def count(self) -> int:
        """Index entries over every segment."""
        return sum(s.count for s in self.segments)


class IndexRun:
    """Index entries in order, as three parallel int64 arrays (24 bytes an entry)."""

    __slots__ = ("ts", "ledger", "entry")

    def __init__(
        self, ts: array[int] | None = None, ledger: array[int] | None = None, entry: array[int] | None = None
    ) -> None:
        self.ts: array[int] = ts if ts is not None else array("q")
        self.ledger: array[int] = ledger if ledger is not None else array("q")
        self.entry: array[int] = entry if entry is not None else array("q")

    def __len__(self) -> int:
        return len(self.ts)

    def append(self, ts: int, ledger_id: int, entry_id: int) -> None:
        """Add an entry after the others (the caller keeps the order)."""
        self.ts.append(ts)
        self.ledger.append(ledger_id)
        self.entry.append(entry_id)

    def key(self, i: int) -> int:
        """The `pack` key of entry ``i``."""
        return pack(self.ts[i], self.ledger[i], self.entry[i])

    def info(self) -> SegmentInfo:
        """Its footer line (the run must not be empty)."""
        return SegmentInfo(len(self.ts), self.ts[0], self.ts[-1])

    @property
    def nbytes(self) -> int:
        """Bytes its arrays allocate (their capacity, not only their length)."""
        return sum(a.buffer_info()[1] * a.itemsize for a in (self.ts, self.ledger, self.entry))

    @classmethod
    def from_keys(cls, keys: Iterable[int]) -> IndexRun:
        """A run of `pack` keys given in order."""
        run = cls()
        for k in keys:
            ts, ledger_id, entry_id = unpack(k)
            run.append(ts, ledger_id, entry_id)
        return run


def _be_bytes(a: array[int]) -> bytes:
    if not _SWAP:
        return a.tobytes()
    b = array("q", a)
    b.byteswap()
    return b.tobytes()


def _be_array(data: bytes | memoryview) -> array[int]:
    a = array("q")
    a.frombytes(data)
    if _SWAP:
        a.byteswap()
    return a


def encode_segment(run: IndexRun) -> bytes:
    """The stored form of one segment."""
    return _SEG_HEAD.pack(_SEGMENT_MAGIC, len(run)) + _be_bytes(run.ts) + _be_bytes(run.ledger) + _be_bytes(run.entry)


def decode_segment(data: bytes) -> IndexRun:
    """Parse `encode_segment` output; refuses a wrong magic, a length that does not match its
    count, and negative fields."""
    if len(data) < _SEG_HEAD.size:
        raise DelayedIndexFormatError("segment too short for its header")
    magic, count = _SEG_HEAD.unpack_from(data, 0)
    if magic != _SEGMENT_MAGIC:
        raise DelayedIndexFormatError(f"not a delayed-index segment (magic {magic!r})")
    if len(data) != _SEG_HEAD.size + count * INDEX_BYTES:
        raise DelayedIndexFormatError(f"segment of {count} entries has {len(data)} bytes")
    view = memoryview(data)[_SEG_HEAD.size :]
    width = count * 8
    run = IndexRun(_be_array(view[:width]), _be_array(view[width : 2 * width]), _be_array(view[2 * width :]))
    if count and (min(run.ts) < 0 or min(run.ledger) < 0 or min(run.entry) < 0):
        raise DelayedIndexFormatError("segment holds a negative field")
    return run


def encode_footer(footer: BucketFooter) -> bytes:
    """The stored form of a bucket's footer."""
    head = _FOOTER_HEAD.pack(
        _FOOTER_MAGIC,
        _FOOTER_VERSION,
        0,
        footer.start.ledger_id,
        footer.start.entry_id,
        footer.end.ledger_id,
        footer.end.entry_id,
        len(footer.segments),
    )
    return head + b"".join(_SEG_INFO.pack(s.count, s.min_ts, s.max_ts) for s in footer.segments)


def decode_footer(data: bytes) -> BucketFooter:
    """Parse `encode_footer` output; refuses a wrong magic or version, a length that does not
    match the segment count, an empty segment, a segment whose times are out of order, and a
    start after the end."""
    if len(data) < _FOOTER_HEAD.size:
        raise DelayedIndexFormatError("footer too short for its header")
    magic, version, _, sl, se, el, ee, n = _FOOTER_HEAD.unpack_from(data, 0)
    if magic != _FOOTER_MAGIC:
        raise DelayedIndexFormatError(f"not a delayed-index footer (magic {magic!r})")
    if version != _FOOTER_VERSION:
        raise DelayedIndexFormatError(f"unknown delayed-index footer version {version}")
    if len(data) != _FOOTER_HEAD.size + n * _SEG_INFO.size:
        raise DelayedIndexFormatError(f"footer of {n} segments has {len(data)} bytes")
    segments = tuple(
        SegmentInfo(*_SEG_INFO.unpack_from(data, _FOOTER_HEAD.size + i * _SEG_INFO.size)) for i in range(n)
    )
    for s in segments:
        if s.count < 1 or s.min_ts < 0 or s.max_ts < s.min_ts:
            raise DelayedIndexFormatError(f"footer has an invalid segment {s}")
    for a, b in itertools.pairwise(segments):
        if b.min_ts < a.max_ts:
            raise DelayedIndexFormatError("footer segments are not in due-time order")
    start, end = Position(sl, se), Position(el, ee)
    if min(sl, se, el, ee) < 0 or end < start:
        raise DelayedIndexFormatError(f"footer covers an invalid range {start}..{end}")
    return BucketFooter(start, end, segments)


def bucket_key(start: Position, end: Position) -> str:
    """The cursor property naming a bucket that covers ``start..end``."""
    return f"{BUCKET_KEY_PREFIX}_{start.ledger_id}:{start.entry_id}_{end.ledger_id}:{end.entry_id}"


def parse_bucket_key(key: str) -> tuple[Position, Position] | None:
    """``(start, end)`` of a `bucket_key`; None for any other property name (not ours);
    `DelayedIndexFormatError` for a name with our prefix that does not parse."""
    prefix = BUCKET_KEY_PREFIX + "_"
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split("_")
    try:
        if len(parts) != 2:
            raise ValueError(key)
        (sl, se), (el, ee) = (tuple(int(x) for x in p.split(":")) for p in parts)
    except ValueError:
        raise DelayedIndexFormatError(f"malformed delayed bucket key {key!r}") from None
    start, end = Position(sl, se), Position(el, ee)
    if min(sl, se, el, ee) < 0 or end < start:
        raise DelayedIndexFormatError(f"delayed bucket key {key!r} names an invalid range")
    return start, end


class SegmentCutter:
    """Cuts index entries, given in order, into segments.

    A segment ends before an entry that would make it hold more than ``max_indexes`` entries
    (None: no count limit), reach past ``time_step_ms`` after its first entry's time, or exceed
    ``max_bytes`` stored. `add` returns the finished segment when an entry starts a new one;
    `finish` returns the last one.
    """

    def __init__(self, time_step_ms: int, max_indexes: int | None, max_bytes: int) -> None:
        if time_step_ms < 1:
            raise ValueError("time_step_ms must be positive")
        self._step = time_step_ms
        by_bytes = max(1, (max_bytes - _SEG_HEAD.size) // INDEX_BYTES)
        self._max = by_bytes if max_indexes is None else max(1, min(max_indexes, by_bytes))
        self._run = IndexRun()
        self._upper = 0

    @property
    def max_indexes(self) -> int:
        """The most entries a segment gets."""
        return self._max

    @property
    def pending(self) -> IndexRun:
        """The segment being filled."""
        return self._run

    def add(self, ts: int, ledger_id: int, entry_id: int) -> IndexRun | None:
        """Add the next entry; the segment it closed, if any."""
        done = None
        run = self._run
        if len(run) and (len(run) >= self._max or ts > self._upper):
            done, run = run, IndexRun()
            self._run = run
        if not len(run):
            self._upper = ts + self._step - 1
        run.append(ts, ledger_id, entry_id)
        return done

    def finish(self) -> IndexRun | None:
        """The last segment (None when nothing was added since the last one)."""
        run, self._run = self._run, IndexRun()
        return run if len(run) else None


def cut_keys(keys: Sequence[int], cutter: SegmentCutter) -> Iterator[IndexRun]:
    """The segments of ``keys`` (`pack` keys in order)."""
    for k in keys:
        ts, ledger_id, entry_id = unpack(k)
        done = cutter.add(ts, ledger_id, entry_id)
        if done is not None:
            yield done
    last = cutter.finish()
    if last is not None:
        yield last
