"""Catch-up reads vs adds: what a reader going through cold entry logs costs foreground adds.

Prints figures and asserts nothing. Setup: ``--data-mb`` of 4 KiB entries of one ledger in entry
logs, flushed and dropped from the page cache (``POSIX_FADV_DONTNEED``), then in one process with a
real `Bookie` (journal fsync on, journal and entry logs on the same disk, the process set up as
``magnetar bookie`` runs):

1. baseline: paced 1 KiB adds (``--add-rate`` per second) to another ledger for ``--seconds``;
2. the same adds while ``--readers`` readers read the old ledger from its first entry on, one
   entry at a time as fast as they can (a consumer catching up on a backlog: the bookie's own
   read-ahead fills its read cache; whatever the kernel reads ahead comes on top).

``--rounds N`` repeats both phases (the page cache dropped each time) and prints the pooled p99s.

Usage::

    .venv/bin/python bench/catchup_bench.py [--data-mb 1024] [--rounds 3] [--seconds 4]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bookie import BookieConfig, DbLedgerStorage, open_bookie
from magnetar.cli._common import SERVER_SWITCH_INTERVAL_S
from protocols.bookkeeper import encode_entry

MiB = 1 << 20
ENTRY = 4096
KEY = b"bench-key"
OLD = 1
NEW = 10_000


async def prepare(ledger_dir: Path, data_mb: int) -> int:
    """Write the old ledger; returns its entry count."""
    st = await DbLedgerStorage.open(
        [ledger_dir], log_size_limit=64 * MiB, write_cache_max_bytes=64 * MiB, flush_interval_ms=0
    )
    st.set_master_key(OLD, KEY)
    count = data_mb * MiB // ENTRY
    payload = os.urandom(ENTRY - 32)
    for i in range(count):
        await st.add_entry(OLD, i, encode_entry(OLD, i, i - 1, 0, payload))
        if i % 4000 == 3999:
            await st.flush()
    await st.flush()
    await st.aclose()
    return count


def drop_cache(root: Path) -> None:
    """Push the entry logs out of the page cache (they are synced already)."""
    for path in root.rglob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


async def paced_adds(bookie: Any, rate: float, seconds: float, latencies: list[float]) -> None:
    payload = os.urandom(1024)
    bookie.storage.set_master_key(NEW, KEY)

    async def one(eid: int, scheduled: float) -> None:
        await bookie.add_entry(NEW, eid, KEY, encode_entry(NEW, eid, eid - 1, 0, payload))
        latencies.append((trio.current_time() - scheduled) * 1000)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        eid = 0
        while trio.current_time() - start < seconds:
            scheduled = start + eid / rate
            await trio.sleep_until(scheduled)
            nursery.start_soon(one, eid, scheduled)
            eid += 1


async def reader(bookie: Any, first: int, count: int, stop: trio.Event, done: list[float]) -> None:
    eid = first
    while not stop.is_set() and eid < count:
        await bookie.read_entry(OLD, eid)
        done[0] += 1
        eid += 1
    done[1] = max(done[1], trio.current_time())


def config(root: Path) -> BookieConfig:
    return BookieConfig(
        journal_dir=str(root / "journal"),
        ledger_dirs=(str(root / "ledgers"),),
        port=0,
        http_port=0,
        log_size_limit=64 * MiB,
        flush_interval_ms=1000,
    )


async def run_phase(root: Path, *, readers: int, add_rate: float, seconds: float, count: int) -> dict[str, Any]:
    latencies: list[float] = []
    read = [0.0, 0.0]  # entries read, when the last reader stopped
    async with open_bookie(config(root)) as bookie:
        stop = trio.Event()
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            for r in range(readers):
                nursery.start_soon(reader, bookie, r * (count // max(1, readers)), count, stop, read)
            await paced_adds(bookie, add_rate, seconds, latencies)
            stop.set()
        elapsed = max(1e-9, read[1] - t0)
    return {
        "latencies": latencies,
        "read_mb_s": read[0] * ENTRY / 1e6 / elapsed,
        "reads": int(read[0]),
        "read_s": elapsed,
    }


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="catchup-bench-", dir=args.dir))
    try:
        count = await prepare(base / "ledgers", args.data_mb)
        print(f"data set: {args.data_mb} MiB of {ENTRY} B entries of one ledger; readers: {args.readers}")
        pooled: dict[str, list[float]] = {"base": [], "read": []}
        for _ in range(args.rounds):
            drop_cache(base)
            b = await run_phase(base, readers=0, add_rate=args.add_rate, seconds=args.seconds, count=count)
            drop_cache(base)
            r = await run_phase(base, readers=args.readers, add_rate=args.add_rate, seconds=args.seconds, count=count)
            pooled["base"] += b["latencies"]
            pooled["read"] += r["latencies"]
            print(
                f"adds alone: p50 {pct(b['latencies'], 0.5):.2f} p99 {pct(b['latencies'], 0.99):.2f} ms; "
                f"with catch-up reads: p50 {pct(r['latencies'], 0.5):.2f} p99 {pct(r['latencies'], 0.99):.2f} ms, "
                f"reads {r['read_mb_s']:.1f} MB/s ({r['reads']} entries in {r['read_s']:.1f} s)"
            )
        pb, pr = pct(pooled["base"], 0.99), pct(pooled["read"], 0.99)
        print(
            f"pooled p99: {pb:.2f} ms alone, {pr:.2f} ms with catch-up reads: ratio {pr / pb:.2f}x; "
            f"p50 {statistics.median(pooled['base']):.2f} / {statistics.median(pooled['read']):.2f} ms"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="Directory for the data (default: the temp dir).")
    parser.add_argument("--data-mb", type=int, default=1024)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--add-rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parsed = parser.parse_args()
    sys.setswitchinterval(SERVER_SWITCH_INTERVAL_S)
    gc.freeze()
    trio.run(main, parsed)
