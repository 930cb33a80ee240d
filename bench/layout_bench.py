"""Standalone (one process) against a broker and a bookie in separate processes, same load.

Issue 15 item 4: standalone Magnetar is one Python process, so one core. This runs the same native
load against two layouts, one after the other:

* ``standalone``: ``magnetar standalone`` (embedded metadata store, broker and bookie in one process);
* ``broker + bookie``: ``magnetar cluster start --brokers 1 --bookies 1 --no-autorecovery``
  (ZooKeeper, one ``magnetar bookie`` and one ``magnetar broker`` process, ensemble 1/1/1 as
  standalone uses), so the broker and the bookie can each have a core.

Both fsync the journal before every receipt (the bookie default). For each case it prints the
rate, p50 / p99 send -> receipt and the CPU per message of the Magnetar processes (broker and
bookie; ZooKeeper is not counted: it does nothing per message), read from ``/proc/<pid>/stat``::

    PYTHONPATH=. .venv/bin/python bench/layout_bench.py [--seconds 12] [--layouts standalone,split]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES: list[tuple[str, list[str]]] = [
    ("batched 100 B, max rate", ["-s", "100", "--workers", "1", "--connections", "2"]),
    ("unbatched 100 B, max rate", ["-s", "100", "--no-batching", "--connections", "4", "--max-pending", "500"]),
    (
        "batched 100 B at 20,000 msg/s",
        ["-s", "100", "-r", "20000", "--batch-max-messages", "100", "--connections", "2"],
    ),
    ("unbatched 100 B at 5,000 msg/s", ["-s", "100", "--no-batching", "-r", "5000", "--connections", "4"]),
]
_TICK = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    return total


def _row(text: str, name: str) -> str:
    m = re.search(rf"{re.escape(name)}\s*│\s*([^│]+?)\s*│", text)
    return m.group(1) if m else "?"


def _run_cases(layout: str, url: str, pids: list[int], seconds: int) -> None:
    for i, (name, flags) in enumerate(CASES):
        before = _cpu_s(pids)
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
                url,
                f"persistent://public/default/layout-{i}",
                "-t",
                str(seconds),
                *flags,
            ],
            capture_output=True,
            text=True,
        ).stdout
        cpu = _cpu_s(pids) - before
        messages = float(_row(text, "messages").replace(",", "") or 0) if _row(text, "messages") != "?" else 0.0
        per_msg = f"{cpu / messages * 1e6:.1f}" if messages else "?"
        print(
            f"{layout:<16} {name:<32} {_row(text, 'msg/s'):>11} {_row(text, 'publish latency p50 ms'):>8} "
            f"{_row(text, 'publish latency p99 ms'):>8} {per_msg:>10}",
            flush=True,
        )


def _standalone(base: Path, seconds: int) -> None:
    port, web, bookie = _free_port(), _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar",
            "standalone",
            "--data-dir",
            str(base / "standalone"),
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
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "ready" in line:
                break
        _run_cases("standalone", f"pulsar://127.0.0.1:{port}", [proc.pid], seconds)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _split(base: Path, seconds: int) -> None:
    directory = base / "cluster"
    magnetar = [sys.executable, "-m", "magnetar", "cluster"]
    subprocess.run(
        [
            *magnetar,
            "start",
            "--dir",
            str(directory),
            "--brokers",
            "1",
            "--bookies",
            "1",
            "--no-autorecovery",
            "--zk-port",
            str(_free_port()),
            "--broker-port",
            str(_free_port()),
            "--web-port",
            str(_free_port()),
            "--bookie-port",
            str(_free_port()),
            "--bookie-http-port",
            "0",
            "--broker-set",
            "managed_ledger.ensemble_size=1",
            "--broker-set",
            "managed_ledger.write_quorum=1",
            "--broker-set",
            "managed_ledger.ack_quorum=1",
        ],
        check=True,
        capture_output=True,
    )
    try:
        state = json.loads((directory / "cluster.json").read_text())
        pids = [p["pid"] for p in state["processes"] if p["name"] in ("bookie-0", "broker-0")]
        _run_cases("broker + bookie", state["brokers"][0]["service_url"], pids, seconds)
    finally:
        subprocess.run([*magnetar, "stop", "--dir", str(directory)], capture_output=True)


def main() -> None:
    """Run every case on each layout and print one row per (layout, case)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=12)
    parser.add_argument("--layouts", default="standalone,split", help="Comma-separated: standalone, split.")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="magnetar-layout-"))
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}, "
        f"{args.seconds} s per case"
    )
    print(f"{'layout':<16} {'case':<32} {'msg/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/msg':>10}")
    try:
        for layout in args.layouts.split(","):
            {"standalone": _standalone, "split": _split}[layout.strip()](base, args.seconds)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
