"""Produce throughput with 1, 2 and 3 broker processes over the same 3 bookies, and the time
clients take to resume after a broker SIGKILL and after a graceful bundle unload.

    PYTHONPATH=. .venv/bin/python bench/multi_broker_bench.py [--seconds 15] [--topics 12]

Real processes: ZooKeeper (Debian's package), 3 ``magnetar bookie``, N ``magnetar broker``
(``magnetar broker`` = ownership on), E=Qw=Qa=2. The load generator is the same for every N:
one process of the official client (C++ core, its own threads), one producer per topic, the
topics spread over the brokers by bundle ownership (16 bundles), ``send_async`` with a bounded
queue. Printed per run: receipts/s, and each process's CPU seconds per million messages (from
/proc/PID/stat), so that "broker CPU per message does not rise with N" can be read off.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.admin import rest
from tests.support.bookies import RealCluster, wait_registered
from tests.support.brokers import BrokerProcess
from tests.support.zookeeper import start_zookeeper

ARGS = (
    "--set",
    "managed_ledger.managedLedgerDefaultEnsembleSize=2",
    "--set",
    "managed_ledger.managedLedgerDefaultWriteQuorum=2",
    "--set",
    "managed_ledger.managedLedgerDefaultAckQuorum=2",
)
TICKS = os.sysconf("SC_CLK_TCK")
QUIET = logging.getLogger("pulsar-client")
QUIET.setLevel(logging.ERROR)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (children excluded)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.last_ok = 0.0

    def cb(self, res: pulsar.Result, _mid: object) -> None:
        with self.lock:
            if res == pulsar.Result.Ok:
                self.ok += 1
                self.last_ok = time.monotonic()
            else:
                self.failed += 1


def produce(client: pulsar.Client, topics: list[str], seconds: float, batched: bool, size: int) -> Counter:
    counter = Counter()
    producers = [
        client.create_producer(
            t,
            batching_enabled=batched,
            block_if_queue_full=True,
            max_pending_messages=2000,
            batching_max_messages=100,
            batching_max_publish_delay_ms=2,
        )
        for t in topics
    ]
    payload = os.urandom(size)
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        producers[i % len(producers)].send_async(payload, counter.cb)
        i += 1
    for p in producers:
        p.flush()
        p.close()
    return counter


def resume_after(client: pulsar.Client, topic: str, action, timeout: float = 120.0) -> float:
    """Seconds from ``action()`` to the first receipt of a send made after it (sends keep going)."""
    producer = client.create_producer(
        topic, batching_enabled=False, block_if_queue_full=True, send_timeout_millis=int(timeout * 1000)
    )
    producer.send(b"warm")
    counter = Counter()
    action()
    t0 = time.monotonic()
    while counter.ok == 0 and time.monotonic() - t0 < timeout:
        producer.send_async(b"x", counter.cb)
        time.sleep(0.005)
    elapsed = counter.last_ok - t0 if counter.ok else float("nan")
    producer.flush()
    producer.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--topics", type=int, default=12)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--brokers", default="1,2,3")
    opts = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mb-bench-"))
    zk = start_zookeeper(base / "zk")
    url = zk.url(f"/bench-{uuid.uuid4().hex[:6]}", session_timeout_ms=4000)
    bookies = RealCluster(base / "bookies", url)
    brokers: list[BrokerProcess] = []
    try:
        bookies.start(3)
        wait_registered(url, 3)
        print(
            f"{'brokers':>7} {'mode':>9} {'msg/s':>9} {'failed':>6}  CPU s per 1M msgs "
            "(each broker | sum of brokers | bookies | load generator)"
        )
        for n in [int(x) for x in opts.brokers.split(",")]:
            while len(brokers) < n:
                b = BrokerProcess(base / f"broker{len(brokers)}", url, *ARGS)
                b.start()
                brokers.append(b)
            ns = f"public/bench-{n}-{uuid.uuid4().hex[:4]}"
            rest("PUT", brokers[0].admin_url, f"/admin/v2/namespaces/{ns}", json={"bundles": {"numBundles": 16}})
            client = pulsar.Client(
                "pulsar://" + ",".join(b.service_url.split("://")[1] for b in brokers),
                operation_timeout_seconds=60,
                io_threads=2,
                logger=QUIET,
            )
            for batched in (False, True):
                topics = [f"persistent://{ns}/{'b' if batched else 'n'}{i}" for i in range(opts.topics)]
                for t in topics:  # look every topic up once, outside the measurement
                    client.create_producer(t).close()
                pids = {f"broker{i}": b.proc.pid for i, b in enumerate(brokers) if b.proc is not None}
                pids |= {f"bookie{i}": bk.process.pid for i, bk in enumerate(bookies.bookies) if bk.process is not None}
                pids["loadgen"] = os.getpid()
                before = {k: cpu_s(p) for k, p in pids.items()}
                t0 = time.monotonic()
                c = produce(client, topics, opts.seconds, batched, opts.size)
                dt = time.monotonic() - t0
                used = {k: cpu_s(p) - before[k] for k, p in pids.items()}
                per_m = {k: v / max(c.ok, 1) * 1e6 for k, v in used.items()}
                bro = [per_m[k] for k in per_m if k.startswith("broker")]
                boo = sum(per_m[k] for k in per_m if k.startswith("bookie"))
                print(
                    f"{n:>7} {'batched' if batched else 'single':>9} {c.ok / dt:>9.0f} {c.failed:>6}  "
                    f"{' '.join(f'{x:.0f}' for x in bro)} | {sum(bro):.0f} | {boo:.0f} | {per_m['loadgen']:.0f}",
                    flush=True,
                )
            client.close()
            # its topics stay loaded until idle: unload them so that the next run starts even
            rest("PUT", brokers[0].admin_url, f"/admin/v2/namespaces/{ns}/unload")
        # resume times, with 2 brokers (the client looks up through broker 0, which stays)
        while len(brokers) > 2:
            brokers.pop().stop()
        a, b = brokers[0], brokers[1]
        ns = f"public/resume-{uuid.uuid4().hex[:4]}"
        rest("PUT", a.admin_url, f"/admin/v2/namespaces/{ns}")
        client = pulsar.Client(a.service_url, operation_timeout_seconds=60, logger=QUIET)
        from broker.resources._bundles import bundle_hash, parse_bundle

        def owner_is(topic: str, broker: BrokerProcess) -> bool:
            owned = rest(
                "GET",
                broker.admin_url,
                f"/admin/v2/brokers/standalone/{broker.admin_url.split('://')[1]}/ownedNamespaces",
            ).json()
            h = bundle_hash(topic)
            return any(k.startswith(ns + "/") and parse_bundle(k.rsplit("/", 1)[1]).contains(h) for k in owned)

        topics = [f"persistent://{ns}/r{i}" for i in range(16)]
        for t in topics:
            client.create_producer(t).close()
        on_b = [t for t in topics if owner_is(t, b)]
        on_a = [t for t in topics if owner_is(t, a)]
        if on_a:
            t = on_a[0]
            owned = rest(
                "GET", a.admin_url, f"/admin/v2/brokers/standalone/{a.admin_url.split('://')[1]}/ownedNamespaces"
            ).json()
            bundle = next(
                k.rsplit("/", 1)[1]
                for k in owned
                if k.startswith(ns + "/") and parse_bundle(k.rsplit("/", 1)[1]).contains(bundle_hash(t))
            )
            s = resume_after(client, t, lambda: rest("PUT", a.admin_url, f"/admin/v2/namespaces/{ns}/{bundle}/unload"))
            print(f"resume after a graceful bundle unload: {s:.2f} s")
        if on_b:
            assert b.proc is not None
            pid = b.proc.pid
            s = resume_after(client, on_b[0], lambda: os.kill(pid, signal.SIGKILL))
            print(f"resume after SIGKILL of the owner: {s:.2f} s (session timeout 4 s)")
        client.close()
    finally:
        for br in brokers:
            br.stop()
        bookies.stop_all()
        zk.stop()


if __name__ == "__main__":
    main()
