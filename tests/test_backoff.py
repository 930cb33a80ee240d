"""`magnetar.common.backoff`: doubling delays up to a cap, reset and halving, bounded jitter."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.common.backoff import Backoff, doubled


def test_delays_double_up_to_the_cap_and_reset_starts_over() -> None:
    b = Backoff(0.5, 3.0)
    assert [b.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert b.failures == 5
    b.reset()
    assert (b.failures, b.next()) == (0, 0.5)


def test_reduce_to_half_never_goes_below_the_initial_delay() -> None:
    b = Backoff(1.0, 60.0)
    for _ in range(4):
        b.next()
    assert b.upcoming_s == 16.0
    b.reduce_to_half()
    assert b.upcoming_s == 8.0 and b.failures == 4
    for _ in range(5):
        b.reduce_to_half()
    assert b.upcoming_s == 1.0 and b.failures == 0


@given(st.floats(0.001, 10.0), st.floats(1.0, 100.0), st.floats(0.0, 0.9), st.integers(0, 2**32))
def test_jitter_stays_between_the_initial_delay_and_the_unjittered_one(
    initial: float, factor: float, jitter: float, seed: int
) -> None:
    plain, jittered = (
        Backoff(initial, initial * factor),
        Backoff(initial, initial * factor, jitter=jitter, rng=random.Random(seed)),
    )
    for _ in range(12):
        expected = plain.next()
        got = jittered.next()
        assert initial <= got <= expected
        assert got >= expected * (1 - jitter) or got == initial


def test_doubled_is_the_rule_for_callers_keeping_their_own_delays() -> None:
    assert doubled(None, 1.0, 60.0) == 1.0
    assert doubled(0.0, 1.0, 60.0) == 1.0
    assert doubled(8.0, 1.0, 60.0) == 16.0
    assert doubled(40.0, 1.0, 60.0) == 60.0
    assert doubled(None, 5.0, 2.0) == 2.0  # a cap below the first delay wins


@pytest.mark.parametrize(("initial", "cap", "jitter"), [(0.0, 1.0, 0.0), (2.0, 1.0, 0.0), (1.0, 2.0, 1.0)])
def test_bad_settings_are_refused(initial: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="need"):
        Backoff(initial, cap, jitter=jitter)


def test_jittered_delays_double_to_the_cap_and_halve_after_a_success() -> None:
    b = Backoff(1.0, 5.0, jitter=0.1, rng=random.Random(4))  # as the broker's dispatcher uses it
    delays = [b.next() for _ in range(5)]
    assert all(d >= 1.0 for d in delays)
    assert 1.8 <= delays[1] <= 2.0 and 3.6 <= delays[2] <= 4.0 and 4.5 <= delays[3] <= 5.0
    b.reduce_to_half()
    assert b.upcoming_s == 2.5
    b.reset()
    assert b.upcoming_s == 1.0 and b.failures == 0
    with pytest.raises(ValueError, match="initial_s"):
        Backoff(0, 1)
