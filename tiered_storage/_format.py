"""The layout of an offloaded ledger in a tier (sans-IO: pure functions over bytes).

An offloaded ledger is two objects, written once and never modified:

* the **data object**, a sequence of *blocks* back to back from offset 0;
* the **index object**, which says where each block starts, which entries it holds and the
  CRC32C of its payload, so a reader fetches only the blocks of the entries it wants (one ranged
  read) instead of the whole object.

Wire shapes (all integers big-endian)::

    block    [magic "MGTB"][first_entry u64][entry_count u32][payload_len u32]
             [payload_crc u32][header_crc u32]                                  (28 bytes)
             payload: entry_count records [length u32][entry bytes], ids consecutive from
             first_entry
    index    [magic "MGTI"][version u16 = 1][reserved u16 = 0]
             [ledger_id u64][entry_count u64][ledger_bytes u64][data_length u64]
             [block_count u32] block_count x
                 [first_entry u64][offset u64][length u32][entry_count u32][payload_crc u32]
             [metadata_count u32] metadata_count x [key_len u16][key utf-8][value_len u32][value]
             [index_crc u32]

``payload_crc`` is the CRC32C of the block's payload and ``header_crc`` of the 24 header bytes
before it; ``index_crc`` covers every index byte before it. ``ledger_bytes`` is the sum of the
entry lengths (the ledger's size as the managed ledger counts it), ``data_length`` the size of the
data object. Blocks cover entries ``0 .. entry_count - 1`` in order, without gap or overlap, and
lie back to back (``offset`` of block k+1 = ``offset + length`` of block k); a block is cut once
its payload reaches the writer's block size, so it exceeds that by less than one entry.

Rules a decoder enforces (`OffloadFormatError` otherwise): magic, version, both CRCs, and the
coverage and contiguity above; a block read back must match its index record (first entry, count,
length, payload CRC), so a ranged read that returned the wrong bytes is refused, not served.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from crc32c import crc32c

from ._errors import TierError

__all__ = [
    "BLOCK_HEADER_SIZE",
    "BlockBuilder",
    "BlockRef",
    "LedgerIndex",
    "OffloadFormatError",
    "blocks_for_range",
    "decode_block",
    "decode_blocks",
]

BLOCK_MAGIC = b"MGTB"
INDEX_MAGIC = b"MGTI"
INDEX_VERSION = 1
_BLOCK_HEAD = struct.Struct(">4sQIII")  # magic, first entry, count, payload length, payload crc
_BLOCK_HEAD_CRC = struct.Struct(">I")
BLOCK_HEADER_SIZE = _BLOCK_HEAD.size + _BLOCK_HEAD_CRC.size
_INDEX_HEAD = struct.Struct(">4sHHQQQQI")
_INDEX_BLOCK = struct.Struct(">QQIII")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class OffloadFormatError(TierError):
    """Bytes that are not a valid block or index (corrupt, truncated, or not what the index says)."""


@dataclass(frozen=True, slots=True)
class BlockRef:
    """Where one block lies in the data object and what it holds."""

    first_entry: int
    offset: int
    length: int
    entry_count: int
    payload_crc: int

    @property
    def last_entry(self) -> int:
        """Id of the block's last entry."""
        return self.first_entry + self.entry_count - 1

    @property
    def end(self) -> int:
        """Offset just past the block."""
        return self.offset + self.length


@dataclass(frozen=True)
class LedgerIndex:
    """The index of one offloaded ledger (see the module docstring for its rules)."""

    ledger_id: int
    entry_count: int
    ledger_bytes: int
    data_length: int
    blocks: tuple[BlockRef, ...]
    metadata: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        expected_entry, expected_offset = 0, 0
        for b in self.blocks:
            if b.entry_count < 1 or b.length < BLOCK_HEADER_SIZE:
                raise OffloadFormatError(f"block at {b.offset} is empty or shorter than its header")
            if b.first_entry != expected_entry or b.offset != expected_offset:
                raise OffloadFormatError(
                    f"block at {b.offset} does not follow the previous one "
                    f"(entry {b.first_entry}, expected {expected_entry})"
                )
            expected_entry, expected_offset = b.first_entry + b.entry_count, b.end
        if expected_entry != self.entry_count or expected_offset != self.data_length:
            raise OffloadFormatError(
                f"blocks cover {expected_entry} entries and {expected_offset} bytes, "
                f"the index says {self.entry_count} and {self.data_length}"
            )

    def encode(self) -> bytes:
        """The index object's bytes."""
        parts = [
            _INDEX_HEAD.pack(
                INDEX_MAGIC,
                INDEX_VERSION,
                0,
                self.ledger_id,
                self.entry_count,
                self.ledger_bytes,
                self.data_length,
                len(self.blocks),
            )
        ]
        parts += [
            _INDEX_BLOCK.pack(b.first_entry, b.offset, b.length, b.entry_count, b.payload_crc) for b in self.blocks
        ]
        parts.append(_U32.pack(len(self.metadata)))
        for key in sorted(self.metadata):
            raw = key.encode()
            value = self.metadata[key]
            parts += [_U16.pack(len(raw)), raw, _U32.pack(len(value)), value]
        body = b"".join(parts)
        return body + _U32.pack(crc32c(body))

    @classmethod
    def decode(cls, data: bytes) -> LedgerIndex:
        """Parse an index object; `OffloadFormatError` when it is not a valid one."""
        data = bytes(data)
        if len(data) < _INDEX_HEAD.size + 8:
            raise OffloadFormatError(f"index of {len(data)} bytes is truncated")
        (crc,) = _U32.unpack_from(data, len(data) - 4)
        if crc32c(data[:-4]) != crc:
            raise OffloadFormatError("index checksum mismatch")
        magic, version, _r, ledger_id, entries, ledger_bytes, data_length, count = _INDEX_HEAD.unpack_from(data)
        if magic != INDEX_MAGIC:
            raise OffloadFormatError(f"not an offload index (magic {magic!r})")
        if version != INDEX_VERSION:
            raise OffloadFormatError(f"index version {version} is not supported")
        pos = _INDEX_HEAD.size
        if pos + count * _INDEX_BLOCK.size + 8 > len(data):
            raise OffloadFormatError(f"index lists {count} blocks but is {len(data)} bytes long")
        blocks = []
        for _ in range(count):
            blocks.append(BlockRef(*_INDEX_BLOCK.unpack_from(data, pos)))
            pos += _INDEX_BLOCK.size
        (n_meta,) = _U32.unpack_from(data, pos)
        pos += 4
        meta: dict[str, bytes] = {}
        try:
            for _ in range(n_meta):
                (klen,) = _U16.unpack_from(data, pos)
                key = data[pos + 2 : pos + 2 + klen].decode()
                pos += 2 + klen
                (vlen,) = _U32.unpack_from(data, pos)
                meta[key] = data[pos + 4 : pos + 4 + vlen]
                pos += 4 + vlen
        except (struct.error, UnicodeDecodeError) as exc:
            raise OffloadFormatError(f"index metadata is malformed: {exc}") from exc
        if pos != len(data) - 4:
            raise OffloadFormatError("index has trailing or missing bytes")
        return cls(ledger_id, entries, ledger_bytes, data_length, tuple(blocks), meta)


def blocks_for_range(index: LedgerIndex, first: int, last: int) -> tuple[int, int]:
    """``(i, j)``: blocks ``i .. j - 1`` hold entries ``first .. last`` (ValueError when the range is
    empty or outside the ledger)."""
    if not 0 <= first <= last < index.entry_count:
        raise ValueError(f"entries {first}..{last} are not in a ledger of {index.entry_count} entries")
    starts = [b.first_entry for b in index.blocks]
    i = bisect_right(starts, first) - 1
    j = bisect_right(starts, last)
    return i, j


def _encode_block(first_entry: int, entries: Sequence[bytes]) -> bytes:
    payload = b"".join(_U32.pack(len(e)) + e for e in entries)
    head = _BLOCK_HEAD.pack(BLOCK_MAGIC, first_entry, len(entries), len(payload), crc32c(payload))
    return head + _BLOCK_HEAD_CRC.pack(crc32c(head)) + payload


class BlockBuilder:
    """Cuts a ledger's entries (added in id order from 0) into blocks of about ``block_size`` payload
    bytes and builds the `LedgerIndex` of what it cut. ``add`` returns the bytes of the blocks
    completed by that entry (append them to the data object in order); ``finish`` returns the
    last block's bytes and the index."""

    def __init__(self, ledger_id: int, block_size: int) -> None:
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self.ledger_id = ledger_id
        self.block_size = block_size
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._next_entry = 0
        self._block_first = 0
        self._offset = 0
        self._ledger_bytes = 0
        self._blocks: list[BlockRef] = []

    @property
    def entries(self) -> int:
        """Entries added so far."""
        return self._next_entry

    def add(self, entry_id: int, data: bytes) -> bytes:
        """Add the next entry (``entry_id`` must be the next id). Returns completed block bytes
        (empty when the current block is not full yet)."""
        if entry_id != self._next_entry:
            raise ValueError(f"entry {entry_id} added where {self._next_entry} was expected")
        self._pending.append(bytes(data))
        self._pending_bytes += 4 + len(data)
        self._ledger_bytes += len(data)
        self._next_entry += 1
        if self._pending_bytes >= self.block_size:
            return self._cut()
        return b""

    def _cut(self) -> bytes:
        if not self._pending:
            return b""
        raw = _encode_block(self._block_first, self._pending)
        (_m, _f, _n, _l, payload_crc) = _BLOCK_HEAD.unpack_from(raw)
        self._blocks.append(BlockRef(self._block_first, self._offset, len(raw), len(self._pending), payload_crc))
        self._offset += len(raw)
        self._block_first = self._next_entry
        self._pending, self._pending_bytes = [], 0
        return raw

    def finish(self, metadata: Mapping[str, bytes] | None = None) -> tuple[bytes, LedgerIndex]:
        """The last block's bytes (possibly empty) and the ledger's index."""
        tail = self._cut()
        return tail, LedgerIndex(
            self.ledger_id, self._next_entry, self._ledger_bytes, self._offset, tuple(self._blocks), metadata or {}
        )


def decode_block(data: bytes, ref: BlockRef) -> list[tuple[int, bytes]]:
    """The ``(entry_id, bytes)`` of one block read back, after checking it against its index record."""
    if len(data) != ref.length:
        raise OffloadFormatError(f"block at {ref.offset}: read {len(data)} bytes, the index says {ref.length}")
    head = data[: _BLOCK_HEAD.size]
    try:
        magic, first, count, plen, pcrc = _BLOCK_HEAD.unpack(head)
        (hcrc,) = _BLOCK_HEAD_CRC.unpack_from(data, _BLOCK_HEAD.size)
    except struct.error as exc:
        raise OffloadFormatError(f"block at {ref.offset} is truncated") from exc
    if magic != BLOCK_MAGIC or crc32c(head) != hcrc:
        raise OffloadFormatError(f"block at {ref.offset}: bad header (wrong offset or corrupt)")
    if (first, count, pcrc) != (
        ref.first_entry,
        ref.entry_count,
        ref.payload_crc,
    ) or plen != ref.length - BLOCK_HEADER_SIZE:
        raise OffloadFormatError(f"block at {ref.offset} is not the one the index lists")
    payload = memoryview(data)[BLOCK_HEADER_SIZE:]
    if crc32c(payload) != pcrc:
        raise OffloadFormatError(f"block at {ref.offset}: payload checksum mismatch")
    out: list[tuple[int, bytes]] = []
    pos = 0
    for i in range(count):
        if pos + 4 > plen:
            raise OffloadFormatError(f"block at {ref.offset}: entry {first + i} is truncated")
        (n,) = _U32.unpack_from(payload, pos)
        if pos + 4 + n > plen:
            raise OffloadFormatError(f"block at {ref.offset}: entry {first + i} overruns the block")
        out.append((first + i, bytes(payload[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    if pos != plen:
        raise OffloadFormatError(f"block at {ref.offset} has {plen - pos} trailing bytes")
    return out


def decode_blocks(data: bytes, refs: Iterable[BlockRef]) -> Iterator[tuple[BlockRef, list[tuple[int, bytes]]]]:
    """Split a ranged read of consecutive blocks (``data`` starts at the first ref's offset) and
    decode each one."""
    refs = list(refs)
    if not refs:
        return
    base = refs[0].offset
    for ref in refs:
        start = ref.offset - base
        yield ref, decode_block(data[start : start + ref.length], ref)
