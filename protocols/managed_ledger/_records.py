"""Managed-ledger metadata records as frozen values, with their binary codec (sans-IO).

``ManagedLedgerInfo`` is the value of a managed ledger's metadata node (its ledger list);
``CursorInfo`` the value of each cursor's child node. Both are stored as the plain binary
protobuf (``magnetar.ml.ManagedLedgerInfo`` / ``ManagedCursorInfo``, Pulsar's field numbers).
Invariants (checked on construction, ``ValueError``; on decode, ``MLFormatError``):

- ledgers are listed in strictly increasing ledger id, with non-negative entries and size;
- a cursor's individually deleted ranges are open-closed ``(lower, upper]`` as in Pulsar, each
  with ``lower < upper``, sorted and disjoint (adjacent ranges are allowed but callers should
  merge them).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from google.protobuf.message import DecodeError, EncodeError, Message

from .._utf8 import invalid_utf8_field
from . import managed_ledger_pb2 as pb

__all__ = [
    "EARLIEST",
    "LATEST",
    "CursorInfo",
    "LedgerInfo",
    "MLFormatError",
    "ManagedLedgerInfo",
    "OffloadContext",
    "Position",
    "PositionRange",
    "indexes_to_words",
    "words_to_indexes",
]

_I64_MAX = 2**63 - 1


class MLFormatError(Exception):
    """Bytes that are not a valid managed-ledger or cursor record."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """An entry position; ordered by ledger id, then entry id."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


EARLIEST = Position(-1, -1)
"""Before every entry (Pulsar's PositionImpl.EARLIEST)."""
LATEST = Position(_I64_MAX, _I64_MAX)
"""After every entry (Pulsar's PositionImpl.LATEST)."""


@dataclass(frozen=True, slots=True)
class PositionRange:
    """The open-closed range ``(lower, upper]`` of positions."""

    lower: Position
    upper: Position

    def __contains__(self, pos: object) -> bool:
        return isinstance(pos, Position) and self.lower < pos <= self.upper


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass(frozen=True)
class OffloadContext:
    """A ledger's copy in tiered storage (Pulsar's ``OffloadContext``).

    ``uid`` names its objects and is recorded before anything is written; ``complete`` once the
    copy is written and verified (``timestamp_ms``: when); ``bookkeeper_deleted`` once the bookie
    copy is gone; ``driver`` and ``driver_metadata`` say where it went.
    """

    uid: uuid.UUID
    complete: bool = False
    bookkeeper_deleted: bool = False
    timestamp_ms: int = 0
    driver: str = ""
    driver_metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "driver_metadata", _ro(self.driver_metadata))
        if self.bookkeeper_deleted and not self.complete:
            raise ValueError("a ledger's bookie copy cannot be deleted before its offload is complete")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffloadContext):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (
            self.uid,
            self.complete,
            self.bookkeeper_deleted,
            self.timestamp_ms,
            self.driver,
            tuple(sorted(self.driver_metadata.items())),
        )

    def completed(self, timestamp_ms: int) -> OffloadContext:
        """This context marked complete at ``timestamp_ms``."""
        return replace(self, complete=True, timestamp_ms=timestamp_ms)

    def bookie_copy_deleted(self) -> OffloadContext:
        """This (complete) context with its bookie copy marked deleted."""
        return replace(self, bookkeeper_deleted=True)

    def _fill(self, msg: Any) -> None:
        n = self.uid.int
        msg.uidMsb, msg.uidLsb = _signed64(n >> 64), _signed64(n & ((1 << 64) - 1))
        msg.complete = self.complete
        msg.bookkeeperDeleted = self.bookkeeper_deleted
        msg.timestamp = self.timestamp_ms
        if self.driver:
            msg.driverMetadata.name = self.driver
            for key in sorted(self.driver_metadata):
                msg.driverMetadata.properties.add(key=key, value=self.driver_metadata[key])

    @classmethod
    def _from(cls, msg: Any) -> OffloadContext | None:
        if not (msg.HasField("uidMsb") and msg.HasField("uidLsb")):
            return None  # Pulsar writes an empty context for ledgers never offloaded
        n = ((msg.uidMsb & ((1 << 64) - 1)) << 64) | (msg.uidLsb & ((1 << 64) - 1))
        driver, meta = "", {}
        if msg.HasField("driverMetadata"):
            driver = msg.driverMetadata.name
            meta = {kv.key: kv.value for kv in msg.driverMetadata.properties}
        return cls(uuid.UUID(int=n), msg.complete, msg.bookkeeperDeleted and msg.complete, msg.timestamp, driver, meta)


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """One ledger of a managed ledger: entries and bytes (final once rolled), close time, and its
    copy in tiered storage if it has one."""

    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp_ms: int = 0
    offload: OffloadContext | None = None

    @property
    def offloaded(self) -> bool:
        """Whether a complete, verified copy is in tiered storage."""
        return self.offload is not None and self.offload.complete

    @property
    def on_bookies(self) -> bool:
        """Whether the bookie copy still exists (as far as the managed ledger knows)."""
        return self.offload is None or not self.offload.bookkeeper_deleted


def _ro(m: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(m))


def _parse(msg_type: type, data: bytes, what: str) -> Any:
    msg = msg_type()
    data = bytes(data)
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise MLFormatError(f"not a {what} record: {exc}") from exc
    if not msg.IsInitialized():  # upb does not enforce proto2 `required` on parse
        raise MLFormatError(f"{what} record lacks {msg.FindInitializationErrors()}")
    bad = invalid_utf8_field(msg, data)  # nor UTF-8: the field would read as bytes (see _utf8)
    if bad is not None:
        raise MLFormatError(f"{what} record field {bad} is not UTF-8")
    return msg


def _serialize(msg: Message) -> bytes:
    try:
        data: bytes = msg.SerializeToString()
    except EncodeError as exc:  # unreachable for validated values
        raise MLFormatError(str(exc)) from exc
    return data


@dataclass(frozen=True)
class ManagedLedgerInfo:
    """A managed ledger's ledger list, terminated position and string properties."""

    ledgers: tuple[LedgerInfo, ...] = ()
    terminated_position: Position | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ledgers", tuple(self.ledgers))
        object.__setattr__(self, "properties", _ro(self.properties))
        prev = None
        for info in self.ledgers:
            if prev is not None and info.ledger_id <= prev:
                raise ValueError("ledgers must be in strictly increasing id order")
            if info.entries < 0 or info.size < 0:
                raise ValueError(f"ledger {info.ledger_id} has negative entries or size")
            prev = info.ledger_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ManagedLedgerInfo):
            return NotImplemented
        return (self.ledgers, self.terminated_position, dict(self.properties)) == (
            other.ledgers,
            other.terminated_position,
            dict(other.properties),
        )

    def __hash__(self) -> int:
        return hash((self.ledgers, self.terminated_position, tuple(sorted(self.properties.items()))))

    def encode(self) -> bytes:
        """The binary ``ManagedLedgerInfo`` protobuf (properties in key order)."""
        msg = pb.ManagedLedgerInfo()
        for info in self.ledgers:
            li = msg.ledgerInfo.add(
                ledgerId=info.ledger_id, entries=info.entries, size=info.size, timestamp=info.timestamp_ms
            )
            if info.offload is not None:
                info.offload._fill(li.offloadContext)
        if self.terminated_position is not None:
            msg.terminatedPosition.ledgerId = self.terminated_position.ledger_id
            msg.terminatedPosition.entryId = self.terminated_position.entry_id
        for key in sorted(self.properties):
            msg.properties.add(key=key, value=self.properties[key])
        return _serialize(msg)

    @classmethod
    def decode(cls, data: bytes) -> ManagedLedgerInfo:
        """Parse ``encode`` output; ``MLFormatError`` when unparsable or invalid."""
        msg = _parse(pb.ManagedLedgerInfo, data, "ManagedLedgerInfo")
        term = None
        if msg.HasField("terminatedPosition"):
            term = Position(msg.terminatedPosition.ledgerId, msg.terminatedPosition.entryId)
        try:
            return cls(
                ledgers=tuple(
                    LedgerInfo(
                        i.ledgerId,
                        i.entries,
                        i.size,
                        i.timestamp,
                        OffloadContext._from(i.offloadContext) if i.HasField("offloadContext") else None,
                    )
                    for i in msg.ledgerInfo
                ),
                terminated_position=term,
                properties={kv.key: kv.value for kv in msg.properties},
            )
        except ValueError as exc:
            raise MLFormatError(f"invalid ManagedLedgerInfo: {exc}") from exc


def _check_ranges(ranges: tuple[PositionRange, ...]) -> None:
    prev_upper: Position | None = None
    for r in ranges:
        if not r.lower < r.upper:
            raise ValueError(f"range ({r.lower}, {r.upper}] is empty")
        if prev_upper is not None and r.lower < prev_upper:
            raise ValueError("individually deleted ranges must be sorted and disjoint")
        prev_upper = r.upper


def _pos(p: pb.NestedPositionInfo) -> Position:
    return Position(p.ledgerId, p.entryId)


@dataclass(frozen=True)
class CursorInfo:
    """A cursor's persisted state.

    ``mark_delete``: every entry at or before it is acknowledged. ``individual_deleted``: ranges
    acknowledged beyond it. ``properties``: numeric properties of the mark-delete position.
    ``batch_deletes``: per batch entry, the bitset words of its batch indexes (see
    ``indexes_to_words``). ``cursor_properties``: string properties of the cursor itself.
    """

    mark_delete: Position
    individual_deleted: tuple[PositionRange, ...] = ()
    properties: Mapping[str, int] = field(default_factory=dict)
    last_active_ms: int | None = None
    batch_deletes: Mapping[Position, tuple[int, ...]] = field(default_factory=dict)
    cursor_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "individual_deleted", tuple(self.individual_deleted))
        object.__setattr__(self, "properties", _ro(self.properties))
        object.__setattr__(
            self, "batch_deletes", MappingProxyType({p: tuple(w) for p, w in self.batch_deletes.items()})
        )
        object.__setattr__(self, "cursor_properties", _ro(self.cursor_properties))
        _check_ranges(self.individual_deleted)
        for words in self.batch_deletes.values():
            if any(not -(2**63) <= w <= _I64_MAX for w in words):
                raise ValueError("bitset words must be signed 64-bit integers")

    def _key(self) -> tuple[object, ...]:
        return (
            self.mark_delete,
            self.individual_deleted,
            tuple(sorted(self.properties.items())),
            self.last_active_ms,
            tuple(sorted(self.batch_deletes.items())),
            tuple(sorted(self.cursor_properties.items())),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CursorInfo):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def is_deleted(self, pos: Position) -> bool:
        """True if ``pos`` is at or before the mark-delete position or in a deleted range."""
        if pos <= self.mark_delete:
            return True
        lo, hi = 0, len(self.individual_deleted)
        while lo < hi:  # first range whose upper >= pos
            mid = (lo + hi) // 2
            if self.individual_deleted[mid].upper < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo < len(self.individual_deleted) and pos in self.individual_deleted[lo]

    def encode(self) -> bytes:
        """The binary ``ManagedCursorInfo`` protobuf (``cursorsLedgerId`` = -1: the state lives
        in this record, not in a cursor ledger)."""
        msg = pb.ManagedCursorInfo(
            cursorsLedgerId=-1,
            markDeleteLedgerId=self.mark_delete.ledger_id,
            markDeleteEntryId=self.mark_delete.entry_id,
        )
        for r in self.individual_deleted:
            m = msg.individualDeletedMessages.add()
            m.lowerEndpoint.ledgerId, m.lowerEndpoint.entryId = r.lower.ledger_id, r.lower.entry_id
            m.upperEndpoint.ledgerId, m.upperEndpoint.entryId = r.upper.ledger_id, r.upper.entry_id
        for name in sorted(self.properties):
            msg.properties.add(name=name, value=self.properties[name])
        if self.last_active_ms is not None:
            msg.lastActive = self.last_active_ms
        for pos in sorted(self.batch_deletes):
            b = msg.batchedEntryDeletionIndexInfo.add()
            b.position.ledgerId, b.position.entryId = pos.ledger_id, pos.entry_id
            b.deleteSet.extend(self.batch_deletes[pos])
        for name in sorted(self.cursor_properties):
            msg.cursorProperties.add(name=name, value=self.cursor_properties[name])
        return _serialize(msg)

    @classmethod
    def decode(cls, data: bytes) -> CursorInfo:
        """Parse ``encode`` output; ``MLFormatError`` when unparsable or invalid.

        A record without a mark-delete snapshot decodes with ``mark_delete = EARLIEST``.
        """
        msg = _parse(pb.ManagedCursorInfo, data, "ManagedCursorInfo")
        mark = EARLIEST
        if msg.HasField("markDeleteLedgerId") and msg.HasField("markDeleteEntryId"):
            mark = Position(msg.markDeleteLedgerId, msg.markDeleteEntryId)
        try:
            return cls(
                mark_delete=mark,
                individual_deleted=tuple(
                    PositionRange(_pos(r.lowerEndpoint), _pos(r.upperEndpoint)) for r in msg.individualDeletedMessages
                ),
                properties={p.name: p.value for p in msg.properties},
                last_active_ms=msg.lastActive if msg.HasField("lastActive") else None,
                batch_deletes={_pos(b.position): tuple(b.deleteSet) for b in msg.batchedEntryDeletionIndexInfo},
                cursor_properties={p.name: p.value for p in msg.cursorProperties},
            )
        except ValueError as exc:
            raise MLFormatError(f"invalid ManagedCursorInfo: {exc}") from exc


def indexes_to_words(indexes: Iterable[int]) -> tuple[int, ...]:
    """Pack batch indexes into signed 64-bit words as ``java.util.BitSet.toLongArray`` does
    (bit ``i % 64`` of word ``i // 64``; no trailing zero words). ``ValueError`` if negative.

    What a set bit means is the caller's convention (Pulsar: an index not yet acknowledged).
    """
    words: list[int] = []
    for i in indexes:
        if i < 0:
            raise ValueError(f"batch index {i} is negative")
        w, bit = divmod(i, 64)
        if w >= len(words):
            words.extend([0] * (w + 1 - len(words)))
        words[w] |= 1 << bit
    while words and words[-1] == 0:
        words.pop()
    return tuple(w - (1 << 64) if w >= 1 << 63 else w for w in words)


def words_to_indexes(words: Iterable[int]) -> tuple[int, ...]:
    """Inverse of ``indexes_to_words``: the set bit positions, in increasing order."""
    out = []
    for wi, w in enumerate(words):
        w &= (1 << 64) - 1
        while w:
            low = w & -w
            out.append(wi * 64 + low.bit_length() - 1)
            w ^= low
    return tuple(out)
