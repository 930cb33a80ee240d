"""Topic compaction: how long a run takes and how fast read-compacted readers read the view.

One ``magnetar standalone`` subprocess (1 bookie, default storage config). The official client (in
this process) produces N messages over K keys (batched, as the Python client does by default,
or not with ``--no-batching``); then a compaction run is started over the admin REST API and
timed until its status is SUCCESS (the status is polled every 20 ms, so short runs read up to
20 ms long); then a reader with ``is_read_compacted=True`` reads the whole view and a plain reader
the whole topic, each timed. A second run after M more messages shows the incremental cost (the
previous view is read again, plus the new messages). Asserts only that the view holds one message
per key; prints the figures.

    PYTHONPATH=. .venv/bin/python bench/compaction_bench.py [--messages 100000] [--keys 1000] [--size 200]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx
import pulsar

from tests.support.standalone import Standalone, start_standalone


def _produce(client: pulsar.Client, topic: str, n: int, keys: int, size: int, batching: bool, offset: int) -> float:
    producer = client.create_producer(topic, batching_enabled=batching, block_if_queue_full=True)
    body = b"x" * size
    started = time.monotonic()
    for i in range(offset, offset + n):
        producer.send_async(body, None, partition_key=f"key-{i % keys}")
    producer.flush()
    elapsed = time.monotonic() - started
    producer.close()
    return elapsed


def _compact(sa: Standalone, topic: str) -> float:
    base = f"{sa.admin_url}/admin/v2/persistent/public/default/{topic}/compaction"
    started = time.monotonic()
    r = httpx.put(base, timeout=30)
    r.raise_for_status()
    while True:
        status = httpx.get(base, timeout=30).json()
        if status["status"] != "RUNNING":
            break
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    if status["status"] != "SUCCESS":
        raise SystemExit(f"compaction failed: {status}")
    return elapsed


def _read(client: pulsar.Client, topic: str, compacted: bool) -> tuple[int, float]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    n = 0
    started = time.monotonic()
    last = started
    while True:
        try:
            reader.read_next(timeout_millis=2000)
        except pulsar.Timeout:
            break
        n += 1
        last = time.monotonic()
    reader.close()
    return n, last - started


def main() -> None:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--more", type=int, default=10_000, help="messages produced before the second run")
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--no-batching", action="store_true")
    args = ap.parse_args()
    batching = not args.no_batching
    with tempfile.TemporaryDirectory() as tmp:
        sa = start_standalone(Path(tmp) / "data")
        try:
            client = pulsar.Client(sa.service_url, operation_timeout_seconds=60, logger=None)
            topic = "compaction-bench"
            client.subscribe(topic, "keep").close()  # a subscription, so nothing is trimmed meanwhile
            t = _produce(client, topic, args.messages, args.keys, args.size, batching, 0)
            print(
                f"produced {args.messages} messages of {args.size} B over {args.keys} keys "
                f"(batching {'on' if batching else 'off'}): {args.messages / t:,.0f} msg/s"
            )
            t = _compact(sa, topic)
            print(f"first compaction run: {t:.2f} s ({args.messages / t:,.0f} messages/s read)")
            n, t = _read(client, topic, True)
            assert n == args.keys, f"the view holds {n} messages, not one per key ({args.keys})"
            print(f"read-compacted reader: {n} messages in {t:.3f} s")
            n, t = _read(client, topic, False)
            print(f"plain reader: {n} messages in {t:.2f} s ({n / t:,.0f} msg/s)")
            _produce(client, topic, args.more, args.keys, args.size, batching, args.messages)
            t = _compact(sa, topic)
            print(f"second run after {args.more} more messages: {t:.2f} s")
            client.close()
        finally:
            sa.stop()


if __name__ == "__main__":
    main()
