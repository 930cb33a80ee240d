"""Property tests of the pure quorum arithmetic (bk_client._quorum)."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bk_client import AckSet, BookieResponse, CoverageRule, DistributionSchedule, QuorumCoverageSet


@st.composite
def schedules(draw: st.DrawFn, max_e: int = 9) -> DistributionSchedule:
    e = draw(st.integers(1, max_e))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    return DistributionSchedule(e, qw, qa)


def test_rejects_bad_quorums() -> None:
    for e, qw, qa in [(3, 4, 2), (3, 2, 3), (3, 3, 0), (0, 0, 0)]:
        with pytest.raises(ValueError, match="ack_quorum <= write_quorum"):
            DistributionSchedule(e, qw, qa)
    with pytest.raises(ValueError):
        DistributionSchedule(3, 2, 2).write_set(-1)


def test_seed_example_e4_qw3() -> None:
    s = DistributionSchedule(4, 3, 2)
    assert [s.write_set(e) for e in range(6)] == [(0, 1, 2), (1, 2, 3), (2, 3, 0), (3, 0, 1), (0, 1, 2), (1, 2, 3)]


@given(schedules(), st.integers(0, 2**63 - 1))
def test_write_set_has_qw_distinct_members_starting_at_entry_mod_e(s: DistributionSchedule, entry: int) -> None:
    ws = s.write_set(entry)
    assert len(ws) == s.write_quorum == len(set(ws))
    assert ws[0] == entry % s.ensemble_size
    assert all(0 <= i < s.ensemble_size for i in ws)
    for i in range(s.ensemble_size):
        assert s.has_entry(entry, i) == (i in ws)


@given(schedules(), st.integers(0, 10**12))
def test_each_bookie_in_exactly_qw_of_e_consecutive_write_sets(s: DistributionSchedule, start: int) -> None:
    counts = [0] * s.ensemble_size
    for entry in range(start, start + s.ensemble_size):
        for i in s.write_set(entry):
            counts[i] += 1
    assert counts == [s.write_quorum] * s.ensemble_size


@given(schedules(), st.integers(0, 1000), st.data())
def test_ack_set_completes_exactly_at_qa_distinct_members(
    s: DistributionSchedule, entry: int, data: st.DataObject
) -> None:
    acks = s.ack_set(entry)
    ws = s.write_set(entry)
    order = data.draw(st.lists(st.sampled_from(ws), max_size=3 * len(ws)))
    seen: set[int] = set()
    for i in order:
        done = acks.ack(i)
        seen.add(i)
        assert done == (len(seen) >= s.ack_quorum) == acks.complete
    assert acks.acked == frozenset(seen)


@given(schedules(), st.integers(0, 1000), st.data())
def test_ack_set_fail_and_remove(s: DistributionSchedule, entry: int, data: st.DataObject) -> None:
    acks = s.ack_set(entry)
    ws = s.write_set(entry)
    model_ok: set[int] = set()
    model_failed: set[int] = set()
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["ack", "fail", "remove"]), st.sampled_from(ws)), max_size=20))
    for op, i in ops:
        if op == "ack":
            model_ok.add(i)
            model_failed.discard(i)
            assert acks.ack(i) == (len(model_ok) >= s.ack_quorum)
        elif op == "fail":
            model_ok.discard(i)
            model_failed.add(i)
            assert acks.fail(i, f"b{i}") == (len(model_failed) > s.write_quorum - s.ack_quorum)
        else:
            model_ok.discard(i)
            model_failed.discard(i)
            assert acks.remove(i) == (len(model_ok) >= s.ack_quorum)
        assert acks.acked == model_ok and set(acks.failed) == model_failed
        # Broken means the members not failed cannot reach Qa any more.
        assert acks.broken == (s.write_quorum - len(model_failed) < s.ack_quorum)


def test_ack_set_rejects_outsiders() -> None:
    acks = DistributionSchedule(5, 3, 2).ack_set(0)
    with pytest.raises(ValueError, match="not in the write set"):
        acks.ack(4)
    with pytest.raises(ValueError):
        AckSet((1, 1), 1)


def _some_write_set_escapes(s: DistributionSchedule, responders: set[int]) -> bool:
    """Brute force: is there a write set with Qa members outside the responders?"""
    for entry in range(s.ensemble_size):
        outside = [i for i in s.write_set(entry) if i not in responders]
        if any(True for _ in combinations(outside, s.ack_quorum)):
            return True
    return False


@given(schedules(), st.data())
@settings(max_examples=300)
def test_coverage_exactly_when_no_write_set_can_ack_without_a_responder(
    s: DistributionSchedule, data: st.DataObject
) -> None:
    cov = s.coverage_set(CoverageRule.FENCE)
    responders: set[int] = set()
    order = data.draw(st.permutations(range(s.ensemble_size)))
    cut = data.draw(st.integers(0, s.ensemble_size))
    for i in order[:cut]:
        responders.add(i)
        assert cov.add(i, BookieResponse.OK) == (not _some_write_set_escapes(s, responders))
    assert cov.covered == (not _some_write_set_escapes(s, responders))
    # The same statement as in the papers: every write set has >= Qw - Qa + 1 responders.
    assert cov.covered == all(
        sum(1 for i in ws if i in responders) >= s.write_quorum - s.ack_quorum + 1 for ws in s.write_sets()
    )


@given(schedules(), st.data())
def test_coverage_rules_for_each_response(s: DistributionSchedule, data: st.DataObject) -> None:
    answers = data.draw(
        st.lists(st.sampled_from(list(BookieResponse)), min_size=s.ensemble_size, max_size=s.ensemble_size)
    )
    fence = s.coverage_set(CoverageRule.FENCE)
    lac = s.coverage_set(CoverageRule.READ_LAC)
    for i, a in enumerate(answers):
        fence.add(i, a)
        lac.add(i, a)
    fence_ok = {i for i, a in enumerate(answers) if a in (BookieResponse.OK, BookieResponse.NO_ENTRY)}
    lac_ok = fence_ok | {i for i, a in enumerate(answers) if a is BookieResponse.NO_LEDGER}
    assert fence.covered_bookies == fence_ok and lac.covered_bookies == lac_ok
    assert fence.covered == (not _some_write_set_escapes(s, fence_ok))
    assert lac.covered == (not _some_write_set_escapes(s, lac_ok))
    assert fence.all_answered and lac.all_answered
    # With everyone answered, impossible is just "not covered".
    assert fence.impossible == (not fence.covered)


def test_coverage_is_sticky_and_impossible_early() -> None:
    s = DistributionSchedule(3, 3, 2)  # need 2 of 3 to fence
    cov = QuorumCoverageSet(s, CoverageRule.FENCE)
    assert not cov.add(0, BookieResponse.OK)
    cov.add(0, BookieResponse.ERROR)  # a later error does not undo a recorded fence
    assert cov.covered_bookies == {0}
    assert not cov.impossible
    cov.add(1, BookieResponse.ERROR)
    assert not cov.impossible  # bookie 2 could still answer
    cov.add(2, BookieResponse.NO_LEDGER)
    assert cov.impossible and not cov.covered
    with pytest.raises(ValueError):
        cov.add(3, BookieResponse.OK)


@given(schedules(), st.integers(0, 100), st.sets(st.integers(0, 8)))
def test_has_ack_quorum_and_writability(s: DistributionSchedule, entry: int, acked: set[int]) -> None:
    acked = {i for i in acked if i < s.ensemble_size}
    members = [i for i in s.write_set(entry) if i in acked]
    assert s.has_ack_quorum(entry, acked) == (len(members) >= s.ack_quorum)
    assert s.write_set_writable(entry, acked) == s.has_ack_quorum(entry, acked)
    assert s.ensemble_writable(acked) == all(s.has_ack_quorum(e, acked) for e in range(s.ensemble_size))
