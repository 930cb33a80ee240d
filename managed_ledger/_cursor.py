"""`ManagedCursor`: a consumer's position in a managed ledger.

A cursor is a mark-delete position (every entry at or before it is acknowledged), ranges of
entries acknowledged individually after it, partially acknowledged batches (batch indexes), and a
read position (the next entry to hand out). Durable cursors persist that state to their metadata
node with compare-and-set, throttled (the managed ledger flushes changed cursors every
``cursor_persist_interval_s``) and always on close; admin operations (reset, skip, clear backlog)
persist at once. Non-durable cursors (readers) are never persisted and never hold back trimming.

States (`CursorState`):

* Rule 1: OPEN on creation or reopen; every operation is allowed.
* Rule 2: OPEN -> CLOSED by ``close()`` (after a final persist) or when the cursor is deleted;
  reads then raise `ManagedLedgerClosed`. ``ManagedLedger.open_cursor`` reopens a closed cursor.

Persisted form: when there are more ranges than ``max_unacked_ranges_to_persist`` only the first
ones are written. That may make a recovered cursor redeliver entries acknowledged later, never
skip one that was not acknowledged. Batch acks are stored as bitsets with a set bit meaning
"this index was acknowledged".

A cursor uses its managed ledger only through `CursorHost`: the ledger list (positions), reads,
the event that wakes waiting reads, the metadata store and the two state transitions a cursor
can cause (fencing, closing).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from managed_ledger._errors import (
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
    NoMoreEntries,
)
from managed_ledger._ledger_list import LedgerList
from managed_ledger._ranges import AckRanges
from managed_ledger._types import Entry, InitialPosition
from managed_ledger.metrics import ManagedLedgerMetrics
from metadata import BadVersionError, MetadataError, MetadataStore, NoNodeError
from protocols.managed_ledger import (
    EARLIEST,
    CursorInfo,
    Position,
    PositionRange,
    indexes_to_words,
    words_to_indexes,
)

__all__ = [
    "ManagedCursor",
    "CursorHost",
    "CursorState",
    "cursor_from_info",
    "new_cursor_positions",
    "INTERNAL_PROPERTY_PREFIX",
]

INTERNAL_PROPERTY_PREFIX = "#pulsar.internal."
"""Cursor properties the broker keeps for itself (Pulsar's ``CURSOR_INTERNAL_PROPERTY_PREFIX``)."""


class CursorState(enum.Enum):
    """Lifecycle of a cursor; the rules are in the module header."""

    OPEN = "open"
    CLOSED = "closed"


class CursorHost(Protocol):
    """What a cursor uses of its managed ledger, and all it uses.

    `ManagedLedger` gives its cursors one (``managed_ledger._ledger._CursorSide``). Every member
    is read when used, never cached by the cursor: the ledger list changes as entries are added
    and ledgers rolled or trimmed, and ``entries_event`` is replaced each time it fires.
    """

    @property
    def name(self) -> str:
        """The managed ledger's name (for messages)."""
        ...

    @property
    def ledgers(self) -> LedgerList:
        """The ledger list, for position arithmetic and the last confirmed entry. Cursors only read it."""
        ...

    @property
    def entries_event(self) -> trio.Event:
        """Set (and replaced by a new one) when entries were added or the managed ledger changed
        state (terminated, fenced, closed) or a cursor closed: what a waiting read waits on."""
        ...

    @property
    def terminated(self) -> bool:
        """True once no entry can be added any more (reads go on)."""
        ...

    def check_open(self) -> None:
        """Raise `ManagedLedgerClosed` or `ManagedLedgerFenced` when the managed ledger is closed
        (or closing) or fenced on this instance."""
        ...

    async def read(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` of one ledger, in order (from the entry cache or storage).
        Raises `ManagedLedgerError` when storage cannot serve them, `ManagedLedgerClosed` when closed."""
        ...

    @property
    def store(self) -> MetadataStore:
        """Where durable cursors persist, each in the node ``{node_path}/{cursor name}``."""
        ...

    @property
    def node_path(self) -> str:
        """The managed ledger's metadata node, the parent of its cursors' nodes."""
        ...

    @property
    def metrics(self) -> ManagedLedgerMetrics:
        """The factory's metrics (persist latency and errors, truncated ranges)."""
        ...

    @property
    def max_unacked_ranges_to_persist(self) -> int:
        """How many acknowledged ranges (and partially acknowledged batches) a persist keeps."""
        ...

    def now_ms(self) -> int:
        """The factory clock, in milliseconds (``last_active_ms`` of a persisted cursor)."""
        ...

    def fence(self, why: str) -> None:
        """Another owner rewrote a cursor node: fence the managed ledger (its adds fail, Rule 5 of
        `managed_ledger._ledger`)."""
        ...

    def cursor_closed(self, cursor: ManagedCursor) -> None:
        """``cursor`` closed: forget it if it is non-durable, and wake the reads waiting on it."""
        ...


@dataclass
class _Batch:
    size: int | None  # unknown after recovery until the next batch ack names it
    acked: set[int] = field(default_factory=set)


def new_cursor_positions(ledgers: LedgerList, initial: InitialPosition) -> tuple[Position, Position]:
    """(mark-delete, read) positions of a new cursor at ``initial``."""
    lce = ledgers.last_confirmed()
    first = ledgers.first_ledger()
    if initial is InitialPosition.LATEST or first is None:
        return lce, ledgers.next_valid(lce)
    return Position(first, -1), ledgers.normalize(Position(first, 0))


def cursor_from_info(host: CursorHost, name: str, info: CursorInfo, version: int) -> ManagedCursor:
    """Rebuild a durable cursor exactly as persisted (read position: first entry after mark-delete)."""
    ledgers = host.ledgers
    md = info.mark_delete
    if md == EARLIEST:
        first = ledgers.first_ledger()
        md = Position(first if first is not None else -1, -1)
    cursor = ManagedCursor(host, name, True, md, ledgers.next_valid(md))
    for r in info.individual_deleted:
        cursor._ranges.add_range(Position(r.lower.ledger_id, r.lower.entry_id + 1), r.upper)
    for pos, words in info.batch_deletes.items():
        cursor._batch[pos] = _Batch(None, set(words_to_indexes(words)))
    cursor._properties = dict(info.properties)
    cursor._cursor_properties = dict(info.cursor_properties)
    cursor.version = version
    cursor._read = ledgers.next_valid(cursor._md)
    return cursor


class ManagedCursor:
    """A durable or non-durable cursor (see the module header). Create through
    `ManagedLedger.open_cursor` or `ManagedLedger.new_non_durable_cursor`."""

    def __init__(self, host: CursorHost, name: str, durable: bool, mark_delete: Position, read: Position) -> None:
        self._host = host
        self.name = name
        self.durable = durable
        self.state = CursorState.OPEN
        self._md = mark_delete
        self._read = read
        self._read_epoch = 0
        self._ranges = AckRanges(lambda p: host.ledgers.next_valid(p), lambda a, b: host.ledgers.count_between(a, b))
        self._batch: dict[Position, _Batch] = {}
        self._properties: dict[str, int] = {}
        self._cursor_properties: dict[str, str] = {}
        self._persist_lock = trio.Lock()
        self.dirty = False
        self.version = -1
        self.messages_consumed_counter = 0

    def __repr__(self) -> str:
        return f"<ManagedCursor {self._host.name}/{self.name} md={self._md} read={self.read_position}>"

    @property
    def _ledgers(self) -> LedgerList:
        return self._host.ledgers

    @property
    def _last_confirmed(self) -> Position:
        return self._host.ledgers.last_confirmed()

    def _check_open(self) -> None:
        self._host.check_open()
        if self.state is CursorState.CLOSED:
            raise ManagedLedgerClosed(f"cursor {self.name} of {self._host.name} is closed")

    # --- positions ---------------------------------------------------------------------------

    @property
    def mark_delete_position(self) -> Position:
        """Every entry at or before this position is acknowledged."""
        return self._md

    @property
    def read_position(self) -> Position:
        """The next entry ``read_entries`` will consider."""
        return self._ledgers.normalize(self._read)

    @property
    def properties(self) -> dict[str, int]:
        """Numeric properties stored with the mark-delete position."""
        return dict(self._properties)

    @property
    def cursor_properties(self) -> dict[str, str]:
        """String properties of the cursor itself (a copy; Pulsar's subscription properties and the
        broker's own ``#pulsar.internal.`` ones), persisted with its state."""
        return dict(self._cursor_properties)

    async def set_cursor_properties(self, properties: Mapping[str, str]) -> None:
        """Replace the cursor's string properties and persist them now (durable cursors; a
        non-durable cursor keeps them in memory). As Pulsar's, the ``#pulsar.internal.`` ones (the
        broker's: delayed-delivery buckets) are kept, and a key with that prefix is refused
        (`ValueError`). Raises as `persist`."""
        self._check_open()
        bad = [k for k in properties if str(k).startswith(INTERNAL_PROPERTY_PREFIX)]
        if bad:
            raise ValueError(f"property keys may not start with {INTERNAL_PROPERTY_PREFIX}: {bad[0]}")
        kept = {k: v for k, v in self._cursor_properties.items() if k.startswith(INTERNAL_PROPERTY_PREFIX)}
        self._cursor_properties = {**{str(k): str(v) for k, v in properties.items()}, **kept}
        self.dirty = True
        await self.persist()

    async def update_cursor_properties(self, put: Mapping[str, str] | None = None, remove: Iterable[str] = ()) -> None:
        """Set the ``put`` properties and drop the ``remove`` ones in one change, persisted at
        once (compare-and-set, as `persist`; a non-durable cursor keeps them in memory). On a
        persist failure the change stays in memory and is written by the next persist; the
        caller learns of it by the exception (`ManagedLedgerFenced`, `ManagedLedgerError`)."""
        self._check_open()
        for key in remove:
            self._cursor_properties.pop(key, None)
        self._cursor_properties.update(put or {})
        self.dirty = True
        await self.persist()

    @property
    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        """Acknowledged ranges after the mark-delete position, open-closed ``(lower, upper]`` as in
        Pulsar's stats and the persisted record."""
        return [(Position(a.ledger_id, a.entry_id - 1), b) for a, b in self._ranges]

    def is_acked(self, position: Position) -> bool:
        """True when the entry at ``position`` is acknowledged (cumulatively or individually)."""
        return position <= self._md or position in self._ranges

    def batch_acked_indexes(self, position: Position) -> set[int] | None:
        """Acknowledged indexes of a partially acknowledged batch entry, or None when there is
        no partial ack for it (not acked at all, or acked as a whole)."""
        batch = self._batch.get(position)
        return None if batch is None else set(batch.acked)

    def has_more_entries(self) -> bool:
        """True when an entry exists at or after the read position."""
        return self.read_position <= self._last_confirmed

    @property
    def backlog(self) -> int:
        """Entries after the mark-delete position that are not acknowledged."""
        return max(self._ledgers.count_between(self._md, self._last_confirmed) - self._ranges.acked_entries, 0)

    @property
    def backlog_size(self) -> int:
        """Estimated bytes of the backlog (backlog times the average entry size)."""
        ledgers = self._ledgers
        n = ledgers.number_of_entries
        return 0 if n == 0 else self.backlog * ledgers.total_size // n

    # --- acknowledgements --------------------------------------------------------------------

    def _set_md(self, position: Position) -> None:
        self._md = position
        self._ranges.remove_upto(position)
        self._absorb()
        self._after_md_change()

    def _absorb(self) -> None:
        # Ranges that start right after the mark-delete position become part of it.
        while True:
            first = self._ranges.first()
            if first is None or first[0] > self._ledgers.next_valid(self._md):
                break
            self._ranges.pop_first()
            self._md = max(self._md, first[1])

    def _after_md_change(self) -> None:
        for pos in [p for p in self._batch if p <= self._md]:
            del self._batch[pos]
        nxt = self._ledgers.next_valid(self._md)
        if self._ledgers.normalize(self._read) < nxt:
            self._read = nxt
        self.dirty = True

    async def mark_delete(self, position: Position, properties: Mapping[str, int] | None = None) -> None:
        """Acknowledge every entry up to and including ``position`` (cumulative ack). A position
        at or before the current mark-delete is ignored; one past the last entry raises
        `ManagedLedgerError`. Persisted by the next flush or on close."""
        self._check_open()
        lce = self._last_confirmed
        if position > lce:
            raise ManagedLedgerError(
                f"{self._host.name}/{self.name}: cannot mark-delete {position}, past the last entry {lce}"
            )
        if properties is not None:
            self._properties = dict(properties)
            self.dirty = True
        if position > self._md:
            self._set_md(position)
        await trio.lowlevel.checkpoint()

    async def delete(self, positions: Iterable[Position]) -> None:
        """Acknowledge individual entries. Positions already acknowledged, or that are not entries
        of the managed ledger, are ignored. Persisted by the next flush or on close."""
        self._check_open()
        changed = False
        for pos in positions:
            if pos <= self._md or not self._ledgers.is_entry(pos):
                continue
            if self._ranges.add(pos):
                self._batch.pop(pos, None)
                changed = True
        if changed:
            self._absorb()
            self._after_md_change()
        await trio.lowlevel.checkpoint()

    async def delete_batch_indexes(self, position: Position, batch_size: int, acked_indexes: Iterable[int]) -> None:
        """Acknowledge some messages of the batch entry at ``position``; once all ``batch_size``
        are acknowledged the entry itself is (``delete([position])``)."""
        self._check_open()
        if self.is_acked(position) or not self._ledgers.is_entry(position):
            await trio.lowlevel.checkpoint()
            return
        batch = self._batch.setdefault(position, _Batch(batch_size))
        batch.size = batch_size
        batch.acked.update(i for i in acked_indexes if 0 <= i < batch_size)
        self.dirty = True
        if len(batch.acked) >= batch_size:
            await self.delete([position])
        else:
            await trio.lowlevel.checkpoint()

    # --- moving the read position ------------------------------------------------------------

    def _set_read(self, position: Position) -> None:
        self._read = position
        self._read_epoch += 1

    def rewind(self) -> None:
        """Move the read position back to the first entry after the mark-delete position."""
        self._set_read(self._ledgers.next_valid(self._md))

    async def seek(self, position: Position) -> None:
        """Move the read position to ``position`` (kept after the mark-delete position and no
        further than just after the last entry)."""
        self._check_open()
        lo = self._ledgers.next_valid(self._md)
        hi = self._ledgers.next_valid(self._last_confirmed)
        self._set_read(self._ledgers.normalize(min(max(position, lo), hi)))
        await trio.lowlevel.checkpoint()

    async def reset(self, position: Position) -> None:
        """Reset-cursor: mark-delete just before ``position``, forget individual and batch acks,
        read from ``position`` (clamped to the available entries); persisted at once."""
        self._check_open()
        ledgers = self._ledgers
        first = ledgers.first_ledger()
        pos = position
        if first is not None and pos < Position(first, 0):
            pos = Position(first, 0)
        hi = ledgers.next_valid(ledgers.last_confirmed())
        pos = ledgers.normalize(min(pos, hi))
        self._md = Position(pos.ledger_id, pos.entry_id - 1)
        self._ranges.clear()
        self._batch.clear()
        self._set_read(pos)
        self.dirty = True
        await self.persist()

    async def skip_entries(self, n: int) -> None:
        """Acknowledge the next ``n`` unacknowledged entries after the mark-delete position
        (already acknowledged ones are not counted); persisted at once."""
        self._check_open()
        if n < 0:
            raise ManagedLedgerError("cannot skip a negative number of entries")
        ledgers = self._ledgers
        lce = ledgers.last_confirmed()
        p, remaining = self._md, n
        while remaining > 0:
            q = ledgers.next_valid(p)
            if q > lce:
                break
            rng = self._ranges.find(q)
            if rng is not None:
                p = rng[1]
                continue
            nxt = self._ranges.next_start_after(q)
            bound = lce if nxt is None or nxt > lce else Position(nxt.ledger_id, nxt.entry_id - 1)
            avail = ledgers.count_between(p, bound)
            if remaining >= avail:
                p, remaining = bound, remaining - avail
            else:
                p = ledgers.position_after(p, remaining) or bound
                remaining = 0
        if p > self._md:
            self._set_md(p)
        await self.persist()

    async def clear_backlog(self) -> None:
        """Acknowledge every entry up to the last one; persisted at once."""
        self._check_open()
        lce = self._last_confirmed
        if lce > self._md:
            self._set_md(lce)
        await self.persist()

    def ledgers_removed(self) -> None:
        """Called when ledgers left the list (trimmed, or empty and deleted): move the
        mark-delete position (and with it the read position) out of ledgers that are gone."""
        ledgers = self._ledgers
        if self._md.ledger_id in ledgers or ledgers.first_ledger() is None:
            return
        nxt = ledgers.normalize(Position(self._md.ledger_id, self._md.entry_id + 1))
        if nxt.ledger_id in ledgers and nxt.ledger_id > self._md.ledger_id:
            self._set_md(Position(nxt.ledger_id, -1))

    # --- reads -------------------------------------------------------------------------------

    async def read_entries(
        self, max_entries: int, max_bytes: int | None = None, max_position: Position | None = None
    ) -> list[Entry]:
        """Up to ``max_entries`` entries from the read position (skipping acknowledged ones) that
        exist now, stopping once ``max_bytes`` is reached (at least one entry is returned when
        any is available) and never past ``max_position`` (the broker's max read position: entries
        after it stay unread); advances the read position. Never waits for new entries."""
        self._check_open()
        if max_entries < 1:
            raise ManagedLedgerError("max_entries must be at least 1")
        ledgers = self._ledgers
        lce = ledgers.last_confirmed()
        if max_position is not None and max_position < lce:
            lce = max_position
        epoch = self._read_epoch
        out: list[Entry] = []
        total = 0
        pos = ledgers.normalize(self._read)
        while len(out) < max_entries and pos <= lce and (max_bytes is None or total < max_bytes):
            if pos <= self._md:
                pos = ledgers.next_valid(self._md)
                continue
            rng = self._ranges.find(pos)
            if rng is not None:
                pos = ledgers.next_valid(rng[1])
                continue
            last = ledgers.entries(pos.ledger_id) - 1
            if pos.ledger_id == lce.ledger_id:
                last = min(last, lce.entry_id)
            nxt = self._ranges.next_start_after(pos)
            if nxt is not None and nxt.ledger_id == pos.ledger_id:
                last = min(last, nxt.entry_id - 1)
            last = min(last, pos.entry_id + max_entries - len(out) - 1)
            if last < pos.entry_id:  # defensive: nothing readable here
                break
            got = await self._host.read(pos.ledger_id, pos.entry_id, last)
            if not got:
                break
            for entry in got:
                out.append(entry)
                total += len(entry.data)
                pos = entry.position
                if max_bytes is not None and total >= max_bytes:
                    break
            pos = ledgers.next_valid(pos)
        if epoch == self._read_epoch:  # a concurrent seek/rewind wins over this read
            self._read = pos
        self.messages_consumed_counter += len(out)
        return out

    async def read_entries_or_wait(self, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """Like ``read_entries`` but waits until at least one entry is available. Raises
        `NoMoreEntries` when the managed ledger is terminated and fully read,
        `ManagedLedgerClosed` when it or the cursor closes, `ManagedLedgerFenced` when fenced.
        Cancel it with a cancel scope."""
        host = self._host
        while True:
            event = host.entries_event
            entries = await self.read_entries(max_entries, max_bytes)
            if entries:
                return entries
            if host.terminated and not self.has_more_entries():
                raise NoMoreEntries(f"{host.name} is terminated and cursor {self.name} read it all")
            self._check_open()  # fenced or closed while reading
            await event.wait()
            self._check_open()

    async def find_newest_matching(
        self, predicate: Callable[[Entry], bool], *, search_all: bool = False
    ) -> Position | None:
        """The newest entry for which ``predicate`` holds, by binary search; the predicate must
        hold for a prefix of the entries (e.g. "published before t"). Searches the entries after
        the mark-delete position, or every available entry with ``search_all``."""
        self._check_open()
        ledgers = self._ledgers
        lce = ledgers.last_confirmed()
        start = self._md
        if search_all:
            first = ledgers.first_ledger()
            start = Position(first if first is not None else -1, -1)
        lo, hi = 0, ledgers.count_between(start, lce) - 1
        found = None
        while lo <= hi:
            mid = (lo + hi) // 2
            pos = ledgers.position_after(start, mid + 1)
            if pos is None:
                break
            (entry,) = await self._host.read(pos.ledger_id, pos.entry_id, pos.entry_id)
            if predicate(entry):
                found, lo = pos, mid + 1
            else:
                hi = mid - 1
        return found

    # --- persistence -------------------------------------------------------------------------

    def snapshot(self) -> CursorInfo:
        """The record persisted for this cursor (bounded ranges; see the module header)."""
        limit = self._host.max_unacked_ranges_to_persist
        ranges = []
        for i, (a, b) in enumerate(self._ranges):
            if i >= limit:
                self._host.metrics.truncated_ranges.inc()
                break
            ranges.append(PositionRange(Position(a.ledger_id, a.entry_id - 1), b))
        batches = {}
        for pos in sorted(self._batch)[:limit]:
            words = indexes_to_words(self._batch[pos].acked)
            if words:
                batches[pos] = words
        return CursorInfo(
            mark_delete=self._md,
            individual_deleted=tuple(ranges),
            properties=self._properties,
            last_active_ms=self._host.now_ms(),
            batch_deletes=batches,
            cursor_properties=self._cursor_properties,
        )

    async def persist(self) -> None:
        """Write the state to the cursor's metadata node now (CAS on its version). No-op for
        non-durable cursors. Raises `ManagedLedgerFenced` when another owner rewrote the node
        (this managed ledger is then fenced) and `ManagedLedgerError` on store failures."""
        if not self.durable:
            return
        host = self._host
        metrics = host.metrics
        async with self._persist_lock:
            info = self.snapshot()
            self.dirty = False
            path = f"{host.node_path}/{self.name}"
            started = trio.current_time()
            try:
                stat = await host.store.set(path, info.encode(), version=self.version)
            except (BadVersionError, NoNodeError) as exc:
                self.dirty = True
                metrics.cursor_persist_errors.inc()
                if self.state is CursorState.CLOSED and isinstance(exc, NoNodeError):
                    return  # deleted meanwhile
                host.fence(f"cursor {self.name} was rewritten by another owner ({exc})")
                raise ManagedLedgerFenced(f"{host.name}/{self.name}: {exc}") from exc
            except MetadataError as exc:
                self.dirty = True
                metrics.cursor_persist_errors.inc()
                raise ManagedLedgerError(f"{host.name}/{self.name}: cannot persist: {exc}") from exc
            self.version = stat.version
            metrics.cursor_persist_latency.observe(max(trio.current_time() - started, 0.0))

    def mark_closed(self) -> None:
        """Close without persisting (the cursor was deleted)."""
        self.state = CursorState.CLOSED
        self._host.cursor_closed(self)

    async def close(self) -> None:
        """Persist (durable cursors) and close; waiting reads raise `ManagedLedgerClosed`."""
        if self.state is CursorState.CLOSED:
            return
        try:
            if self.durable:
                await self.persist()
        finally:
            self.mark_closed()

    def stats(self) -> dict[str, Any]:
        """A snapshot like Pulsar's CursorStats in ``stats-internal``."""
        return {
            "markDeletePosition": str(self._md),
            "readPosition": str(self.read_position),
            "messagesConsumedCounter": self.messages_consumed_counter,
            "individuallyDeletedMessages": "["
            + ", ".join(f"({lo}..{hi}]" for lo, hi in self.individually_deleted_ranges)
            + "]",
            "totalNonContiguousDeletedMessagesRange": len(self._ranges),
            "numberOfEntriesSinceFirstNotAckedMessage": self._ledgers.count_between(self._md, self._last_confirmed),
            "state": self.state.name,
            "durable": self.durable,
            "properties": dict(self._properties),
        }
