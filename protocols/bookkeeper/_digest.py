"""Entry and LAC digests as BookKeeper's digest managers frame them (pure, sans-IO).

An entry, as the client sends it in ``AddRequest.body`` and the bookie stores and returns it::

    [ledgerId i64][entryId i64][lastAddConfirmed i64][length i64][code][payload]

all big-endian, ``length`` being the ledger's total payload length after this entry. ``code``
is the ledger's digest over the 32 header bytes followed by the payload (the code bytes
themselves skipped); its size depends on the digest type recorded in the ledger's metadata
(``LedgerMetadata.digest_type``), as BookKeeper's ``DigestManager`` subclasses define it:

=========  =====  =====================================================================
type       bytes  code
=========  =====  =====================================================================
CRC32C     4      CRC32C (Castagnoli, reflected, init/xorout 0xFFFFFFFF, as
                  ``crc32c.crc32c``), a Java int - Magnetar's and Pulsar's default
CRC32      8      zlib CRC32 as an unsigned value in a Java long (the high 4 bytes 0)
HMAC       20     HMAC-SHA1 keyed with SHA-1(``b"mac"`` + ledger password), as BookKeeper's
                  ``MacDigestManager`` (its ``DigestType.MAC``)
DUMMY      0      nothing: the payload is not protected, only the ids in the header are
                  checked (as BookKeeper's ``DummyDigestManager``, for benchmarks)
=========  =====  =====================================================================

A WRITE_LAC body is ``[ledgerId i64][lac i64][code]``, the code over the 16 header bytes
(BookKeeper's LAC_METADATA_LENGTH = 16).

``EntryDigest`` is one ledger's digest (``digest_for(type, password)``, cached); the module
functions ``encode_entry`` / ``decode_entry`` / ``encode_lac`` / ``decode_lac`` are the CRC32C
digest's, kept for callers that only ever see CRC32C ledgers. A bookie never needs the type: it
reads only the 32 header bytes (``peek_entry_header``), which every type shares.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import crc32c as _crc32c

from ._ledger_metadata import DigestType

__all__ = [
    "ENTRY_HEADER_SIZE",
    "ENTRY_METADATA_SIZE",
    "LAC_BODY_SIZE",
    "LAC_METADATA_SIZE",
    "MAX_ENTRY_HEADER_SIZE",
    "DecodedEntry",
    "DigestMismatch",
    "EntryDigest",
    "EntryHeader",
    "decode_entry",
    "decode_lac",
    "digest_for",
    "encode_entry",
    "encode_lac",
    "peek_entry_header",
]

_META = struct.Struct(">qqqq")
_LAC_META = struct.Struct(">qq")

ENTRY_METADATA_SIZE = _META.size
"""32: the header bytes every digest type shares (ids, LAC, length), before the code."""
LAC_METADATA_SIZE = _LAC_META.size
"""16: the LAC body bytes every digest type shares (ledger id, LAC), before the code."""

_CODE_SIZE = {DigestType.CRC32C: 4, DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.DUMMY: 0}

ENTRY_HEADER_SIZE = ENTRY_METADATA_SIZE + _CODE_SIZE[DigestType.CRC32C]
"""36: bytes before the payload in a CRC32C-framed entry."""
LAC_BODY_SIZE = LAC_METADATA_SIZE + _CODE_SIZE[DigestType.CRC32C]
"""20: bytes of a CRC32C-framed LAC."""
MAX_ENTRY_HEADER_SIZE = ENTRY_METADATA_SIZE + max(_CODE_SIZE.values())
"""52: the largest header of any digest type (HMAC-SHA1), for frame-size bounds."""


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


_Buffer = bytes | bytearray | memoryview


def _crc32c_code(meta: _Buffer, payload: _Buffer) -> bytes:
    return _crc32c.crc32c(payload, _crc32c.crc32c(meta)).to_bytes(4, "big")


def _crc32_code(meta: _Buffer, payload: _Buffer) -> bytes:
    return zlib.crc32(payload, zlib.crc32(meta)).to_bytes(8, "big")


def _dummy_code(meta: _Buffer, payload: _Buffer) -> bytes:
    return b""


class EntryDigest:
    """One ledger's digest: frames entries and LACs with its code and verifies them.

    Guarantees: ``decode_entry(encode_entry(...))`` returns the fields and payload encoded;
    ``decode_entry`` / ``decode_lac`` raise ``DigestMismatch`` for data too short for this type's
    header, a code that does not match (any changed byte of header or payload, except for DUMMY,
    which has no code and protects only what the id checks see), or ids other than the expected
    ones. Immutable and shareable; build it with ``digest_for`` (cached per type and password).
    """

    __slots__ = ("digest_type", "code_size", "header_size", "lac_size", "_code")

    def __init__(self, digest_type: DigestType, password: bytes = b"") -> None:
        self.digest_type = DigestType(digest_type)
        self.code_size = _CODE_SIZE[self.digest_type]
        self.header_size = ENTRY_METADATA_SIZE + self.code_size
        """Bytes before the payload in an entry framed by this digest."""
        self.lac_size = LAC_METADATA_SIZE + self.code_size
        """Bytes of a LAC body framed by this digest."""
        code: Callable[[_Buffer, _Buffer], bytes]
        if self.digest_type is DigestType.CRC32C:
            code = _crc32c_code
        elif self.digest_type is DigestType.CRC32:
            code = _crc32_code
        elif self.digest_type is DigestType.DUMMY:
            code = _dummy_code
        else:
            key = hashlib.sha1(b"mac" + bytes(password)).digest()

            def code(meta: _Buffer, payload: _Buffer) -> bytes:
                mac = hmac.new(key, meta, hashlib.sha1)
                mac.update(payload)
                return mac.digest()

        self._code = code

    def __repr__(self) -> str:
        return f"EntryDigest({self.digest_type.name})"

    def encode_entry(self, ledger_id: int, entry_id: int, lac: int, length: int, payload: _Buffer) -> bytes:
        """Digest-frame ``payload``; ``length`` is the ledger length including this entry.

        Raises ``struct.error`` if an id does not fit in a signed 64-bit integer.
        """
        meta = _META.pack(ledger_id, entry_id, lac, length)
        return b"".join((meta, self._code(meta, payload), payload))

    def decode_entry(
        self, data: _Buffer, expected_ledger_id: int | None = None, expected_entry_id: int | None = None
    ) -> DecodedEntry:
        """Verify and unpack an entry framed by this digest.

        Raises ``DigestMismatch`` when ``data`` is shorter than the header, the code does not
        match, or the ledger / entry id differs from the expected one.
        """
        view = memoryview(data)
        if len(view) < self.header_size:
            raise DigestMismatch(
                f"entry of {len(view)} bytes is shorter than its "
                f"{self.digest_type.name} header ({self.header_size} bytes)"
            )
        payload = view[self.header_size :]
        computed = self._code(view[:ENTRY_METADATA_SIZE], payload)
        stored = bytes(view[ENTRY_METADATA_SIZE : self.header_size])
        if not hmac.compare_digest(computed, stored):
            raise DigestMismatch(
                f"entry {self.digest_type.name} digest mismatch: stored {stored.hex()}, computed {computed.hex()}"
            )
        ledger_id, entry_id, lac, length = _META.unpack_from(view, 0)
        if expected_ledger_id is not None and ledger_id != expected_ledger_id:
            raise DigestMismatch(f"entry belongs to ledger {ledger_id}, expected {expected_ledger_id}")
        if expected_entry_id is not None and entry_id != expected_entry_id:
            raise DigestMismatch(f"entry is {entry_id}, expected {expected_entry_id}")
        return DecodedEntry(ledger_id, entry_id, lac, length, bytes(payload))

    def encode_lac(self, ledger_id: int, lac: int) -> bytes:
        """Digest-frame a LAC for a WRITE_LAC body (``lac_size`` bytes)."""
        meta = _LAC_META.pack(ledger_id, lac)
        return meta + self._code(meta, b"")

    def decode_lac(self, data: _Buffer, expected_ledger_id: int | None = None) -> int:
        """Verify a LAC body framed by this digest and return the LAC.

        Raises ``DigestMismatch`` when ``data`` is not exactly ``lac_size`` bytes, the code does
        not match, or the ledger id differs from the expected one.
        """
        if len(data) != self.lac_size:
            raise DigestMismatch(f"LAC body of {len(data)} bytes, expected {self.lac_size} ({self.digest_type.name})")
        view = memoryview(data)
        computed = self._code(view[:LAC_METADATA_SIZE], b"")
        stored = bytes(view[LAC_METADATA_SIZE:])
        if not hmac.compare_digest(computed, stored):
            raise DigestMismatch(
                f"LAC {self.digest_type.name} digest mismatch: stored {stored.hex()}, computed {computed.hex()}"
            )
        ledger_id: int
        lac: int
        ledger_id, lac = _LAC_META.unpack_from(view, 0)
        if expected_ledger_id is not None and ledger_id != expected_ledger_id:
            raise DigestMismatch(f"LAC belongs to ledger {ledger_id}, expected {expected_ledger_id}")
        return lac


@functools.lru_cache(maxsize=1024)  # bounded: one entry per (type, password) in use
def digest_for(digest_type: DigestType, password: bytes = b"") -> EntryDigest:
    """The ``EntryDigest`` of a ledger with ``digest_type`` and ``password`` (shared, cached).
    Raises ``ValueError`` for a number that is no digest type."""
    return EntryDigest(DigestType(digest_type), bytes(password))


_CRC32C = EntryDigest(DigestType.CRC32C)


def encode_entry(ledger_id: int, entry_id: int, lac: int, length: int, payload: _Buffer) -> bytes:
    """CRC32C-frame ``payload`` (``EntryDigest.encode_entry`` of the CRC32C digest)."""
    return _CRC32C.encode_entry(ledger_id, entry_id, lac, length, payload)


def peek_entry_header(data: _Buffer) -> EntryHeader:
    """The header fields WITHOUT checking the code, whatever the digest type (a bookie reading
    the LAC of an add it stores verbatim). Raises ``DigestMismatch`` if ``data`` is shorter than
    the 32 bytes every type's header starts with."""
    if len(data) < ENTRY_METADATA_SIZE:
        raise DigestMismatch(f"entry of {len(data)} bytes is shorter than its header")
    return EntryHeader(*_META.unpack_from(data, 0))


def decode_entry(
    data: _Buffer, expected_ledger_id: int | None = None, expected_entry_id: int | None = None
) -> DecodedEntry:
    """Verify and unpack a CRC32C-framed entry (``EntryDigest.decode_entry``)."""
    return _CRC32C.decode_entry(data, expected_ledger_id, expected_entry_id)


def encode_lac(ledger_id: int, lac: int) -> bytes:
    """CRC32C-frame a LAC for a WRITE_LAC body (20 bytes)."""
    return _CRC32C.encode_lac(ledger_id, lac)


def decode_lac(data: _Buffer, expected_ledger_id: int | None = None) -> int:
    """Verify a CRC32C-framed LAC and return the LAC (``EntryDigest.decode_lac``)."""
    return _CRC32C.decode_lac(data, expected_ledger_id)
