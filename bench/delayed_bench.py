"""Broker memory with a large delayed backlog: N delayed messages spread over an hour.

    PYTHONPATH=. .venv/bin/python bench/delayed_bench.py [--messages 1000000] [--spread-s 3600]
        [--tracker bucket|memory] [--restart]

Real processes: ZooKeeper (Debian's package), one ``magnetar bookie``, one ``magnetar broker``
(E=Qw=Qa=1). One Shared subscription is attached (its receiver queue open) before the official
client sends the messages, each with its own ``deliver_at`` drawn uniformly over ``--spread-s``
seconds starting ``--first-due-s`` from now (none comes due during the run), 100-byte payloads,
no batching. The broker's ``RssAnon`` (/proc/PID/status: native memory included, page
cache excluded) is sampled every second until every message is in the subscription's index and
for ``--settle`` seconds more; the index's own figures come from the broker's /metrics.

The bound printed is the broker's configured memory: its RssAnon before the load, plus the
managed-ledger cache (``managedLedgerCacheSizeMB``), plus the index's memory bound for one
subscription (`IndexSettings.memory_bound`, from the ``delayedDelivery*`` keys), plus the
connection's outgoing queue bound (``outgoing_queue_bytes``) and 64 MiB for the Python heap's
own slack. ``--tracker memory`` runs Pulsar's in-memory tracker instead (no bound: the figures
show what the bucket index saves). ``--restart`` then SIGKILLs the broker, starts a new one, and
times how long the subscription takes to have its index whole again (recovered from the bucket
ledgers, or rebuilt by reading the backlog) and to have read the backlog through.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker import BrokerConfig
from broker.topics._delayed import BUCKET_FACTORY, IN_MEMORY_FACTORY, IndexSettings
from tests.support.bookies import RealCluster, wait_registered
from tests.support.brokers import BrokerProcess
from tests.support.zookeeper import start_zookeeper

TOPIC = "persistent://public/default/delayed-bench"
MIB = 1024 * 1024
QUIET = logging.getLogger("pulsar-client")
QUIET.setLevel(logging.ERROR)


def rss_anon(pid: int) -> int:
    """RssAnon of a process in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def metric(admin_url: str, name: str) -> float:
    """The sum of a metric's series on the broker's /metrics (-1 when unreachable)."""
    try:
        with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return -1.0
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def read_through(admin_url: str) -> bool:
    """The subscription's cursor has read every stored entry."""
    with urllib.request.urlopen(
        f"{admin_url}/admin/v2/persistent/public/default/delayed-bench/internalStats", timeout=10
    ) as resp:
        stats = json.loads(resp.read())
    read = tuple(int(x) for x in stats["cursors"]["s"]["readPosition"].split(":"))
    last = tuple(int(x) for x in stats["lastConfirmedEntry"].split(":"))
    return read > last


class Sampler:
    """Samples a pid's RssAnon every second in a thread; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self.last = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.last = rss_anon(self.pid)
            self.peak = max(self.peak, self.last)
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--spread-s", type=int, default=3600, help="due times spread over this many seconds")
    ap.add_argument("--first-due-s", type=int, default=3 * 3600, help="the earliest due time, from now")
    ap.add_argument("--tracker", choices=("bucket", "memory"), default="bucket")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds sampled after everything is indexed")
    ap.add_argument("--restart", action="store_true", help="then SIGKILL the broker and time the recovery")
    ap.add_argument("--set", action="append", default=[], help="extra broker --set section.key=value")
    args = ap.parse_args()

    factory = BUCKET_FACTORY if args.tracker == "bucket" else IN_MEMORY_FACTORY
    broker_args = [
        "--set",
        "managed_ledger.managedLedgerDefaultEnsembleSize=1",
        "--set",
        "managed_ledger.managedLedgerDefaultWriteQuorum=1",
        "--set",
        "managed_ledger.managedLedgerDefaultAckQuorum=1",
        "--set",
        f"broker.delayedDeliveryTrackerFactoryClassName={factory}",
    ]
    for kv in args.set:
        broker_args += ["--set", kv]
    config = BrokerConfig(delayed_delivery_tracker_factory_class_name=factory)
    settings = IndexSettings.from_config(config, 5 * MIB)
    cache = 64 * MIB

    with tempfile.TemporaryDirectory(prefix="magnetar-delayed-bench-") as tmp:
        base = Path(tmp)
        zk = start_zookeeper(base / "zk")
        url = zk.url(f"/bench-{uuid.uuid4().hex[:6]}", session_timeout_ms=4000)
        bookies = RealCluster(base / "bookies", url, small_journal=False)
        broker = BrokerProcess(base / "broker", url, *broker_args)
        try:
            bookies.start(1)
            wait_registered(url, 1)
            broker.start()
            assert broker.proc is not None
            time.sleep(2)
            idle = rss_anon(broker.proc.pid)
            index_bound = settings.memory_bound
            bound = idle + cache + (index_bound or 0) + config.outgoing_queue_bytes + 64 * MIB
            print(
                f"tracker {args.tracker}: broker idle RssAnon {idle / MIB:.1f} MiB; index bound "
                f"{'none' if index_bound is None else f'{index_bound / MIB:.1f} MiB'}; "
                f"bound {bound / MIB:.1f} MiB"
                + (" (not a bound: the in-memory index has none)" if index_bound is None else "")
            )
            sampler = Sampler(broker.proc.pid)
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=60, logger=QUIET)
            consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared)
            producer = client.create_producer(
                TOPIC,
                batching_enabled=False,
                block_if_queue_full=True,
                max_pending_messages=5000,
                send_timeout_millis=0,
            )
            rng = random.Random(7)
            payload = b"x" * 100
            failed = []
            t0 = time.monotonic()
            first_due = int(time.time() * 1000) + args.first_due_s * 1000
            for _ in range(args.messages):
                producer.send_async(
                    payload,
                    lambda res, _m: res == pulsar.Result.Ok or failed.append(res),
                    deliver_at=first_due + rng.randrange(args.spread_s * 1000),
                )
            producer.flush()
            produced_s = time.monotonic() - t0
            print(
                f"produced {args.messages} in {produced_s:.0f} s ({args.messages / produced_s:,.0f} msg/s), "
                f"{len(failed)} failed; RssAnon peak so far {sampler.peak / MIB:.1f} MiB"
            )
            while metric(broker.admin_url, "pulsar_subscription_delayed") < args.messages:
                time.sleep(1)
            indexed_s = time.monotonic() - t0
            time.sleep(args.settle)
            loaded = metric(broker.admin_url, "pulsar_delayed_message_index_loaded")
            buckets = metric(broker.admin_url, "pulsar_delayed_message_index_bucket_total")
            memory = metric(broker.admin_url, "magnetar_delayed_message_index_memory_bytes")
            print(
                f"indexed after {indexed_s:.0f} s: {buckets:.0f} buckets, {loaded:,.0f} entries in memory, "
                f"index memory {memory / MIB:.2f} MiB"
            )
            print(
                f"broker RssAnon: peak {sampler.peak / MIB:.1f} MiB, after {args.settle:.0f} s "
                f"{sampler.last / MIB:.1f} MiB; bound {bound / MIB:.1f} MiB: "
                f"{'within' if sampler.peak <= bound else 'OVER'}"
            )
            sampler.stop()
            consumer.close()
            client.close()
            if args.restart:
                broker.kill()
                t1 = time.monotonic()
                broker.start()
                assert broker.proc is not None
                sampler = Sampler(broker.proc.pid)
                client = pulsar.Client(broker.service_url, operation_timeout_seconds=60, logger=QUIET)
                consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared)
                while metric(broker.admin_url, "pulsar_subscription_delayed") < args.messages:
                    time.sleep(1)
                whole_s = time.monotonic() - t1
                while not read_through(broker.admin_url):
                    time.sleep(1)
                print(
                    f"after a SIGKILL: the index was whole again {whole_s:.0f} s after the restart, the "
                    f"backlog read through after {time.monotonic() - t1:.0f} s; RssAnon peak "
                    f"{sampler.peak / MIB:.1f} MiB"
                )
                sampler.stop()
                consumer.close()
                client.close()
        finally:
            broker.stop()
            bookies.stop_all()
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
