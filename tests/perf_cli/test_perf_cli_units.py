"""Pure parts of ``magnetar perf``: histogram percentiles, rate limiting, option checks, what limited a run."""

from __future__ import annotations

import math

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from magnetar.cli import main
from magnetar.cli._perf import RunFigures, limiting_factor
from magnetar.cli.cmd_perf import LatencyHistogram, PerfCounters, RateLimiter, validate_consume, validate_produce


def _exact(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * q / 100)) - 1]


@given(
    st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=300),
    st.sampled_from([1.0, 50.0, 95.0, 99.0, 99.9, 100.0]),
)
def test_percentile_is_within_a_bucket_above_the_exact_value(values: list[int], q: float) -> None:
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    exact = _exact(values, q)
    got = h.percentile(q)
    assert exact <= got <= max(exact, exact * 1.002 + 1)
    assert got <= h.max == max(values)
    assert h.count == len(values) and h.min == min(values)


def test_small_values_are_exact_and_empty_histogram_is_zero() -> None:
    h = LatencyHistogram()
    assert h.percentile(99) == 0 and h.mean == 0
    for v in range(1, 101):
        h.record(v)
    assert h.percentile(50) == 50
    assert h.percentile(99) == 99
    assert h.percentile(100) == 100
    h.record(-5)  # clock skew between hosts
    assert h.min == 0
    with pytest.raises(ValueError):
        h.percentile(0)


def test_merge_equals_recording_everything_in_one() -> None:
    a, b, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for v in range(0, 50_000, 7):
        (a if v % 2 else b).record(v)
        both.record(v)
    a.merge(b)
    assert [a.percentile(q) for q in (50, 90, 99, 99.9)] == [both.percentile(q) for q in (50, 90, 99, 99.9)]
    assert (a.count, a.max, a.min, a.total) == (both.count, both.max, both.min, both.total)


def test_counters_intervals_fold_into_totals() -> None:
    now = [100.0]
    c = PerfCounters(clock=lambda: now[0])
    for v in (1000, 2000, 3000):
        c.record(v, 10)
    c.error()
    now[0] = 101.0
    r = c.interval()
    assert (r.messages, r.bytes, r.errors, r.msg_rate, r.mb_rate) == (3, 30, 1, 3.0, 30 / 1e6)
    c.record(4000, 10)
    now[0] = 102.0
    r2 = c.interval()
    assert r2.messages == 1 and r2.latency.max == 4000
    s = c.summary()
    assert (s.messages, s.errors, s.seconds, s.latency.max) == (4, 1, 2.0, 4000)


def test_rate_limiter_paces_and_does_not_burst_after_a_stall() -> None:
    now = [0.0]
    lim = RateLimiter(1000, clock=lambda: now[0])
    delays = [lim.delay(100) for _ in range(5)]
    assert delays == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    now[0] = 10.0  # the sender stalled: at most one second of catch-up
    assert lim.delay(1000) == 0.0
    assert lim.delay(1) == 0.0
    assert lim.delay(1) == pytest.approx(0.001)
    assert RateLimiter(0).delay(10**6) == 0.0
    with pytest.raises(ValueError):
        RateLimiter(-1)


_PRODUCE_OK = dict(
    topics=("t",),
    rate=0.0,
    size=100,
    producers=1,
    batch_max_messages=1000,
    batch_max_bytes=131072,
    batch_delay_ms=1.0,
    max_pending=1000,
    num_messages=0,
    duration=0.0,
)


@pytest.mark.parametrize(
    "change, option",
    [
        ({"topics": ()}, "topic"),
        ({"rate": -1.0}, "--rate"),
        ({"size": 0}, "--size"),
        ({"size": 6 * 1024 * 1024, "batch_max_bytes": 10**8}, "--size"),
        ({"producers": 0}, "--producers"),
        ({"batch_max_messages": 0}, "--batch-max-messages"),
        ({"batch_max_bytes": 10}, "--batch-max-bytes"),
        ({"max_pending": -1}, "--max-pending"),
        ({"num_messages": -1}, "--num-messages"),
        ({"duration": -1.0}, "--time"),
    ],
)
def test_produce_validation_names_the_option(change: dict, option: str) -> None:
    validate_produce(**_PRODUCE_OK)
    with pytest.raises(click.UsageError, match=option):
        validate_produce(**{**_PRODUCE_OK, **change})


def test_consume_validation() -> None:
    ok = dict(
        topics=("t",),
        rate=0.0,
        consumers=1,
        subscription_type="Shared",
        receiver_queue_size=1000,
        num_messages=0,
        duration=0.0,
    )
    validate_consume(**ok)
    validate_consume(**{**ok, "consumers": 3})
    for change, option in (
        ({"consumers": 2, "subscription_type": "Exclusive"}, "Exclusive"),
        ({"receiver_queue_size": 0}, "--receiver-queue-size"),
        ({"consumers": 0}, "--consumers"),
    ):
        with pytest.raises(click.UsageError, match=option):
            validate_consume(**{**ok, **change})


def test_cli_rejects_bad_options_before_connecting() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["perf", "produce", "-u", "pulsar://127.0.0.1:1", "t", "--size", "0"])
    assert result.exit_code == 2 and "--size" in result.output
    result = runner.invoke(main, ["perf", "produce", "t", "--time", "soon"])
    assert result.exit_code == 2 and "duration" in result.output
    result = runner.invoke(main, ["perf", "consume", "t", "-n", "2"])
    assert result.exit_code == 2 and "Exclusive" in result.output
    assert "produce" in runner.invoke(main, ["perf", "--help"]).output


def _figures(**change: object) -> RunFigures:
    base: dict[str, object] = dict(
        msg_rate=5000.0,
        asked_rate=0.0,
        client_cores=0.3,
        client_cores_max=1.0,
        broker_cores=0.4,
        pending_full=0.0,
        pending_limit=1000,
        pending_mean=10.0,
        load_per_core=0.5,
    )
    return RunFigures(**{**base, **change})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "change, cause",
    [
        ({"asked_rate": 100.0, "msg_rate": 99.0}, "the rate asked for (100 msg/s"),
        ({"asked_rate": 100.0, "msg_rate": 99.0, "broker_cores": 1.0}, "the rate asked for"),
        ({"broker_cores": 0.95, "pending_full": 1.0}, "the broker's CPU"),
        ({"client_cores": 0.97, "pending_full": 1.0}, "the client's CPU"),
        ({"client_cores": 3.7, "client_cores_max": 4.0}, "the client's CPU"),
        ({"client_cores": 1.0, "client_cores_max": 4.0}, "neither CPU"),
        ({"pending_full": 0.8}, "pending messages (--max-pending 1,000 reached in 80% of the samples"),
        ({"load_per_core": 7.0}, "a busy machine"),
        ({"pending_full": None}, "probably the messages in flight (--max-pending 1,000)"),
        ({"pending_full": None, "pending_limit": 0}, "neither CPU nor a limit set here"),
    ],
)
def test_limiting_factor_names_the_first_limit_that_held(change: dict, cause: str) -> None:
    line = limiting_factor(_figures(**change))
    assert line.startswith(f"limited by {cause}"), line


def test_limiting_factor_states_its_figures() -> None:
    line = limiting_factor(_figures(asked_rate=100.0, msg_rate=100.0))
    assert "client CPU 0.30 of 1 core(s)" in line and "broker CPU 0.40 core(s)" in line
    assert "10 message(s) pending on average (limit 1,000)" in line and "machine load 0.5 per core" in line
    assert "broker CPU not measured" in limiting_factor(_figures(broker_cores=None))
