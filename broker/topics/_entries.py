"""What the broker needs to know about a stored entry, read from its bytes without I/O.

A stored entry is exactly the block a producer sent after the checksum:
``[metadataSize u32][MessageMetadata][payload]`` (a batch stays one entry). Consumers get it back
verbatim inside MESSAGE frames. Entries Apache Pulsar's broker stored carry headers before that
block; the managed ledger's ``read_transform`` (``protocols.pulsar.stored_entry_block``) has
removed them before the broker sees an entry.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import trio
from google.protobuf.message import DecodeError

from protocols.pulsar import MessageMetadata, invalid_utf8_field, key_hash_slot, sticky_key

from ..transactions import TxnID

__all__ = [
    "EntryInfo",
    "entry_info",
    "entry_metadata",
    "ack_set_words",
    "acked_indexes_from_ack_set",
    "MAX_UNKNOWN_BATCH_SIZE",
    "Signal",
    "UINT64_MAX",
]

UINT64_MAX = (1 << 64) - 1
_U32 = struct.Struct(">I")


def entry_metadata(data: bytes) -> MessageMetadata:
    """Parse the MessageMetadata at the start of a stored entry.

    Raises ``ValueError`` (and nothing else) if it is not one: too short, a size that overruns
    the entry, bytes that do not parse, or a ``string`` field that is not UTF-8. Required fields
    are not checked (a stored entry is delivered as it is; the client judges it).
    """
    if len(data) < 4:
        raise ValueError("entry too short for a metadata size")
    (size,) = _U32.unpack_from(data, 0)
    if size > len(data) - 4:
        raise ValueError("entry metadata size overruns the entry")
    md = MessageMetadata()
    raw = data[4 : 4 + size]
    try:
        md.ParseFromString(raw)
    except DecodeError as exc:
        raise ValueError(f"entry metadata unparsable: {exc}") from exc
    bad = invalid_utf8_field(md, raw)
    if bad is not None:
        raise ValueError(f"entry metadata field {bad} is not UTF-8")
    return md


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """Dispatch facts of one entry: message count (permits used), Key_Shared slot, delivery time,
    and for transactions its marker type (a commit or abort marker) and its transaction."""

    num_messages: int
    is_batch: bool
    hash_slot: int
    deliver_at_ms: int | None
    publish_time_ms: int
    marker_type: int | None = None
    txn: TxnID | None = None


def entry_info(data: bytes) -> EntryInfo:
    """`EntryInfo` of a stored entry; an unparsable entry counts as one message of the NONE key.

    Never raises: the dispatcher calls it on every entry it reads, whoever wrote the entry.
    """
    try:
        md = entry_metadata(data)
    except Exception:
        return EntryInfo(1, False, key_hash_slot(b"NONE_KEY"), None, 0)
    is_batch = md.HasField("num_messages_in_batch")
    # A batched message takes at least 6 bytes (its size and its metadata's payload_size), so a
    # producer cannot make the broker believe in more messages than the entry can hold.
    return EntryInfo(
        num_messages=min(max(1, md.num_messages_in_batch), max(1, len(data) // 6)) if is_batch else 1,
        is_batch=is_batch,
        hash_slot=key_hash_slot(sticky_key(md)),
        deliver_at_ms=md.deliver_at_time if md.HasField("deliver_at_time") else None,
        publish_time_ms=md.publish_time,
        marker_type=md.marker_type if md.HasField("marker_type") else None,
        txn=TxnID(md.txnid_most_bits, md.txnid_least_bits) if md.HasField("txnid_most_bits") else None,
    )


MAX_UNKNOWN_BATCH_SIZE = 100_000
"""The largest batch size the broker takes from a client's ack when it does not know the entry's
own (it was delivered before a restart); a larger one is refused rather than trusted."""


def ack_set_words(batch_size: int, acked: Iterable[int]) -> list[int]:
    """Java ``BitSet.toLongArray`` of the still-unacked indexes (bit set = unacked), as signed int64.

    Linear in ``batch_size / 8`` plus the acked indexes (a bitmap, not a loop per index)."""
    bitmap = bytearray(b"\xff" * ((batch_size + 63) // 64 * 8))
    for i in range(batch_size, len(bitmap) * 8):  # at most 63 bits past the batch
        bitmap[i >> 3] &= ~(1 << (i & 7)) & 0xFF
    for i in acked:
        if 0 <= i < batch_size:
            bitmap[i >> 3] &= ~(1 << (i & 7)) & 0xFF
    words = [int.from_bytes(bitmap[k : k + 8], "little") for k in range(0, len(bitmap), 8)]
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def acked_indexes_from_ack_set(batch_size: int, words: Iterable[int]) -> set[int]:
    """Indexes of a batch that an ack's ``ack_set`` marks as acked (bit clear = acked; indexes past
    the words are acked). The caller bounds ``batch_size`` (see `MAX_UNKNOWN_BATCH_SIZE`)."""
    bitmap = b"".join((w & UINT64_MAX).to_bytes(8, "little") for w in words)
    out = set()
    for byte_index in range((batch_size + 7) // 8):
        byte = bitmap[byte_index] if byte_index < len(bitmap) else 0
        if byte == 0xFF:
            continue
        base = byte_index * 8
        for bit in range(min(8, batch_size - base)):
            if not (byte >> bit) & 1:
                out.add(base + bit)
    return out


class Signal:
    """A level-triggered wake-up: waiters capture `current()` before checking state, then wait on it.

    `fire` sets the captured event and starts a fresh one, so a change that happens between a
    waiter's check and its wait is never missed.
    """

    def __init__(self) -> None:
        self._event = trio.Event()

    def current(self):
        """The event that the next `fire` sets."""
        return self._event

    def fire(self) -> None:
        """Wake everyone waiting on the current event."""
        self._event.set()
        self._event = trio.Event()
