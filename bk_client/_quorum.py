"""Quorum arithmetic of a ledger: which bookies get an entry, when it is acknowledged, when a
recovery step has heard from enough bookies. Pure: no I/O, no clock, no trio.

A ledger segment has an ensemble of E bookies (indexes 0..E-1), a write quorum Qw and an ack
quorum Qa with 1 <= Qa <= Qw <= E.

Rule 1 (striping). Entry ``e`` is written to the Qw consecutive ensemble indexes starting at
``e % E`` (wrapping around): its *write set*. So there are exactly E distinct write sets, and
every bookie is in exactly Qw of them.

Rule 2 (acknowledgement). An entry is acknowledged once Qa distinct members of its write set
acked it. A write set that has lost more than Qw - Qa members can no longer reach Qa acks: the
entry must be re-sent to replacement bookies (ensemble change) or fail.

Rule 3 (coverage, for fencing and recovery). After a set R of bookies answered, no write set can
still collect Qa acks without one of them exactly when every write set has at most Qa - 1 members
outside R, i.e. at least Qw - Qa + 1 members in R. Fencing is complete when R (bookies that
persisted the fence) covers every write set: an old writer can then never again complete an add.
The largest LAC reported by a covering R is at least the LAC of any entry the old writer had
acknowledged, which is what makes read-LAC during recovery safe.

Which answers count toward R depends on the operation (``CoverageRule``): a fence counts only if
the bookie recorded it (OK, or "fenced, but I hold no entry"); a plain read-LAC also counts
"no such ledger", since a bookie that never saw the ledger cannot hold an acknowledged entry.
Errors and silence never count.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = [
    "DistributionSchedule",
    "AckSet",
    "BookieResponse",
    "CoverageRule",
    "QuorumCoverageSet",
]


@dataclass(frozen=True, slots=True)
class DistributionSchedule:
    """Round-robin striping of entries over an ensemble (rules 1 and 2 above).

    Raises ``ValueError`` unless ``1 <= ack_quorum <= write_quorum <= ensemble_size``.
    """

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    # the E write sets, computed once: every add looks its own up
    _sets: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size):
            raise ValueError(
                "quorum sizes must satisfy 1 <= ack_quorum <= write_quorum <= ensemble_size, got "
                f"E={self.ensemble_size} Qw={self.write_quorum} Qa={self.ack_quorum}"
            )
        e = self.ensemble_size
        object.__setattr__(
            self, "_sets", tuple(tuple((start + i) % e for i in range(self.write_quorum)) for start in range(e))
        )

    def write_set(self, entry_id: int) -> tuple[int, ...]:
        """The Qw distinct ensemble indexes entry ``entry_id`` goes to, first ``entry_id % E``.

        Raises ``ValueError`` for a negative entry id.
        """
        if entry_id < 0:
            raise ValueError(f"entry id must be >= 0, got {entry_id}")
        return self._sets[entry_id % self.ensemble_size]

    def write_sets(self) -> Iterator[tuple[int, ...]]:
        """The E distinct write sets, in the order of entries 0..E-1."""
        for start in range(self.ensemble_size):
            yield self.write_set(start)

    def has_entry(self, entry_id: int, bookie_index: int) -> bool:
        """True when the bookie at ``bookie_index`` is in the write set of ``entry_id``."""
        offset = (bookie_index - entry_id) % self.ensemble_size
        return offset < self.write_quorum

    def ack_set(self, entry_id: int) -> AckSet:
        """A fresh ack tracker for ``entry_id`` (rule 2)."""
        return AckSet._checked(self.write_set(entry_id), self.ack_quorum)

    def coverage_set(self, rule: CoverageRule) -> QuorumCoverageSet:
        """A fresh coverage tracker over this ensemble (rule 3) counting answers per ``rule``."""
        return QuorumCoverageSet(self, rule)

    def has_ack_quorum(self, entry_id: int, acked: Collection[int]) -> bool:
        """True when at least Qa members of ``entry_id``'s write set are in ``acked``.

        This is the check for "enough bookies have it" used when closing / recovering a ledger
        (a recovery re-write counts only with an ack quorum) and for write-LAC / force requests.
        """
        return sum(1 for i in self.write_set(entry_id) if i in acked) >= self.ack_quorum

    def write_set_writable(self, entry_id: int, writable: Collection[int]) -> bool:
        """True when enough members of ``entry_id``'s write set are writable to reach Qa acks."""
        return self.has_ack_quorum(entry_id, writable)

    def ensemble_writable(self, writable: Collection[int]) -> bool:
        """True when every write set can still reach Qa acks using only ``writable`` bookies.

        When False, some entries cannot be acknowledged until an ensemble change replaces bookies.
        """
        return all(sum(1 for i in ws if i in writable) >= self.ack_quorum for ws in self.write_sets())


class AckSet:
    """Acknowledgement tracker for one entry (rule 2).

    ``ack``/``fail``/``remove`` take ensemble indexes; an index outside the write set is a
    programming error and raises ``ValueError``. Acks are counted once per bookie. A later answer
    from the same bookie replaces its earlier one (an ack after a failure clears the failure, as
    when a write is re-sent to the replacement bookie at the same index).
    """

    __slots__ = ("_write_set", "_ack_quorum", "_acked", "_failed")

    def __init__(self, write_set: tuple[int, ...], ack_quorum: int) -> None:
        if len(set(write_set)) != len(write_set):
            raise ValueError(f"write set has duplicate indexes: {write_set}")
        if not 1 <= ack_quorum <= len(write_set):
            raise ValueError(f"ack quorum {ack_quorum} outside 1..{len(write_set)}")
        self._write_set = write_set
        self._ack_quorum = ack_quorum
        self._acked: set[int] = set()
        self._failed: dict[int, str | None] = {}

    @classmethod
    def _checked(cls, write_set: tuple[int, ...], ack_quorum: int) -> AckSet:
        # the schedule's write sets and quorum were validated once, in DistributionSchedule:
        # skip the per-entry checks on the add path
        ack = cls.__new__(cls)
        ack._write_set = write_set
        ack._ack_quorum = ack_quorum
        ack._acked = set()
        ack._failed = {}
        return ack

    @property
    def write_set(self) -> tuple[int, ...]:
        """The ensemble indexes this entry is written to."""
        return self._write_set

    @property
    def acked(self) -> frozenset[int]:
        """Indexes that acknowledged the entry."""
        return frozenset(self._acked)

    @property
    def failed(self) -> Mapping[int, str | None]:
        """Indexes whose write failed, with the failed bookie id when it was given."""
        return dict(self._failed)

    @property
    def complete(self) -> bool:
        """True when at least Qa distinct write-set members acked."""
        return len(self._acked) >= self._ack_quorum

    @property
    def broken(self) -> bool:
        """True when more than Qw - Qa members failed: Qa acks are impossible without replacements."""
        return len(self._failed) > len(self._write_set) - self._ack_quorum

    def _check(self, index: int) -> None:
        if index not in self._write_set:
            raise ValueError(f"bookie index {index} is not in the write set {self._write_set}")

    def ack(self, index: int) -> bool:
        """Record an ack from ``index``; return whether the entry is now acknowledged."""
        self._check(index)
        self._failed.pop(index, None)
        self._acked.add(index)
        return self.complete

    def fail(self, index: int, bookie_id: str | None = None) -> bool:
        """Record a failed write at ``index``; return whether the ack quorum is now broken."""
        self._check(index)
        self._acked.discard(index)
        self._failed[index] = bookie_id
        return self.broken

    def remove(self, index: int) -> bool:
        """Forget any answer from ``index`` (its bookie was replaced and the write is re-sent);
        return whether the entry is still acknowledged by the others."""
        self._check(index)
        self._acked.discard(index)
        self._failed.pop(index, None)
        return self.complete


class BookieResponse(enum.Enum):
    """How a bookie answered a fence / read-LAC request, as far as coverage cares."""

    OK = "ok"  # answered, fence recorded / LAC returned
    NO_ENTRY = "no_entry"  # knows the ledger (fence recorded) but holds no entry
    NO_LEDGER = "no_ledger"  # has never seen the ledger
    ERROR = "error"  # any failure: unknown what the bookie holds


class CoverageRule(enum.Enum):
    """Which answers count as covering a bookie (see the module header, rule 3)."""

    FENCE = "fence"  # the bookie must have recorded the fence: OK or NO_ENTRY
    READ_LAC = "read_lac"  # the bookie's answer is authoritative: OK, NO_ENTRY or NO_LEDGER

    def counts(self, response: BookieResponse) -> bool:
        """True when ``response`` covers its bookie under this rule."""
        if response is BookieResponse.ERROR:
            return False
        if response is BookieResponse.NO_LEDGER:
            return self is CoverageRule.READ_LAC
        return True


class QuorumCoverageSet:
    """Tracks the answers of one fence / read-LAC round over one ensemble (rule 3).

    ``covered`` becomes True exactly when every write set has at least Qw - Qa + 1 covered members.
    A covering answer is sticky (a recorded fence cannot be undone by a later error from the same
    bookie). ``impossible`` says coverage cannot be reached even if every bookie not yet covered
    and not yet failed answered OK: the round must fail (or be retried).
    """

    __slots__ = ("_schedule", "_rule", "_covered", "_answered")

    def __init__(self, schedule: DistributionSchedule, rule: CoverageRule) -> None:
        self._schedule = schedule
        self._rule = rule
        self._covered: set[int] = set()
        self._answered: set[int] = set()

    @property
    def rule(self) -> CoverageRule:
        """The rule deciding which answers count."""
        return self._rule

    @property
    def covered_bookies(self) -> frozenset[int]:
        """Indexes whose answer counts."""
        return frozenset(self._covered)

    @property
    def answered(self) -> frozenset[int]:
        """Indexes that answered at all (counting or not)."""
        return frozenset(self._answered)

    def add(self, index: int, response: BookieResponse) -> bool:
        """Record ``index``'s answer; return whether the ensemble is now covered.

        Raises ``ValueError`` for an index outside the ensemble.
        """
        if not 0 <= index < self._schedule.ensemble_size:
            raise ValueError(f"bookie index {index} outside ensemble of {self._schedule.ensemble_size}")
        self._answered.add(index)
        if self._rule.counts(response):
            self._covered.add(index)
        return self.covered

    def _covers(self, members: set[int]) -> bool:
        s = self._schedule
        # A write set escapes coverage when Qa of its members are outside the set.
        return all(sum(1 for i in ws if i not in members) < s.ack_quorum for ws in s.write_sets())

    @property
    def covered(self) -> bool:
        """True when no write set can reach Qa acks without a covered bookie."""
        return self._covers(self._covered)

    @property
    def all_answered(self) -> bool:
        """True when every ensemble member answered."""
        return len(self._answered) == self._schedule.ensemble_size

    @property
    def impossible(self) -> bool:
        """True when even OK answers from every still-silent bookie could not cover the ensemble."""
        hopeful = self._covered | (set(range(self._schedule.ensemble_size)) - self._answered)
        return not self._covers(hopeful)
