"""Non-persistent against persistent topics on a real standalone, driven by the official client:
publish rate with a consumer draining alongside, and what a slow consumer costs (drops, not memory).

    PYTHONPATH=. .venv/bin/python bench/nonpersistent_bench.py [--seconds 5]

Starts ``magnetar standalone`` in a temporary directory (the same start-up as
``bench/rate_limit_bench.py``), floods a producer with async sends (500 pending, 100-byte
messages) for the window and prints messages per second published and received, then the same on
a non-persistent topic that also has a consumer which never receives (``receiver_queue_size=100``):
what it was sent and dropped (topic stats) and the broker's RSS before and after.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.standalone import start_standalone


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def flood(client: pulsar.Client, topic: str, seconds: float) -> tuple[float, float]:
    """Publish for ``seconds`` while one consumer receives; (published/s, received/s), both over the
    publishing window (received: everything delivered by one second after the last receipt)."""
    consumer = client.subscribe(topic, "fast", receiver_queue_size=1000)
    producer = client.create_producer(topic, batching_enabled=True, max_pending_messages=500, block_if_queue_full=True)
    received = 0
    stop = threading.Event()

    def drain() -> None:
        nonlocal received
        while not stop.is_set():
            try:
                consumer.acknowledge(consumer.receive(200))
                received += 1
            except pulsar.Timeout:
                continue

    t = threading.Thread(target=drain)
    t.start()
    payload = b"x" * 100
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        producer.send_async(payload, None)
        sent += 1
    producer.flush()
    elapsed = time.monotonic() - started
    time.sleep(1.0)
    stop.set()
    t.join()
    producer.close()
    consumer.close()
    return sent / elapsed, received / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sa = start_standalone(Path(tmp) / "data", timeout=90)
        proc, url, admin = sa.proc, sa.service_url, sa.admin_url
        try:
            client = pulsar.Client(url, operation_timeout_seconds=30)
            for name in ("persistent://public/default/bench-p", "non-persistent://public/default/bench-np"):
                pub, rec = flood(client, name, args.seconds)
                print(f"{name}: published {pub:,.0f} msg/s, received {rec:,.0f} msg/s")
            rss_before = _rss_mib(proc.pid)
            topic = "non-persistent://public/default/bench-np-slow"
            slow = client.subscribe(topic, "slow", receiver_queue_size=100)  # never receives
            pub, rec = flood(client, topic, args.seconds)
            stats = httpx.get(f"{admin}/admin/v2/non-persistent/public/default/bench-np-slow/stats", timeout=10).json()
            slow_stats = stats["subscriptions"]["slow"]
            print(
                f"{topic} (+ a consumer that never receives): published {pub:,.0f} msg/s, fast consumer "
                f"received {rec:,.0f} msg/s; messages in {stats['msgInCounter']:,}, to the slow consumer "
                f"{slow_stats['msgOutCounter']:,}, dropped for it {slow_stats['msgDropCounter']:,}; "
                f"broker RSS {rss_before:.0f} -> {_rss_mib(proc.pid):.0f} MiB"
            )
            slow.close()
            client.close()
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
