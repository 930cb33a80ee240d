"""Retention-aware placement (issue 19, item 2): bytes copied by compaction per byte reclaimed,
ledgers interleaved in one current entry log (BookKeeper's default) vs one log per ledger
(``entryLogPerLedgerEnabled``), on the same workload.

Prints figures and asserts nothing. One `DbLedgerStorage` and its `GarbageCollector` in process
(no network, no journal). Workload, per round (one ``gcWaitTime`` of simulated time, 15 min):

* ``--topics`` topics each write ``--round-mb``/topics of 4 KiB entries into their current
  ledger, interleaved (as a broker's managed ledgers do), and roll to a new ledger every round;
* half the topics keep a ledger ``--short`` rounds, the other half ``--long`` rounds (two
  namespaces with different retention), then delete it (retention trimming whole ledgers);
* the write cache is flushed (a checkpoint), then one GC run: ``forced`` (a forced major GC
  every round, the most compaction there can be) or ``timer`` (BookKeeper's default thresholds
  and intervals on the simulated clock).

GC settings are the defaults otherwise (dead current logs and logs older than 30 min are rolled
for GC). Figures: client MiB (records written by adds), copied MiB (records copied by
compaction), reclaimed MiB (entry-log bytes deleted or compacted away), copied per reclaimed,
and entry-log bytes on disk relative to the live ledgers' bytes (mean after the first long
retention period).

Usage::

    PYTHONPATH=. .venv/bin/python bench/placement_bench.py [--rounds 32] [--round-mb 4] [--log-mb 16]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import trio

from bookie import DbLedgerStorage
from bookie.gc import GarbageCollector, GcConfig

MiB = 1 << 20
ENTRY = 4096
REC = ENTRY + 20
ROUND_S = 900


def log_bytes(d: Path) -> int:
    return sum(os.stat(d / n).st_size for n in os.listdir(d) if n.endswith(".log"))


async def run(base: Path, args: argparse.Namespace, mode: str, per_ledger: bool) -> dict[str, float]:
    d = base / f"{mode}-{'per-ledger' if per_ledger else 'interleaved'}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    st = await DbLedgerStorage.open(
        [d / "ledgers"],
        log_size_limit=args.log_mb * MiB,
        index_path=d / "index.sqlite",
        write_cache_max_bytes=256 * MiB,
        flush_interval_ms=0,
        entry_log_per_ledger=per_ledger,
    )
    now_s = [0.0]
    st.entry_logger._clock = lambda: now_s[0]  # the age roll sees simulated time
    gc = GarbageCollector(
        st,
        GcConfig(compaction_free_space_reserve_bytes=0, compaction_rate_by_entries=10**9),
        clock=lambda: now_s[0] * 1000,
    )
    payload = os.urandom(ENTRY)
    per_topic = args.round_mb * MiB // REC // args.topics
    ledgers: list[tuple[int, int, int]] = []  # (ledger, round created, retention rounds)
    client = reclaimed = 0
    ratios: list[float] = []
    next_lid = 1
    for rnd in range(args.rounds):
        current = list(range(next_lid, next_lid + args.topics))
        next_lid += args.topics
        ledgers += [(lid, rnd, args.short if i % 2 == 0 else args.long) for i, lid in enumerate(current)]
        for eid in range(per_topic):
            for lid in current:
                await st.add_entry(lid, eid, payload)
            if eid % 64 == 63:
                await st.flush()
        client += per_topic * args.topics * REC
        for item in [x for x in ledgers if rnd - x[1] >= x[2]]:
            await st.delete_ledger(item[0])
            ledgers.remove(item)
        await st.flush()
        now_s[0] += ROUND_S
        res = await gc.run_once(force=(mode == "forced"))
        reclaimed += res.reclaimed_deletion + res.reclaimed_compaction
        if rnd >= args.long:
            ratios.append(log_bytes(d / "ledgers") / (len(ledgers) * per_topic * REC))
    copied = gc.metrics.compaction_written_bytes._value.get()
    await st.aclose()
    shutil.rmtree(d, ignore_errors=True)
    return {
        "client": client / MiB,
        "copied": copied / MiB,
        "reclaimed": reclaimed / MiB,
        "per_byte": copied / reclaimed if reclaimed else float("nan"),
        "disk": statistics.fmean(ratios),
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--rounds", type=int, default=32)
    ap.add_argument("--round-mb", type=int, default=4, help="MiB written per round (all topics)")
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--short", type=int, default=1, help="rounds a short-retention ledger is kept")
    ap.add_argument("--long", type=int, default=8, help="rounds a long-retention ledger is kept")
    ap.add_argument("--log-mb", type=int, default=16, help="logSizeLimit in MiB")
    ap.add_argument("--modes", default="forced,timer")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="placement-bench-"))
    print(
        f"{args.rounds} rounds of {args.round_mb} MiB over {args.topics} topics (half kept {args.short} "
        f"round(s), half {args.long}), logSizeLimit {args.log_mb} MiB"
    )
    print(
        f"{'mode':7} {'placement':12} {'client MiB':>10} {'copied MiB':>10} {'reclaimed MiB':>13} "
        f"{'copied/reclaimed':>16} {'disk/live':>9}"
    )
    try:
        results = {}
        for mode in args.modes.split(","):
            for per_ledger in (False, True):
                r = await run(base, args, mode, per_ledger)
                results[(mode, per_ledger)] = r
                print(
                    f"{mode:7} {'per-ledger' if per_ledger else 'interleaved':12} {r['client']:10.1f} "
                    f"{r['copied']:10.1f} {r['reclaimed']:13.1f} {r['per_byte']:16.3f} {r['disk']:9.2f}",
                    flush=True,
                )
            inter, apart = results[(mode, False)]["per_byte"], results[(mode, True)]["per_byte"]
            less = f"{inter / apart:.1f}x less" if apart else "nothing"
            print(
                f"{mode}: per byte reclaimed, per-ledger placement copies {less} (interleaved: {inter:.3f})", flush=True
            )
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    trio.run(main)
