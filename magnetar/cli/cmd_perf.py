"""``magnetar perf produce|consume``: load generators on the official client, like pulsar-perf.

``produce`` publishes fixed-size messages at ``--rate`` (by default pulsar-perf's defaults: 100
msg/s of 1 KiB, batching within 1 ms up to 1,000 messages or 4 MiB, no count limit on the messages
in flight) and measures the publish latency from ``send_async`` to its callback (that is, until
the broker's receipt: the entry is in the journal of the ack quorum, fsync included).
``consume`` subscribes and measures the end-to-end latency from each message's publish time to
its arrival. Both print one line a second and a summary (p50 / p95 / p99 / p99.9 / max) at the
end: after ``--num-messages``, ``--time`` or Ctrl-C. A produce run ends with a line that says what
limited its figure (the rate asked for, the broker's CPU, the client's, the pending-message
limit, or a busy machine: `_perf.limiting_factor`).

The Python client spends most of its time in Python per message; the producer therefore builds
messages with the client's extension module directly when it can (the public ``send_async``
does the same plus argument checks), which roughly doubles what one process can send. Even so it
tops out near 31,000 msg/s, so ``--engine native`` (`_perf_native`) speaks the protocol itself,
from several processes, to drive a broker past its limit; it also reports the broker's CPU
seconds per million messages.
"""

from __future__ import annotations

import functools
import os
import resource
import threading
import time
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ._help import HelpGroup
from ._perf import (
    SUMMARY_PERCENTILES,
    IntervalReport,
    LatencyHistogram,
    PerfCounters,
    RateLimiter,
    RunFigures,
    format_rate_line,
    limiting_factor,
    parse_duration,
    validate_common,
)
from ._perf_native import (
    NativeConsumeOptions,
    NativeProduceOptions,
    parse_service_url,
    read_broker_cpu_seconds,
    run_native_consume,
    run_native_produce,
)

__all__ = [
    "command",
    "LatencyHistogram",
    "PerfCounters",
    "RateLimiter",
    "validate_produce",
    "validate_consume",
    "summary_table",
]

_SUB_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


def validate_produce(
    *,
    topics: tuple[str, ...],
    rate: float,
    size: int,
    producers: int,
    batch_max_messages: int,
    batch_max_bytes: int,
    batch_delay_ms: float,
    max_pending: int,
    num_messages: int,
    duration: float,
) -> None:
    """Check ``perf produce`` options; raises ``click.UsageError`` naming the bad option."""
    validate_common(topics=topics, rate=rate, size=size, num_messages=num_messages, duration=duration)
    if producers < 1:
        raise click.UsageError(f"--producers must be >= 1, got {producers}")
    if batch_max_messages < 1:
        raise click.UsageError(f"--batch-max-messages must be >= 1, got {batch_max_messages}")
    if batch_max_bytes < size:
        raise click.UsageError(f"--batch-max-bytes ({batch_max_bytes}) must hold one message of --size {size}")
    if batch_delay_ms < 0:
        raise click.UsageError(f"--batch-delay-ms must be >= 0, got {batch_delay_ms}")
    if max_pending < 0:
        raise click.UsageError(f"--max-pending must be >= 0 (0 = no count limit), got {max_pending}")


def validate_consume(
    *,
    topics: tuple[str, ...],
    rate: float,
    consumers: int,
    subscription_type: str,
    receiver_queue_size: int,
    num_messages: int,
    duration: float,
) -> None:
    """Check ``perf consume`` options; raises ``click.UsageError`` naming the bad option."""
    validate_common(topics=topics, rate=rate, size=None, num_messages=num_messages, duration=duration)
    if consumers < 1:
        raise click.UsageError(f"--consumers must be >= 1, got {consumers}")
    if subscription_type not in _SUB_TYPES:
        raise click.UsageError(f"--subscription-type must be one of {', '.join(_SUB_TYPES)}")
    if consumers > 1 and subscription_type == "Exclusive":
        raise click.UsageError("an Exclusive subscription takes one consumer; use Shared, Failover or Key_Shared")
    if receiver_queue_size < 1:
        raise click.UsageError(f"--receiver-queue-size must be >= 1, got {receiver_queue_size}")


def summary_table(title: str, r: IntervalReport, latency_name: str) -> Table:
    """The final summary: totals, rates and the latency percentiles in milliseconds."""
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("messages", f"{r.messages:,}")
    table.add_row("errors", f"{r.errors:,}")
    table.add_row("seconds", f"{r.seconds:,.2f}")
    table.add_row("msg/s", f"{r.msg_rate:,.1f}")
    table.add_row("MB/s", f"{r.mb_rate:,.2f}")
    lat = r.latency
    for q in SUMMARY_PERCENTILES:
        table.add_row(f"{latency_name} p{q:g} ms", f"{lat.percentile(q) / 1000:,.3f}")
    table.add_row(f"{latency_name} max ms", f"{lat.max / 1000:,.3f}")
    table.add_row(f"{latency_name} mean ms", f"{lat.mean / 1000:,.3f}")
    return table


class _Reporter:
    """Prints a line per second from its own thread until stopped."""

    def __init__(self, console: Console, kind: str, counters: PerfCounters, pending: Any = None) -> None:
        self._console, self._kind, self._counters, self._pending = console, kind, counters, pending
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"perf-{kind}-report", daemon=True)

    def __enter__(self) -> _Reporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            r = self._counters.interval()
            self._console.print(
                format_rate_line(self._kind, r, self._pending() if self._pending else None), soft_wrap=True
            )


def _sleep_until(deadline: float, stop: threading.Event) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        stop.wait(delay)


def _validate_native(workers: int, connections: int, service_url: str) -> None:
    if workers < 1:
        raise click.UsageError(f"--workers must be >= 1, got {workers}")
    if connections < 1:
        raise click.UsageError(f"--connections must be >= 1, got {connections}")
    try:
        parse_service_url(service_url)
    except ValueError as exc:
        raise click.UsageError(f"--service-url: {exc}") from None


def _run_native(
    console: Console,
    kind: str,
    opts: Any,
    run: Any,
    latency_name: str,
    what: str,
    metrics_url: str | None,
    broker_pid: int | None,
    *,
    pending_limit: int = 0,
) -> None:
    counters = PerfCounters()
    cpu_before = read_broker_cpu_seconds(metrics_url, broker_pid)
    children_before = _cpu_seconds(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    console.print(f"{kind} (native engine) on {', '.join(opts.topics)}: {what}")
    with _Reporter(console, kind, counters):
        failures = run(opts, counters.add)
    wall = time.monotonic() - started
    cpu_after = read_broker_cpu_seconds(metrics_url, broker_pid)
    _native_summary(console, f"perf {kind} (native)", counters, latency_name, cpu_before, cpu_after, failures)
    if kind == "produce" and wall > 0:
        figures = RunFigures(
            msg_rate=counters.total_messages / wall,
            asked_rate=opts.rate,
            client_cores=(_cpu_seconds(resource.RUSAGE_CHILDREN) - children_before) / wall,
            client_cores_max=opts.workers,
            broker_cores=_cores(cpu_before, cpu_after, wall),
            pending_full=None,
            pending_limit=pending_limit,
            load_per_core=_load_per_core(),
        )
        console.print(limiting_factor(figures), soft_wrap=True, markup=False, highlight=False)


def _cpu_seconds(who: int) -> float:
    """User plus system CPU seconds of this process (RUSAGE_SELF) or of its reaped children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _load_per_core() -> float | None:
    """The machine's 1-minute load average over its CPUs (None where the OS does not say)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return None


def _cores(before: float | None, after: float | None, wall: float) -> float | None:
    """CPU seconds per second between two readings (None when either is missing)."""
    if before is None or after is None or wall <= 0:
        return None
    return max(0.0, after - before) / wall


def _client(service_url: str, io_threads: int) -> Any:
    import pulsar

    # A broker with authenticationEnabled: the token in MAGNETAR_TOKEN (as `magnetar admin` takes it).
    token = os.environ.get("MAGNETAR_TOKEN", "").strip()
    auth = pulsar.AuthenticationToken(token) if token else None
    # The C++ console logger: a Python logger would be called back for every log record.
    return pulsar.Client(
        service_url,
        io_threads=io_threads,
        operation_timeout_seconds=30,
        authentication=auth,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )


def _fast_sender(producer: Any, payload: bytes) -> Any:
    """``send(callback)`` for one producer: the extension module's API when present."""
    try:
        import _pulsar

        raw, builder = producer._producer, _pulsar.MessageBuilder
        raw.send_async  # noqa: B018 - probe the private API once
    except (ImportError, AttributeError):
        return lambda cb: producer.send_async(payload, cb)
    return lambda cb: raw.send_async(builder().content(payload).build(), cb)


def _broker_cpu_source(service_url: str, metrics_url: str | None) -> str | None:
    """Where the broker's ``process_cpu_seconds_total`` is: the given URL, else port 8080 of the
    broker host (the default ``webServicePort``)."""
    if metrics_url:
        return metrics_url
    try:
        host, _, _ = parse_service_url(service_url)
    except ValueError:
        return None
    return f"http://{host}:8080/metrics"


def _native_summary(
    console: Console,
    title: str,
    counters: PerfCounters,
    latency_name: str,
    cpu_before: float | None,
    cpu_after: float | None,
    failures: list[str],
) -> None:
    counters.interval()
    summary = counters.summary()
    table = summary_table(title, summary, latency_name)
    if cpu_before is not None and cpu_after is not None and summary.messages:
        per_million = (cpu_after - cpu_before) / summary.messages * 1e6
        table.add_row("broker CPU s", f"{cpu_after - cpu_before:,.2f}")
        table.add_row("broker CPU s / 1M msgs", f"{per_million:,.2f}")
        table.add_row("broker CPU us / msg", f"{per_million:,.2f}")
    else:
        table.add_row("broker CPU s / 1M msgs", "unknown (give --broker-metrics-url or --broker-pid)")
    console.print(table)
    for failure in failures[:20]:
        console.print(f"[red]failure:[/red] {failure}", soft_wrap=True)
    if failures:
        raise click.exceptions.Exit(1)


_native_options = [
    click.option(
        "--engine",
        type=click.Choice(["client", "native"]),
        default="client",
        show_default=True,
        help="client: the official pulsar-client; native: this tool's own protocol engine "
        "(pre-encoded frames, several processes), to load a broker past its limit.",
    ),
    click.option("--workers", type=int, default=1, show_default=True, help="native: worker processes."),
    click.option(
        "--connections",
        type=int,
        default=2,
        show_default=True,
        help="native: connections (one producer or consumer each) per worker.",
    ),
    click.option(
        "--broker-metrics-url",
        default=None,
        help="Where to read the broker's process_cpu_seconds_total [default: http://<broker host>:8080/metrics].",
    ),
    click.option(
        "--broker-pid", type=int, default=None, help="Read the broker's CPU time from /proc/<pid>/stat instead."
    ),
    click.option("--tls-trust-cert-path", default=None, help="native: CA file for pulsar+ssl:// URLs."),
]


def _with_native(fn: Any) -> Any:
    for deco in reversed(_native_options):
        fn = deco(fn)
    return fn


_common = [
    click.argument("topics", nargs=-1, required=True),
    click.option(
        "--service-url", "-u", default="pulsar://localhost:6650", show_default=True, help="The broker's pulsar:// URL."
    ),
    click.option(
        "--num-messages",
        "-m",
        type=int,
        default=0,
        show_default=True,
        help="Stop after this many messages in total (0 = no limit).",
    ),
    click.option(
        "--time",
        "-t",
        "duration",
        default="0",
        show_default=True,
        help="Stop after this long (30, 30s, 5m; 0 = no limit).",
    ),
    click.option("--io-threads", type=int, default=1, show_default=True, help="Client I/O threads."),
]


def _with_common(fn: Any) -> Any:
    for deco in reversed(_common):
        fn = deco(fn)
    return fn


@click.group(name="perf", cls=HelpGroup)
def command() -> None:
    """Load generators: publish or consume at a rate and report throughput and latency.

    Against a broker with authentication on, set MAGNETAR_TOKEN to the token to connect with.
    """


# pulsar-perf's defaults (PerformanceProducer and the Java client's ProducerConfigurationData in
# Pulsar 4.0) for the client engine; the native engine is a load driver with no pulsar-perf
# counterpart and keeps its own (as fast as possible, a bounded window per connection).
CLIENT_DEFAULTS = {"rate": 100.0, "max_pending": 0, "batch_max_bytes": 4 * 1024 * 1024}
NATIVE_DEFAULTS = {"rate": 0.0, "max_pending": 5000, "batch_max_bytes": 128 * 1024}


def _produce_defaults(
    engine: str, rate: float | None, max_pending: int | None, batch_max_bytes: int | None
) -> tuple[float, int, int]:
    """(rate, max pending, batch max bytes) as given, or the engine's defaults for those not given."""
    defaults = NATIVE_DEFAULTS if engine == "native" else CLIENT_DEFAULTS
    return (
        defaults["rate"] if rate is None else rate,
        int(defaults["max_pending"]) if max_pending is None else max_pending,
        int(defaults["batch_max_bytes"]) if batch_max_bytes is None else batch_max_bytes,
    )


@command.command(name="produce")
@_with_common
@click.option(
    "--rate",
    "-r",
    type=float,
    default=None,
    help="Messages per second in total; 0 = as fast as possible [default: 100 as pulsar-perf; native: 0].",
)
@click.option("--size", "-s", type=int, default=1024, show_default=True, help="Message size in bytes.")
@click.option(
    "--producers", "--num-producers", "-n", type=int, default=1, show_default=True, help="Producers per topic."
)
@click.option("--batching/--no-batching", default=True, show_default=True, help="Client-side batching.")
@click.option(
    "--batch-max-messages", "-bm", type=int, default=1000, show_default=True, help="Messages per batch at most."
)
@click.option(
    "--batch-max-bytes",
    "-bb",
    type=int,
    default=None,
    help="Bytes per batch at most [default: 4 MiB as pulsar-perf; native: 128 KiB].",
)
@click.option(
    "--batch-delay-ms",
    "--batch-time-window",
    "-b",
    type=float,
    default=1.0,
    show_default=True,
    help="How long a batch may wait to fill up.",
)
@click.option(
    "--max-pending",
    "--max-outstanding",
    "-o",
    type=int,
    default=None,
    help="Messages in flight per producer, the sender waiting when full; 0 = no count limit, "
    "only the client's memory limit [default: 0 as pulsar-perf; native: 5000 per connection].",
)
@_with_native
def produce(
    topics: tuple[str, ...],
    service_url: str,
    rate: float | None,
    num_messages: int,
    duration: str,
    io_threads: int,
    size: int,
    producers: int,
    batching: bool,
    batch_max_messages: int,
    batch_max_bytes: int | None,
    batch_delay_ms: float,
    max_pending: int | None,
    engine: str,
    workers: int,
    connections: int,
    broker_metrics_url: str | None,
    broker_pid: int | None,
    tls_trust_cert_path: str | None,
) -> None:
    """Publish SIZE-byte messages to TOPICS; latency is send_async -> receipt.

    The defaults are pulsar-perf's: 100 msg/s of 1 KiB, batches of up to 1,000 messages or 4 MiB
    within 1 ms, no count limit on the messages in flight. The run ends with a line saying what
    limited its figure: the rate asked for, the broker's CPU (read from its /metrics), this
    process's CPU, or the messages in flight.

    With --engine native, each of --workers processes opens --connections producers and sends
    pre-encoded frames of --batch-max-messages messages (bounded by --batch-max-bytes; one with
    --no-batching), at most --max-pending messages unreceipted per connection, as fast as possible
    unless --rate is given. With --rate the latency is measured from each frame's scheduled send
    time (coordinated omission corrected).
    """
    seconds = parse_duration(duration)
    rate, max_pending, batch_max_bytes = _produce_defaults(engine, rate, max_pending, batch_max_bytes)
    validate_produce(
        topics=topics,
        rate=rate,
        size=size,
        producers=producers,
        batch_max_messages=batch_max_messages,
        batch_max_bytes=batch_max_bytes,
        batch_delay_ms=batch_delay_ms,
        max_pending=max_pending,
        num_messages=num_messages,
        duration=seconds,
    )
    cpu_source = _broker_cpu_source(service_url, broker_metrics_url)
    if engine == "native":
        _produce_native(
            topics,
            service_url,
            rate,
            size,
            batching,
            batch_max_messages,
            batch_max_bytes,
            max_pending,
            num_messages,
            seconds,
            workers,
            connections,
            tls_trust_cert_path,
            cpu_source,
            broker_pid,
        )
    else:
        _produce_client(
            topics,
            service_url,
            io_threads,
            rate,
            size,
            producers,
            batching,
            batch_max_messages,
            batch_max_bytes,
            batch_delay_ms,
            max_pending,
            num_messages,
            seconds,
            cpu_source,
            broker_pid,
        )


def _produce_native(
    topics: tuple[str, ...],
    service_url: str,
    rate: float,
    size: int,
    batching: bool,
    batch_max_messages: int,
    batch_max_bytes: int,
    max_pending: int,
    num_messages: int,
    seconds: float,
    workers: int,
    connections: int,
    tls_trust_cert_path: str | None,
    cpu_source: str | None,
    broker_pid: int | None,
) -> None:
    """`perf produce --engine native`: pre-encoded frames from worker processes."""
    _validate_native(workers, connections, service_url)
    if max_pending < 1:
        raise click.UsageError("--max-pending must be >= 1 with --engine native")
    per_frame = max(1, min(batch_max_messages, batch_max_bytes // max(1, size))) if batching else 1
    opts = NativeProduceOptions(
        service_url=service_url,
        topics=topics,
        size=size,
        batch_messages=per_frame,
        batched=batching,
        rate=rate,
        num_messages=num_messages,
        duration=seconds,
        workers=workers,
        connections=connections,
        max_pending=max(1, -(-max_pending // per_frame)),
        token=os.environ.get("MAGNETAR_TOKEN", "").strip() or None,
        tls_trust_cert=tls_trust_cert_path,
    )
    _run_native(
        Console(),
        "produce",
        opts,
        run_native_produce,
        "publish latency",
        f"{workers} worker(s) x {connections} connection(s), {size} B messages, "
        f"{per_frame} per frame, rate {rate or 'max'}",
        cpu_source,
        broker_pid,
        pending_limit=max_pending,
    )


def _produce_client(
    topics: tuple[str, ...],
    service_url: str,
    io_threads: int,
    rate: float,
    size: int,
    producers: int,
    batching: bool,
    batch_max_messages: int,
    batch_max_bytes: int,
    batch_delay_ms: float,
    max_pending: int,
    num_messages: int,
    seconds: float,
    cpu_source: str | None,
    broker_pid: int | None,
) -> None:
    """`perf produce` with the official Python client: send_async from this process."""
    import pulsar

    console = Console()
    client = _client(service_url, io_threads)
    stop = threading.Event()
    try:
        handles = [
            client.create_producer(
                topic,
                batching_enabled=batching,
                batching_max_messages=batch_max_messages,
                batching_max_allowed_size_in_bytes=batch_max_bytes,
                batching_max_publish_delay_ms=max(1, int(batch_delay_ms)) if batching else 10,
                max_pending_messages=max_pending,
                block_if_queue_full=True,
                send_timeout_millis=30_000,
            )
            for topic in topics
            for _ in range(producers)
        ]
        payload = os.urandom(size)
        senders = [_fast_sender(p, payload) for p in handles]
        counters = PerfCounters()
        ok = pulsar.Result.Ok
        sent = [0]
        done = [0]
        now_ns = time.perf_counter_ns

        def on_sent(t0: int, result: Any, _msg_id: Any) -> None:
            done[0] += 1
            if result == ok:
                counters.record((now_ns() - t0) / 1000.0, size)
            else:
                counters.error()

        limiter = RateLimiter(rate)
        # send in small groups so the limiter and the clock are consulted rarely at high rates
        group = max(1, min(100, int(rate / 1000))) if rate else 100
        deadline = time.monotonic() + seconds if seconds else float("inf")
        # the pending queue is full when a group leaves it within a group of the limit
        full_at = max(1, max_pending * len(handles) - group) if max_pending else 0
        samples = full = pending_sum = 0
        asked = f"{rate:g} msg/s" if rate else "max"
        console.print(
            f"producing to {', '.join(topics)}: {len(handles)} producer(s), {size} B messages, batching "
            f"{'on' if batching else 'off'}, rate {asked}, max pending {max_pending or 'no limit'}",
            soft_wrap=True,
        )
        broker_before = read_broker_cpu_seconds(cpu_source, broker_pid)
        client_before = _cpu_seconds(resource.RUSAGE_SELF)
        started = time.monotonic()
        with _Reporter(console, "produce", counters, pending=lambda: max(0, sent[0] - done[0])):
            try:
                i, k = 0, 0
                while not stop.is_set() and (not num_messages or i < num_messages):
                    if time.monotonic() >= deadline:
                        break
                    n = group if not num_messages else min(group, num_messages - i)
                    if rate:
                        _sleep_until(time.monotonic() + limiter.delay(n), stop)
                    for _ in range(n):
                        senders[k](functools.partial(on_sent, now_ns()))
                        k = k + 1 if k + 1 < len(senders) else 0
                    i += n
                    sent[0] = i
                    pending = i - done[0]
                    samples += 1
                    pending_sum += pending
                    full += full_at > 0 and pending >= full_at
                for p in handles:
                    p.flush()
                wait_until = time.monotonic() + 30
                while done[0] < sent[0] and time.monotonic() < wait_until:
                    time.sleep(0.01)
            except KeyboardInterrupt:
                console.print("interrupted; waiting for the receipts in flight")
                stop.set()
        wall = max(1e-9, time.monotonic() - started)
        client_cores = (_cpu_seconds(resource.RUSAGE_SELF) - client_before) / wall
        broker_cores = _cores(broker_before, read_broker_cpu_seconds(cpu_source, broker_pid), wall)
        counters.interval()
        summary = counters.summary()
        console.print(summary_table("perf produce", summary, "publish latency"))
        figures = RunFigures(
            msg_rate=counters.total_messages / wall,
            asked_rate=rate,
            client_cores=client_cores,
            client_cores_max=1.0,
            broker_cores=broker_cores,
            pending_full=full / samples if samples and full_at else None,
            pending_limit=max_pending * len(handles),
            pending_mean=pending_sum / samples if samples else None,
            load_per_core=_load_per_core(),
        )
        console.print(limiting_factor(figures), soft_wrap=True, markup=False, highlight=False)
    finally:
        client.close()


@command.command(name="consume")
@_with_common
@click.option(
    "--rate",
    "-r",
    type=float,
    default=0.0,
    show_default=True,
    help="Messages per second in total (0 = as fast as they come).",
)
@click.option("--subscription", "-S", default="perf-sub", show_default=True, help="Subscription name.")
@click.option("--subscription-type", "-st", type=click.Choice(_SUB_TYPES), default="Exclusive", show_default=True)
@click.option("--consumers", "-n", type=int, default=1, show_default=True, help="Consumers on the subscription.")
@click.option("--receiver-queue-size", "-q", type=int, default=1000, show_default=True)
@click.option(
    "--initial-position",
    type=click.Choice(["latest", "earliest"]),
    default="latest",
    show_default=True,
    help="Where a new subscription starts.",
)
@_with_native
def consume(
    topics: tuple[str, ...],
    service_url: str,
    rate: float,
    num_messages: int,
    duration: str,
    io_threads: int,
    subscription: str,
    subscription_type: str,
    consumers: int,
    receiver_queue_size: int,
    initial_position: str,
    engine: str,
    workers: int,
    connections: int,
    broker_metrics_url: str | None,
    broker_pid: int | None,
    tls_trust_cert_path: str | None,
) -> None:
    """Consume from TOPICS; latency is publish time -> arrival (same clock only on one host).

    With --engine native, --workers processes open --connections consumers each (an Exclusive
    subscription takes one per topic or partition); --rate is not supported there.
    """
    seconds = parse_duration(duration)
    validate_consume(
        topics=topics,
        rate=rate,
        consumers=consumers,
        subscription_type=subscription_type,
        receiver_queue_size=receiver_queue_size,
        num_messages=num_messages,
        duration=seconds,
    )
    if engine == "native":
        _consume_native(
            topics,
            service_url,
            subscription,
            subscription_type,
            initial_position,
            num_messages,
            seconds,
            workers,
            connections,
            receiver_queue_size,
            rate,
            broker_metrics_url,
            broker_pid,
            tls_trust_cert_path,
        )
    else:
        _consume_client(
            topics,
            service_url,
            io_threads,
            rate,
            subscription,
            subscription_type,
            consumers,
            receiver_queue_size,
            initial_position,
            num_messages,
            seconds,
        )


def _consume_native(
    topics: tuple[str, ...],
    service_url: str,
    subscription: str,
    subscription_type: str,
    initial_position: str,
    num_messages: int,
    seconds: float,
    workers: int,
    connections: int,
    receiver_queue_size: int,
    rate: float,
    broker_metrics_url: str | None,
    broker_pid: int | None,
    tls_trust_cert_path: str | None,
) -> None:
    """`perf consume --engine native`: consumers in worker processes."""
    _validate_native(workers, connections, service_url)
    if rate:
        raise click.UsageError("--rate is not supported with --engine native for consume")
    copts = NativeConsumeOptions(
        service_url=service_url,
        topics=topics,
        subscription=subscription,
        subscription_type=_SUB_TYPES.index(subscription_type),
        earliest=initial_position == "earliest",
        num_messages=num_messages,
        duration=seconds,
        workers=workers,
        connections=connections,
        receiver_queue_size=receiver_queue_size,
        token=os.environ.get("MAGNETAR_TOKEN", "").strip() or None,
        tls_trust_cert=tls_trust_cert_path,
    )
    _run_native(
        Console(),
        "consume",
        copts,
        run_native_consume,
        "end-to-end latency",
        f"subscription {subscription} ({subscription_type}), {workers} worker(s) x {connections} connection(s)",
        _broker_cpu_source(service_url, broker_metrics_url),
        broker_pid,
    )


def _consume_client(
    topics: tuple[str, ...],
    service_url: str,
    io_threads: int,
    rate: float,
    subscription: str,
    subscription_type: str,
    consumers: int,
    receiver_queue_size: int,
    initial_position: str,
    num_messages: int,
    seconds: float,
) -> None:
    """`perf consume` with the official Python client: one receiving thread per consumer."""
    import pulsar

    console = Console()
    client = _client(service_url, io_threads)
    stop = threading.Event()
    try:
        subs = [
            client.subscribe(
                list(topics),
                subscription,
                consumer_type=getattr(pulsar.ConsumerType, subscription_type.replace("_", "")),
                receiver_queue_size=receiver_queue_size,
                initial_position=(
                    pulsar.InitialPosition.Earliest if initial_position == "earliest" else pulsar.InitialPosition.Latest
                ),
            )
            for _ in range(consumers)
        ]
        counters = PerfCounters()
        received = [0]
        lock = threading.Lock()
        limiter = RateLimiter(rate)
        lim_lock = threading.Lock()
        deadline = time.monotonic() + seconds if seconds else float("inf")

        def run(consumer: Any) -> None:
            timeout = pulsar.Timeout
            while not stop.is_set() and time.monotonic() < deadline:
                if rate:
                    with lim_lock:
                        delay = limiter.delay(1)
                    _sleep_until(time.monotonic() + delay, stop)
                try:
                    msg = consumer.receive(timeout_millis=200)
                except timeout:
                    continue
                latency_us = (time.time() * 1000.0 - msg.publish_timestamp()) * 1000.0
                counters.record(latency_us, len(msg.data()))
                consumer.acknowledge(msg)
                with lock:
                    received[0] += 1
                    if num_messages and received[0] >= num_messages:
                        stop.set()

        console.print(
            f"consuming from {', '.join(topics)}: subscription {subscription} ({subscription_type}), "
            f"{consumers} consumer(s)"
        )
        threads = [
            threading.Thread(target=run, args=(c,), name=f"perf-consumer-{i}", daemon=True) for i, c in enumerate(subs)
        ]
        with _Reporter(console, "consume", counters):
            for t in threads:
                t.start()
            try:
                while any(t.is_alive() for t in threads):
                    for t in threads:
                        t.join(0.2)
            except KeyboardInterrupt:
                stop.set()
                for t in threads:
                    t.join()
        counters.interval()
        console.print(summary_table("perf consume", counters.summary(), "end-to-end latency"))
    finally:
        client.close()
