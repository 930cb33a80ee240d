"""Issue 15's broker targets in one run: `magnetar standalone` driven by the native load generator.

Starts one standalone (journal fsync before every receipt, default caches), then runs
``magnetar perf produce --engine native`` for each case below and prints its figure next to the
target, plus the standalone's peak anonymous RSS against its configured caches + 150 MiB::

    .venv/bin/python bench/targets.py [--seconds 15] [--dir /tmp/targets]

| case | target |
| --- | --- |
| batched 100 B, as fast as possible | >= 200,000 msg/s |
| batched 1 KiB, as fast as possible | >= 100 MB/s |
| unbatched 100 B, as fast as possible | >= 20,000 msg/s, broker CPU <= 50 us/message |
| batched 100 B at 20,000 msg/s | p99 send -> receipt < 10 ms |
| unbatched 100 B at 5,000 msg/s | p99 send -> receipt < 10 ms |

The bookie-alone targets are `bench/bookie_bench.py`'s; the peers are `bench/peers.py`'s. With
``--rate`` runs the latency is coordinated-omission corrected (see `magnetar perf --help`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.ports import free_port

# (name, perf flags, what to report)
CASES: list[tuple[str, list[str], str]] = [
    ("batched 100 B, max rate", ["-s", "100", "--workers", "1", "--connections", "2"], "rate"),
    (
        "batched 1 KiB, max rate",
        ["-s", "1024", "--batch-max-messages", "128", "--workers", "1", "--connections", "2"],
        "mbs",
    ),
    ("unbatched 100 B, max rate", ["-s", "100", "--no-batching", "--connections", "4", "--max-pending", "500"], "rate"),
    (
        "batched 100 B at 20,000 msg/s",
        ["-s", "100", "-r", "20000", "--batch-max-messages", "100", "--connections", "2"],
        "p99",
    ),
    ("unbatched 100 B at 5,000 msg/s", ["-s", "100", "--no-batching", "-r", "5000", "--connections", "4"], "p99"),
]
TARGETS = {
    "batched 100 B, max rate": ">= 200,000 msg/s",
    "batched 1 KiB, max rate": ">= 100 MB/s",
    "unbatched 100 B, max rate": ">= 20,000 msg/s; <= 50 us CPU/msg",
    "batched 100 B at 20,000 msg/s": "p99 < 10 ms",
    "unbatched 100 B at 5,000 msg/s": "p99 < 10 ms",
}


def _rss_anon_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _row(text: str, name: str) -> str:
    m = re.search(rf"{re.escape(name)}\s*│\s*([^│]+?)\s*│", text)
    return m.group(1) if m else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--dir", default=None, help="Data directory (default: a temp dir, removed after).")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="magnetar-targets-"))
    shutil.rmtree(base, ignore_errors=True)
    port, web, bookie = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar",
            "standalone",
            "--data-dir",
            str(base),
            "--set",
            f"standalone.bookie_port={bookie}",
            "--set",
            "standalone.bookie_http_port=0",
            "--set",
            f"broker.broker_service_port={port}",
            "--set",
            f"broker.web_service_port={web}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    peak = [0.0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak[0] = max(peak[0], _rss_anon_mib(proc.pid))

    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "ready" in line:
                break
        threading.Thread(target=sample, daemon=True).start()
        print(
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}, "
            f"{args.seconds} s per case"
        )
        print(f"{'case':<34} {'msg/s':>11} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/msg':>10}  target")
        for i, (name, flags, _) in enumerate(CASES):
            text = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "magnetar",
                    "perf",
                    "produce",
                    "--engine",
                    "native",
                    "-u",
                    f"pulsar://127.0.0.1:{port}",
                    f"persistent://public/default/targets-{i}",
                    "-t",
                    str(args.seconds),
                    "--broker-metrics-url",
                    f"http://127.0.0.1:{web}/metrics",
                    *flags,
                ],
                capture_output=True,
                text=True,
            ).stdout
            print(
                f"{name:<34} {_row(text, 'msg/s'):>11} {_row(text, 'MB/s'):>8} "
                f"{_row(text, 'publish latency p50 ms'):>8} {_row(text, 'publish latency p99 ms'):>8} "
                f"{_row(text, 'broker CPU us / msg'):>10}  {TARGETS[name]}",
                flush=True,
            )
        # default caches: managed-ledger cache 64 MiB, bookie write cache 64 MiB, read cache 64 MiB
        bound = 64 + 64 + 64 + 150
        print(f"standalone peak RssAnon {peak[0]:.0f} MiB (target <= caches + 150 MiB = {bound} MiB)")
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
