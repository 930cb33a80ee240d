"""Soak: does standalone Magnetar's memory stay bounded after gigabytes written?

Starts `magnetar standalone` on free ports with its data in a temporary directory, drives it with
`magnetar perf produce` (and, with ``--consume``, `magnetar perf consume` on a subscription that
acknowledges everything) until ``--gb`` gigabytes have been published, keeps sampling for
``--settle`` seconds after the load stops, and prints the standalone process's anonymous RSS
(``RssAnon`` in /proc/PID/status: native memory included, page cache of mapped files excluded)
over time, next to the bound the design promises: the configured caches (managed-ledger entry
cache, bookie write cache, bookie read cache) plus 150 MiB.

    .venv/bin/python bench/soak.py --gb 10 --consume

Exit status 1 when the last sample (after the load) is above the bound.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.standalone import start_standalone  # noqa: E402

_MIB = 1024 * 1024
_IN_BYTES = re.compile(r"^pulsar_in_bytes_total\{[^}]*\} (\S+)$", re.M)


def rss_anon_kib(pid: int) -> int:
    """``RssAnon`` of ``pid`` in KiB (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def bytes_published(admin_url: str) -> int:
    """Bytes published to every loaded topic, from the broker's /metrics."""
    try:
        with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return -1
    return int(sum(float(v) for v in _IN_BYTES.findall(text)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=10.0, help="gigabytes (10^9 bytes) to publish")
    ap.add_argument("--size", type=int, default=1024, help="message size in bytes")
    ap.add_argument("--topics", type=int, default=2, help="topics written in parallel")
    ap.add_argument("--consume", action="store_true", help="also consume (and ack) everything")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds sampled after the load stops")
    ap.add_argument("--data-dir", default="", help="where standalone keeps its data (default: a temp dir)")
    ap.add_argument("--set", action="append", default=[], help="extra standalone --set table.key=value")
    args = ap.parse_args()

    tmp = None
    if args.data_dir:
        data = Path(args.data_dir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="magnetar-soak-")
        data = Path(tmp.name) / "data"
    extra: list[str] = []
    for kv in args.set:
        extra += ["--set", kv]
    server = start_standalone(data, *extra)
    pid = server.proc.pid
    # the bound: the caches as configured (defaults unless --set changed them) plus 150 MiB
    caches_mib = _configured_caches_mib(args.set)
    bound_kib = (caches_mib + 150) * 1024
    topics = [f"persistent://public/default/soak-{i}" for i in range(args.topics)]
    magnetar = [sys.executable, "-m", "magnetar"]
    procs: list[subprocess.Popen[bytes]] = []
    print(
        f"standalone pid {pid}, data in {data}; bound = caches {caches_mib} MiB + 150 MiB "
        f"= {bound_kib // 1024} MiB RssAnon"
    )
    print(f"{'t s':>7} {'published GB':>13} {'MB/s':>8} {'RssAnon MiB':>12}")
    target = int(args.gb * 1e9)
    started = time.monotonic()
    samples: list[tuple[float, int, int]] = []
    try:
        if args.consume:
            procs.append(
                subprocess.Popen(
                    [
                        *magnetar,
                        "perf",
                        "consume",
                        "-u",
                        server.service_url,
                        "-st",
                        "Shared",
                        "--initial-position",
                        "earliest",
                        *topics,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            time.sleep(3)  # the subscriptions exist before the first message
        procs.append(
            subprocess.Popen(
                # as fast as the broker takes it, 5,000 in flight per producer (perf's defaults are pulsar-perf's)
                [
                    *magnetar,
                    "perf",
                    "produce",
                    "-u",
                    server.service_url,
                    "-s",
                    str(args.size),
                    "-r",
                    "0",
                    "--max-pending",
                    "5000",
                    "--batch-max-bytes",
                    str(128 * 1024),
                    *topics,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        last_bytes, last_t = 0, started
        load_done_at: float | None = None
        while True:
            time.sleep(args.interval)
            now = time.monotonic()
            published = bytes_published(server.admin_url)
            rss = rss_anon_kib(pid)
            if published >= 0:
                rate = (published - last_bytes) / max(now - last_t, 1e-9) / 1e6
                last_bytes, last_t = published, now
            else:
                rate = float("nan")
            samples.append((now - started, published, rss))
            print(f"{now - started:7.0f} {published / 1e9:13.2f} {rate:8.1f} {rss / 1024:12.1f}", flush=True)
            if server.proc.poll() is not None:
                print("standalone exited:", server.proc.returncode)
                return 1
            if load_done_at is None and published >= target:
                for p in procs:
                    p.terminate()
                load_done_at = now
                print(f"--- {args.gb} GB published; load stopped, settling {args.settle:.0f} s")
            if load_done_at is not None and now - load_done_at >= args.settle:
                break
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()
        if tmp is not None:
            tmp.cleanup()
    peak = max(s[2] for s in samples)
    final = samples[-1][2]
    elapsed = samples[-1][0]
    print(
        f"published {samples[-1][1] / 1e9:.2f} GB in {elapsed:.0f} s; RssAnon peak {peak / 1024:.1f} MiB, "
        f"after the load {final / 1024:.1f} MiB; bound {bound_kib / 1024:.0f} MiB: "
        f"{'OK' if final <= bound_kib else 'OVER'}"
    )
    return 0 if final <= bound_kib else 1


def _configured_caches_mib(sets: list[str]) -> int:
    """Managed-ledger entry cache + bookie write cache + bookie read cache, in MiB."""
    from bookie import BookieConfig
    from managed_ledger import ManagedLedgerConfig

    values = {
        "managed_ledger.cache_size_mb": ManagedLedgerConfig().cache_size_mb,
        "bookie.write_cache_max_mb": BookieConfig().write_cache_max_mb,
        "bookie.read_cache_max_mb": BookieConfig().read_cache_max_mb,
    }
    for kv in sets:
        key, _, value = kv.partition("=")
        if key in values:
            values[key] = float(value)
    return int(sum(values.values()))


if __name__ == "__main__":
    sys.exit(main())
