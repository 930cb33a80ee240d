"""Message deduplication by producer name and sequence id.

Rules (as Pulsar's MessageDeduplication):

* Rule 1: a SEND whose (highest) sequence id is at or below the highest one already *pushed* for
  its producer name is a duplicate and is not stored; if it is also at or below the highest
  *persisted* one it is answered at once with message id -1:-1, else after the entries before it.
* Rule 2: persisted state survives restarts: every ``snapshot_interval`` stored entries (and when
  the topic closes) ``{producer: highest persisted sequence id}`` becomes the properties of the
  durable cursor ``pulsar.dedup``, mark-deleted at the position the snapshot covers (Pulsar's
  design; position and properties are persisted together by the managed ledger). On load the
  broker reads the cursor, then replays the entries after its mark-delete position (their
  metadata carry producer name and sequence ids), so nothing acknowledged is forgotten.
* Rule 3: the cursor is durable so that retention never trims the entries a replay needs: a
  consumed ledger whose sequence ids are not yet in a snapshot stays until the next snapshot.
  (A snapshot written by an older broker to ``/dedup/{managed-ledger-name}`` is still read.)
  The cursor is not a subscription; it is deleted when the topic loads with deduplication off.
"""

from __future__ import annotations

import enum
import json
import logging

from metadata import MetadataStore, NoNodeError

from managed_ledger import InitialPosition, ManagedCursor, ManagedLedger, Position

from ._entries import entry_metadata

__all__ = ["Deduplication", "DedupVerdict", "DEDUP_CURSOR"]

log = logging.getLogger(__name__)
DEDUP_ROOT = "/dedup"
DEDUP_CURSOR = "pulsar.dedup"


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

    def check(self, producer: str, sequence_id: int, highest: int) -> DedupVerdict:
        """Classify a SEND (Rule 1) and, when new, record it as pushed."""
        top = max(sequence_id, highest)
        if sequence_id <= self.pushed.get(producer, -1):
            if top <= self.persisted.get(producer, -1):
                return DedupVerdict.DUPLICATE_PERSISTED
            return DedupVerdict.DUPLICATE_PENDING
        self.pushed[producer] = top
        return DedupVerdict.NEW

    def on_persisted(self, producer: str, sequence_id: int, highest: int, position: Position) -> bool:
        """Record a stored entry; True when a snapshot is due."""
        top = max(sequence_id, highest)
        if top > self.persisted.get(producer, -1):
            self.persisted[producer] = top
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
        """Persist the state (Rule 2) through the dedup cursor; a no-op before `recover`."""
        if self._last_position is None or self._cursor is None:
            return
        self._since_snapshot = 0
        await self._cursor.mark_delete(self._last_position, properties=self.persisted)

    async def _legacy_snapshot(self) -> dict[str, int]:
        try:
            data, _ = await self.store.get(self.path)
        except NoNodeError:
            return {}
        return {k: int(v) for k, v in json.loads(data).get("producers", {}).items()}

    async def recover(self, ml: ManagedLedger) -> None:
        """Open the dedup cursor, load its snapshot and replay the entries after it (Rule 2)."""
        self._cursor = await ml.open_cursor(DEDUP_CURSOR, initial_position=InitialPosition.EARLIEST)
        self.persisted = await self._legacy_snapshot()
        for name, seq in self._cursor.properties.items():
            self.persisted[name] = max(seq, self.persisted.get(name, -1))
        start = self._cursor.mark_delete_position
        cursor = ml.new_non_durable_cursor(start, inclusive=False)
        try:
            while True:
                entries = await cursor.read_entries(500)
                if not entries:
                    break
                for e in entries:
                    try:
                        md = entry_metadata(e.data)
                    except Exception:  # noqa: BLE001 - not a Pulsar message: nothing to learn
                        continue
                    top = max(md.sequence_id, md.highest_sequence_id)
                    if top > self.persisted.get(md.producer_name, -1):
                        self.persisted[md.producer_name] = top
                    self._last_position = e.position
        finally:
            try:
                await cursor.close()
            except Exception:  # noqa: BLE001
                pass
        self.pushed = dict(self.persisted)
