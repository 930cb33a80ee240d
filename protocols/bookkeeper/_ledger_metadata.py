"""Ledger metadata: the record a ledger's metadata node holds, as a frozen value.

Stored form (BookKeeper's format version 3, what BookKeeper 4.9+ writes by default): the ASCII
line ``BookieMetadataFormatVersion\\t3\\n`` then the ``LedgerMetadataFormat`` protobuf, prefixed
with its length as a protobuf varint (Java's ``writeDelimitedTo``). Format version 2 (the same
message in protobuf text format after the line ``BookieMetadataFormatVersion\\t2\\n``, written by
BookKeeper before 4.9 or with ``ledgerMetadataVersion = 2``) is read too, and a ledger read in it
is written back in it (``format_version``), as BookKeeper keeps a ledger's format on update.

State rules (``LedgerState``):

1. A ledger is created OPEN with one segment starting at entry 0, ``last_entry_id == -1`` and
   ``length == 0``.
2. OPEN -> CLOSED when the writer closes it (``closed``), OPEN -> IN_RECOVERY when a reader
   starts recovery (``in_recovery``), IN_RECOVERY -> CLOSED when recovery ends. CLOSED is final.
3. Only a CLOSED ledger's ``last_entry_id`` and ``length`` are authoritative; while OPEN or
   IN_RECOVERY they are whatever was last written (normally -1 and 0).
4. Segments (ensemble changes) are added while OPEN or IN_RECOVERY, with strictly increasing
   ``first_entry_id``; a new segment at the same first entry as the last one replaces it (a
   second ensemble change before any entry reached the first one).

Invariants checked on construction (``ValueError``): 1 <= Qa <= Qw <= E, every ensemble has E
distinct bookies, segments start at 0 and are strictly increasing, a CLOSED ledger's last
entry is >= -1 and its segments start at or below ``last_entry_id + 1``.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from google.protobuf import text_format
from google.protobuf.message import DecodeError, EncodeError

from .._utf8 import invalid_utf8_field
from . import ledger_metadata_pb2 as pb

__all__ = [
    "METADATA_FORMAT_VERSION",
    "DigestType",
    "LedgerMetadata",
    "LedgerState",
    "MetadataFormatError",
    "Segment",
]

METADATA_FORMAT_VERSION = 3
_HEADER_KEY = b"BookieMetadataFormatVersion\t"
_HEADER = _HEADER_KEY + str(METADATA_FORMAT_VERSION).encode() + b"\n"
_MAX_VERSION_DIGITS = 10


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position); ``MetadataFormatError`` if truncated or longer than 10 bytes."""
    value = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        b = data[i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i + 1
        shift += 7
    raise MetadataFormatError("ledger metadata length prefix truncated or invalid")


class MetadataFormatError(Exception):
    """Stored bytes are not a ledger metadata record Magnetar can read."""


class LedgerState(enum.IntEnum):
    """Ledger lifecycle; values are the protobuf's. Rules in the module docstring."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


class DigestType(enum.IntEnum):
    """Entry digest type; values are the protobuf's. Magnetar writes CRC32C."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


@dataclass(frozen=True, slots=True)
class Segment:
    """An ensemble and the first entry it serves (until the next segment's first entry)."""

    first_entry_id: int
    ensemble: tuple[str, ...]


def _frozen_map(m: Mapping[str, bytes]) -> Mapping[str, bytes]:
    return MappingProxyType(dict(m))


@dataclass(frozen=True)
class LedgerMetadata:
    """A ledger's metadata (see the module docstring for the state rules and invariants).

    Equality compares every field; ``custom_metadata`` is a read-only mapping.
    """

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    segments: tuple[Segment, ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = b""
    ctime_ms: int | None = None
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)
    ctoken: int = 0
    format_version: int = field(default=METADATA_FORMAT_VERSION, compare=False)
    """The stored form ``encode`` writes: 3 (binary) or 2 (text). Not part of equality."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", tuple(self.segments))
        object.__setattr__(self, "state", LedgerState(self.state))
        object.__setattr__(self, "digest_type", DigestType(self.digest_type))
        object.__setattr__(self, "custom_metadata", _frozen_map(self.custom_metadata))
        self._validate()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LedgerMetadata):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (
            self.ensemble_size,
            self.write_quorum,
            self.ack_quorum,
            self.segments,
            self.state,
            self.last_entry_id,
            self.length,
            self.digest_type,
            self.password,
            self.ctime_ms,
            tuple(sorted(self.custom_metadata.items())),
            self.ctoken,
        )

    def _validate(self) -> None:
        e, qw, qa = self.ensemble_size, self.write_quorum, self.ack_quorum
        if not 1 <= qa <= qw <= e:
            raise ValueError(f"quorums must satisfy 1 <= Qa <= Qw <= E, got Qa={qa} Qw={qw} E={e}")
        if not self.segments:
            raise ValueError("a ledger has at least one segment")
        if self.segments[0].first_entry_id != 0:
            raise ValueError("the first segment must start at entry 0")
        prev = -1
        for seg in self.segments:
            if seg.first_entry_id <= prev:
                raise ValueError("segments must have strictly increasing first entry ids")
            prev = seg.first_entry_id
            if len(seg.ensemble) != e or len(set(seg.ensemble)) != e:
                raise ValueError(f"segment at {seg.first_entry_id} must list {e} distinct bookies")
        if self.last_entry_id < -1 or self.length < 0:
            raise ValueError("last_entry_id must be >= -1 and length >= 0")
        if (
            self.state is LedgerState.CLOSED
            and len(self.segments) > 1
            and self.segments[-1].first_entry_id > self.last_entry_id + 1
        ):
            raise ValueError("a closed ledger's last segment starts after its last entry")

    # ------------------------------------------------------------ queries

    @property
    def last_segment(self) -> Segment:
        """The segment new entries go to."""
        return self.segments[-1]

    @property
    def is_closed(self) -> bool:
        """True once the ledger is CLOSED (its last entry and length are final)."""
        return self.state is LedgerState.CLOSED

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble serving ``entry_id``: the last segment starting at or before it.

        Raises ``ValueError`` for a negative entry id.
        """
        if entry_id < 0:
            raise ValueError(f"entry id {entry_id} is negative")
        lo, hi = 0, len(self.segments)
        while hi - lo > 1:  # binary search: ledgers that changed ensemble often have many segments
            mid = (lo + hi) // 2
            if self.segments[mid].first_entry_id <= entry_id:
                lo = mid
            else:
                hi = mid
        return self.segments[lo].ensemble

    # ------------------------------------------------------------ transitions

    def with_segment(self, first_entry_id: int, ensemble: tuple[str, ...] | list[str]) -> LedgerMetadata:
        """A copy with a new last segment (ensemble change). A segment at the same first entry as
        the current last one replaces it. ``ValueError`` if CLOSED or out of order."""
        if self.state is LedgerState.CLOSED:
            raise ValueError("cannot change the ensemble of a closed ledger")
        segs = list(self.segments)
        if segs and segs[-1].first_entry_id == first_entry_id:
            segs.pop()
        segs.append(Segment(first_entry_id, tuple(ensemble)))
        return replace(self, segments=tuple(segs))

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        """A CLOSED copy with the final ``last_entry_id`` and ``length``.

        Raises ``ValueError`` if already CLOSED (closing twice must be decided by the caller
        against the stored record, not silently overwritten).
        """
        if self.state is LedgerState.CLOSED:
            raise ValueError("ledger is already closed")
        return replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def in_recovery(self) -> LedgerMetadata:
        """An IN_RECOVERY copy. ``ValueError`` if CLOSED; idempotent when already IN_RECOVERY."""
        if self.state is LedgerState.CLOSED:
            raise ValueError("a closed ledger needs no recovery")
        return replace(self, state=LedgerState.IN_RECOVERY)

    # ------------------------------------------------------------ codec

    def to_proto(self) -> pb.LedgerMetadataFormat:
        """The ``LedgerMetadataFormat`` message for this metadata."""
        state: Any = int(self.state)  # the stubs type enum fields as the enum class; any number works
        digest_type: Any = int(self.digest_type)
        fmt = pb.LedgerMetadataFormat(
            quorumSize=self.write_quorum,
            ensembleSize=self.ensemble_size,
            length=self.length,
            lastEntryId=self.last_entry_id,
            state=state,
            digestType=digest_type,
            password=self.password,
            ackQuorumSize=self.ack_quorum,
            cToken=self.ctoken,
        )
        if self.ctime_ms is not None:
            fmt.ctime = self.ctime_ms
        for seg in self.segments:
            fmt.segment.add(firstEntryId=seg.first_entry_id, ensembleMember=list(seg.ensemble))
        for key in sorted(self.custom_metadata):  # sorted: equal metadata encodes to equal bytes
            fmt.customMetadata.add(key=key, value=self.custom_metadata[key])
        return fmt

    def encode(self) -> bytes:
        """The stored form: version header line, then the length-delimited protobuf (format 3) or
        its text (format 2, without the creator token, which that format never had)."""
        if self.format_version == 2:
            fmt = self.to_proto()
            fmt.ClearField("cToken")
            return _HEADER_KEY + b"2\n" + text_format.MessageToString(fmt).encode()
        try:
            body: bytes = self.to_proto().SerializeToString()
        except EncodeError as exc:  # unreachable for validated values; named for clarity
            raise MetadataFormatError(str(exc)) from exc
        return _HEADER + _varint(len(body)) + body

    @classmethod
    def from_proto(cls, fmt: pb.LedgerMetadataFormat) -> LedgerMetadata:
        """Build from a ``LedgerMetadataFormat``; ``MetadataFormatError`` if it is invalid."""
        try:
            return cls(
                ensemble_size=fmt.ensembleSize,
                write_quorum=fmt.quorumSize,
                ack_quorum=fmt.ackQuorumSize if fmt.HasField("ackQuorumSize") else fmt.quorumSize,
                segments=tuple(Segment(s.firstEntryId, tuple(s.ensembleMember)) for s in fmt.segment),
                state=LedgerState(fmt.state),
                last_entry_id=fmt.lastEntryId if fmt.HasField("lastEntryId") else -1,
                length=fmt.length,
                digest_type=DigestType(fmt.digestType) if fmt.HasField("digestType") else DigestType.CRC32,
                password=fmt.password,
                ctime_ms=fmt.ctime if fmt.HasField("ctime") else None,
                custom_metadata={m.key: m.value for m in fmt.customMetadata},
                ctoken=fmt.cToken,
            )
        except ValueError as exc:
            raise MetadataFormatError(f"invalid ledger metadata: {exc}") from exc

    @classmethod
    def decode(cls, data: bytes) -> LedgerMetadata:
        """Parse the stored form. Raises ``MetadataFormatError`` for a missing or unknown version
        header, a truncated or unparsable body, a ``string`` field that is not UTF-8, trailing
        bytes, or values that break the invariants."""
        data = bytes(data)
        if not data.startswith(_HEADER_KEY):
            raise MetadataFormatError("ledger metadata header missing")
        pos = len(_HEADER_KEY)
        end = data.find(b"\n", pos, pos + _MAX_VERSION_DIGITS + 1)
        if end < 0:
            raise MetadataFormatError("ledger metadata version line is not terminated")
        version = data[pos:end]
        if not version.isdigit():
            raise MetadataFormatError(f"ledger metadata version {version!r} is not a number")
        if int(version) == 2:
            return cls._decode_text(data[end + 1 :])
        if int(version) != METADATA_FORMAT_VERSION:
            raise MetadataFormatError(
                f"ledger metadata format version {int(version)} unsupported (2 and {METADATA_FORMAT_VERSION} are)"
            )
        pos = end + 1
        size, pos = _read_varint(data, pos)
        if pos + size != len(data):
            raise MetadataFormatError(f"ledger metadata body is {len(data) - pos} bytes, the prefix says {size}")
        fmt = pb.LedgerMetadataFormat()
        body = data[pos:]
        try:
            fmt.ParseFromString(body)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise MetadataFormatError(f"ledger metadata body unparsable: {exc}") from exc
        if not fmt.IsInitialized():  # upb does not enforce proto2 `required` on parse
            missing = fmt.FindInitializationErrors()  # type: ignore[attr-defined]  # not in the stubs
            raise MetadataFormatError(f"ledger metadata lacks {missing}")
        bad = invalid_utf8_field(fmt, body)  # nor UTF-8: the field would read as bytes (see _utf8)
        if bad is not None:
            raise MetadataFormatError(f"ledger metadata field {bad} is not UTF-8")
        return cls.from_proto(fmt)

    @classmethod
    def _decode_text(cls, body: bytes) -> LedgerMetadata:
        """Format 2: the message in protobuf text format."""
        fmt = pb.LedgerMetadataFormat()
        try:
            with warnings.catch_warnings():  # an invalid escape only warns in Python; Java's parser refuses it
                warnings.simplefilter("error", DeprecationWarning)
                text_format.Parse(body.decode("utf-8"), fmt)
        except (text_format.ParseError, UnicodeDecodeError, DeprecationWarning) as exc:
            raise MetadataFormatError(f"ledger metadata text unparsable: {exc}") from exc
        if not fmt.IsInitialized():
            missing = fmt.FindInitializationErrors()  # type: ignore[attr-defined]  # not in the stubs
            raise MetadataFormatError(f"ledger metadata lacks {missing}")
        return replace(cls.from_proto(fmt), format_version=2)
