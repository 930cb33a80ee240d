"""Choosing bookies for ensembles. Pure: the caller passes the writable bookies it knows of.

Policy, in priority order, for every bookie picked:

1. Never a bookie in ``exclude`` (failed, quarantined, already in the ensemble) nor a duplicate.
2. Rack spread: when bookies carry rack labels, prefer a rack with the fewest members already in
   the ensemble, so one rack failing loses as few replicas as possible. Unlabelled bookies share
   one implicit rack (``DEFAULT_RACK``); with no labels at all this rule is a no-op.
3. Load spread: prefer the bookie with the fewest ledger placements made by this policy object
   (a local view; each client spreads its own load and together they spread the cluster's).
4. Random tie-break with the injected ``random.Random`` so tests are deterministic.

Placements are counted when an ensemble is chosen or a bookie replaced; ``release`` takes them
back (ledger deleted). Counts are kept only for bookies seen in the latest ``available`` list,
so the table is bounded by the cluster size.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ._errors import NotEnoughBookies

__all__ = ["BookieInfo", "EnsemblePlacementPolicy", "DEFAULT_RACK"]

DEFAULT_RACK = "/default-rack"


@dataclass(frozen=True, slots=True)
class BookieInfo:
    """A candidate bookie: its id (as registered under ``available/``) and optional rack label."""

    id: str
    rack: str | None = None


def _normalize(available: Iterable[BookieInfo | str]) -> dict[str, str]:
    """bookie id -> rack, first occurrence wins."""
    out: dict[str, str] = {}
    for b in available:
        info = BookieInfo(b) if isinstance(b, str) else b
        if info.id not in out:
            out[info.id] = info.rack or DEFAULT_RACK
    return out


class EnsemblePlacementPolicy:
    """Picks ensembles and replacement bookies (see the module header for the rules).

    Not thread-safe; one per client, used from the event loop.
    """

    def __init__(self, *, rng: random.Random | None = None, rack_aware: bool = True) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._rack_aware = rack_aware
        self._load: Counter[str] = Counter()

    def placements(self, bookie_id: str) -> int:
        """How many ledger segments this policy has placed on ``bookie_id`` (and not released)."""
        return self._load[bookie_id]

    def release(self, bookies: Iterable[str]) -> None:
        """Take back one placement on each of ``bookies`` (e.g. the ensemble of a deleted ledger)."""
        for b in bookies:
            if self._load[b] > 1:
                self._load[b] -= 1
            else:
                self._load.pop(b, None)

    def _prune(self, candidates: dict[str, str]) -> None:
        for b in [b for b in self._load if b not in candidates]:
            del self._load[b]

    def _pick(self, candidates: dict[str, str], chosen_racks: Counter[str]) -> str:
        def key(b: str) -> tuple[int, int]:
            rack_use = chosen_racks[candidates[b]] if self._rack_aware else 0
            return rack_use, self._load[b]

        best = min(key(b) for b in candidates)
        ties = sorted(b for b in candidates if key(b) == best)
        return ties[0] if len(ties) == 1 else self._rng.choice(ties)

    def new_ensemble(
        self, size: int, available: Iterable[BookieInfo | str], *, exclude: Iterable[str] = ()
    ) -> tuple[str, ...]:
        """Choose ``size`` distinct bookies from ``available`` minus ``exclude``.

        Returns their ids in ensemble order and counts one placement on each. Raises
        ``NotEnoughBookies(size, n)`` when only ``n < size`` candidates remain (nothing is counted
        then), ``ValueError`` when ``size < 1``.
        """
        if size < 1:
            raise ValueError(f"ensemble size must be >= 1, got {size}")
        all_known = _normalize(available)
        self._prune(all_known)
        excluded = set(exclude)
        candidates = {b: r for b, r in all_known.items() if b not in excluded}
        if len(candidates) < size:
            raise NotEnoughBookies(
                size, len(candidates), detail=f"{len(all_known)} writable, {len(all_known) - len(candidates)} excluded"
            )
        chosen: list[str] = []
        racks: Counter[str] = Counter()
        for _ in range(size):
            b = self._pick(candidates, racks)
            chosen.append(b)
            racks[candidates.pop(b)] += 1
        for b in chosen:
            self._load[b] += 1
        return tuple(chosen)

    def replace_bookie(
        self, ensemble: Sequence[str], index: int, available: Iterable[BookieInfo | str], *, exclude: Iterable[str] = ()
    ) -> str:
        """Choose a bookie to take ``ensemble[index]``'s place (ensemble change, re-replication).

        Never returns a current ensemble member (including the one replaced) nor one in
        ``exclude``. Prefers a rack not used by the remaining members. Counts one placement on the
        new bookie and releases the old one's. Raises ``NotEnoughBookies(1, 0)`` when no candidate
        remains, ``IndexError`` for a bad index.
        """
        if not 0 <= index < len(ensemble):
            raise IndexError(f"index {index} outside ensemble of {len(ensemble)}")
        all_known = _normalize(available)
        self._prune(all_known)
        excluded = set(exclude) | set(ensemble)
        candidates = {b: r for b, r in all_known.items() if b not in excluded}
        if not candidates:
            raise NotEnoughBookies(
                1, 0, detail=f"replacing {ensemble[index]}: {len(all_known)} writable, all in the ensemble or excluded"
            )
        racks: Counter[str] = Counter(all_known.get(b, DEFAULT_RACK) for i, b in enumerate(ensemble) if i != index)
        new = self._pick(candidates, racks)
        self.release([ensemble[index]])
        self._load[new] += 1
        return new
