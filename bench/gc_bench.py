"""GC benchmark: how fast deleted ledgers' space comes back, and what compaction costs foreground adds.

Prints figures and asserts nothing. Setup: entry logs holding ``--data-mb`` of 4 KiB entries (a
quarter in logs of ledgers that are then deleted whole, the rest interleaved over 32 ledgers of
which half are deleted, so those logs are ~50% used). Then, in one process with a real `Bookie`
(journal fsync on, entry logs on the same disk):

1. baseline: paced 1 KiB adds (``--add-rate`` per second) for ``--seconds``, no GC;
2. the same adds while a forced run of the bookie's own garbage collector (`Bookie.gc`, configured
   through `BookieConfig`) deletes the dead logs and compacts the mixed ones with
   ``isThrottleByBytes`` at ``--throttle-mbps``;
3. the same GC on a fresh copy without throttling (and without adds): the raw reclaim rate.

Add latency is measured from each add's scheduled start (no coordinated omission).

On a shared machine one baseline and one GC phase can land in different load; ``--rounds N``
repeats phases 1 and 2 back to back N times (each on a fresh copy) and prints every round's p99
ratio, their median, and the p99s of all rounds' adds pooled (steadier than any one round's).
How often compaction held a sync back for the journal (`bookie._io_priority.SyncPriority`) is
printed with the throttled phase. The process runs as ``magnetar bookie`` does: GIL switch
interval 0.5 ms (``--switch-interval-ms``) and start-up objects frozen out of the cyclic GC.

Usage::

    .venv/bin/python bench/gc_bench.py [--dir /path] [--data-mb 128] [--throttle-mbps 32]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
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


async def prepare(ledger_dir: Path, data_mb: int, log_mb: int) -> int:
    """Write the data set; returns the bytes of the deleted ledgers' records."""
    st = await DbLedgerStorage.open(
        [ledger_dir], log_size_limit=log_mb * MiB, write_cache_max_bytes=64 * MiB, flush_interval_ms=0
    )
    payload = os.urandom(ENTRY)
    rec = ENTRY + 20
    alone = data_mb * MiB // 4 // rec
    for i in range(alone):
        await st.add_entry(1, i, payload)
        if i % 2000 == 1999:
            await st.flush()
    await st.flush()
    mixed = list(range(100, 132))
    per_ledger = (data_mb * MiB - alone * rec) // rec // len(mixed)
    for e in range(per_ledger):
        for lid in mixed:
            await st.add_entry(lid, e, payload)
        if e % 50 == 49:
            await st.flush()
    await st.flush()
    dead = [1, *mixed[::2]]
    for lid in dead:
        await st.delete_ledger(lid)
    await st.aclose()
    return alone * rec + per_ledger * rec * len(mixed[::2])


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


async def paced_adds(bookie, rate: float, stop: trio.Event, seconds: float, latencies: list[float]) -> None:  # type: ignore[no-untyped-def]
    payload = os.urandom(1024)
    ledger = 10_000
    bookie.storage.set_master_key(ledger, KEY)

    async def one(eid: int, scheduled: float) -> None:
        body = encode_entry(ledger, eid, eid - 1, 0, payload)
        await bookie.add_entry(ledger, eid, KEY, body)
        latencies.append((trio.current_time() - scheduled) * 1000)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        eid = 0
        while not stop.is_set() and trio.current_time() - start < seconds:
            scheduled = start + eid / rate
            await trio.sleep_until(scheduled)
            nursery.start_soon(one, eid, scheduled)
            eid += 1


def config(root: Path, gc_rate: float | None) -> BookieConfig:
    """The bookie's config; its own garbage collector (`Bookie.gc`) throttles by bytes at ``gc_rate``."""
    return BookieConfig(
        journal_dir=str(root / "journal"),
        ledger_dirs=(str(root / "ledgers"),),
        port=0,
        http_port=0,
        log_size_limit=8 * MiB,
        flush_interval_ms=1000,
        throttle_by_bytes=True,
        compaction_rate_by_bytes=int(gc_rate or 1e6),
        compaction_free_space_reserve_bytes=0,
    )


async def run_phase(
    root: Path, *, gc_rate: float | None, add_rate: float, seconds: float, with_adds: bool = True
) -> dict[str, Any]:
    latencies: list[float] = []
    out: dict[str, Any] = {}
    async with open_bookie(config(root, gc_rate)) as bookie:
        gate = getattr(bookie.storage, "sync_priority", None)  # absent before compaction yielded
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            if with_adds:
                nursery.start_soon(paced_adds, bookie, add_rate, stop, seconds if gc_rate is None else 3600, latencies)
            if gc_rate is not None:
                assert bookie.gc is not None
                t0 = time.perf_counter()
                res = await bookie.gc.run_once(force=True)  # what PUT /api/v1/bookie/gc asks for
                out["gc_s"] = time.perf_counter() - t0
                out["reclaimed_deletion"] = res.reclaimed_deletion
                out["reclaimed_compaction"] = res.reclaimed_compaction
                out["compacted_logs"] = res.compacted_logs
                out["deleted_logs"] = res.deleted_logs
                stop.set()
        if gate is not None:
            out["yields"] = gate.background_waits
            out["yield_s"] = gate.background_wait_s
    out["latencies"] = latencies
    if latencies:
        out["p50"] = pct(latencies, 0.50)
        out["p99"] = pct(latencies, 0.99)
        out["adds"] = len(latencies)
        out["mean"] = statistics.fmean(latencies)
    return out


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="gc-bench-", dir=args.dir))
    try:
        seed = base / "seed"
        dead = await prepare(seed / "ledgers", args.data_mb, 8)
        print(
            f"data set: {args.data_mb} MiB of {ENTRY} B entries in 8 MiB logs; "
            f"{dead / MiB:.1f} MiB belong to deleted ledgers"
        )

        ratios = []
        pooled_base: list[float] = []
        pooled_gc: list[float] = []
        for r in range(args.rounds):
            work = base / f"baseline{r}"
            shutil.copytree(seed, work)
            b = await run_phase(work, gc_rate=None, add_rate=args.add_rate, seconds=args.seconds)
            shutil.rmtree(work, ignore_errors=True)
            pooled_base += b["latencies"]
            print(
                f"1 KiB adds at {args.add_rate:.0f}/s without GC:      p50 {b['p50']:.2f} ms  "
                f"p99 {b['p99']:.2f} ms ({b['adds']:.0f} adds)"
            )

            work = base / f"throttled{r}"
            shutil.copytree(seed, work)
            t = await run_phase(work, gc_rate=args.throttle_mbps * 1e6, add_rate=args.add_rate, seconds=args.seconds)
            shutil.rmtree(work, ignore_errors=True)
            reclaimed = t["reclaimed_deletion"] + t["reclaimed_compaction"]
            pooled_gc += t["latencies"]
            ratios.append(t["p99"] / b["p99"])
            yields = (
                f"; compaction yielded to the journal {t['yields']:.0f} times, {t['yield_s'] * 1000:.0f} ms"
                if "yields" in t
                else ""
            )
            print(
                f"1 KiB adds at {args.add_rate:.0f}/s during GC ({args.throttle_mbps:.0f} MB/s throttle): "
                f"p50 {t['p50']:.2f} ms  p99 {t['p99']:.2f} ms ({t['adds']:.0f} adds); "
                f"p99 ratio {ratios[-1]:.2f}x{yields}"
            )
        if args.rounds > 1:
            print(
                f"p99 ratio over {args.rounds} rounds: median {statistics.median(ratios):.2f}x, "
                f"range {min(ratios):.2f}-{max(ratios):.2f}x"
            )
            print(
                f"all rounds pooled: p99 {pct(pooled_base, 0.99):.2f} ms without GC, {pct(pooled_gc, 0.99):.2f} ms "
                f"during GC: ratio {pct(pooled_gc, 0.99) / pct(pooled_base, 0.99):.2f}x"
            )
        print(
            f"throttled GC: {t['gc_s']:.2f} s, reclaimed {reclaimed / MiB:.1f} MiB "
            f"({t['reclaimed_deletion'] / MiB:.1f} by deleting {t['deleted_logs']:.0f} logs, "
            f"{t['reclaimed_compaction'] / MiB:.1f} by compacting {t['compacted_logs']:.0f}): "
            f"{reclaimed / 1e6 / t['gc_s']:.1f} MB/s"
        )

        work = base / "unthrottled"
        shutil.copytree(seed, work)
        u = await run_phase(work, gc_rate=1e12, add_rate=args.add_rate, seconds=args.seconds, with_adds=False)
        reclaimed = u["reclaimed_deletion"] + u["reclaimed_compaction"]
        print(
            f"unthrottled GC, no adds: {u['gc_s']:.2f} s, reclaimed {reclaimed / MiB:.1f} MiB: "
            f"{reclaimed / 1e6 / u['gc_s']:.1f} MB/s (compaction alone "
            f"{u['reclaimed_compaction'] / 1e6 / u['gc_s']:.1f} MB/s)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="Directory for the data (default: the temp dir).")
    parser.add_argument("--data-mb", type=int, default=128)
    parser.add_argument("--throttle-mbps", type=float, default=32.0)
    parser.add_argument("--add-rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1, help="Baseline + throttled pairs to run (median ratio).")
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=SERVER_SWITCH_INTERVAL_S * 1e3,
        help="sys.setswitchinterval, as the bookie command sets it (default 0.5; Python's is 5).",
    )
    parsed = parser.parse_args()
    sys.setswitchinterval(parsed.switch_interval_ms / 1e3)
    gc.freeze()  # as the bookie command does once started (magnetar/cli/_common.run_until_signal)
    trio.run(main, parsed)
