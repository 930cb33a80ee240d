"""Message deduplication by producer name and sequence id.

Rules (as Pulsar's MessageDeduplication):

* Rule 1: a SEND whose (highest) sequence id is at or below the highest one already *pushed* for
  its producer name is a duplicate and is not stored; if it is also at or below the highest
  *persisted* one it is answered at once with message id -1:-1, else after the entries before it.
* Rule 2: persisted state survives restarts: every ``snapshot_interval`` stored entries (and when
  the topic closes) ``{producer: highest persisted sequence id}`` plus the position it covers is
  written to the metadata node ``/dedup/{managed-ledger-name}`` (JSON, compare-and-set). On load
  the broker reads the snapshot, then replays the entries after its position (their metadata
  carry producer name and sequence ids), so nothing acknowledged is forgotten.
  (Entries after the snapshot are not pinned against retention: if they were trimmed, the
  sequence ids they carried are lost; the snapshot interval bounds that window.)
"""

from __future__ import annotations

import enum
import json
import logging

from metadata import BadVersionError, MetadataStore, NodeExistsError, NoNodeError

from managed_ledger import InitialPosition, ManagedLedger, Position

from ._entries import entry_metadata

__all__ = ["Deduplication", "DedupVerdict"]

log = logging.getLogger(__name__)
DEDUP_ROOT = "/dedup"


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
        self._version: int | None = None

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
        """Persist the state (Rule 2); a concurrent writer (a new owner) wins and we stop."""
        if self._last_position is None:
            return
        body = json.dumps({"position": [self._last_position.ledger_id, self._last_position.entry_id],
                           "producers": self.persisted}).encode()
        self._since_snapshot = 0
        try:
            if self._version is None:
                try:
                    await self.store.create(self.path, body, make_parents=True)
                    self._version = 0
                    return
                except NodeExistsError:
                    _, stat = await self.store.get(self.path)
                    self._version = stat.version
            stat = await self.store.set(self.path, body, version=self._version)
            self._version = stat.version
        except BadVersionError:
            log.warning("dedup snapshot %s changed under us; another broker owns the topic", self.path)

    async def recover(self, ml: ManagedLedger) -> None:
        """Load the snapshot and replay the entries after it (Rule 2)."""
        start: Position | None = None
        try:
            data, stat = await self.store.get(self.path)
            obj = json.loads(data)
            self._version = stat.version
            self.persisted = {k: int(v) for k, v in obj.get("producers", {}).items()}
            start = Position(*obj["position"])
        except NoNodeError:
            pass
        cursor = (ml.new_non_durable_cursor(start, inclusive=False) if start is not None
                  else ml.new_non_durable_cursor(InitialPosition.EARLIEST))
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
