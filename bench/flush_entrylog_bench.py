"""Checkpoints vs adds: add latency of a real bookie while checkpoints write the write cache.

One ``magnetar bookie`` subprocess per setting (fresh directories, journal fsync on), adds of
``--size`` bytes sent at a fixed ``--rate`` for ``--seconds`` while a checkpoint runs every
``--flush-ms``; prints the add latency percentiles for each pair of a ``flushEntrylogBytes`` value
(0 = one entry-log sync per checkpoint, BookKeeper's default) and a ``flush_pace_fraction`` (0 =
each checkpoint written at once, as BookKeeper; 0.5 = spread over half the interval, Magnetar's
default). Asserts nothing.

    PYTHONPATH=. .venv/bin/python bench/flush_entrylog_bench.py [--values 0,4194304,1048576]
        [--pace 0,0.5] [--size 8192] [--rate 1500] [--seconds 15] [--flush-ms 2000] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import trio

from tests.support.bookie_load import Bookie, add_frames, pct, pipelined


async def one(base: Path, value: int, pace: float, args: argparse.Namespace) -> None:
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    extra = [
        "--set",
        f"flushInterval={args.flush_ms}",
        "--set",
        f"flushEntrylogBytes={value}",
        "--set",
        f"write_cache_max_mb={args.write_cache_mb}",
        "--set",
        f"flush_pace_fraction={pace}",
    ]
    bk = Bookie(base, None, extra)
    bk.start()
    try:
        n = int(args.rate * args.seconds)
        frames = add_frames(7, n, args.size)
        _, lat, _, errors = await pipelined(bk.port, frames, n, rate=args.rate)
    finally:
        bk.stop()
    logs = sum(f.stat().st_size for f in (base / "ledgers").glob("*.log"))
    print(
        f"flushEntrylogBytes={value:>9} pace {pace:.2f}: {n} adds of {args.size} B at {args.rate:.0f}/s, entry logs "
        f"{logs / 1e6:.0f} MB; add latency ms p50 {pct(lat, 50):.2f} p99 {pct(lat, 99):.2f} "
        f"p999 {pct(lat, 99.9):.2f} max {max(lat):.2f}; errors {len(errors)}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


async def main(args: argparse.Namespace) -> None:
    root = Path(args.dir or tempfile.mkdtemp(prefix="flush-entrylog-bench-"))
    try:
        for value in (int(v) for v in args.values.split(",")):
            for pace in (float(f) for f in args.pace.split(",")):
                await one(root / f"v{value}-{pace}", value, pace, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--values", default="0,4194304,1048576", help="flushEntrylogBytes values, comma-separated")
    p.add_argument("--pace", default="0,0.5", help="flush_pace_fraction values, comma-separated")
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--rate", type=float, default=1500.0)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--flush-ms", type=int, default=2000)
    p.add_argument("--write-cache-mb", type=int, default=128)
    p.add_argument("--dir", default="")
    trio.run(main, p.parse_args())
