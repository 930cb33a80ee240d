"""Pure consumer-selection policies of the dispatchers (no I/O, no trio).

* Failover: the active consumer is the first by (priority level, consumer name, arrival); on a
  partitioned topic, partition ``p`` goes to consumer ``p % n`` of the best priority level, so
  several consumers share the partitions.
* Shared: round robin over the consumers that have permits (`RoundRobin`).
* Key_Shared AUTO_SPLIT (`AutoSplitRanges`): the hash space 0..65535 starts whole with the first
  consumer; each new consumer takes the lower half of the largest range; a leaving consumer's
  range is merged into its neighbour above (or below, for the last range).
* Key_Shared STICKY (`StickyRanges`): consumers bring their own ranges, which must not overlap;
  hashes outside every range have no consumer and wait.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "HASH_RANGE_SIZE",
    "ConsumerKey",
    "choose_active_consumer",
    "RoundRobin",
    "AutoSplitRanges",
    "StickyRanges",
    "RangeConflictError",
]

HASH_RANGE_SIZE = 65536
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True, order=True)
class ConsumerKey:
    """What failover ordering looks at: priority level (lower first), name, arrival order."""

    priority: int
    name: str
    seq: int


def choose_active_consumer(consumers: Sequence[ConsumerKey], partition: int = -1) -> ConsumerKey | None:
    """The failover active consumer for a (partition of a) topic, or None when there are none."""
    if not consumers:
        return None
    ordered = sorted(consumers)
    if partition < 0:
        return ordered[0]
    best = [c for c in ordered if c.priority == ordered[0].priority]
    return best[partition % len(best)]


class RoundRobin(Generic[K]):
    """Round robin over a changing set of keys, skipping those the caller says cannot take more."""

    def __init__(self) -> None:
        self._next = 0

    def pick(self, keys: Sequence[K], can_take: Callable[[K], bool]) -> K | None:
        """The next key after the previous pick for which ``can_take(key)`` is true, or None."""
        n = len(keys)
        for i in range(n):
            key = keys[(self._next + i) % n]
            if can_take(key):
                self._next = (self._next + i + 1) % n
                return key
        return None


class RangeConflictError(ValueError):
    """A Key_Shared STICKY consumer asked for hash ranges that overlap another consumer's or are invalid."""


class AutoSplitRanges(Generic[K]):
    """Key_Shared AUTO_SPLIT: inclusive range ends -> consumer; see the module rules."""

    def __init__(self) -> None:
        self._ends: list[int] = []  # sorted inclusive range ends
        self._owners: list[K] = []

    def add(self, key: K) -> None:
        """Give ``key`` a range: the whole space if it is the first, else half of the largest range."""
        if not self._ends:
            self._ends, self._owners = [HASH_RANGE_SIZE - 1], [key]
            return
        best, best_size = 0, -1
        for i, end in enumerate(self._ends):
            start = self._ends[i - 1] + 1 if i else 0
            if end - start + 1 > best_size:
                best, best_size = i, end - start + 1
        start = self._ends[best - 1] + 1 if best else 0
        end = self._ends[best]
        if best_size < 2:
            raise RangeConflictError("no hash range left to split for a new Key_Shared consumer")
        middle = start + (end - start) // 2
        self._ends.insert(best, middle)
        self._owners.insert(best, key)

    def remove(self, key: K) -> None:
        """Drop ``key``'s range, merging it into the neighbour above (below for the last range)."""
        if key not in self._owners:
            return
        i = self._owners.index(key)
        if len(self._ends) == 1:
            self._ends, self._owners = [], []
            return
        if i == len(self._ends) - 1:
            # the last range: the one below grows up to the end
            self._ends[i - 1] = self._ends[i]
        del self._ends[i]
        del self._owners[i]

    def select(self, hash_value: int) -> K | None:
        """The consumer owning ``hash_value`` (0..65535), None when there are no consumers."""
        from bisect import bisect_left

        if not self._ends:
            return None
        return self._owners[bisect_left(self._ends, hash_value % HASH_RANGE_SIZE)]

    def ranges(self) -> list[tuple[int, int, K]]:
        """``(start, end, consumer)`` for each range, in order (for stats and tests)."""
        out = []
        for i, end in enumerate(self._ends):
            out.append((self._ends[i - 1] + 1 if i else 0, end, self._owners[i]))
        return out


class StickyRanges(Generic[K]):
    """Key_Shared STICKY: explicit inclusive ranges per consumer; overlaps are refused."""

    def __init__(self) -> None:
        self._ranges: list[tuple[int, int, K]] = []

    def add(self, key: K, ranges: Sequence[tuple[int, int]]) -> None:
        """Assign ``ranges`` to ``key``; raise `RangeConflictError` if any is invalid or taken."""
        if not ranges:
            raise RangeConflictError("a STICKY Key_Shared consumer must give at least one hash range")
        for start, end in ranges:
            if not 0 <= start <= end < HASH_RANGE_SIZE:
                raise RangeConflictError(f"invalid hash range [{start}, {end}]: must lie in 0..65535")
            for s, e, _other in self._ranges:
                if start <= e and s <= end:
                    raise RangeConflictError(f"hash range [{start}, {end}] overlaps [{s}, {e}] of another consumer")
        for i, (start, end) in enumerate(ranges):
            for s2, e2 in ranges[i + 1 :]:
                if start <= e2 and s2 <= end:
                    raise RangeConflictError(f"hash ranges [{start}, {end}] and [{s2}, {e2}] overlap")
        self._ranges.extend((s, e, key) for s, e in ranges)
        self._ranges.sort(key=lambda r: r[0])

    def remove(self, key: K) -> None:
        """Drop every range of ``key``."""
        self._ranges = [r for r in self._ranges if r[2] != key]

    def select(self, hash_value: int) -> K | None:
        """The consumer whose range holds ``hash_value``, or None."""
        h = hash_value % HASH_RANGE_SIZE
        for s, e, key in self._ranges:
            if s <= h <= e:
                return key
        return None

    def ranges(self) -> list[tuple[int, int, K]]:
        """``(start, end, consumer)`` sorted by start."""
        return list(self._ranges)
