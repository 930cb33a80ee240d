"""Entry and LAC digests as BookKeeper's CRC32C digest manager frames them (pure, sans-IO).

An entry, as the client sends it in ``AddRequest.body`` and the bookie stores and returns it::

    [ledgerId i64][entryId i64][lastAddConfirmed i64][length i64][crc32c u32][payload]

all big-endian, ``length`` being the ledger's total payload length after this entry. The
checksum is one CRC32C (Castagnoli, the standard reflected CRC with init/xorout 0xFFFFFFFF,
as ``crc32c.crc32c`` computes it) over the 32 header bytes followed by the payload - the 4
checksum bytes themselves are skipped - which is what BookKeeper's ``DigestManager`` does for
the CRC32C digest type (METADATA_LENGTH = 32, a 4-byte code written as a Java int).

A WRITE_LAC body is ``[ledgerId i64][lac i64][crc32c u32]``, the checksum over the 16 header
bytes (BookKeeper's LAC_METADATA_LENGTH = 16).

Only the CRC32C digest type is implemented: Magnetar ledgers are always created with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c as _crc32c

__all__ = [
    "ENTRY_HEADER_SIZE",
    "LAC_BODY_SIZE",
    "DecodedEntry",
    "DigestMismatch",
    "EntryHeader",
    "decode_entry",
    "decode_lac",
    "encode_entry",
    "encode_lac",
    "peek_entry_header",
]

_META = struct.Struct(">qqqq")
_LAC_META = struct.Struct(">qq")
_CRC = struct.Struct(">I")

ENTRY_HEADER_SIZE = _META.size + _CRC.size
"""36: bytes before the payload in a digest-framed entry."""
LAC_BODY_SIZE = _LAC_META.size + _CRC.size
"""20: bytes of a digest-framed LAC."""


class DigestMismatch(Exception):
    """The data is not a valid digest-framed entry or LAC: too short, a bad checksum, or
    checksummed ids that are not the ones expected."""


@dataclass(frozen=True, slots=True)
class EntryHeader:
    """The header fields of a digest-framed entry."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    """A verified entry: its header fields and payload."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int
    payload: bytes


def encode_entry(ledger_id: int, entry_id: int, lac: int, length: int,
                 payload: bytes | bytearray | memoryview) -> bytes:
    """Digest-frame ``payload``; ``length`` is the ledger length including this entry.

    Raises ``struct.error`` if an id does not fit in a signed 64-bit integer.
    """
    meta = _META.pack(ledger_id, entry_id, lac, length)
    crc = _crc32c.crc32c(payload, _crc32c.crc32c(meta))
    return b"".join((meta, _CRC.pack(crc), payload))


def peek_entry_header(data: bytes | bytearray | memoryview) -> EntryHeader:
    """The header fields WITHOUT checking the checksum (a bookie reading the LAC of an add it
    stores verbatim). Raises ``DigestMismatch`` if ``data`` is shorter than a header."""
    if len(data) < ENTRY_HEADER_SIZE:
        raise DigestMismatch(f"entry of {len(data)} bytes is shorter than its header")
    return EntryHeader(*_META.unpack_from(data, 0))


def decode_entry(data: bytes | bytearray | memoryview, expected_ledger_id: int | None = None,
                 expected_entry_id: int | None = None) -> DecodedEntry:
    """Verify and unpack a digest-framed entry.

    Raises ``DigestMismatch`` when ``data`` is shorter than the header, the checksum does not
    match, or the (checksummed) ledger / entry id differs from the expected one.
    """
    view = memoryview(data)
    if len(view) < ENTRY_HEADER_SIZE:
        raise DigestMismatch(f"entry of {len(view)} bytes is shorter than its header")
    payload = view[ENTRY_HEADER_SIZE:]
    crc = _crc32c.crc32c(payload, _crc32c.crc32c(view[: _META.size]))
    (stored,) = _CRC.unpack_from(view, _META.size)
    if crc != stored:
        raise DigestMismatch(f"entry checksum mismatch: stored {stored:#010x}, computed {crc:#010x}")
    ledger_id, entry_id, lac, length = _META.unpack_from(view, 0)
    if expected_ledger_id is not None and ledger_id != expected_ledger_id:
        raise DigestMismatch(f"entry belongs to ledger {ledger_id}, expected {expected_ledger_id}")
    if expected_entry_id is not None and entry_id != expected_entry_id:
        raise DigestMismatch(f"entry is {entry_id}, expected {expected_entry_id}")
    return DecodedEntry(ledger_id, entry_id, lac, length, bytes(payload))


def encode_lac(ledger_id: int, lac: int) -> bytes:
    """Digest-frame a LAC for a WRITE_LAC body (20 bytes)."""
    meta = _LAC_META.pack(ledger_id, lac)
    return meta + _CRC.pack(_crc32c.crc32c(meta))


def decode_lac(data: bytes | bytearray | memoryview, expected_ledger_id: int | None = None) -> int:
    """Verify a digest-framed LAC and return the LAC.

    Raises ``DigestMismatch`` when ``data`` is not exactly ``LAC_BODY_SIZE`` bytes, the checksum
    does not match, or the ledger id differs from the expected one.
    """
    if len(data) != LAC_BODY_SIZE:
        raise DigestMismatch(f"LAC body of {len(data)} bytes, expected {LAC_BODY_SIZE}")
    view = memoryview(data)
    (stored,) = _CRC.unpack_from(view, _LAC_META.size)
    crc = _crc32c.crc32c(view[: _LAC_META.size])
    if crc != stored:
        raise DigestMismatch(f"LAC checksum mismatch: stored {stored:#010x}, computed {crc:#010x}")
    ledger_id: int
    lac: int
    ledger_id, lac = _LAC_META.unpack_from(view, 0)
    if expected_ledger_id is not None and ledger_id != expected_ledger_id:
        raise DigestMismatch(f"LAC belongs to ledger {ledger_id}, expected {expected_ledger_id}")
    return lac
