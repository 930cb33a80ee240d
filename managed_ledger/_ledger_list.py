"""The ledger list of one managed ledger and the position arithmetic over it (pure, no I/O).

A managed ledger is a chain of ledgers in increasing id order. Every ledger but the *current* one
(the ledger being written, if any) is closed with a final entry count; the current ledger's count
grows as adds complete. Positions follow Pulsar's conventions:

* ``Position(L, e)`` with ``0 <= e < entries(L)`` names an entry.
* ``Position(L, -1)`` is "just before the first entry of L" (used for an empty managed ledger's
  last confirmed entry and for mark-delete positions); it sorts after every entry of earlier
  ledgers, so it is equivalent to the last entry of the previous ledger.
* A position past the end of a closed ledger, or inside a ledger that is no longer in the list
  (trimmed, or removed because it was empty), *normalizes* to the first entry of the next ledger
  in the list; past the last ledger it stays where it is (the next entry's position is not known
  yet: it will be in a ledger that does not exist yet).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import replace

from protocols.managed_ledger import LedgerInfo, OffloadContext, Position

__all__ = ["LedgerList"]


class LedgerList:
    """Ledger infos by id plus the live counts of the current ledger.

    Invariants: ids strictly increase; ``current``, when set, is the last id; closed ledgers in the
    list have their final counts (a closed ledger with 0 entries may appear transiently).
    """

    def __init__(self, infos: tuple[LedgerInfo, ...] = ()) -> None:
        self._ids: list[int] = [i.ledger_id for i in infos]
        self._infos: dict[int, LedgerInfo] = {i.ledger_id: i for i in infos}
        self.current: int | None = None
        self.current_entries = 0
        self.current_size = 0

    # --- mutation ------------------------------------------------------------------------------

    def append_current(self, ledger_id: int) -> None:
        """Add a new ledger as the current (empty) one."""
        if self._ids and ledger_id <= self._ids[-1]:
            raise ValueError(f"ledger {ledger_id} is not after {self._ids[-1]}")
        if self.current is not None:
            raise ValueError("close the current ledger first")
        self._ids.append(ledger_id)
        self._infos[ledger_id] = LedgerInfo(ledger_id)
        self.current, self.current_entries, self.current_size = ledger_id, 0, 0

    def close_current(self, timestamp_ms: int) -> LedgerInfo | None:
        """Freeze the current ledger's counts; return its final info (None when there is none)."""
        if self.current is None:
            return None
        info = LedgerInfo(self.current, self.current_entries, self.current_size, timestamp_ms)
        self._infos[self.current] = info
        self.current = None
        return info

    def set_offload(self, ledger_id: int, offload: OffloadContext) -> None:
        """Record a closed ledger's offload context (KeyError when not listed)."""
        if ledger_id == self.current:
            raise ValueError("the current ledger is never offloaded")
        self._infos[ledger_id] = replace(self._infos[ledger_id], offload=offload)

    def remove(self, ledger_id: int) -> None:
        """Drop a ledger from the list (trimmed, or closed with no entries)."""
        if ledger_id == self.current:
            raise ValueError("cannot remove the current ledger")
        self._ids.remove(ledger_id)
        del self._infos[ledger_id]

    # --- queries -------------------------------------------------------------------------------

    def ids(self) -> list[int]:
        """Ledger ids, oldest first."""
        return list(self._ids)

    def __contains__(self, ledger_id: object) -> bool:
        return ledger_id in self._infos

    def __len__(self) -> int:
        return len(self._ids)

    def infos(self) -> list[LedgerInfo]:
        """Every ledger's info, oldest first; the current ledger with its live counts."""
        return [self.info(i) for i in self._ids]

    def closed_infos(self) -> tuple[LedgerInfo, ...]:
        """What the metadata record lists: closed ledgers with final counts, the current one as 0/0."""
        return tuple(self._infos[i] for i in self._ids)

    def info(self, ledger_id: int) -> LedgerInfo:
        """One ledger's info (live counts for the current ledger); KeyError if not listed."""
        if ledger_id == self.current:
            base = self._infos[ledger_id]
            return LedgerInfo(ledger_id, self.current_entries, self.current_size, base.timestamp_ms, base.offload)
        return self._infos[ledger_id]

    def entries(self, ledger_id: int) -> int:
        """Entries of a listed ledger (0 when not listed)."""
        if ledger_id == self.current:
            return self.current_entries
        info = self._infos.get(ledger_id)
        return 0 if info is None else info.entries

    @property
    def number_of_entries(self) -> int:
        """Entries over every listed ledger."""
        return sum(self.entries(i) for i in self._ids)

    @property
    def total_size(self) -> int:
        """Bytes over every listed ledger."""
        return sum(self.info(i).size for i in self._ids)

    def first_ledger(self) -> int | None:
        """The oldest listed ledger id."""
        return self._ids[0] if self._ids else None

    def last_confirmed(self, fallback_ledger: int = -1) -> Position:
        """The last entry, or ``(first ledger, -1)`` when there is none."""
        for lid in reversed(self._ids):
            n = self.entries(lid)
            if n > 0:
                return Position(lid, n - 1)
        first = self._ids[0] if self._ids else fallback_ledger
        return Position(first, -1)

    def is_entry(self, pos: Position) -> bool:
        """True when ``pos`` names an entry of a listed ledger."""
        return pos.ledger_id in self._infos and 0 <= pos.entry_id < self.entries(pos.ledger_id)

    def _has_room(self, lid: int, entry_id: int) -> bool:
        return lid == self.current or entry_id < self.entries(lid)

    def normalize(self, pos: Position) -> Position:
        """The position of the first entry at or after ``pos`` (see the module header)."""
        lid, eid = pos.ledger_id, max(pos.entry_id, 0)
        if lid in self._infos and self._has_room(lid, eid):
            return Position(lid, eid)
        k = bisect_right(self._ids, lid)
        while k < len(self._ids):
            nxt = self._ids[k]
            if self._has_room(nxt, 0):
                return Position(nxt, 0)
            k += 1
        return Position(lid, eid)

    def next_valid(self, pos: Position) -> Position:
        """The first entry position strictly after ``pos``."""
        return self.normalize(Position(pos.ledger_id, pos.entry_id + 1))

    def count_between(self, lo: Position, hi: Position) -> int:
        """Entries ``e`` with ``lo < e <= hi``."""
        if hi <= lo:
            return 0
        total = 0
        start = bisect_right(self._ids, lo.ledger_id) - 1
        for lid in self._ids[max(start, 0) :]:
            if lid > hi.ledger_id:
                break
            n = self.entries(lid)
            first = lo.entry_id + 1 if lid == lo.ledger_id else (0 if lid > lo.ledger_id else n)
            last = hi.entry_id if lid == hi.ledger_id else n - 1
            last = min(last, n - 1)
            first = max(first, 0)
            if last >= first:
                total += last - first + 1
        return total

    def position_after(self, pos: Position, n: int) -> Position | None:
        """The ``n``-th entry after ``pos`` (n >= 1), or None when fewer exist."""
        if n < 1:
            raise ValueError("n must be at least 1")
        start = bisect_right(self._ids, pos.ledger_id) - 1
        for lid in self._ids[max(start, 0) :]:
            count = self.entries(lid)
            first = pos.entry_id + 1 if lid == pos.ledger_id else (0 if lid > pos.ledger_id else count)
            first = max(first, 0)
            avail = count - first
            if avail <= 0:
                continue
            if n <= avail:
                return Position(lid, first + n - 1)
            n -= avail
        return None

    def iter_runs(self, start: Position, stop: Position) -> Iterator[tuple[int, int, int]]:
        """``(ledger, first, last)`` runs of entries from ``start`` (inclusive) to ``stop``
        (inclusive), one per ledger, in order."""
        k = max(bisect_right(self._ids, start.ledger_id) - 1, 0)
        for lid in self._ids[k:]:
            if lid > stop.ledger_id:
                return
            n = self.entries(lid)
            first = max(start.entry_id, 0) if lid == start.ledger_id else (0 if lid > start.ledger_id else n)
            last = min(stop.entry_id if lid == stop.ledger_id else n - 1, n - 1)
            if last >= first:
                yield lid, first, last
