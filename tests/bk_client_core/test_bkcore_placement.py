"""Placement policy: spreads load, honours exclusions, clear errors, optional rack spread."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bk_client import BookieInfo, EnsemblePlacementPolicy, NotEnoughBookies

BOOKIES = [f"bookie-{i}:3181" for i in range(6)]


def test_ensemble_is_distinct_and_from_available() -> None:
    p = EnsemblePlacementPolicy(rng=random.Random(1))
    ens = p.new_ensemble(3, BOOKIES)
    assert len(ens) == 3 == len(set(ens))
    assert set(ens) <= set(BOOKIES)


def test_deterministic_with_seeded_rng() -> None:
    a = [EnsemblePlacementPolicy(rng=random.Random(7)).new_ensemble(3, BOOKIES) for _ in range(2)]
    assert a[0] == a[1]


def test_spreads_load_evenly() -> None:
    p = EnsemblePlacementPolicy(rng=random.Random(3))
    load: Counter[str] = Counter()
    for _ in range(40):
        load.update(p.new_ensemble(3, BOOKIES))
    # 120 placements over 6 bookies, always picking the least loaded: exactly 20 each.
    assert set(load.values()) == {20}
    assert all(p.placements(b) == 20 for b in BOOKIES)


def test_prefers_least_loaded_and_release() -> None:
    p = EnsemblePlacementPolicy(rng=random.Random(0))
    first = p.new_ensemble(3, BOOKIES)
    second = p.new_ensemble(3, BOOKIES)
    assert set(first).isdisjoint(second)
    p.release(first)
    assert set(p.new_ensemble(3, BOOKIES)) == set(first)


def test_excludes() -> None:
    p = EnsemblePlacementPolicy(rng=random.Random(0))
    for _ in range(20):
        ens = p.new_ensemble(4, BOOKIES, exclude=BOOKIES[:2])
        assert not set(ens) & set(BOOKIES[:2])


def test_not_enough_bookies_error() -> None:
    p = EnsemblePlacementPolicy()
    with pytest.raises(NotEnoughBookies) as info:
        p.new_ensemble(5, BOOKIES, exclude=BOOKIES[:3])
    assert info.value.needed == 5 and info.value.available == 3
    assert "needed 5, 3 available" in str(info.value)
    assert all(p.placements(b) == 0 for b in BOOKIES)  # failed call counts nothing
    with pytest.raises(NotEnoughBookies):
        p.new_ensemble(1, [])
    with pytest.raises(ValueError):
        p.new_ensemble(0, BOOKIES)


def test_duplicates_in_available_do_not_duplicate_members() -> None:
    p = EnsemblePlacementPolicy()
    with pytest.raises(NotEnoughBookies):
        p.new_ensemble(3, ["a", "a", "b", BookieInfo("b")])


def test_replace_bookie_excludes_members_and_failed() -> None:
    p = EnsemblePlacementPolicy(rng=random.Random(5))
    ens = p.new_ensemble(3, BOOKIES)
    failed = [b for b in BOOKIES if b not in ens][:1]
    for _ in range(10):
        new = p.replace_bookie(ens, 1, BOOKIES, exclude=failed)
        assert new not in ens and new not in failed
    with pytest.raises(NotEnoughBookies) as info:
        p.replace_bookie(ens, 0, BOOKIES, exclude=[b for b in BOOKIES if b not in ens])
    assert info.value.needed == 1 and info.value.available == 0
    with pytest.raises(IndexError):
        p.replace_bookie(ens, 3, BOOKIES)


def test_replace_moves_the_placement_count() -> None:
    p = EnsemblePlacementPolicy(rng=random.Random(5))
    ens = p.new_ensemble(3, BOOKIES[:4])
    spare = next(b for b in BOOKIES[:4] if b not in ens)
    assert p.replace_bookie(ens, 2, BOOKIES[:4]) == spare
    assert p.placements(ens[2]) == 0 and p.placements(spare) == 1


def test_rack_aware_spreads_over_racks() -> None:
    bookies = [BookieInfo(f"r{r}-b{i}", rack=f"/rack{r}") for r in range(3) for i in range(4)]
    p = EnsemblePlacementPolicy(rng=random.Random(11))
    rack_of = {b.id: b.rack for b in bookies}
    for _ in range(20):
        ens = p.new_ensemble(3, bookies)
        assert len({rack_of[b] for b in ens}) == 3
    ens = p.new_ensemble(3, bookies)
    new = p.replace_bookie(ens, 0, bookies)
    assert rack_of[new] == rack_of[ens[0]]  # the only rack not used by the remaining two


def test_rack_labels_optional_and_mixed() -> None:
    bookies = [BookieInfo("a", "/r1"), BookieInfo("b"), "c", BookieInfo("d", "/r1")]
    p = EnsemblePlacementPolicy(rng=random.Random(2))
    ens = p.new_ensemble(2, bookies)
    # /r1 and the default rack: one of each
    assert len({("a" in ens or "d" in ens), ("b" in ens or "c" in ens)}) == 1
    assert ("a" in ens or "d" in ens) and ("b" in ens or "c" in ens)
