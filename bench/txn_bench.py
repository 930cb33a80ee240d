"""Transactional produce (a commit every 100 messages) against plain produce, on one standalone.

The Python client has no transaction API, so the load comes from pulsar-perf (the Java
pulsar-testclient whose class path tests/java/run_suite.py resolves from Maven Central into
tests/java/target): ``pulsar-perf produce`` for plain runs and ``pulsar-perf produce --txn-enable
-nmt 100`` for transactional ones, each to a topic of its own, with the same message size, batching
and unlimited rate. The two cases alternate for ``--rounds`` rounds so that a change in the
machine's load falls on both; each run prints the mean of pulsar-perf's 10-second throughput reports::

    .venv/bin/python bench/txn_bench.py [--seconds 20] [--rounds 3] [--size 1024] [--threads 1] [--no-batching]

Standalone runs with ``transactionCoordinatorEnabled=true`` on free loopback ports, its data in a
temporary directory that is removed afterwards; its log is kept in that directory only while it
runs (``--keep`` keeps the directory).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "java"))

from run_suite import perf_classpath  # noqa: E402

from tests.support.ports import free_port  # noqa: E402

READY = re.compile(r"broker: (pulsar://\S+)\s+admin REST: (http://\S+)")
# pulsar-perf's 10-second reports; its closing "Aggregated" figure divides by a time that includes
# its shutdown, so the steady rate is the mean of the full reports
INTERVAL = re.compile(r"Throughput produced:\s+(\d+) msg ---\s+([\d.]+) msg/s .*Latency: mean:\s+([\d.]+) ms")
TXNS = re.compile(r"--- Transaction : (\d+) transaction end successfully --- (\d+) transaction end failed")


def start_standalone(work: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """`magnetar standalone` with transactions on; its process, broker URL and log path."""
    log = work / "standalone.log"
    sets = {
        "standalone.bookie_port": free_port(),
        "standalone.bookie_http_port": 0,
        "broker.broker_service_port": 0,
        "broker.web_service_port": 0,
        "broker.transactionCoordinatorEnabled": "true",
    }
    cmd = [sys.executable, "-m", "magnetar", "standalone", "--data-dir", str(work / "data")]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        m = READY.search(text)
        if m and "ready" in text:
            return proc, m.group(1), log
        if proc.poll() is not None:
            raise RuntimeError(f"standalone exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.2)
    raise RuntimeError("standalone was not ready after 180 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to standalone's process group, SIGKILL if it has not exited after 60 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_perf(cp: str, work: Path, url: str, topic: str, args: argparse.Namespace, txn: bool) -> tuple[float, str]:
    """One ``pulsar-perf produce`` run; its aggregated msg/s and a note (transactions ended)."""
    conf = work / "client.conf"
    conf.write_text("")
    cmd = [
        "java",
        "-Xmx1g",
        "-cp",
        cp,
        "org.apache.pulsar.testclient.PulsarPerfTestTool",
        str(conf),
        "produce",
        "-u",
        url,
        "-r",
        "10000000",  # far above what one broker takes: in effect no limit (0 is refused)
        "-s",
        str(args.size),
        "-time",
        str(args.seconds),
    ]
    if args.threads > 1:
        # each pulsar-perf thread has a producer and a transaction of its own
        cmd += ["--num-test-threads", str(args.threads)]
    if args.no_batching:
        cmd.append("--disable-batching")
    if txn:
        cmd += ["--txn-enable", "-nmt", str(args.per_txn), "--txn-timeout", "60"]
    cmd.append(topic)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 120)
    out = done.stdout + done.stderr
    (work / (topic.rsplit("/", 1)[-1] + ".log")).write_text(out)
    reports = INTERVAL.findall(out)
    if done.returncode != 0 or not reports or sum(int(n) for n, _, _ in reports) == 0:
        raise RuntimeError(f"pulsar-perf exited {done.returncode}:\n{out[-4000:]}")
    rate = statistics.mean(float(r) for _, r, _ in reports)
    latency = statistics.mean(float(lat) for _, _, lat in reports)
    # the count in each report is the running total
    note = f"{reports[-1][0]} messages in {len(reports)} reports, mean send latency {latency:.0f} ms"
    ends = TXNS.findall(out)
    if txn and ends:
        ok, failed = ends[-1]
        note += f", {ok} transactions committed, {failed} failed"
    return rate, note


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=31, help="length of each pulsar-perf run")
    parser.add_argument("--rounds", type=int, default=3, help="plain and transactional runs each")
    parser.add_argument("--size", type=int, default=1024, help="message size in bytes")
    parser.add_argument("--per-txn", type=int, default=100, help="messages per transaction")
    parser.add_argument("--threads", type=int, default=1, help="pulsar-perf threads (concurrent transactions)")
    parser.add_argument("--no-batching", action="store_true", help="one message per entry")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    cp = perf_classpath(ROOT / "tests" / "java" / "target")
    if not cp:
        return 1
    work = Path(tempfile.mkdtemp(prefix="magnetar-txn-bench-"))
    proc, url, _log = start_standalone(work)
    rates: dict[str, list[float]] = {"plain": [], "txn": []}
    try:
        for r in range(args.rounds):
            for case in ("plain", "txn"):
                topic = f"persistent://public/default/txn-bench-{case}-{r}"
                rate, note = run_perf(cp, work, url, topic, args, case == "txn")
                rates[case].append(rate)
                load = os.getloadavg()[0]
                print(f"round {r + 1} {case:5}: {rate:10,.0f} msg/s ({note}; load {load:.1f})", flush=True)
    finally:
        stop(proc)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    plain, txn = statistics.median(rates["plain"]), statistics.median(rates["txn"])
    for case, rs in rates.items():
        print(f"{case:5}: median {statistics.median(rs):,.0f} msg/s, min {min(rs):,.0f}, max {max(rs):,.0f}")
    print(f"transactional / plain (medians): {txn / plain:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
