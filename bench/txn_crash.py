"""Exactly-once through a broker crash: consume-transform-produce with transactions, SIGKILL.

Each run starts standalone (transactions on, fixed free loopback ports so the client finds it
again), publishes ``--messages`` inputs ``in-N`` with the Python client, starts
bench/java/TxnPipeline.java (the Java client: per input one transaction that produces ``out-N``
and acknowledges the input), SIGKILLs standalone at a random moment while the pipeline works,
starts it again on the same data and ports, and waits until the pipeline is idle with no
backlog. Then it checks that every input's output was committed exactly once (a reader over the
output topic) and that the input subscription has nothing left to acknowledge::

    .venv/bin/python bench/txn_crash.py [--runs 20] [--messages 200] [--seed S]

The class path (pulsar-client with its transaction API) is pulsar-perf's, which
tests/java/run_suite.py resolves from Maven Central into tests/java/target. Exit status 0 when
every run held; each failing run's directory (logs, data) is kept and printed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "java"))

import pulsar  # noqa: E402
from run_suite import perf_classpath  # noqa: E402

from tests.support.ports import free_port  # noqa: E402
from tests.support.standalone import Standalone, start_standalone  # noqa: E402

PIPELINE = Path(__file__).resolve().parent / "java" / "TxnPipeline.java"
IN = "persistent://public/default/txn-crash-in"
OUT = "persistent://public/default/txn-crash-out"
_QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def _start(data: Path, ports: tuple[int, int]) -> Standalone:
    return start_standalone(
        data,
        "--set",
        f"broker.broker_service_port={ports[0]}",
        "--set",
        f"broker.web_service_port={ports[1]}",
        "--set",
        "broker.transactionCoordinatorEnabled=true",
        timeout=180,
    )


def _backlog(admin_url: str) -> int:
    with urllib.request.urlopen(f"{admin_url}/admin/v2/persistent/public/default/txn-crash-in/stats") as r:
        return int(json.load(r)["subscriptions"]["app"]["msgBacklog"])


def _outputs(service_url: str) -> collections.Counter[str]:
    client = pulsar.Client(service_url, logger=_QUIET)
    try:
        reader = client.create_reader(OUT, pulsar.MessageId.earliest)
        got: collections.Counter[str] = collections.Counter()
        while True:
            try:
                got[reader.read_next(timeout_millis=3000).data().decode()] += 1
            except pulsar.Timeout:
                return got
    finally:
        client.close()


def one_run(work: Path, cp: str, n: int, rng: random.Random, log_line: str) -> str | None:
    """One crash run; None when it held, else what went wrong."""
    data = work / "data"
    ports = (free_port(), free_port())
    sa = _start(data, ports)
    client = pulsar.Client(sa.service_url, logger=_QUIET)
    producer = client.create_producer(IN)
    for i in range(n):
        producer.send(f"in-{i}".encode())
    client.close()
    pipe_log = work / "pipeline.log"
    with open(pipe_log, "w") as f:
        pipe = subprocess.Popen(
            ["java", "-cp", cp, str(PIPELINE), sa.service_url, IN, OUT],
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # kill once the pipeline has committed a random share of the inputs
        target = rng.randint(1, n - 1)
        deadline = time.monotonic() + 120
        while pipe_log.read_text(errors="replace").count("COMMITTED ") < target:
            if time.monotonic() > deadline or pipe.poll() is not None:
                return f"the pipeline did not reach {target} commits before the kill"
            time.sleep(0.02)
        committed_at_kill = pipe_log.read_text(errors="replace").count("COMMITTED ")
        sa.kill()
        sa = _start(data, ports)
        deadline = time.monotonic() + 180
        while True:
            if time.monotonic() > deadline:
                return f"backlog not drained after restart (killed at {committed_at_kill} commits)"
            if pipe.poll() is not None:
                return "the pipeline exited"
            try:
                if _backlog(sa.admin_url) == 0 and pipe_log.read_text(errors="replace").endswith("IDLE\n"):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        got = _outputs(sa.service_url)
        want = {f"out-{i}" for i in range(n)}
        missing = sorted(want - set(got))
        twice = sorted(k for k, c in got.items() if c > 1)
        extra = sorted(set(got) - want)
        print(
            f"{log_line}: killed at {committed_at_kill} commits; outputs {sum(got.values())}, "
            f"distinct {len(got)}, missing {len(missing)}, duplicated {len(twice)}; "
            f"pipeline failures {pipe_log.read_text(errors='replace').count('FAILED ')}",
            flush=True,
        )
        if missing or twice or extra:
            return f"missing {missing[:10]} duplicated {twice[:10]} unexpected {extra[:10]}"
        return None
    finally:
        os.killpg(pipe.pid, signal.SIGKILL)
        pipe.wait()
        if sa.proc.poll() is None:
            sa.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}", flush=True)
    cp = perf_classpath(ROOT / "tests" / "java" / "target")
    if not cp:
        return 1
    failed = 0
    for r in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="magnetar-txn-crash-"))
        started = time.monotonic()
        problem = one_run(work, cp, args.messages, rng, f"run {r + 1}")
        if problem:
            failed += 1
            print(f"run {r + 1} FAILED ({time.monotonic() - started:.0f} s): {problem}; kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{args.runs - failed}/{args.runs} runs held")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
