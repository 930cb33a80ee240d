"""Journal throughput: many concurrent adders, 1 KiB and 64 KiB records; then the latency of
sequential adds (one adder, the next add after the previous one is durable). Prints figures only.

    .venv/bin/python bench/journal_bench.py [--seconds 5] [--tasks 256] [--dir /tmp/x] [--no-sync]
        [--sequential 2000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import trio

from bookie.journal import Journal, JournalConfig


async def run_one(base: Path, size: int, tasks: int, seconds: float, cfg: JournalConfig) -> None:
    jdir = base / f"j{size}"
    journal = await Journal.open(jdir, [base / f"l{size}"], cfg)
    payload = bytes(size)
    count = 0
    running = True

    async def adder(ledger: int) -> None:
        nonlocal count
        entry = 0
        while running:
            await journal.log_add_entry(ledger, entry, payload)
            entry += 1
            count += 1

    async with journal.running():
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(tasks):
                nursery.start_soon(adder, i)
            await trio.sleep(seconds)
            running = False
        elapsed = time.perf_counter() - t0
    stats = journal.statistics()
    syncs = max(1, stats.force_writes)
    print(
        f"{size:>6} B x {tasks} tasks: {count / elapsed:>9,.0f} adds/s  {count * size / elapsed / 1e6:>7.1f} MB/s"
        f"  batches={sum(stats.flushes.values())} syncs={stats.force_writes}"
        f" adds/sync={count / syncs:.0f} flushes={ {k: v for k, v in stats.flushes.items() if v} }"
    )
    shutil.rmtree(jdir, ignore_errors=True)


async def run_sequential(base: Path, count: int, cfg: JournalConfig) -> None:
    jdir = base / "jseq"
    journal = await Journal.open(jdir, [base / "lseq"], cfg)
    payload = bytes(1024)
    lat = []
    async with journal.running():
        for i in range(count):
            t0 = time.perf_counter()
            await journal.log_add_entry(1, i, payload)
            lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    stats = journal.statistics()
    print(
        f"sequential 1 KiB adds: {count} adds, latency ms p50 {lat[len(lat) // 2]:.3f} "
        f"p99 {lat[int(len(lat) * 0.99)]:.3f}; syncs={stats.force_writes}"
    )
    shutil.rmtree(jdir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--tasks", type=int, default=256)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("--sizes", default="1024,65536")
    ap.add_argument("--sequential", type=int, default=2000, help="Sequential adds (0: skip).")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="journal-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    # the bookie's default (journalFlushWhenQueueEmpty = true in Magnetar)
    cfg = JournalConfig(sync_data=not args.no_sync, max_file_size=512 * 1024 * 1024, flush_when_queue_empty=True)
    try:
        for size in (int(s) for s in args.sizes.split(",") if s):
            trio.run(run_one, base, size, args.tasks, args.seconds, cfg)
        if args.sequential:
            trio.run(run_sequential, base, args.sequential, cfg)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
