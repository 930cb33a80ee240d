"""What rolling the current entry log early for GC costs (issue 19, item 1): write amplification and
disk space, with and without the early rolls, on a workload that deletes ledgers periodically.

Prints figures and asserts nothing. One `DbLedgerStorage` and its `GarbageCollector` in process
(no network, no journal: the roll and compaction paths are the ones measured). Workload, per
round (one round = one ``gcWaitTime`` of simulated time, 15 min by default):

* ``--topics`` topics each write ``--round-mb``/topics of 4 KiB entries into their current
  ledger, interleaved (as a broker's managed ledgers do), and roll to a new ledger every round;
* a ledger is deleted once it is ``--retention`` rounds old (retention trimming whole ledgers);
* the write cache is flushed (a checkpoint), then one GC run.

GC modes: ``timer`` runs GC as its timer would, with BookKeeper's default compaction settings
(minor every hour at 0.2, major every ``--major-interval-h`` (24) hours at 0.8; the simulated
clock advances one round per run, and the entry logger's clock with it so the age roll sees the
simulated age); ``forced`` runs a forced major GC every round (an operator calling
``PUT /api/v1/bookie/gc`` every ``gcWaitTime``: the most rolling and compaction there can be).
Each mode runs with the early rolls off (BookKeeper's behaviour: a log is collectable only once
it reached ``logSizeLimit``), with only the dead-share roll, and with both (the defaults: dead-share roll and
``gc_roll_current_log_after_s`` = 1800 s).

Figures: client bytes (entry records written by adds), compaction bytes (records copied by
compaction), write amplification = compaction bytes / client bytes, early rolls, and entry-log
bytes on disk after each GC run relative to the live ledgers' record bytes (mean and max over
the runs after the first retention period; 1.0 would be no garbage at all).

Usage::

    .venv/bin/python bench/gc_roll_bench.py [--dir /path] [--rounds 48] [--round-mb 4] [--log-mb 64]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bookie import DbLedgerStorage
from bookie.gc import GarbageCollector, GcConfig

MiB = 1 << 20
ENTRY = 4096
REC = ENTRY + 20
ROUND_S = 900  # gcWaitTime's default


def log_bytes(d: Path) -> int:
    return sum(os.stat(d / n).st_size for n in os.listdir(d) if n.endswith(".log"))


VARIANTS = {  # early-roll settings compared
    "off": {"gc_roll_dead_current_log": False, "gc_roll_current_log_after_s": 0},
    "dead-share": {"gc_roll_dead_current_log": True, "gc_roll_current_log_after_s": 0},
    "both": {},  # the defaults: dead share and age (1800 s)
}


async def run(base: Path, args: argparse.Namespace, mode: str, variant: str) -> dict[str, float]:
    d = base / f"{mode}-{variant}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    st = await DbLedgerStorage.open(
        [d / "ledgers"],
        log_size_limit=args.log_mb * MiB,
        index_path=d / "index.sqlite",
        write_cache_max_bytes=256 * MiB,
        flush_interval_ms=0,
    )
    now_s = [0.0]
    st.entry_logger._clock = lambda: now_s[0]  # the age roll sees simulated time
    extra = VARIANTS[variant]
    gc = GarbageCollector(
        st,
        GcConfig(
            compaction_free_space_reserve_bytes=0,
            compaction_rate_by_entries=10**9,
            major_compaction_interval_s=int(args.major_interval_h * 3600),
            **extra,
        ),  # type: ignore[arg-type]
        clock=lambda: now_s[0] * 1000,
    )
    payload = os.urandom(ENTRY)
    per_topic = args.round_mb * MiB // REC // args.topics
    ledgers: list[tuple[int, int]] = []  # (ledger, round created)
    client = 0
    ratios: list[float] = []
    rolls = 0
    next_lid = 1
    for rnd in range(args.rounds):
        current = list(range(next_lid, next_lid + args.topics))
        next_lid += args.topics
        ledgers += [(lid, rnd) for lid in current]
        for eid in range(per_topic):
            for lid in current:
                await st.add_entry(lid, eid, payload)
            if eid % 64 == 63:
                await st.flush()
        client += per_topic * args.topics * REC
        for lid, born in [x for x in ledgers if rnd - x[1] >= args.retention]:
            await st.delete_ledger(lid)
            ledgers.remove((lid, born))
        await st.flush()
        now_s[0] += ROUND_S
        res = await gc.run_once(force=(mode == "forced"))
        rolls += res.rolled_logs
        live = len(ledgers) * per_topic * REC
        if rnd >= args.retention:
            ratios.append(log_bytes(d / "ledgers") / live)
    copied = gc.metrics.compaction_written_bytes._value.get()
    await st.aclose()
    shutil.rmtree(d, ignore_errors=True)
    return {
        "client_mb": client / MiB,
        "copied_mb": copied / MiB,
        "wa": copied / client,
        "rolls": rolls,
        "disk_mean": statistics.fmean(ratios),
        "disk_max": max(ratios),
        "disk_last": ratios[-1],
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--rounds", type=int, default=48)
    ap.add_argument("--round-mb", type=int, default=4, help="MiB written per round (all topics)")
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--retention", type=int, default=4, help="rounds a ledger is kept")
    ap.add_argument("--log-mb", type=int, default=64, help="logSizeLimit in MiB")
    ap.add_argument("--major-interval-h", type=float, default=24, help="majorCompactionInterval in hours")
    ap.add_argument("--modes", default="timer,forced", help="comma-separated: timer, forced")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="gc-roll-bench-"))
    print(
        f"{args.rounds} rounds of {args.round_mb} MiB over {args.topics} topics, ledgers kept "
        f"{args.retention} rounds, logSizeLimit {args.log_mb} MiB, major compaction every "
        f"{args.major_interval_h:g} h (timer mode)"
    )
    print(
        f"{'mode':8} {'early rolls':12} {'client MiB':>10} {'copied MiB':>10} {'WA':>6} {'rolls':>6} "
        f"{'disk/live mean':>14} {'max':>6} {'last':>6}"
    )
    try:
        for mode in args.modes.split(","):
            for variant in VARIANTS:
                r = await run(base, args, mode, variant)
                print(
                    f"{mode:8} {variant:12} {r['client_mb']:10.1f} {r['copied_mb']:10.1f} "
                    f"{r['wa']:6.3f} {r['rolls']:6.0f} {r['disk_mean']:14.2f} {r['disk_max']:6.2f} "
                    f"{r['disk_last']:6.2f}",
                    flush=True,
                )
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    trio.run(main)
