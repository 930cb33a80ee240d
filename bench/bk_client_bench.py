"""BookKeeper client end to end: E=3 Qw=2 Qa=2 over real ``magnetar bookie`` subprocesses.

A ZooKeeper (Debian's) and 3 bookies (default bookie config: journal fsync on) on loopback; one
client process, one task appending 1 KiB entries with ``LedgerWriteHandle.append`` (up to
``--window`` in flight) and one task collecting completions in order (latency = append to ack).

Phase 1, steady: adds/s, MB/s, p50/p99/p999 add latency.
Phase 2, a fault: a 4th bookie joins, a new ledger is written the same way and one bookie of its
ensemble is SIGKILLed a third of the way in; prints the throughput per 100 ms around the kill,
the dip, the stall (longest gap between completions) and the time until the rate is back to
80% of the pre-kill rate (ensemble change to the 4th bookie).

    .venv/bin/python bench/bk_client_bench.py [--adds 100000] [--window 2000] [--profile out.prof]

``--profile`` runs phase 1 under cProfile (client side) and prints the top functions.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from bk_client import BookKeeper, ClientConfig, PendingAdd
from metadata import open_metadata_store
from tests.support.bookies import RealCluster
from tests.support.zookeeper import start_zookeeper


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


async def write_ledger(bk: BookKeeper, count: int, size: int, *, at_third=None):  # type: ignore[no-untyped-def]
    """Write ``count`` entries; returns (seconds, latencies ms, completion times, kill time)."""
    lh = await bk.create_ledger(3, 2, 2, password=b"bench")
    payload = os.urandom(size)
    ops: list[PendingAdd] = []
    lat: list[float] = []
    done_at: list[float] = []
    kill_at: list[float] = []
    appended = trio.Event()
    start = trio.current_time()
    cpu0 = time.process_time()

    async def appender() -> None:
        for i in range(count):
            ops.append(await lh.append(payload))
            if not appended.is_set():
                appended.set()
            if at_third is not None and i == count // 3:
                kill_at.append(trio.current_time())
                at_third(lh)

    async def collector() -> None:
        await appended.wait()
        i = 0
        while i < count:
            while i >= len(ops):
                await trio.sleep(0.001)
            op = ops[i]
            if not op.finished:
                await op.result()
            else:
                op.entry_id if op.error is None else await op.result()
            lat.append((op.completed_at - op.started) * 1000)
            done_at.append(op.completed_at - start)
            ops[i] = None  # type: ignore[call-overload]  # keep memory flat
            i += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(appender)
        nursery.start_soon(collector)
    elapsed = trio.current_time() - start
    print(f"  client CPU {(time.process_time() - cpu0) / count * 1e6:.0f} us per add", flush=True)
    segments = lh.metadata.segments
    await lh.close()
    return elapsed, lat, done_at, (kill_at[0] - start if kill_at else None), segments


def report(name: str, count: int, size: int, elapsed: float, lat: list[float]) -> float:
    rate = count / elapsed
    print(
        f"{name}: {count} adds of {size} B in {elapsed:.2f} s = {rate:,.0f} adds/s, "
        f"{count * size / elapsed / 1e6:,.1f} MB/s; add latency ms p50 {pct(lat, 50):.2f} "
        f"p99 {pct(lat, 99):.2f} p999 {pct(lat, 99.9):.2f}",
        flush=True,
    )
    return rate


def fault_report(done_at: list[float], kill_t: float, new_segment_first: int) -> None:
    """Throughput around the kill and the time until the first entry of the new segment (the
    first one that needed the replacement bookie) completed."""
    bucket = 0.25
    n = int(done_at[-1] / bucket) + 1
    counts = [0] * n
    for t in done_at:
        counts[int(t / bucket)] += 1

    def rate(t0: float, t1: float) -> float:
        return sum(1 for t in done_at if t0 <= t < t1) / (t1 - t0)

    before, after = rate(kill_t - 1, kill_t), rate(kill_t, kill_t + 1)
    gaps = [(b - a, a) for a, b in itertools.pairwise(done_at) if a >= kill_t - 0.5]
    stall, stall_at = max(gaps) if gaps else (0.0, kill_t)
    through = done_at[new_segment_first] - kill_t if new_segment_first < len(done_at) else float("nan")
    print(
        f"kill at t={kill_t:.2f} s; rate 1 s before {before:,.0f} adds/s, 1 s after {after:,.0f} adds/s "
        f"(dip {100 * (1 - after / before) if before else 0:.0f}%); longest gap between completions "
        f"{stall * 1000:.0f} ms at t={stall_at:.2f} s; first entry of the new segment ({new_segment_first}) "
        f"acknowledged {through * 1000:.0f} ms after the kill",
        flush=True,
    )
    k = int(kill_t / bucket)
    print(
        "adds per 250 ms from 1 s before the kill: " + " ".join(str(c) for c in counts[max(0, k - 4) : k + 16]),
        flush=True,
    )


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="bkc-bench-"))
    zk = start_zookeeper(base / "zk")
    url = zk.url(f"/bench-{uuid.uuid4().hex[:8]}", session_timeout_ms=6000)
    cluster = RealCluster(base, url, ["--set", "http_enabled=false"], small_journal=False)
    cfg = ClientConfig(max_in_flight_adds=args.window, add_entry_timeout_s=5.0)
    try:
        await trio.to_thread.run_sync(cluster.start, 3)
        async with open_metadata_store(url) as store, BookKeeper.open(store, config=cfg) as bk:
            while len(await bk.ledger_manager.list_bookies()) < 3:
                await trio.sleep(0.1)
            # warm-up: connections, journal files
            await write_ledger(bk, min(5000, args.adds), args.size)
            prof = cProfile.Profile() if args.profile else None
            if prof:
                prof.enable()
            elapsed, lat, _, _, _ = await write_ledger(bk, args.adds, args.size)
            if prof:
                prof.disable()
                prof.dump_stats(args.profile)
            report(f"E=3 Qw=2 Qa=2, 3 bookies, {args.window} in flight", args.adds, args.size, elapsed, lat)
            if prof:
                pstats.Stats(args.profile).sort_stats("tottime").print_stats(25)

            if args.no_fault:
                return
            await trio.to_thread.run_sync(cluster.start, 1)
            while len(await bk.ledger_manager.list_bookies()) < 4:
                await trio.sleep(0.1)

            def kill(lh) -> None:  # type: ignore[no-untyped-def]
                victim = lh.metadata.last_segment.ensemble[0]
                print(f"SIGKILL bookie {victim}", flush=True)
                cluster.kill(victim)

            elapsed, lat, done_at, kill_t, segments = await write_ledger(bk, args.adds, args.size, at_third=kill)
            report("with one bookie SIGKILLed a third of the way in", args.adds, args.size, elapsed, lat)
            print(
                f"segments in the ledger: {len(segments)}; ensemble changes: "
                f"{bk.metrics.statistics().get('bookkeeper_client_NUM_ENSEMBLE_CHANGE_total', 0):.0f}"
            )
            fault_report(done_at, kill_t, segments[-1].first_entry_id)
    finally:
        cluster.stop_all()
        zk.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adds", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--window", type=int, default=2000)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--no-fault", action="store_true")
    t0 = time.perf_counter()
    trio.run(main, ap.parse_args())
    print(f"total {time.perf_counter() - t0:.0f} s")
