"""Chaos run with an invariant checker, on real processes.

ZooKeeper, bookies (E=3 Qw=2 Qa=2 by default) and brokers (or one standalone process); random
SIGKILLs of bookies, brokers and producer processes while producers (batched and not,
deduplication on and off) and consumers (Shared, Exclusive, Failover; individual and cumulative
acks with holes) run. With --netns every server and producer runs in a test host of its own
(a network namespace) and the faults add host isolation, one-way and pairwise cuts, SIGSTOP
past the session timeout, clock jumps and full disks. After every cycle the checker proves: no
receipted message lost, no unacknowledged message skipped after a crash, order kept per producer,
no two owners acknowledging writes, every receipted entry on an ack quorum of bookies, cursors
never moving back, ownership converging and everything available once the faults are healed, and
(at the end, with a reader) no key stored twice with deduplication on. See
tests/support/chaos/checker.py and tests/support/chaos/audit.py for the exact invariants and
tests/support/chaos/run.py for a cycle.

    sudo .venv/bin/python bench/chaos.py --netns --cycles 20 --seed 7
    sudo .venv/bin/python bench/chaos.py --netns --deploy standalone --cycles 20 --seed 8
    sudo .venv/bin/python bench/chaos.py --netns --faults partition,pause --cycles 10
    .venv/bin/python bench/chaos.py --cycles 20 --seed 7
    .venv/bin/python bench/chaos.py --deploy standalone --cycles 10 --persist-interval 1
    .venv/bin/python bench/chaos.py --kill bookie,producer --batching on --dedup on
    .venv/bin/python bench/chaos.py --scenario holes-after-restart --deploy cluster
    .venv/bin/python bench/chaos.py --scenario holes-after-restart --deploy standalone --batching on

Exit status 1 on any violation (the violating message ids are printed; the servers' data, logs
and internal stats stay in the work directory), 2 when the run could not complete.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.chaos.run import DEFAULT_TARGETS, NETWORK_FAULTS, ChaosRun, RunOptions  # noqa: E402
from tests.support.chaos.scenarios import SCENARIOS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    # `kill -USR1 PID` prints every thread's stack: where a stalled run waits
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deploy", choices=["cluster", "standalone"], default="cluster")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of traffic and faults per cycle")
    ap.add_argument(
        "--kill",
        "--faults",
        dest="kill",
        default="",
        help="comma-separated fault kinds; cluster: "
        f"{','.join(DEFAULT_TARGETS['cluster'])}; standalone: {','.join(DEFAULT_TARGETS['standalone'])}; "
        f"with --netns also {','.join(NETWORK_FAULTS)} (default: all of the deployment's)",
    )
    ap.add_argument(
        "--netns",
        action="store_true",
        help="every server and producer in a network namespace of its own (root, iproute2, nftables; "
        "libfaketime for clock jumps)",
    )
    ap.add_argument("--brokers", type=int, default=0, help="cluster brokers (default: 2 with --netns, else 1)")
    ap.add_argument("--session-timeout-ms", type=int, default=6000, help="ZooKeeper session timeout of the servers")
    ap.add_argument(
        "--converge-timeout",
        type=float,
        default=60.0,
        help="seconds after the last heal within which ownership must converge",
    )
    ap.add_argument("--disk-mb", type=int, default=512, help="size of each bookie's tmpfs (disk-full fault)")
    ap.add_argument("--max-kills", type=int, default=2, help="faults per cycle, at most (at least 1)")
    ap.add_argument(
        "--persist-interval", type=float, default=1.0, help="managed_ledger.cursor_persist_interval_s of the servers"
    )
    ap.add_argument("--batching", choices=["off", "on", "mixed"], default="mixed")
    ap.add_argument("--dedup", choices=["off", "on", "both"], default="both")
    ap.add_argument("--no-trim-topic", action="store_true", help="leave out the topic with default retention")
    ap.add_argument("--rate", type=float, default=50.0, help="messages per second per producer")
    ap.add_argument("--size", type=int, default=100, help="payload padding bytes")
    ap.add_argument(
        "--ledger-entries",
        type=int,
        default=None,
        help="roll ledgers after this many entries (0: the servers' default; default 200 for random "
        "cycles, 0 for scenarios)",
    )
    ap.add_argument("--drain-timeout", type=float, default=90.0)
    ap.add_argument("--keep-going", action="store_true", help="do not stop at the first violation")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory even when all is well")
    ap.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default=None,
        help="run a deterministic scenario instead of random cycles",
    )
    args = ap.parse_args(argv)

    if args.scenario:
        report = SCENARIOS[args.scenario](
            args.deploy,
            persist_interval_s=args.persist_interval,
            batching=args.batching == "on",
            ledger_entries=args.ledger_entries or 0,
            workdir=args.workdir,
            keep=args.keep,
        )
        return 0 if report.ok else 1

    options = RunOptions(
        deploy=args.deploy,
        cycles=args.cycles,
        seed=args.seed,
        duration_s=args.duration,
        targets=tuple(t for t in args.kill.split(",") if t),
        max_kills=args.max_kills,
        persist_interval_s=args.persist_interval,
        batching=args.batching,
        dedup=args.dedup,
        trim_topic=not args.no_trim_topic,
        rate=args.rate,
        size=args.size,
        ledger_entries=200 if args.ledger_entries is None else args.ledger_entries,
        drain_timeout_s=args.drain_timeout,
        stop_on_violation=not args.keep_going,
        workdir=args.workdir,
        keep=args.keep,
        netns=args.netns,
        brokers=args.brokers,
        session_timeout_ms=args.session_timeout_ms,
        converge_timeout_s=args.converge_timeout,
        disk_mb=args.disk_mb,
    )
    try:
        report = ChaosRun(options).run()
    except Exception:
        return 2
    if not report.ok:
        return 1
    return 2 if report.stalls else 0


if __name__ == "__main__":
    sys.exit(main())
