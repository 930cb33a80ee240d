"""What the broker needs to know about a stored entry, read from its bytes without I/O.

A stored entry is exactly the block a producer sent after the checksum:
``[metadataSize u32][MessageMetadata][payload]`` (a batch stays one entry). Consumers get it back
verbatim inside MESSAGE frames.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from broker.protocol import MessageMetadata, key_hash_slot, sticky_key

__all__ = ["EntryInfo", "entry_info", "entry_metadata", "ack_set_words", "acked_indexes_from_ack_set",
           "Signal", "UINT64_MAX"]

UINT64_MAX = (1 << 64) - 1
_U32 = struct.Struct(">I")


def entry_metadata(data: bytes) -> MessageMetadata:
    """Parse the MessageMetadata at the start of a stored entry; ValueError if it is not one."""
    if len(data) < 4:
        raise ValueError("entry too short for a metadata size")
    (size,) = _U32.unpack_from(data, 0)
    if size > len(data) - 4:
        raise ValueError("entry metadata size overruns the entry")
    md = MessageMetadata()
    md.ParseFromString(data[4:4 + size])
    return md


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """Dispatch facts of one entry: message count (permits used), Key_Shared slot, delivery time."""

    num_messages: int
    is_batch: bool
    hash_slot: int
    deliver_at_ms: int | None
    publish_time_ms: int


def entry_info(data: bytes) -> EntryInfo:
    """`EntryInfo` of a stored entry; an unparsable entry counts as one message of the NONE key."""
    try:
        md = entry_metadata(data)
    except Exception:  # noqa: BLE001 - a corrupt entry must still be deliverable (the client rejects it)
        return EntryInfo(1, False, key_hash_slot(b"NONE_KEY"), None, 0)
    is_batch = md.HasField("num_messages_in_batch")
    return EntryInfo(
        num_messages=max(1, md.num_messages_in_batch) if is_batch else 1,
        is_batch=is_batch,
        hash_slot=key_hash_slot(sticky_key(md)),
        deliver_at_ms=md.deliver_at_time if md.HasField("deliver_at_time") else None,
        publish_time_ms=md.publish_time,
    )


def ack_set_words(batch_size: int, acked: Iterable[int]) -> list[int]:
    """Java ``BitSet.toLongArray`` of the still-unacked indexes (bit set = unacked), as signed int64."""
    acked = set(acked)
    words = [0] * ((batch_size + 63) // 64)
    for i in range(batch_size):
        if i not in acked:
            words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def acked_indexes_from_ack_set(batch_size: int, words: Iterable[int]) -> set[int]:
    """Indexes of a batch that an ack's ``ack_set`` marks as acked (bit clear = acked)."""
    unsigned = [w & UINT64_MAX for w in words]
    out = set()
    for i in range(batch_size):
        word = unsigned[i // 64] if i // 64 < len(unsigned) else 0
        if not (word >> (i % 64)) & 1:
            out.add(i)
    return out


class Signal:
    """A level-triggered wake-up: waiters capture `current()` before checking state, then wait on it.

    `fire` sets the captured event and starts a fresh one, so a change that happens between a
    waiter's check and its wait is never missed.
    """

    def __init__(self) -> None:
        import trio

        self._trio = trio
        self._event = trio.Event()

    def current(self):  # noqa: ANN201 - trio.Event
        """The event that the next `fire` sets."""
        return self._event

    def fire(self) -> None:
        """Wake everyone waiting on the current event."""
        self._event.set()
        self._event = self._trio.Event()
