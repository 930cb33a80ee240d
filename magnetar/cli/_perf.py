"""Pure parts of ``magnetar perf``: a latency histogram, a rate limiter, option checks, formatting.

Nothing here talks to a broker, so it is unit-tested on its own; `cmd_perf` wires it to the
official client. The histogram is safe to record into from the client's callback thread while the
reporting thread takes interval snapshots (`PerfCounters` holds a lock around both).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import click

from magnetar.common import durations

__all__ = [
    "LatencyHistogram",
    "PerfCounters",
    "IntervalReport",
    "RateLimiter",
    "SUMMARY_PERCENTILES",
    "validate_common",
    "format_rate_line",
    "parse_duration",
    "RunFigures",
    "limiting_factor",
    "RATE_REACHED",
    "CPU_SATURATED",
    "PENDING_FULL",
]

# Values below 2**_SUB_BITS microseconds are exact; above, each power-of-two range is split in
# 2**(_SUB_BITS - 1) buckets, so a reported percentile is within 0.2% of the recorded value.
_SUB_BITS = 10
_SUB = 1 << _SUB_BITS
_MASK = _SUB - 1

#: The percentiles of the final summary (pulsar-perf's list, in percent).
SUMMARY_PERCENTILES = (50.0, 95.0, 99.0, 99.9)


def _index(value_us: int) -> int:
    if value_us < _SUB:
        return value_us
    shift = value_us.bit_length() - _SUB_BITS
    return (shift << _SUB_BITS) + (value_us >> shift)


def _upper(index: int) -> int:
    shift = index >> _SUB_BITS
    if shift == 0:
        return index
    return (((index & _MASK) + 1) << shift) - 1


class LatencyHistogram:
    """Counts of latencies in microseconds, log-linear buckets (exact below 1,024 us, 0.2% above).

    Guarantees: ``percentile(q)`` returns a value v such that at least q% of the recorded values
    are <= v, and v is at most 0.2% above the true q-th percentile; it never exceeds ``max``.
    Negative values are recorded as 0 (clocks of two hosts). Not thread-safe on its own.
    """

    __slots__ = ("_counts", "count", "total", "max", "min")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.count = 0
        self.total = 0
        self.max = 0
        self.min = 0

    def record(self, value_us: int | float, count: int = 1) -> None:
        """Add a value (microseconds) ``count`` times (the messages of one batch share a latency)."""
        v = int(value_us) if value_us > 0 else 0
        i = _index(v)
        counts = self._counts
        counts[i] = counts.get(i, 0) + count
        if self.count == 0 or v < self.min:
            self.min = v
        self.count += count
        self.total += v * count
        if v > self.max:
            self.max = v

    def merge(self, other: LatencyHistogram) -> None:
        """Add every value of ``other`` to this histogram."""
        if other.count == 0:
            return
        for i, n in other._counts.items():
            self._counts[i] = self._counts.get(i, 0) + n
        if self.count == 0 or other.min < self.min:
            self.min = other.min
        self.count += other.count
        self.total += other.total
        self.max = max(self.max, other.max)

    @property
    def mean(self) -> float:
        """The mean in microseconds (0 when empty)."""
        return self.total / self.count if self.count else 0.0

    def percentile(self, q: float) -> int:
        """The ``q``-th percentile (0 < q <= 100) in microseconds; 0 when empty.

        Raises ``ValueError`` for q outside (0, 100].
        """
        if not 0 < q <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {q}")
        if self.count == 0:
            return 0
        rank = max(1, -(-self.count * q // 100))  # ceil without float rounding trouble
        seen = 0
        for i in sorted(self._counts):
            seen += self._counts[i]
            if seen >= rank:
                return min(_upper(i), self.max)
        return self.max


@dataclass(frozen=True)
class IntervalReport:
    """What happened since the previous snapshot (or since the start, for the summary)."""

    seconds: float
    messages: int
    bytes: int
    errors: int
    latency: LatencyHistogram

    @property
    def msg_rate(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_rate(self) -> float:
        """Megabytes (10^6 bytes) per second."""
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


class PerfCounters:
    """Messages, bytes, errors and latencies, recorded from any thread.

    ``record`` is called by the client's callback thread, ``interval`` by the reporting thread;
    both hold one lock briefly. The totals keep everything since the start.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.started = clock()
        self._interval_start = self.started
        self._cur = LatencyHistogram()
        self._msgs = self._bytes = self._errors = 0
        self.total = LatencyHistogram()
        self.total_messages = self.total_bytes = self.total_errors = 0

    def record(self, latency_us: float, size: int) -> None:
        """One message done (published or received) after ``latency_us``."""
        with self._lock:
            self._cur.record(latency_us)
            self._msgs += 1
            self._bytes += size

    def record_many(self, latencies_us: Iterable[float], size_each: int) -> None:
        """Several messages of the same size."""
        with self._lock:
            n = 0
            for v in latencies_us:
                self._cur.record(v)
                n += 1
            self._msgs += n
            self._bytes += n * size_each

    def add(self, messages: int, nbytes: int, errors: int, latency: LatencyHistogram) -> None:
        """Fold in what another process counted (the native engine's workers report this way)."""
        with self._lock:
            self._cur.merge(latency)
            self._msgs += messages
            self._bytes += nbytes
            self._errors += errors

    def error(self) -> None:
        """One message failed."""
        with self._lock:
            self._errors += 1

    def interval(self) -> IntervalReport:
        """The counts since the previous call; they are added to the totals."""
        with self._lock:
            now = self._clock()
            report = IntervalReport(now - self._interval_start, self._msgs, self._bytes, self._errors, self._cur)
            self._interval_start = now
            self._cur = LatencyHistogram()
            self._msgs = self._bytes = self._errors = 0
        self.total.merge(report.latency)
        self.total_messages += report.messages
        self.total_bytes += report.bytes
        self.total_errors += report.errors
        return report

    def summary(self) -> IntervalReport:
        """Totals since the start (call `interval` first to fold in the last partial interval)."""
        return IntervalReport(
            self._clock() - self.started, self.total_messages, self.total_bytes, self.total_errors, self.total
        )


class RateLimiter:
    """Paces a sender at ``rate`` messages per second (0 = unlimited).

    `delay` says how long to sleep before sending the next ``n`` messages; the schedule is
    absolute (a late sender catches up, without bursting past one second of backlog).
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if rate < 0:
            raise ValueError(f"rate must be >= 0, got {rate}")
        self.rate = rate
        self._clock = clock
        self._next = clock()

    def delay(self, n: int = 1) -> float:
        """Seconds to wait before sending ``n`` more messages (0 when they may go now)."""
        if self.rate == 0:
            return 0.0
        now = self._clock()
        if self._next < now - 1.0:
            self._next = now - 1.0  # do not build up more than a second of catch-up burst
        due = self._next
        self._next += n / self.rate
        return max(0.0, due - now)


def parse_duration(value: str) -> float:
    """``"30"``, ``"30s"``, ``"500ms"``, ``"5m"``, ``"1h"`` -> seconds (`magnetar.common.durations`);
    raises ``click.BadParameter``, also for a negative duration."""
    try:
        seconds = durations.parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds < 0:
        raise click.BadParameter(f"duration must be >= 0, got {value!r}")
    return seconds


def validate_common(
    *,
    topics: tuple[str, ...],
    rate: float,
    size: int | None,
    num_messages: int,
    duration: float,
    max_size: int = 5 * 1024 * 1024,
) -> None:
    """Check options shared by produce and consume; raises ``click.UsageError`` naming the option."""
    if not topics:
        raise click.UsageError("give at least one topic")
    if rate < 0:
        raise click.UsageError(f"--rate must be >= 0 (0 = as fast as possible), got {rate}")
    if size is not None and not 1 <= size <= max_size:
        raise click.UsageError(f"--size must be between 1 and {max_size} bytes, got {size}")
    if num_messages < 0:
        raise click.UsageError(f"--num-messages must be >= 0 (0 = unlimited), got {num_messages}")
    if duration < 0:
        raise click.UsageError(f"--time must be >= 0 (0 = unlimited), got {duration}")


def format_rate_line(kind: str, r: IntervalReport, pending: int | None = None) -> str:
    """One live line: rate, throughput, latency p50/p99/max of the interval (rich markup)."""
    lat = r.latency
    line = (
        f"[bold]{kind}[/bold] {r.msg_rate:>11,.1f} msg/s  {r.mb_rate:>8.2f} MB/s  "
        f"latency ms p50 {lat.percentile(50) / 1000:>7.2f}  p99 {lat.percentile(99) / 1000:>7.2f}  "
        f"max {lat.max / 1000:>7.2f}"
    )
    if pending is not None:
        line += f"  pending {pending:,}"
    if r.errors:
        line += f"  [red]errors {r.errors:,}[/red]"
    return line


RATE_REACHED = 0.95
"""A run reached the rate asked for when it sent at least this fraction of it."""
CPU_SATURATED = 0.9
"""A process is CPU-bound at this fraction of the cores it can use (one for a Python process: its
interpreter lock; one per worker process for the native engine)."""
PENDING_FULL = 0.5
"""The pending-message limit held the sender back when the queue was at it in this fraction of
the samples (or more)."""


@dataclass(frozen=True)
class RunFigures:
    """What a run measured, for `limiting_factor`.

    ``client_cores`` and ``broker_cores`` are CPU seconds per second of the run (None: not
    measured); ``client_cores_max`` is how many cores the client can use at most.
    ``pending_full`` is the fraction of samples in which the messages in flight were at
    ``pending_limit`` (None: not sampled, or no count limit, ``pending_limit`` 0).
    ``load_per_core`` is the machine's load average over its cores at the end (None: unknown).
    """

    msg_rate: float
    asked_rate: float
    client_cores: float | None
    client_cores_max: float
    broker_cores: float | None
    pending_full: float | None
    pending_limit: int
    pending_mean: float | None = None
    load_per_core: float | None = None


def limiting_factor(f: RunFigures) -> str:
    """One line saying what limited the run's figure, with the measurements it rests on.

    The first that holds, in this order: the rate asked for was reached; the broker's CPU was
    saturated (more messages in flight or more client CPU would not help); the client's CPU was;
    the sender waited on its pending-message limit; the machine was busier than its cores (load
    average at least one per core); otherwise none of these, named as such.
    """
    seen = []
    if f.client_cores is not None:
        seen.append(f"client CPU {f.client_cores:.2f} of {f.client_cores_max:g} core(s)")
    if f.broker_cores is not None:
        seen.append(f"broker CPU {f.broker_cores:.2f} core(s)")
    else:
        seen.append("broker CPU not measured (give --broker-metrics-url or --broker-pid)")
    if f.pending_mean is not None:
        limit = f"limit {f.pending_limit:,}" if f.pending_limit else "no limit"
        seen.append(f"{f.pending_mean:,.0f} message(s) pending on average ({limit})")
    if f.load_per_core is not None:
        seen.append(f"machine load {f.load_per_core:.1f} per core")
    figures = "; ".join(seen)
    if f.asked_rate > 0 and f.msg_rate >= RATE_REACHED * f.asked_rate:
        why = f"the rate asked for ({f.asked_rate:,g} msg/s; raise --rate for more)"
    elif f.broker_cores is not None and f.broker_cores >= CPU_SATURATED:
        why = "the broker's CPU"
    elif f.client_cores is not None and f.client_cores >= CPU_SATURATED * f.client_cores_max:
        why = "the client's CPU (more producers in other processes, or --engine native, offer more)"
    elif f.pending_full is not None and f.pending_full >= PENDING_FULL:
        why = (
            f"pending messages (--max-pending {f.pending_limit:,} reached in {f.pending_full:.0%} of the "
            "samples: the sender waited for receipts)"
        )
    elif f.load_per_core is not None and f.load_per_core >= 1.0:
        why = "a busy machine: other processes held the CPUs, so neither the client nor the broker got a core"
    elif f.pending_full is None and f.pending_limit:
        why = (
            f"probably the messages in flight (--max-pending {f.pending_limit:,}) and the time each receipt "
            "takes: neither CPU was saturated"
        )
    else:
        why = "neither CPU nor a limit set here: the time each receipt takes, with the messages in flight"
    return f"limited by {why}; {figures}"
