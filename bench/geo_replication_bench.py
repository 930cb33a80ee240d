"""Geo-replication throughput and lag between two standalones on one machine.

    PYTHONPATH=. .venv/bin/python bench/geo_replication_bench.py [--rate 1000] [--seconds 20] [--size 100]

Starts two ``magnetar standalone`` processes (clusters ``a`` and ``b``, their own ports, data and
metadata) in a temporary directory, links them as the README's geo-replication section does
(cluster records, tenant, namespace replicated to both, deduplication on), then publishes on
``a`` at a fixed rate (official client, batching on, sends paced on an absolute schedule) while
a consumer on ``b`` receives. Lag is measured per message from its publish time (set by the
client on ``a``) to its receipt on ``b`` (same machine clock), so it includes ``a``'s storage,
the replicator and ``b``'s storage and dispatch. Prints what was sent and received, the receive
rate and lag percentiles (p50, p99, max).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.ports import free_port
from tests.support.standalone import Standalone, start_standalone

NS = "geo/bench"


def _start(root: Path, name: str) -> tuple[Standalone, str, str]:
    port, web = free_port(), free_port()
    proc = start_standalone(
        root / name,
        "--set",
        f"broker.cluster_name={name}",
        "--set",
        f"broker.broker_service_port={port}",
        "--set",
        f"broker.web_service_port={web}",
    )
    return proc, f"pulsar://127.0.0.1:{port}", f"http://127.0.0.1:{web}"


def _link(me: str, other_name: str, other_url: str, other_http: str) -> None:
    calls = [
        ("PUT", f"/admin/v2/clusters/{other_name}", {"serviceUrl": other_http, "brokerServiceUrl": other_url}),
        ("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b"]}),
        ("PUT", f"/admin/v2/namespaces/{NS}", None),
        ("POST", f"/admin/v2/namespaces/{NS}/replication", ["a", "b"]),
        ("POST", f"/admin/v2/namespaces/{NS}/deduplication", True),
    ]
    for method, path, body in calls:
        r = httpx.request(method, me + path, json=body, timeout=10)
        assert r.status_code == 204, (path, r.status_code, r.text)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=1000, help="messages per second published on a")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        a, a_url, a_http = _start(root, "a")
        b, b_url, b_http = _start(root, "b")
        try:
            _link(a_http, "b", b_url, b_http)
            _link(b_http, "a", a_url, a_http)
            run(a_url, b_url, args.rate, args.seconds, args.size)
        finally:
            a.stop()
            b.stop()


def run(a_url: str, b_url: str, rate: int, seconds: float, size: int) -> None:
    topic = f"persistent://{NS}/bench"
    ca = pulsar.Client(a_url, operation_timeout_seconds=30)
    cb = pulsar.Client(b_url, operation_timeout_seconds=30)
    consumer = cb.subscribe(topic, "bench", receiver_queue_size=5000)
    producer = ca.create_producer(topic, batching_enabled=True, block_if_queue_full=True, max_pending_messages=5000)
    lags_ms: list[float] = []
    total = int(rate * seconds)
    done = threading.Event()

    def receive() -> None:
        while len(lags_ms) < total and not done.is_set():
            try:
                msg = consumer.receive(1000)
            except pulsar.Timeout:
                continue
            lags_ms.append(time.time() * 1000 - msg.publish_timestamp())
            consumer.acknowledge(msg)

    receiver = threading.Thread(target=receive)
    receiver.start()
    payload = b"x" * size
    started = time.monotonic()
    for i in range(total):
        due = started + i / rate  # absolute schedule: a stall is not hidden by sending later
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        producer.send_async(payload, None)
    producer.flush()
    published_s = time.monotonic() - started
    receiver.join(timeout=max(60.0, seconds * 3))
    done.set()
    received_s = time.monotonic() - started
    print(f"published {total} messages of {size} B on a in {published_s:.1f} s ({total / published_s:,.0f} msg/s)")
    print(f"received {len(lags_ms)} on b within {received_s:.1f} s ({len(lags_ms) / received_s:,.0f} msg/s)")
    print(
        f"lag a -> b: p50 {_percentile(lags_ms, 0.5):.1f} ms, p99 {_percentile(lags_ms, 0.99):.1f} ms, "
        f"max {max(lags_ms, default=float('nan')):.1f} ms"
    )
    ca.close()
    cb.close()


if __name__ == "__main__":
    main()
