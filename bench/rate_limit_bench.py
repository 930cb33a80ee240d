"""How closely publish and dispatch rate limits hold on a real standalone (real bookie storage),
driven by the official client: the achieved rate against the configured one, and the unthrottled
rate for comparison.

    PYTHONPATH=. .venv/bin/python bench/rate_limit_bench.py [--seconds 5]

Starts ``magnetar standalone`` in a temporary directory, sets topic-level publishRate /
dispatchRate through the admin REST, floods a producer (async sends, 500 pending) or drains a
backlog, and prints messages per second over the measuring window (after a one-second warm-up).
"""

from __future__ import annotations

import argparse
import logging
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


def publish_rate(client: pulsar.Client, admin: str, topic: str, limit: int, seconds: float) -> float:
    client.create_producer(topic).close()
    if limit:
        r = httpx.post(
            f"{admin}/admin/v2/persistent/public/default/{topic}/publishRate",
            json={"publishThrottlingRateInMsg": limit, "publishThrottlingRateInByte": -1},
            timeout=10,
        )
        r.raise_for_status()
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=500, block_if_queue_full=True)
    acked = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def done(res: pulsar.Result, _mid: object) -> None:
        if res == pulsar.Result.Ok:
            with lock:
                acked[0] += 1

    def flood() -> None:
        while not stop.is_set():
            producer.send_async(b"x" * 100, done)

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    time.sleep(1.0)
    with lock:
        start_count, start_time = acked[0], time.monotonic()
    time.sleep(seconds)
    with lock:
        rate = (acked[0] - start_count) / (time.monotonic() - start_time)
    stop.set()
    t.join(timeout=30)
    producer.flush()
    producer.close()
    return rate


def dispatch_rate(client: pulsar.Client, admin: str, topic: str, limit: int, seconds: float) -> float:
    client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(
        topic, batching_enabled=False, max_pending_messages=1000, block_if_queue_full=True
    )
    total = int(max(limit, 2000) * (seconds + 3))
    for _ in range(total):
        producer.send_async(b"y" * 100, None)
    producer.flush()
    producer.close()
    if limit:
        r = httpx.post(
            f"{admin}/admin/v2/persistent/public/default/{topic}/dispatchRate",
            json={
                "dispatchThrottlingRateInMsg": limit,
                "dispatchThrottlingRateInByte": -1,
                "relativeToPublishRate": False,
                "ratePeriodInSecond": 1,
            },
            timeout=10,
        )
        r.raise_for_status()
    consumer = client.subscribe(topic, "s")
    got, start_count, start_time = 0, 0, 0.0
    begin = time.monotonic()
    while True:
        now = time.monotonic()
        if not start_time and now - begin >= 1.0:
            start_count, start_time = got, now
        if start_time and now - start_time >= seconds:
            break
        try:
            m = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            continue
        consumer.acknowledge(m)
        got += 1
    rate = (got - start_count) / (time.monotonic() - start_time)
    consumer.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sa = start_standalone(Path(tmp) / "data", timeout=90)
        proc, url, admin = sa.proc, sa.service_url, sa.admin_url
        try:
            quiet = logging.getLogger("pulsar-client")
            quiet.setLevel(logging.WARNING)
            client = pulsar.Client(url, operation_timeout_seconds=30, logger=quiet)
            print(f"{'figure':<40} {'limit':>8} {'achieved msg/s':>15}")
            for limit in (0, 100, 1000):
                rate = publish_rate(client, admin, f"pub-{limit}", limit, args.seconds)
                print(f"{'publish (100 B, async)':<40} {limit or 'none':>8} {rate:>15.0f}")
            for limit in (0, 100, 1000):
                rate = dispatch_rate(client, admin, f"disp-{limit}", limit, args.seconds)
                print(f"{'dispatch (backlog drain, 1 consumer)':<40} {limit or 'none':>8} {rate:>15.0f}")
            client.close()
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
