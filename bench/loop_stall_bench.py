"""Which tasks stall standalone Magnetar's one event loop, under the native load generator.

Runs `magnetar.stack.serve_standalone` in this process with a trio instrument that times every
task step, drives it with ``magnetar perf produce --engine native`` (a subprocess, default: 100 B
batched at a fixed 20,000 msg/s, issue 15's latency case) and prints:

* the generator's summary (rate, p50 / p99 send -> receipt),
* every task whose single step held the loop longer than ``--threshold-ms``, grouped by task
  name (count, total, worst), and
* the loop's run batches (from one I/O poll to the next) longer than the threshold: that is the
  lag every socket sees, whichever tasks made it up.

    PYTHONPATH=. .venv/bin/python bench/loop_stall_bench.py [--seconds 15] [-- extra perf flags]

The instrument itself costs a little per step, so the rate figures here are not the ones to
quote (bench/targets.py is); the stalls are.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections import Counter, defaultdict

import trio
import trio.abc


class StallRecorder(trio.abc.Instrument):
    """Record task steps and run batches longer than ``threshold_s`` (bounded lists)."""

    def __init__(self, threshold_s: float, limit: int = 100_000) -> None:
        self.threshold_s = threshold_s
        self.limit = limit
        self._step_start = 0.0
        self._batch_start: float | None = None
        self.steps: dict[str, list[float]] = defaultdict(list)
        self.batches: list[tuple[float, float]] = []  # (start, duration)
        self.recording = False
        self.gc_pauses: dict[int, list[float]] = defaultdict(list)  # generation -> durations
        self._gc_start = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # a collection runs in whichever thread allocated; any of them holds the GIL meanwhile
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self.recording and len(self.gc_pauses[info["generation"]]) < self.limit:
            self.gc_pauses[info["generation"]].append(time.perf_counter() - self._gc_start)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._step_start = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        took = time.perf_counter() - self._step_start
        if self.recording and took > self.threshold_s:
            durations = self.steps[task.name]
            if len(durations) < self.limit:
                durations.append(took)

    def after_io_wait(self, timeout: float) -> None:
        self._batch_start = time.perf_counter()

    def before_io_wait(self, timeout: float) -> None:
        if self._batch_start is None:
            return
        took = time.perf_counter() - self._batch_start
        if self.recording and took > self.threshold_s and len(self.batches) < self.limit:
            self.batches.append((self._batch_start, took))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run(args: argparse.Namespace, recorder: StallRecorder, base: str) -> None:
    from bk_client import ClientConfig
    from bookie import BookieConfig
    from broker import BrokerConfig
    from magnetar.cli._common import load_sections
    from magnetar.stack import STANDALONE_DEFAULTS, StandaloneConfig, serve_standalone
    from managed_ledger import ManagedLedgerConfig

    port, web, bookie = _free_port(), _free_port(), _free_port()
    cfg = load_sections(
        None,
        {
            "standalone": StandaloneConfig,
            "broker": BrokerConfig,
            "bookie": BookieConfig,
            "managed_ledger": ManagedLedgerConfig,
            "bk_client": ClientConfig,
        },
        (
            f"standalone.data_dir={base}",
            f"standalone.bookie_port={bookie}",
            "standalone.bookie_http_port=0",
            f"broker.broker_service_port={port}",
            f"broker.web_service_port={web}",
            *args.set,
        ),
        defaults=STANDALONE_DEFAULTS,
    )
    async with trio.open_nursery() as nursery:
        ep = await nursery.start(
            lambda task_status: serve_standalone(
                cfg["standalone"],
                cfg["broker"],
                cfg["bookie"],
                cfg["managed_ledger"],
                cfg["bk_client"],
                task_status=task_status,
            )
        )
        if args.freeze:
            gc.collect()
            gc.freeze()  # as magnetar/cli/_common.run_until_signal does once a server has started
        perf = [
            sys.executable,
            "-m",
            "magnetar",
            "perf",
            "produce",
            "--engine",
            "native",
            "-u",
            f"pulsar://127.0.0.1:{port}",
            "persistent://public/default/stalls",
            "-t",
            str(args.seconds),
            *(args.perf or ["-s", "100", "-r", "20000", "--batch-max-messages", "100", "--connections", "2"]),
        ]
        if args.warmup:
            # what bench/targets.py runs just before its latency case: unbatched at full rate,
            # leaving the write cache, the index and the journal with work to catch up on
            await trio.run_process(
                [
                    *perf[: perf.index("-t")],
                    "-t",
                    str(args.warmup),
                    "-s",
                    "100",
                    "--no-batching",
                    "--connections",
                    "4",
                    "--max-pending",
                    "500",
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        if args.heap:
            _print_heap("after start-up and warm-up")
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)  # keep what cycles the collector finds, to name it below
        recorder.recording = True
        cpu = time.process_time()
        result = await trio.run_process(perf, capture_stdout=True, capture_stderr=True, check=False)
        cpu = time.process_time() - cpu
        recorder.recording = False
        print(result.stdout.decode(errors="replace")[-1500:])
        m = re.search(r"messages\s*│\s*([\d,]+)", result.stdout.decode(errors="replace"))
        sent = int(m.group(1).replace(",", "")) if m else 0
        per_message = f", {cpu / sent * 1e6:.1f} us per message" if sent else ""
        print(f"standalone CPU during the run: {cpu:.2f} s{per_message}")
        await _print_journal_sync(ep.bookies[0].http_urls)
        if args.heap:
            gc.collect()
            gc.set_debug(0)
            cyclic = Counter(type(o).__qualname__ for o in gc.garbage)
            print(
                f"objects in reference cycles made during the run: {len(gc.garbage):,}; most common: "
                + ", ".join(f"{name} {n:,}" for name, n in cyclic.most_common(10))
            )
            gc.garbage.clear()
            _print_heap("after the run")
        if result.returncode:
            print(result.stderr.decode(errors="replace")[-2000:])
        nursery.cancel_scope.cancel()


def _print_heap(when: str) -> None:
    counts = Counter(type(o).__qualname__ for o in gc.get_objects())
    print(
        f"objects the cyclic GC tracks {when}: {sum(counts.values()):,} ({len(gc.get_objects(2)):,} in the "
        f"oldest generation, {gc.get_freeze_count():,} frozen); most common: "
        + ", ".join(f"{name} {n:,}" for name, n in counts.most_common(8))
    )


async def _print_journal_sync(urls: tuple[str, ...]) -> None:
    """The bookie's journal fdatasync latency histogram (ms): what a receipt waits for at least."""
    import httpx

    if not urls:
        return
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{urls[0].rstrip('/')}/metrics")).text
    buckets = re.findall(r'^\w*JOURNAL_SYNC_bucket\{le="([^"]+)"\} (\S+)', text, re.M)
    if buckets:
        total = float(buckets[-1][1]) or 1.0
        print(
            "journal fdatasync ms, cumulative share: "
            + ", ".join(f"<={le}: {float(n) / total:.3f}" for le, n in buckets if float(n) / total < 0.9999)
        )


def _report(recorder: StallRecorder, threshold_ms: float) -> None:
    print(f"task steps longer than {threshold_ms} ms, by task (worst first):")
    rows = sorted(recorder.steps.items(), key=lambda kv: -max(kv[1]))
    print(f"  {'count':>6} {'total ms':>9} {'max ms':>8}  task")
    for name, durations in rows[:25]:
        print(f"  {len(durations):>6} {sum(durations) * 1e3:>9.1f} {max(durations) * 1e3:>8.1f}  {name}")
    for gen, pauses in sorted(recorder.gc_pauses.items()):
        print(
            f"cyclic GC generation {gen}: {len(pauses)} collections, total {sum(pauses) * 1e3:.1f} ms, "
            f"max {max(pauses) * 1e3:.1f} ms"
        )
    batches = recorder.batches
    if batches:
        longest = sorted(d for _, d in batches)
        print(
            f"run batches longer than {threshold_ms} ms: {len(batches)}, total {sum(longest) * 1e3:.0f} ms, "
            f"p50 {longest[len(longest) // 2] * 1e3:.1f} ms, max {longest[-1] * 1e3:.1f} ms"
        )
        t0 = batches[0][0]
        worst = sorted(batches, key=lambda b: -b[1])[:15]
        print("  worst at (s from first): " + ", ".join(f"{s - t0:.2f}s:{d * 1e3:.0f}ms" for s, d in sorted(worst)))
    else:
        print(f"no run batch longer than {threshold_ms} ms")


def main() -> None:
    """Run the load and print the stalls."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--threshold-ms", type=float, default=5.0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="TABLE.KEY=VALUE", help="Standalone config override (repeatable)."
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        metavar="SECONDS",
        help="First run unbatched 100 B at full rate for this long (not recorded).",
    )
    parser.add_argument(
        "--freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="gc.freeze() once started, as the magnetar commands do (default on).",
    )
    parser.add_argument(
        "--bare",
        action="store_true",
        help="No trio instrument (its per-step cost is gone; only GC and CPU figures remain).",
    )
    parser.add_argument("--heap", action="store_true", help="Print the types the cyclic GC tracks, after the run.")
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=None,
        help="sys.setswitchinterval (default: Python's 5 ms; the magnetar server commands set 0.5).",
    )
    parser.add_argument("perf", nargs="*", help="Flags for magnetar perf produce (after --).")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="magnetar-stalls-")
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)
    recorder = StallRecorder(args.threshold_ms / 1e3)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    try:
        trio.run(_run, args, recorder, base, instruments=[] if args.bare else [recorder])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    _report(recorder, args.threshold_ms)


if __name__ == "__main__":
    main()
