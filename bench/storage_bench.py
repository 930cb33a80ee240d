"""Ledger storage throughput: adds/s with background flushes, flush MB/s, random and sequential reads.

Prints figures and asserts nothing. Usage::

    .venv/bin/python bench/storage_bench.py [--dir /path/on/the/disk] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import trio

from bookie.storage import DbLedgerStorage


async def bench_adds(root: Path, size: int, seconds: float, ledgers: int = 16) -> None:
    st = await DbLedgerStorage.open([root / f"adds{size}"], write_cache_max_bytes=256 << 20, flush_interval_ms=1000)
    payload = os.urandom(size)
    n = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(st.run)
        start = time.perf_counter()
        deadline = start + seconds
        eid = 0
        while True:
            for lid in range(ledgers):
                await st.add_entry(lid, eid, payload)
            n += ledgers
            eid += 1
            if eid % 64 == 0:
                await trio.lowlevel.checkpoint()  # let the flush loop run, as a server would
                if time.perf_counter() > deadline:
                    break
        await st.flush()
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    stats = st.statistics()
    print(
        f"adds {size:>6} B: {n / elapsed:>10,.0f} adds/s  {n * size / elapsed / 1e6:>8.1f} MB/s "
        f"(incl. final flush; {stats.flushes} flushes, {stats.write_cache.throttled_adds} throttled)"
    )
    await st.aclose()


async def bench_flush(root: Path, size: int, total: int) -> DbLedgerStorage:
    st = await DbLedgerStorage.open(
        [root / "flush"], write_cache_max_bytes=2 * total + (8 << 20), read_cache_max_bytes=32 << 20
    )
    payload = os.urandom(size)
    count = total // size
    for i in range(count):
        await st.add_entry(i % 8, i // 8, payload)
    start = time.perf_counter()
    await st.flush()
    elapsed = time.perf_counter() - start
    print(
        f"flush {count} x {size} B: {total / elapsed / 1e6:8.1f} MB/s ({elapsed * 1000:.0f} ms incl. sort, "
        f"write, fdatasync, index)"
    )
    return st


async def bench_reads(st: DbLedgerStorage, size: int, count: int) -> None:
    per_ledger = count // 8
    async with trio.open_nursery() as nursery:
        await nursery.start(st.run)
        keys = [(random.randrange(8), random.randrange(per_ledger)) for _ in range(min(count, 20_000))]
        start = time.perf_counter()
        for lid, eid in keys:
            await st.get_entry(lid, eid)
        elapsed = time.perf_counter() - start
        rate = len(keys) / elapsed
        print(f"random reads  {size} B: {rate:>10,.0f} reads/s {rate * size / 1e6:8.1f} MB/s")
        start = time.perf_counter()
        n = 0
        for lid in range(8, 0, -1):  # a ledger the random pass touched least recently first
            for eid in range(per_ledger):
                await st.get_entry(lid - 1, eid)
                n += 1
        elapsed = time.perf_counter() - start
        s = st.statistics()
        print(
            f"sequential    {size} B: {n / elapsed:>10,.0f} reads/s {n * size / elapsed / 1e6:8.1f} MB/s "
            f"(read cache hits {s.read_cache.hits}, misses {s.read_cache.misses}, "
            f"read-ahead entries {s.read_ahead.entries_read})"
        )
        nursery.cancel_scope.cancel()


async def main(root: Path, seconds: float) -> None:
    await bench_adds(root, 1024, seconds)
    await bench_adds(root, 64 * 1024, seconds)
    st = await bench_flush(root, 1024, 64 << 20)
    await bench_reads(st, 1024, (64 << 20) // 1024)
    await st.aclose()
    st = await bench_flush(root, 64 * 1024, 256 << 20)
    await bench_reads(st, 64 * 1024, (256 << 20) // (64 * 1024))
    await st.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to measure (temp dir by default)")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="storage-bench-", dir=args.dir))
    try:
        trio.run(main, root, args.seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
