"""Individually acknowledged ranges of a cursor (pure, no I/O).

Ranges are closed ``[first, last]`` runs of entry positions, kept in a ``SortedDict`` keyed by
their first position, so memory grows with the number of gaps, not with the number of acks.
Adjacency across ledger boundaries is decided by the caller's ``next_valid`` function (the
ledger list knows where each ledger ends). The number of acknowledged entries is maintained
incrementally with the caller's ``count`` function (entries in ``(lo, hi]``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sortedcontainers import SortedDict

from protocols.managed_ledger import Position

__all__ = ["AckRanges"]

NextFn = Callable[[Position], Position]
CountFn = Callable[[Position, Position], int]


def _before(p: Position) -> Position:
    return Position(p.ledger_id, p.entry_id - 1)


class AckRanges:
    """Disjoint, non-adjacent (as far as ``next_valid`` could tell when they were added) closed
    ranges of acknowledged positions."""

    def __init__(self, next_valid: NextFn, count: CountFn) -> None:
        self._next = next_valid
        self._count = count
        self._ranges: SortedDict = SortedDict()  # first -> last
        self._sizes: dict[Position, int] = {}
        self.acked_entries = 0

    def __len__(self) -> int:
        return len(self._ranges)

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        return iter(list(self._ranges.items()))

    def clear(self) -> None:
        """Forget every range."""
        self._ranges.clear()
        self._sizes.clear()
        self.acked_entries = 0

    def _put(self, first: Position, last: Position) -> None:
        self._ranges[first] = last
        size = self._count(_before(first), last)
        self._sizes[first] = size
        self.acked_entries += size

    def _drop(self, first: Position) -> Position:
        last: Position = self._ranges.pop(first)  # SortedDict is untyped (no stubs)
        self.acked_entries -= self._sizes.pop(first)
        return last

    def find(self, pos: Position) -> tuple[Position, Position] | None:
        """The range holding ``pos``, if any."""
        k = self._ranges.bisect_right(pos) - 1
        if k < 0:
            return None
        first = self._ranges.keys()[k]
        last = self._ranges[first]
        return (first, last) if pos <= last else None

    def __contains__(self, pos: object) -> bool:
        return isinstance(pos, Position) and self.find(pos) is not None

    def first(self) -> tuple[Position, Position] | None:
        """The lowest range."""
        if not self._ranges:
            return None
        first = self._ranges.keys()[0]
        return first, self._ranges[first]

    def next_start_after(self, pos: Position) -> Position | None:
        """The first position of the lowest range starting after ``pos``."""
        k = self._ranges.bisect_right(pos)
        return self._ranges.keys()[k] if k < len(self._ranges) else None

    def add(self, pos: Position) -> bool:
        """Acknowledge one entry; merge with neighbours. False when it was already acked."""
        if self.find(pos) is not None:
            return False
        first, last = pos, pos
        k = self._ranges.bisect_right(pos) - 1
        if k >= 0:
            pfirst = self._ranges.keys()[k]
            if self._next(self._ranges[pfirst]) == pos:
                self._drop(pfirst)
                first = pfirst
        nxt = self._next(pos)
        if nxt in self._ranges:
            last = self._drop(nxt)
        self._put(first, last)
        return True

    def add_range(self, first: Position, last: Position) -> None:
        """Insert a restored range as is (from a persisted record; must not overlap)."""
        self._put(first, last)

    def pop_first(self) -> tuple[Position, Position]:
        """Remove and return the lowest range."""
        first = self._ranges.keys()[0]
        return first, self._drop(first)

    def remove_upto(self, pos: Position) -> None:
        """Forget acknowledgements at or before ``pos`` (the mark-delete position moved there)."""
        while self._ranges:
            first = self._ranges.keys()[0]
            if first > pos:
                return
            last = self._drop(first)
            if last > pos:
                self._put(self._next(pos), last)
                return

    def acked_in(self, lo: Position, hi: Position) -> int:
        """Acknowledged entries in ``(lo, hi]`` (exact at range edges)."""
        if not self._ranges or hi <= lo:
            return 0
        if lo < self._ranges.keys()[0] and hi >= self._ranges.peekitem(-1)[1]:
            return self.acked_entries
        total = 0
        for first, last in self._ranges.items():
            if first > hi:
                break
            if last <= lo:
                continue
            a = max(_before(first), lo)
            b = min(last, hi)
            total += self._count(a, b)
        return total
