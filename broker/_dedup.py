"""Message deduplication by producer name and sequence id.

Rules (as Pulsar's MessageDeduplication):

* Rule 1: a SEND is keyed on its *highest* sequence id (`highest_sequence_id`: the command's or
  the metadata's ``highest_sequence_id`` when above ``sequence_id``, else ``sequence_id +
  num_messages - 1``, so a batch of N messages numbered from ``sequence_id`` covers them all).
  One whose highest id is at or below the highest already *pushed* for its producer name is a
  duplicate and is not stored; if it is also at or below the highest *persisted* one it is
  answered at once with message id -1:-1, else after the entries before it. (A re-sent batch
  whose first ids are old but whose highest is new is stored whole, as in Pulsar: writers that
  need exactly-once must re-send the same batches, see the Spark sink.)
* Rule 2: persisted state survives restarts: every ``snapshot_interval`` stored entries (and when
  the topic closes) ``{producer: highest persisted sequence id}`` becomes the properties of the
  durable cursor ``pulsar.dedup``, mark-deleted at the position the snapshot covers (Pulsar's
  design; position and properties are persisted together by the managed ledger). On load the
  broker reads the cursor, then replays the entries after its mark-delete position (their
  metadata carry producer name and sequence ids), so nothing acknowledged is forgotten.
* Rule 3: the cursor is durable so that retention never trims the entries a replay needs: a
  consumed ledger whose sequence ids are not yet in a snapshot stays until the next snapshot.
  (A snapshot written by an older broker to ``/dedup/{managed-ledger-name}`` is still read.)
  The cursor is not a subscription (no backlog quota, TTL or subscription listing); it is deleted
  when deduplication is turned off.
* Rule 5 (chunked messages): all chunks of a message carry its sequence id; only the LAST chunk
  records it. A chunk before the last is a duplicate only when its id is already persisted (a
  re-sent message whose last chunk was stored), otherwise it is stored without recording, as in
  Pulsar: recording it would make the message's next chunk look like a duplicate.
* Rule 4 (turning on and off while loaded): `Topic.set_deduplication` builds the state with
  `recover` while SENDs go on; during that time ``note_pushed``/``on_persisted`` record what the
  topic pushes and stores, merged (maximum per producer) with what the replay finds, so nothing
  stored before the switch is forgotten. `disable` stops snapshots and deletes the cursor.
"""

from __future__ import annotations

import enum
import json
import logging

import trio

from managed_ledger import InitialPosition, ManagedCursor, ManagedLedger, Position
from metadata import MetadataStore, NoNodeError

from ._entries import entry_metadata

__all__ = ["Deduplication", "DedupVerdict", "DEDUP_CURSOR", "highest_sequence_id", "is_partial_chunk"]

log = logging.getLogger(__name__)
DEDUP_ROOT = "/dedup"
DEDUP_CURSOR = "pulsar.dedup"


def highest_sequence_id(sequence_id: int, highest_field: int, num_messages: int) -> int:
    """The id a SEND is keyed on (Rule 1): ``highest_field`` when above ``sequence_id``, else the
    last id of ``num_messages`` consecutive ones from ``sequence_id`` (the C++ client does not set
    the field for its batches)."""
    if highest_field > sequence_id:
        return highest_field
    return sequence_id + max(1, num_messages) - 1


def is_partial_chunk(metadata: object) -> bool:
    """True for a chunk of a chunked message that is not its last chunk (Rule 5)."""
    chunks = getattr(metadata, "num_chunks_from_msg", 0)
    return chunks > 1 and getattr(metadata, "chunk_id", 0) < chunks - 1


class DedupVerdict(enum.Enum):
    """What to do with a SEND."""

    NEW = "new"
    DUPLICATE_PERSISTED = "duplicate-persisted"
    DUPLICATE_PENDING = "duplicate-pending"


class Deduplication:
    """Per-topic dedup state; see the module rules."""

    def __init__(self, store: MetadataStore, ml_name: str, snapshot_interval: int) -> None:
        self.store = store
        self.path = f"{DEDUP_ROOT}/{ml_name}"
        self.snapshot_interval = snapshot_interval
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self._since_snapshot = 0
        self._last_position: Position | None = None
        self._cursor: ManagedCursor | None = None
        self._lock = trio.Lock()
        self._disabled = False

    def check(self, producer: str, sequence_id: int, highest: int, *, partial_chunk: bool = False) -> DedupVerdict:
        """Classify a SEND by its highest sequence id (Rule 1) and, when new, record it as pushed;
        a chunk before the last is only compared with what is persisted (Rule 5)."""
        top = max(sequence_id, highest)
        if partial_chunk:
            if top <= self.persisted.get(producer, -1):
                return DedupVerdict.DUPLICATE_PERSISTED
            return DedupVerdict.NEW
        # persisted too: an add admitted before deduplication was turned on lands only there
        if top <= max(self.pushed.get(producer, -1), self.persisted.get(producer, -1)):
            if top <= self.persisted.get(producer, -1):
                return DedupVerdict.DUPLICATE_PERSISTED
            return DedupVerdict.DUPLICATE_PENDING
        self.pushed[producer] = top
        return DedupVerdict.NEW

    def note_pushed(self, producer: str, highest: int) -> None:
        """Record a SEND admitted while this state is being built (Rule 4)."""
        if highest > self.pushed.get(producer, -1):
            self.pushed[producer] = highest

    def on_persisted(self, producer: str, sequence_id: int, highest: int, position: Position, *,
                     partial_chunk: bool = False) -> bool:
        """Record a stored entry (a chunk before the last records no sequence id, Rule 5); True when
        a snapshot is due."""
        if not partial_chunk:
            self._persist(producer, max(sequence_id, highest))
        if self._last_position is None or position > self._last_position:
            self._last_position = position
        self._since_snapshot += 1
        return self._since_snapshot >= self.snapshot_interval

    def on_failed(self, producer: str) -> None:
        """An add failed: pushed falls back to persisted so the client's resend is accepted."""
        self.pushed[producer] = self.persisted.get(producer, -1)

    def last_sequence_id(self, producer: str) -> int:
        """The highest persisted sequence id of a producer name, -1 if none."""
        return self.persisted.get(producer, -1)

    async def snapshot(self) -> None:
        """Persist the state (Rule 2) through the dedup cursor; a no-op before `recover` and after
        `disable`."""
        async with self._lock:
            if self._last_position is None or self._cursor is None or self._disabled:
                return
            self._since_snapshot = 0
            await self._cursor.mark_delete(self._last_position, properties=dict(self.persisted))

    async def disable(self, ml: ManagedLedger) -> None:
        """Stop snapshots and delete the dedup cursor so it pins nothing any more (Rule 4)."""
        async with self._lock:
            self._disabled = True
            self._cursor = None
            if DEDUP_CURSOR in getattr(ml, "cursors", {}):
                await ml.delete_cursor(DEDUP_CURSOR)

    async def _legacy_snapshot(self) -> dict[str, int]:
        try:
            data, _ = await self.store.get(self.path)
        except NoNodeError:
            return {}
        return {k: int(v) for k, v in json.loads(data).get("producers", {}).items()}

    async def recover(self, ml: ManagedLedger) -> None:
        """Open the dedup cursor, load its snapshot and replay the entries after it (Rule 2)."""
        # merged, never assigned: on_persisted may run meanwhile (Rule 4)
        cursor_ = await ml.open_cursor(DEDUP_CURSOR, initial_position=InitialPosition.EARLIEST)
        for name, seq in list((await self._legacy_snapshot()).items()) + list(cursor_.properties.items()):
            self._persist(name, int(seq))
        self._cursor = cursor_
        start = cursor_.mark_delete_position
        cursor = ml.new_non_durable_cursor(start, inclusive=False)
        try:
            while True:
                entries = await cursor.read_entries(500)
                if not entries:
                    break
                for e in entries:
                    try:
                        md = entry_metadata(e.data)
                    except Exception:
                        continue
                    n = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
                    if not is_partial_chunk(md):
                        self._persist(md.producer_name, highest_sequence_id(md.sequence_id, md.highest_sequence_id, n))
                    if self._last_position is None or e.position > self._last_position:
                        self._last_position = e.position
        finally:
            try:
                await cursor.close()
            except Exception:
                pass
        for name, seq in self.persisted.items():
            self.note_pushed(name, seq)

    def _persist(self, producer: str, seq: int) -> None:
        if seq > self.persisted.get(producer, -1):
            self.persisted[producer] = seq
