"""Message deduplication by producer name and sequence id.

Rules (as Pulsar's MessageDeduplication):

* Rule 1 (verdicts): a SEND is keyed on its *highest* sequence id (`highest_sequence_id`: the
  command's or the metadata's ``highest_sequence_id`` when above ``sequence_id``, else
  ``sequence_id + num_messages - 1``, so a batch of N messages numbered from ``sequence_id``
  covers them all). One whose highest id is above the highest *pushed* for its producer name is
  NEW. One at or below the highest *persisted* is DUPLICATE_PERSISTED: answered at once with
  message id -1:-1 and not stored. One in between is DUPLICATE_PENDING: a copy of it is still on
  its way to storage and may yet fail, so it is confirmed only once that copy is stored (the
  topic's Rule 8). (A re-sent batch whose first ids are old but whose highest is new is stored
  whole: writers that need exactly-once must re-send the same batches, see the Spark sink.)
* Rule 2 (in flight): every SEND judged NEW (or noted while the state is built, Rule 7) is *in
  flight* for its producer name until the topic `settle`\\ s it (stored or failed). The highest
  pushed id of a name is the highest of its SENDs in flight, or its persisted id once none is in
  flight. So after a failed add the producer's resend is accepted as soon as nothing of that name
  can still be stored, and never before: a resend accepted while an earlier copy might still be
  stored would be stored twice. (Pulsar resets every producer's pushed id to its persisted one
  when the topic's pending writes drain after a failure; this is the same, per producer name.)
* Rule 3 (snapshots): every ``snapshot_interval`` stored entries
  (``brokerDeduplicationEntriesInterval``), when ``brokerDeduplicationSnapshotIntervalSeconds``
  passed since the last one with entries stored since (`snapshot_if_stale`), after inactive
  producers were purged, and when the topic closes, the persisted ids become the properties of
  the durable cursor ``pulsar.dedup``, mark-deleted at the last position they cover; the managed
  ledger persists position and properties together. On load the broker reads the cursor, then
  replays the entries after its mark-delete position (their metadata carry producer name and
  sequence ids), so nothing stored is forgotten for lack of a snapshot; when that replay read at
  least ``snapshot_interval`` entries a snapshot follows at once.
* Rule 4 (bounded state): a producer name is *attached* while a producer of that name is
  connected to the topic, else *inactive* since it left (or since it was loaded). Inactive names
  are forgotten after ``brokerDeduplicationProducerInactivityTimeoutMinutes`` (`purge_inactive`).
  At most ``brokerDeduplicationMaxNumberOfProducers`` names are kept: past that the longest
  inactive are forgotten first; attached names are never forgotten, so only more attached
  producers than that can raise the count, and then by no more than them. The names in flight
  are bounded by the SENDs in flight. A snapshot holds at most that many names and at most
  `SNAPSHOT_MAX_BYTES` of them, attached names first, then the most recently active: it always
  fits in one metadata node, so the cursor never stops. A name left out (only past those bounds)
  is known after a restart only if one of its entries lies after the snapshot's position, as in
  Pulsar for the producers past its cap.
* Rule 5 (cursor and retention): the cursor is durable so that retention never trims the entries
  a replay needs: a consumed ledger whose sequence ids are not yet in a snapshot stays until the
  next snapshot. (A snapshot written by an older broker to ``/dedup/{managed-ledger-name}`` is
  still read.) The cursor is not a subscription (no backlog quota, TTL or subscription listing);
  it is deleted when deduplication is turned off.
* Rule 6 (chunked messages): all chunks of a message carry its sequence id; only the LAST chunk
  records it. A chunk before the last is a duplicate only when its id is already persisted (a
  re-sent message whose last chunk was stored), otherwise it is stored without recording, as in
  Pulsar: recording it would make the message's next chunk look like a duplicate.
* Rule 7 (turning on and off while loaded): `Topic.set_deduplication` builds the state with
  `recover` while SENDs go on; during that time ``note_pushed``/``on_persisted`` record what the
  topic pushes and stores, merged (maximum per producer) with what the replay finds, so nothing
  stored before the switch is forgotten. `disable` stops snapshots and deletes the cursor.
"""

from __future__ import annotations

import enum
import json
import logging
from collections import OrderedDict
from collections.abc import Collection, Iterator

import trio

from managed_ledger import InitialPosition, ManagedCursor, ManagedLedger, Position
from metadata import MetadataStore, NoNodeError

from ._entries import entry_metadata

__all__ = [
    "Deduplication",
    "DedupVerdict",
    "DEDUP_CURSOR",
    "SNAPSHOT_MAX_BYTES",
    "highest_sequence_id",
    "is_partial_chunk",
]

log = logging.getLogger(__name__)
DEDUP_ROOT = "/dedup"
DEDUP_CURSOR = "pulsar.dedup"

SNAPSHOT_MAX_BYTES = 512 * 1024
"""Encoded size a snapshot may take in the cursor's metadata node (Rule 4). ZooKeeper refuses a
request over its ``jute.maxbuffer`` (1 MiB less one byte unless raised) by dropping the client's
connection, so an over-long snapshot would fail every persist of the cursor; half of that leaves
room for the node's other fields with producer names of any length."""

_PROPERTY_OVERHEAD = 24
"""Bytes a cursor property costs on top of its name (protobuf tags, lengths, a 64-bit varint)."""


def highest_sequence_id(sequence_id: int, highest_field: int, num_messages: int) -> int:
    """The id a SEND is keyed on (Rule 1): ``highest_field`` when above ``sequence_id``, else the
    last id of ``num_messages`` consecutive ones from ``sequence_id`` (the C++ client does not set
    the field for its batches)."""
    if highest_field > sequence_id:
        return highest_field
    return sequence_id + max(1, num_messages) - 1


def is_partial_chunk(metadata: object) -> bool:
    """True for a chunk of a chunked message that is not its last chunk (Rule 6)."""
    chunks = getattr(metadata, "num_chunks_from_msg", 0)
    return chunks > 1 and getattr(metadata, "chunk_id", 0) < chunks - 1


class DedupVerdict(enum.Enum):
    """What to do with a SEND (Rule 1)."""

    NEW = "new"
    DUPLICATE_PERSISTED = "duplicate-persisted"
    DUPLICATE_PENDING = "duplicate-pending"


class Deduplication:
    """Per-topic dedup state; see the module rules.

    ``snapshot_interval``: stored entries between snapshots; ``max_producers``: names kept
    (Rule 4); ``snapshot_max_bytes``: the encoded size a snapshot may take.
    """

    def __init__(
        self,
        store: MetadataStore,
        ml_name: str,
        snapshot_interval: int,
        *,
        max_producers: int = 10_000,
        snapshot_max_bytes: int = SNAPSHOT_MAX_BYTES,
    ) -> None:
        self.store = store
        self.path = f"{DEDUP_ROOT}/{ml_name}"
        self.snapshot_interval = snapshot_interval
        self.max_producers = max_producers
        self.snapshot_max_bytes = snapshot_max_bytes
        self.persisted: dict[str, int] = {}
        # Rule 2: name -> [SENDs in flight, highest id among them (-1: only chunks before a last)]
        self._in_flight: dict[str, list[int]] = {}
        # Rule 4: names not attached, with the time they became inactive, the longest inactive
        # first; always a subset of ``persisted``'s names
        self._inactive: OrderedDict[str, float] = OrderedDict()
        self._since_snapshot = 0
        self._last_position: Position | None = None
        self._last_snapshot_at = 0.0
        self._cursor: ManagedCursor | None = None
        self._lock = trio.Lock()
        self._disabled = False

    # ------------------------------------------------------------------ verdicts (Rules 1, 2, 6)

    def pushed(self, producer: str) -> int:
        """The highest sequence id of ``producer`` that is stored or on its way (Rule 2), -1 if none."""
        flight = self._in_flight.get(producer)
        persisted = self.persisted.get(producer, -1)
        return persisted if flight is None else max(flight[1], persisted)

    def check(self, producer: str, sequence_id: int, highest: int, *, partial_chunk: bool = False) -> DedupVerdict:
        """Classify a SEND by its highest sequence id (Rule 1); a NEW one is in flight until
        `settle` (Rule 2). A chunk before the last is only compared with what is persisted (Rule 6)."""
        top = max(sequence_id, highest)
        persisted = self.persisted.get(producer, -1)
        if top <= persisted:
            return DedupVerdict.DUPLICATE_PERSISTED
        if not partial_chunk and top <= self.pushed(producer):
            return DedupVerdict.DUPLICATE_PENDING
        self.note_pushed(producer, top, partial_chunk=partial_chunk)
        return DedupVerdict.NEW

    def note_pushed(self, producer: str, highest: int, *, partial_chunk: bool = False) -> None:
        """Count a SEND in flight without judging it (Rule 2; used while the state is built, Rule 7):
        the topic `settle`\\ s it like a NEW one."""
        flight = self._in_flight.setdefault(producer, [0, -1])
        flight[0] += 1
        if not partial_chunk and highest > flight[1]:
            flight[1] = highest

    def settle(self, producer: str) -> None:
        """One SEND counted in flight for ``producer`` was answered, stored or failed (Rule 2);
        a stored one was recorded with `on_persisted` first."""
        flight = self._in_flight.get(producer)
        if flight is None:
            return
        flight[0] -= 1
        if flight[0] <= 0:
            del self._in_flight[producer]

    def on_persisted(
        self,
        producer: str,
        sequence_id: int,
        highest: int,
        position: Position,
        *,
        partial_chunk: bool = False,
        attached: bool = True,
        now: float = 0.0,
    ) -> bool:
        """Record a stored entry (a chunk before the last records no sequence id, Rule 6); True when
        a snapshot is due (Rule 3). ``attached``: a producer of that name is connected; if not,
        the name counts as inactive from ``now`` on (Rule 4)."""
        if not partial_chunk:
            self._persist(producer, max(sequence_id, highest))
            if not attached and producer not in self._inactive:
                self._inactive[producer] = now
            self._enforce_cap()
        if self._last_position is None or position > self._last_position:
            self._last_position = position
        self._since_snapshot += 1
        return self._since_snapshot >= self.snapshot_interval

    def last_sequence_id(self, producer: str) -> int:
        """The highest persisted sequence id of a producer name, -1 if none."""
        return self.persisted.get(producer, -1)

    # ------------------------------------------------------------------ producers (Rule 4)

    @property
    def tracked_producers(self) -> int:
        """How many producer names the state remembers."""
        return len(self.persisted)

    @property
    def inactive_producers(self) -> list[str]:
        """The inactive names (Rule 4), the longest inactive first."""
        return list(self._inactive)

    def producer_added(self, producer: str) -> None:
        """A producer of that name attached to the topic: its name is not inactive any more."""
        self._inactive.pop(producer, None)

    def producer_removed(self, producer: str, now: float) -> None:
        """The producer of that name left the topic at ``now``: its name is inactive from then on."""
        if producer in self.persisted:
            self._inactive.pop(producer, None)
            self._inactive[producer] = now
            self._enforce_cap()

    def purge_inactive(self, now: float, timeout_s: float, attached: Collection[str] = ()) -> bool:
        """Forget the names inactive for at least ``timeout_s`` at ``now`` (Rule 4); True when any
        was. ``attached`` (the names connected now) puts the bookkeeping right first: those are not
        inactive, and a remembered name that is neither counts as inactive from ``now``."""
        for name in attached:
            self._inactive.pop(name, None)
        for name in self.persisted:
            if name not in self._inactive and name not in attached:
                self._inactive[name] = now
        purged = False
        while self._inactive:
            name, since = next(iter(self._inactive.items()))
            if now - since < timeout_s:
                break
            self._forget_oldest_inactive()
            purged = True
        return purged

    def _enforce_cap(self) -> None:
        while len(self.persisted) > self.max_producers and self._inactive:
            self._forget_oldest_inactive()

    def _forget_oldest_inactive(self) -> None:
        name, _ = self._inactive.popitem(last=False)
        self.persisted.pop(name, None)
        log.debug("dedup %s: forgot inactive producer %s", self.path, name)

    def _by_recency(self) -> Iterator[str]:
        """Remembered names, attached ones first, then the inactive ones, most recent first."""
        for name in self.persisted:
            if name not in self._inactive:
                yield name
        yield from reversed(self._inactive)

    def snapshot_properties(self) -> dict[str, int]:
        """What a snapshot stores (Rule 4): at most ``max_producers`` names taking at most
        ``snapshot_max_bytes``, attached ones first, then the most recently active."""
        out: dict[str, int] = {}
        size = 0
        for name in self._by_recency():
            if len(out) >= self.max_producers:
                break
            cost = len(name.encode()) + _PROPERTY_OVERHEAD
            if size + cost > self.snapshot_max_bytes:
                continue  # a long name left out; shorter ones may still fit
            out[name] = self.persisted[name]
            size += cost
        return out

    # ------------------------------------------------------------------ snapshots (Rule 3)

    async def snapshot(self, now: float | None = None) -> None:
        """Persist the state (Rule 3) through the dedup cursor; a no-op before `recover` and after
        `disable`. ``now`` (the service clock) dates it for `snapshot_if_stale`."""
        async with self._lock:
            if self._last_position is None or self._cursor is None or self._disabled:
                return
            self._since_snapshot = 0
            await self._cursor.mark_delete(self._last_position, properties=self.snapshot_properties())
            if now is not None:
                self._last_snapshot_at = now

    async def snapshot_if_stale(self, now: float, interval_s: float) -> bool:
        """Take a snapshot when ``interval_s`` (> 0) passed since the last one and entries were
        stored after its position (Rule 3, Pulsar's time-based snapshot); True when it did."""
        cursor = self._cursor
        if interval_s <= 0 or cursor is None or self._disabled or self._last_position is None:
            return False
        if now - self._last_snapshot_at < interval_s or self._last_position <= cursor.mark_delete_position:
            return False
        await self.snapshot(now)
        return True

    async def disable(self, ml: ManagedLedger) -> None:
        """Stop snapshots and delete the dedup cursor so it pins nothing any more (Rule 7)."""
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

    async def recover(self, ml: ManagedLedger, *, now: float = 0.0, attached: Collection[str] = ()) -> None:
        """Open the dedup cursor, load its snapshot and replay the entries after it (Rule 3). Names
        not in ``attached`` (the producers connected now) are inactive from ``now`` (Rule 4)."""
        # merged, never assigned: on_persisted may run meanwhile (Rule 7)
        cursor_ = await ml.open_cursor(DEDUP_CURSOR, initial_position=InitialPosition.EARLIEST)
        for name, seq in list((await self._legacy_snapshot()).items()) + list(cursor_.properties.items()):
            self._persist(name, int(seq))
        self._cursor = cursor_
        start = cursor_.mark_delete_position
        cursor = ml.new_non_durable_cursor(start, inclusive=False)
        replayed = 0
        try:
            while True:
                entries = await cursor.read_entries(500)
                if not entries:
                    break
                for e in entries:
                    replayed += 1
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
        if self._last_position is None:
            # nothing after the snapshot: a later one (a purge) rewrites it at the same position
            self._last_position = start
        for name in self.persisted:
            if name not in attached and name not in self._inactive:
                self._inactive[name] = now
        self._enforce_cap()
        self._since_snapshot += replayed
        if self._since_snapshot >= self.snapshot_interval:
            await self.snapshot(now)

    def _persist(self, producer: str, seq: int) -> None:
        if seq > self.persisted.get(producer, -1):
            self.persisted[producer] = seq
