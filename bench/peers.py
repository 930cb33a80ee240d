"""Magnetar beside Apache Pulsar itself: the same machine, disk, load tools and durability, one run.

Starts ``magnetar standalone`` and then the real Apache Pulsar standalone (``bench/pulsar_dist.py``:
from Maven Central, with a config equivalent to Magnetar's: one bookie, journal fsync before every
acknowledgement, the same group commit, caches and retention, no functions worker, no stream
storage), one after the other, each with its data in a fresh directory on the same disk, and runs
the same cases against each. Every figure is printed for both with the ratio Magnetar / Pulsar,
and the goal where the issue sets one::

    .venv/bin/python bench/peers.py                   # every case, 20 s each (about 30 min in all)
    .venv/bin/python bench/peers.py --quick           # every case, 10 s each, 100 MiB catch-up
    .venv/bin/python bench/peers.py --cases perf-b100,native-u100-r2k --systems magnetar,pulsar
    .venv/bin/python bench/peers.py --list            # the cases

The load tools, the same against both:

* ``pulsar-perf`` (Pulsar's own, from ``pulsar-testclient``) for produce and consume. It prints
  its counts every 10 s; its first 10 s are a warm-up (the JVM's JIT; ``--warmup-time`` keeps them
  out of its latency too), and its throughput is the messages acknowledged in the whole intervals
  after that, over their time (a catch-up read: every message, from its start line to DONE). Its
  latency runs from the send call, after its rate limiter let the message go: it is **not**
  corrected for coordinated omission (``pulsar-perf`` 4.0 has no option for that), and is
  labelled so.
* ``magnetar perf produce --engine native`` (this repository's protocol engine, pre-encoded
  frames, several in flight per connection), which offers more load than ``pulsar-perf`` from one
  JVM can on a small machine; at a fixed ``--rate`` its latency runs from each frame's intended
  send time, so it is coordinated-omission corrected.

Whatever cases are chosen, each system is also measured for start-up time (process spawn to the
first message acknowledged to the official Python client), resident memory and CPU while idle
(after a settling pause), and peak resident memory under load (sampled every 0.25 s during the
cases). CPU and memory are summed over the server's process tree, from ``/proc``; CPU per message
is the server's CPU time over the stretch the throughput was measured in, over the messages
acknowledged in it. ``--json FILE`` keeps every figure, ``--logs DIR`` every tool's output.

The older comparison with Redis and NATS JetStream is ``bench/peers_redis_nats.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pulsar_dist  # a sibling script, not a package

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


# ------------------------------------------------------------------------------ /proc readings


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid``'s process tree (threads included)."""
    total = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total / CLK_TCK


def tree_rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, RssAnon) of ``pid``'s process tree in MiB."""
    rss = anon = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
                    elif line.startswith("RssAnon:"):
                        anon += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, anon / 1024


class PeakRss:
    """Samples a process tree's RSS every ``interval`` s in a thread while running (``with``): the
    peaks of the whole run and of the current case."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_anon = self.case_rss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            rss, anon = tree_rss_mib(self.pid)
            self.peak_rss, self.peak_anon = max(self.peak_rss, rss), max(self.peak_anon, anon)
            self.case_rss = max(self.case_rss, rss)

    def start_case(self) -> None:
        """Start a new per-case peak (``case_rss``); the overall peaks go on."""
        self.case_rss = tree_rss_mib(self.pid)[0]

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ----------------------------------------------------------------------------------- servers


class Server(Protocol):
    """What a case needs of a running broker."""

    name: str
    started_at: float

    @property
    def service_url(self) -> str: ...

    @property
    def pid(self) -> int: ...

    def wait_ready(self, timeout: float = 180.0) -> float: ...


MAGNETAR_SETTINGS: list[str] = []
"""Extra ``--set KEY=VALUE`` settings for ``magnetar standalone`` (``--magnetar-set``), e.g.
``standalone.in_process_transport=false`` to measure the broker's bookie hop over loopback TCP."""


class MagnetarStandalone:
    """``magnetar standalone`` on free loopback ports with its data under ``work``; always stopped
    (with its process group) on leaving the ``with`` block."""

    name = "magnetar"

    def __init__(self, work: Path) -> None:
        self.work = work
        self.broker_port, self.web_port, self.bookie_port = (pulsar_dist.free_port() for _ in range(3))
        self.service_url = f"pulsar://127.0.0.1:{self.broker_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def __enter__(self) -> MagnetarStandalone:
        self.work.mkdir(parents=True, exist_ok=True)
        out = open(self.work / "stdout.log", "ab")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "magnetar",
                "standalone",
                "--data-dir",
                str(self.work / "data"),
                "--set",
                f"standalone.bookie_port={self.bookie_port}",
                "--set",
                "standalone.bookie_http_port=0",
                "--set",
                f"broker.broker_service_port={self.broker_port}",
                "--set",
                f"broker.web_service_port={self.web_port}",
                *(arg for setting in MAGNETAR_SETTINGS for arg in ("--set", setting)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=pulsar_dist.die_with_parent,
        )
        out.close()
        return self

    def wait_ready(self, timeout: float = 180.0) -> float:
        return pulsar_dist.wait_first_ack(
            self.service_url,
            "persistent://public/default/first-ack",
            timeout,
            alive=lambda: self.proc is not None and self.proc.poll() is None,
        )

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


# ------------------------------------------------------------------------------- load tools


@dataclass
class Load:
    """What one load-tool run measured; ``None`` where the tool does not tell."""

    messages: int = 0
    rate: float = 0.0  # msg/s
    mbs: float = 0.0  # MB/s of payload
    p50: float | None = None  # ms
    p99: float | None = None
    p999: float | None = None
    cpu_us: float | None = None  # server CPU per message
    raw: str = field(default="", repr=False)


@dataclass
class Mark:
    """A line of a load tool's output that matched, when it was read, and the server's CPU then."""

    line: str
    at: float
    cpu: float


def _stream(
    cmd: Sequence[str], marks: dict[str, re.Pattern[str]], pid: int, timeout: float, env: dict[str, str] | None = None
) -> tuple[str, dict[str, list[Mark]]]:
    """Run ``cmd``, reading its output as it comes; return it and, for every pattern of ``marks``,
    each line matching it with the time it was read and the server's CPU seconds then.

    The tool is killed after ``timeout`` s.
    """
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=pulsar_dist.die_with_parent,
    )
    lines: list[str] = []
    seen: dict[str, list[Mark]] = {k: [] for k in marks}
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            for key, pattern in marks.items():
                if pattern.search(line):
                    seen[key].append(Mark(line, time.monotonic(), tree_cpu_s(pid)))
        proc.wait()
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return "".join(lines), seen


_AGG_COUNT = re.compile(r"Aggregated throughput stats --- (\d+) records (?:sent|received)")
_AGG_LAT = re.compile(
    r"Aggregated latency stats --- Latency: mean:\s*[\d.]+ ms - med:\s*([\d.]+) - 95pct:\s*[\d.]+"
    r" - 99pct:\s*([\d.]+) - 99\.9pct:\s*([\d.]+)"
)
_INTERVAL = re.compile(r"Throughput (?:produced|received):\s*(\d+) msg")

PERF_INTERVAL_S = 10
"""pulsar-perf prints its counts every 10 s (not settable). Its first interval (the JVM's JIT
warming up; ``--warmup-time`` leaves it out of the latency too) is left out of every figure, and
a rate counts whole intervals only: the acknowledgements that arrive after DONE belong to no
interval, and at full rate they can be many seconds' worth."""


PERF_MAX_OUTSTANDING = 10_000


def perf_intervals(seconds: float) -> int:
    """How many whole 10-s intervals of pulsar-perf measure ``seconds`` (at least one)."""
    return max(1, round(seconds / PERF_INTERVAL_S))


LOGS: Path | None = None
"""Where every load tool's output is kept (``--logs``), or nowhere."""


def _keep(name: str, text: str) -> None:
    if LOGS is not None:
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / f"{name}.log").write_text(text)


_STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) ")


def _stamp_seconds(begin: Mark, end: Mark) -> float:
    """Seconds between two of pulsar-perf's lines by its own time stamps (``HH:mm:ss.SSS``, as
    ``perf-log4j2.xml`` prints them), else by when they were read."""
    a, b = _STAMP.match(begin.line), _STAMP.match(end.line)
    if not a or not b:
        return end.at - begin.at
    t0, t1 = ((int(m[1]) * 60 + int(m[2])) * 60 + int(m[3]) + int(m[4]) / 1000 for m in (a, b))
    return t1 - t0 if t1 >= t0 else t1 + 86400 - t0


def _interval_count(mark: Mark) -> int:
    """The running total of messages an interval line of pulsar-perf reports."""
    m = _INTERVAL.search(mark.line)
    return int(m.group(1)) if m else 0


def pulsar_perf(
    server: Server, work: Path, args: Sequence[str], *, size: int, timeout: float, log: str, whole_run: bool = False
) -> Load:
    """Run ``pulsar-perf`` ``args`` (``produce ...`` / ``consume ...``) against ``server``.

    By default the rate is the messages acknowledged (or received) between the tool's first and
    last interval lines (each carries its running total), over the time between their stamps, and
    the server's CPU per message is taken over the same stretch. With ``whole_run`` (a fixed
    number of messages to read) it is every message over the time from the tool's start line to
    its DONE line.
    """
    pulsar_dist.write_perf_log4j(work)
    cmd = pulsar_dist.perf_command([args[0], "-u", server.service_url, *args[1:]], work=work)
    text, seen = _stream(
        cmd,
        {
            "start": re.compile(r"Created \d+ producers|Start receiving from"),
            "interval": _INTERVAL,
            "done": re.compile(r"-+ DONE"),
        },
        server.pid,
        timeout,
    )
    _keep(log, text)
    total = _AGG_COUNT.search(text)
    if not seen["start"] or not seen["done"] or not total:
        raise RuntimeError(f"pulsar-perf did not run to its end:\n{text[-3000:]}")
    done = seen["done"][0]
    intervals = [m for m in seen["interval"] if m.at <= done.at]
    if whole_run:
        begin, end, n = seen["start"][0], done, int(total.group(1))
    elif len(intervals) >= 2:
        # each interval line carries the running total and the tool's own time stamp
        begin, end = intervals[0], intervals[-1]
        n = _interval_count(end) - _interval_count(begin)
    else:
        raise RuntimeError(f"pulsar-perf printed {len(intervals)} interval(s) before DONE; it needs 2:\n{text[-3000:]}")
    seconds, cpu = _stamp_seconds(begin, end), end.cpu - begin.cpu
    load = Load(messages=n, rate=n / seconds if seconds > 0 else 0.0, raw=text)
    load.mbs = load.rate * size / 1e6
    lat = _AGG_LAT.search(text)
    if lat and args[0] == "produce":
        load.p50, load.p99, load.p999 = (float(g) for g in lat.groups())
    load.cpu_us = cpu / n * 1e6 if n > 0 else None
    return load


def _table_value(text: str, name: str) -> float | None:
    m = re.search(rf"{re.escape(name)}\s*│\s*([\d,.]+)", text)
    return float(m.group(1).replace(",", "")) if m else None


def native(server: Server, args: Sequence[str], *, timeout: float, log: str) -> Load:
    """Run ``magnetar perf produce --engine native`` ``args`` against ``server``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "magnetar",
        "perf",
        "produce",
        "--engine",
        "native",
        "-u",
        server.service_url,
        "--broker-pid",
        str(server.pid),
        *args,
    ]
    text, seen = _stream(
        cmd,
        {"start": re.compile(r"^produce\s"), "end": re.compile(r"perf produce \(native\)")},
        server.pid,
        timeout,
        env=env,
    )
    _keep(log, text)
    if not seen["start"] or not seen["end"]:
        raise RuntimeError(f"magnetar perf did not run to its end:\n{text[-3000:]}")
    seconds, cpu = seen["end"][0].at - seen["start"][0].at, seen["end"][0].cpu - seen["start"][0].cpu
    n = int(_table_value(text, "messages") or 0)
    load = Load(
        messages=n,
        rate=_table_value(text, "msg/s") or 0.0,
        mbs=_table_value(text, "MB/s") or 0.0,
        p50=_table_value(text, "publish latency p50 ms"),
        p99=_table_value(text, "publish latency p99 ms"),
        p999=_table_value(text, "publish latency p99.9 ms"),
        raw=text,
    )
    # messages acked while the per-second lines ran, over the server CPU of the same stretch
    load.cpu_us = cpu / (load.rate * seconds) * 1e6 if load.rate and seconds else None
    return load


# ------------------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Case:
    """One load shape, run the same way against every system."""

    key: str
    label: str
    tool: str  # "perf", "native" or "catchup"
    size: int
    batched: bool = True
    rate: float = 0.0  # msg/s in total; 0 = as fast as it goes
    topics: int = 1

    @property
    def latency_case(self) -> bool:
        return self.rate > 0


CASES: list[Case] = [
    Case("perf-b100", "pulsar-perf, batched 100 B, max rate", "perf", 100),
    Case("perf-u100", "pulsar-perf, unbatched 100 B, max rate", "perf", 100, batched=False),
    Case("perf-b1k", "pulsar-perf, batched 1 KiB, max rate", "perf", 1024),
    Case("perf-u1k", "pulsar-perf, unbatched 1 KiB, max rate", "perf", 1024, batched=False),
    Case("perf-b100-t100", "pulsar-perf, batched 100 B, 100 topics, max rate", "perf", 100, topics=100),
    Case(
        "perf-u100-t100", "pulsar-perf, unbatched 100 B, 100 topics, max rate", "perf", 100, batched=False, topics=100
    ),
    Case("perf-b100-r20k", "pulsar-perf, batched 100 B at 20,000 msg/s (uncorrected)", "perf", 100, rate=20_000),
    Case(
        "perf-u100-r2k",
        "pulsar-perf, unbatched 100 B at 2,000 msg/s (uncorrected)",
        "perf",
        100,
        batched=False,
        rate=2_000,
    ),
    Case("perf-b1k-r20k", "pulsar-perf, batched 1 KiB at 20,000 msg/s (uncorrected)", "perf", 1024, rate=20_000),
    Case(
        "perf-b100-t100-r20k",
        "pulsar-perf, batched 100 B, 100 topics at 20,000 msg/s (uncorrected)",
        "perf",
        100,
        topics=100,
        rate=20_000,
    ),
    Case("native-b100", "native, batched 100 B, max rate", "native", 100),
    Case("native-u100", "native, unbatched 100 B, max rate", "native", 100, batched=False),
    Case("native-b1k", "native, batched 1 KiB, max rate", "native", 1024),
    Case("native-u1k", "native, unbatched 1 KiB, max rate", "native", 1024, batched=False),
    Case("native-b100-r20k", "native, batched 100 B at 20,000 msg/s (CO-corrected)", "native", 100, rate=20_000),
    Case(
        "native-u100-r2k",
        "native, unbatched 100 B at 2,000 msg/s (CO-corrected)",
        "native",
        100,
        batched=False,
        rate=2_000,
    ),
    Case("native-b1k-r20k", "native, batched 1 KiB at 20,000 msg/s (CO-corrected)", "native", 1024, rate=20_000),
    Case(
        "native-u1k-r2k",
        "native, unbatched 1 KiB at 2,000 msg/s (CO-corrected)",
        "native",
        1024,
        batched=False,
        rate=2_000,
    ),
    Case("catchup-1g", "catch-up read of 1 GiB (1 KiB messages, pulsar-perf consume)", "catchup", 1024),
]
CASE_KEYS = {c.key: c for c in CASES}


def _perf_args(case: Case, seconds: float, topic: str) -> list[str]:
    # pulsar-perf takes no "unlimited" rate; 10 M msg/s is more than either server takes here
    # the first interval, then the measured ones, and 2 s for the last interval line to precede DONE
    run = PERF_INTERVAL_S * (1 + perf_intervals(seconds)) + 2
    args = [
        "produce",
        "-s",
        str(case.size),
        "-r",
        str(int(case.rate or 10_000_000)),
        "-time",
        str(run),
        "--warmup-time",
        str(PERF_INTERVAL_S),
    ]
    if not case.rate:
        # unbounded (pulsar-perf's default), a full-rate producer queues messages until its JVM
        # runs out of heap; 10,000 in all keeps ten full batches, or 10,000 single messages, in
        # flight. The limit is per producer, one per topic.
        args += ["-o", str(max(100, PERF_MAX_OUTSTANDING // case.topics))]
    if not case.batched:
        args.append("-db")
    if case.topics > 1:
        args += ["-t", str(case.topics)]
    return [*args, topic]


def _native_args(case: Case, seconds: float, topic: str) -> list[str]:
    # the shapes bench/targets.py uses, so the figures compare with its history
    args = ["-s", str(case.size), "-t", str(int(seconds))]
    if case.batched:
        per_frame = 128 if case.size >= 1024 else (100 if case.rate else 1000)
        args += ["--batch-max-messages", str(per_frame), "--workers", "1", "--connections", "2"]
    else:
        args += ["--no-batching", "--workers", "1", "--connections", "4", "--max-pending", "500"]
    if case.rate:
        args += ["-r", str(int(case.rate))]
    return [*args, topic]


def run_case(case: Case, server: Server, work: Path, seconds: float, catchup_mib: int) -> dict[str, float]:
    """Run one case against ``server``; return its figures by name."""
    topic = f"persistent://public/default/{case.key}"
    timeout = PERF_INTERVAL_S * (2 + perf_intervals(seconds)) + seconds + 120
    log = f"{server.name}-{case.key}"
    fig: dict[str, float] = {}
    if case.tool == "perf":
        load = pulsar_perf(server, work, _perf_args(case, seconds, topic), size=case.size, timeout=timeout, log=log)
    elif case.tool == "native":
        load = native(server, _native_args(case, seconds, topic), timeout=timeout, log=log)
    else:
        return _catchup(case, server, work, catchup_mib)
    if case.latency_case:
        fig["msg/s achieved"] = load.rate
        for name, v in (("p50 ms", load.p50), ("p99 ms", load.p99), ("p99.9 ms", load.p999)):
            if v is not None:
                fig[name] = v
    else:
        fig["msg/s"] = load.rate
        fig["MB/s"] = load.mbs
    if load.cpu_us is not None:
        fig["CPU us/msg"] = load.cpu_us
    return fig


def _catchup(case: Case, server: Server, work: Path, mib: int) -> dict[str, float]:
    """Subscribe, write ``mib`` MiB of 1 KiB messages, then read them all from the start."""
    import pulsar

    topic = f"persistent://public/default/{case.key}"
    n = mib * 1024 * 1024 // case.size
    client = pulsar.Client(server.service_url, logger=pulsar_dist.quiet_logger())
    try:  # a durable subscription first, so that nothing written is trimmed before it is read
        client.subscribe(topic, "catchup", initial_position=pulsar.InitialPosition.Earliest).close()
    finally:
        client.close()
    fill = pulsar_perf(
        server,
        work,
        ["produce", "-s", str(case.size), "-r", "10000000", "-m", str(n), "-o", str(PERF_MAX_OUTSTANDING), topic],
        size=case.size,
        timeout=3600,
        log=f"{server.name}-{case.key}-write",
        whole_run=True,
    )
    read = pulsar_perf(
        server,
        work,
        ["consume", "-ss", "catchup", "-sp", "Earliest", "-q", "10000", "-m", str(fill.messages), topic],
        size=case.size,
        timeout=3600,
        log=f"{server.name}-{case.key}-read",
        whole_run=True,
    )
    # the write's rate is not reported: pulsar-perf says DONE when it has sent the last message,
    # and the acknowledgements still in flight then (many seconds' worth) fall outside that time
    return {
        "read MB/s": read.mbs,
        "read msg/s": read.rate,
        **({"read CPU us/msg": read.cpu_us} if read.cpu_us is not None else {}),
    }


# ------------------------------------------------------------------------------------ a system


def run_system(
    server_cls: type[MagnetarStandalone] | type[pulsar_dist.PulsarStandalone],
    work: Path,
    cases: Sequence[Case],
    args: argparse.Namespace,
) -> dict[str, float]:
    """Start one system, measure start-up and idle, run ``cases``, stop it; figures by name."""
    out: dict[str, float] = {}
    with server_cls(work) as server:
        acked = server.wait_ready()
        out["start-up to first ack, s"] = acked - server.started_at
        print(
            f"  {server.name}: first message acknowledged {out['start-up to first ack, s']:.2f} s after spawn",
            flush=True,
        )
        time.sleep(args.settle)
        cpu0, t0 = tree_cpu_s(server.pid), time.monotonic()
        time.sleep(args.idle)
        cpu1, t1 = tree_cpu_s(server.pid), time.monotonic()
        out["idle CPU, % of a core"] = 100 * (cpu1 - cpu0) / (t1 - t0)
        out["idle RSS, MiB"], out["idle RssAnon, MiB"] = tree_rss_mib(server.pid)
        print(
            f"  {server.name}: idle {out['idle CPU, % of a core']:.1f} % CPU, RSS {out['idle RSS, MiB']:.0f} MiB",
            flush=True,
        )
        if args.warmup > 0 and cases:
            # both servers get the same warm-up (a JIT needs it; Python does not mind)
            native(
                server,
                ["-s", "100", "-t", str(int(args.warmup)), "persistent://public/default/warmup"],
                timeout=args.warmup + 120,
                log=f"{server.name}-warmup",
            )
        with PeakRss(server.pid) as peak:
            for case in cases:
                print(f"  {server.name}: {case.key} ...", flush=True)
                peak.start_case()
                try:
                    figs = run_case(case, server, work, args.seconds, args.catchup_mib)
                    figs["peak RSS MiB"] = peak.case_rss
                except Exception as e:  # one failed case must not lose the others' figures
                    print(f"  {server.name}: {case.key} failed: {type(e).__name__}: {e}", flush=True)
                    continue
                for k, v in figs.items():
                    out[f"{case.key}: {k}"] = v
                print("    " + ", ".join(f"{k} {v:,.2f}" for k, v in figs.items()), flush=True)
        if cases:
            out["peak RSS under load, MiB"] = peak.peak_rss
            out["peak RssAnon under load, MiB"] = peak.peak_anon
    return out


# ------------------------------------------------------------------------------------ report


def goal(figure: str) -> tuple[str, float] | None:
    """The issue's goal for a figure's ratio Magnetar / Pulsar, as (operator, bound)."""
    if figure.startswith("start-up"):
        return "<=", 0.2
    if figure.startswith("idle CPU"):
        return "<=", 0.2
    if "RSS" in figure and "Anon" not in figure:
        return "<=", 0.25
    if figure.endswith(": p99 ms"):
        return "<=", 1.0
    if figure.endswith((": msg/s", ": MB/s", ": read MB/s")):
        return ">=", 1.0
    return None


def report(results: dict[str, dict[str, float]], header: str) -> str:
    """The table of every figure for both systems, the ratio, and the goal's verdict."""
    mag, pul = results.get("magnetar", {}), results.get("pulsar", {})
    names = list(dict.fromkeys([*mag, *pul]))
    lines = [
        header,
        "",
        "| figure | Magnetar | Pulsar | Magnetar / Pulsar | goal |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name in names:
        m, p = mag.get(name), pul.get(name)
        ratio = m / p if m is not None and p else None
        g = goal(name)
        verdict = ""
        if g and ratio is not None:
            ok = ratio >= g[1] if g[0] == ">=" else ratio <= g[1]
            verdict = f"{g[0]} {g[1]:g}: {'met' if ok else '**missed**'}"
        elif g:
            verdict = f"{g[0]} {g[1]:g}"
        lines.append(f"| {name} | {_fmt(m)} | {_fmt(p)} | {'' if ratio is None else f'{ratio:.2f}'} | {verdict} |")
    return "\n".join(lines)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="measured per load case (default 20, --quick 10); pulsar-perf adds a 10-s warm-up",
    )
    parser.add_argument("--quick", action="store_true", help="short cases, 100 MiB catch-up, short idle")
    parser.add_argument("--cases", default="all", help="comma-separated case keys or prefixes (see --list)")
    parser.add_argument("--systems", default="magnetar,pulsar")
    parser.add_argument("--catchup-mib", type=int, default=None, help="catch-up data set (default 1024, --quick 100)")
    parser.add_argument("--idle", type=float, default=None, help="idle CPU window, s (default 20, --quick 5)")
    parser.add_argument("--settle", type=float, default=None, help="pause after start-up, s (default 10, --quick 3)")
    parser.add_argument("--warmup", type=float, default=None, help="native warm-up load, s (default 5, --quick 2)")
    parser.add_argument("--dir", default=os.environ.get("PEERS_DIR"), help="parent of the data directories")
    parser.add_argument("--json", default=None, help="also write every figure to this file")
    parser.add_argument("--logs", default=None, help="keep every load tool's output in this directory")
    parser.add_argument(
        "--magnetar-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a magnetar standalone setting (repeatable): standalone.in_process_transport=false",
    )
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--report", default=None, metavar="JSON", help="print the table of a --json file and exit")
    args = parser.parse_args()
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        print(report(saved["results"], saved["header"]))
        return
    if args.list:
        for c in CASES:
            print(f"{c.key:<22} {c.label}")
        return
    q = args.quick
    MAGNETAR_SETTINGS[:] = args.magnetar_set
    global LOGS
    LOGS = Path(args.logs) if args.logs else None
    args.seconds = args.seconds or (10.0 if q else 20.0)
    args.catchup_mib = args.catchup_mib or (100 if q else 1024)
    args.idle = args.idle if args.idle is not None else (5.0 if q else 20.0)
    args.settle = args.settle if args.settle is not None else (3.0 if q else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (2.0 if q else 5.0)
    cases = select_cases(args.cases)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - {"magnetar", "pulsar"}
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}: choose from magnetar, pulsar")
    if "pulsar" in systems:
        java, broker, _ = pulsar_dist.fetch()
        print(f"Apache Pulsar {pulsar_dist.PULSAR_VERSION} ({broker}), pulsar-perf {pulsar_dist.PERF_VERSION}, {java}")
    elif any(c.tool in ("perf", "catchup") for c in cases):
        pulsar_dist.fetch()
    pulsar_dist.sigterm_raises()
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: dict[str, dict[str, float]] = {}
    base = Path(args.dir) if args.dir else None
    with tempfile.TemporaryDirectory(prefix="magnetar-peers-", dir=base) as tmp:
        for name in systems:
            print(f"running {name} ...", flush=True)
            cls = MagnetarStandalone if name == "magnetar" else pulsar_dist.PulsarStandalone
            work = Path(tmp) / name
            try:
                results[name] = run_system(cls, work, cases, args)
            finally:
                if LOGS is not None:  # the servers' own logs, for what the figures do not say
                    LOGS.mkdir(parents=True, exist_ok=True)
                    for log in work.glob("*.log"):
                        shutil.copy(log, LOGS / f"{name}-server-{log.name}")
                # keep nothing of a system once it has run: the next starts on an equally empty disk
                shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    header = (
        f"{started}, `bench/peers.py {' '.join(sys.argv[1:])}`, {args.seconds:g} s per case; load average "
        f"(1/5/15 min) {'/'.join(f'{x:.1f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.1f}' for x in load_after)} after; {os.cpu_count()} cores"
    )
    print()
    print(report(results, header))
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "results": results}, indent=1))


def select_cases(spec: str) -> list[Case]:
    """The cases named by ``spec``: ``all``, ``none``, or comma-separated keys or key prefixes."""
    if spec == "all":
        return list(CASES)
    if spec == "none":
        return []
    chosen: list[Case] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        match = [c for c in CASES if c.key == part] or [c for c in CASES if c.key.startswith(part)]
        if not match:
            raise SystemExit(f"no case matches {part!r}; see --list")
        chosen += [c for c in match if c not in chosen]
    return chosen


if __name__ == "__main__":
    main()
