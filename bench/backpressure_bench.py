#!/usr/bin/env python3
"""Throughput through the connection back-pressure of the broker, before and after a change.

Starts ``magnetar standalone`` from a source tree (``--src``, default this repository) on free
ports, then runs ``magnetar perf --engine native`` (from this repository) against it:

1. produce, batched (1000 x 100 B per SEND), 2 connections;
2. produce, unbatched 100 B, 2 connections, 500 in flight each (one receipt per message);
3. consume a backlog (batched 1 KiB, written first through a subscription created beforehand)
   from the earliest position, catch-up dispatch through the outgoing queue.

    .venv/bin/python bench/backpressure_bench.py [--src /path/to/other/tree] [--seconds 10]

Prints one line per scenario (messages per second, as perf reports them). Compare two trees by
running it once with each ``--src`` back to back; figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"broker: (pulsar://\S+)\s+admin REST: (http://\S+)")
RATE = re.compile(r"([\d,]+(?:\.\d+)?) msg/s")


def start(src: Path, data: Path) -> tuple[subprocess.Popen[str], str, str, Path]:
    log = data.parent / "standalone.log"
    cmd = [
        sys.executable,
        "-m",
        "magnetar",
        "standalone",
        "--data-dir",
        str(data),
        "--set",
        f"standalone.bookie_port={free_port()}",
        "--set",
        "standalone.bookie_http_port=0",
        "--set",
        "broker.broker_service_port=0",
        "--set",
        "broker.web_service_port=0",
        "--set",
        "broker.retentionCheckIntervalInSeconds=3600",
    ]
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONUNBUFFERED": "1"}
    out = open(log, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        m = READY.search(log.read_text(errors="replace"))
        if m:
            return proc, m.group(1), m.group(2), log
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"standalone did not start:\n{log.read_text()[-3000:]}")


def perf(*args: str) -> str:
    cmd = [sys.executable, "-m", "magnetar", "perf", *args]
    done = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    return done.stdout + done.stderr


def rate_of(output: str) -> str:
    found = RATE.findall(output)
    return found[-1] if found else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, default=ROOT, help="source tree the standalone runs from")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--backlog", type=int, default=300_000, help="messages of the catch-up backlog")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bp-bench-") as tmp:
        proc, url, admin, _log = start(opts.src.resolve(), Path(tmp) / "data")
        metrics = f"{admin}/metrics"
        common = [
            "-u",
            url,
            "--engine",
            "native",
            "--broker-metrics-url",
            metrics,
            "--workers",
            "1",
            "--connections",
            "2",
        ]
        try:
            t = f"{opts.seconds}s"
            out = perf("produce", *common, "persistent://public/default/bp-batched", "-s", "100", "-t", t)
            print(f"produce batched 100 B: {rate_of(out)} msg/s", flush=True)
            out = perf(
                "produce",
                *common,
                "persistent://public/default/bp-unbatched",
                "-s",
                "100",
                "-t",
                t,
                "--no-batching",
                "--max-pending",
                "500",
            )
            print(f"produce unbatched 100 B: {rate_of(out)} msg/s", flush=True)
            topic = "persistent://public/default/bp-backlog"
            # the subscription first, so that the backlog is kept
            perf(
                "consume",
                "-u",
                url,
                "--engine",
                "native",
                "--broker-metrics-url",
                metrics,
                "--workers",
                "1",
                "--connections",
                "1",
                topic,
                "-t",
                "1s",
                "--initial-position",
                "earliest",
            )
            perf("produce", *common, topic, "-s", "1024", "-m", str(opts.backlog))
            out = perf(
                "consume",
                "-u",
                url,
                "--engine",
                "native",
                "--broker-metrics-url",
                metrics,
                "--workers",
                "1",
                "--connections",
                "1",
                topic,
                "-m",
                str(opts.backlog),
                "--initial-position",
                "earliest",
                "-t",
                "300s",
            )
            print(f"consume backlog 1 KiB: {rate_of(out)} msg/s", flush=True)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
