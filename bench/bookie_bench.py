"""Bookie end to end: one client process, one ``magnetar bookie`` subprocess on loopback, fsync on.

Prints adds/s, MB/s and add latency percentiles for 1 KiB and 64 KiB entries at full rate
(pipelined, many in flight), p50/p99 at a fixed moderate rate, tailing and catch-up read MB/s,
and the bookie's peak RSS. Asserts nothing.

    .venv/bin/python bench/bookie_bench.py [--dir /tmp/x] [--small 200000] [--large 8000]
        [--window 4000] [--rate 2000] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import trio

from protocols.bookkeeper import encode_request, read_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.bookie_load import Bookie, add_frames, pct, pipelined, read_frames


def report_adds(name: str, count: int, size: int, elapsed: float, lat: list[float], errors: dict, cpu: float) -> None:
    print(
        f"{name}: {count} adds of {size} B in {elapsed:.2f} s = {count / elapsed:,.0f} adds/s, "
        f"{count * size / elapsed / 1e6:,.1f} MB/s; latency ms p50 {pct(lat, 50):.2f} p99 {pct(lat, 99):.2f} "
        f"p999 {pct(lat, 99.9):.2f}; errors {len(errors)}; bookie CPU {cpu / count * 1e6:.1f} us/add"
    )


async def main(args: argparse.Namespace) -> None:
    base = Path(args.dir or tempfile.mkdtemp(prefix="bookie-bench-"))
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    bk = Bookie(base, args.profile, args.set)
    bk.start()
    try:
        # the moderate rate first, on a fresh bookie: later phases leave flushes running
        n = int(args.rate * args.rate_seconds)
        frames = add_frames(3, n, 1024)
        elapsed, lat, _, errors = await pipelined(bk.port, frames, n, rate=args.rate)
        print(f"load average {os.getloadavg()[0]:.1f}")
        print(
            f"1 KiB at {args.rate:.0f} adds/s: latency ms p50 {pct(lat, 50):.2f} p99 {pct(lat, 99):.2f} "
            f"p999 {pct(lat, 99.9):.2f}; errors {len(errors)}"
        )
        frames = add_frames(1, args.small, 1024)
        cpu0 = bk.cpu_seconds()
        elapsed, lat, _, errors = await pipelined(bk.port, frames, args.window)
        report_adds("1 KiB full rate", args.small, 1024, elapsed, lat, errors, bk.cpu_seconds() - cpu0)
        del frames
        frames = add_frames(2, args.large, 64 * 1024)
        cpu0 = bk.cpu_seconds()
        elapsed, lat, _, errors = await pipelined(bk.port, frames, max(16, args.window // 64))
        report_adds("64 KiB full rate", args.large, 64 * 1024, elapsed, lat, errors, bk.cpu_seconds() - cpu0)
        del frames
        # tailing: the most recent entries of ledger 2 (still in the write / read cache)
        tail = min(args.large, 2000)
        frames = [encode_request(read_request(i + 1, 2, args.large - tail + i)) for i in range(tail)]
        elapsed, lat, nbytes, errors = await pipelined(bk.port, frames, 256)
        print(
            f"tailing read: {tail} entries, {nbytes / elapsed / 1e6:,.1f} MB/s, p50 {pct(lat, 50):.2f} ms; "
            f"errors {len(errors)}"
        )
        rss_before_restart = bk.peak_rss_mib()
        # catch-up: restart (cold caches), read ledger 2 from the entry logs
        bk.stop()
        bk.start()
        frames = read_frames(2, args.large)
        elapsed, lat, nbytes, errors = await pipelined(bk.port, frames, 256)
        print(
            f"catch-up read (cold caches): {args.large} entries, {nbytes / elapsed / 1e6:,.1f} MB/s, "
            f"p50 {pct(lat, 50):.2f} ms; errors {len(errors)}"
        )
        print(
            f"bookie peak RSS: {rss_before_restart:.0f} MiB during writes; "
            f"{bk.peak_rss_mib():.0f} MiB during the catch-up read"
        )
    finally:
        bk.stop()
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="Data directory (default: a temp dir, removed after).")
    parser.add_argument("--small", type=int, default=200_000, help="1 KiB adds at full rate.")
    parser.add_argument("--large", type=int, default=8_000, help="64 KiB adds at full rate.")
    parser.add_argument("--window", type=int, default=4000, help="1 KiB adds in flight.")
    parser.add_argument("--rate", type=float, default=2000.0, help="Moderate rate (adds/s).")
    parser.add_argument("--rate-seconds", type=float, default=3.0)
    parser.add_argument("--profile", default=None, help="Run the bookie under cProfile, writing this file.")
    parser.add_argument("--set", action="append", default=[], help="Extra bookie flags, e.g. --set=--set=k=v")
    trio.run(main, parser.parse_args())
