"""Bookie end to end: one client process, one ``magnetar bookie`` subprocess on loopback, fsync on.

Prints adds/s, MB/s and add latency percentiles for 1 KiB and 64 KiB entries at full rate
(pipelined, many in flight), p50/p99 at a fixed moderate rate, tailing and catch-up read MB/s,
and the bookie's peak RSS. Asserts nothing.

    .venv/bin/python bench/bookie_bench.py [--dir /tmp/x] [--small 200000] [--large 8000]
        [--window 4000] [--rate 2000] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from protocols.bookkeeper import FrameDecoder, add_request, encode_entry, encode_request, read_request

KEY = b"bench-key"


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


class Bookie:
    """A ``magnetar bookie`` subprocess."""

    def __init__(self, base: Path, profile: str | None, extra: list[str]) -> None:
        self.base = base
        self.profile = profile
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> None:
        cmd = [sys.executable]
        if self.profile:  # only the first start: the restart for the catch-up read would overwrite it
            cmd += ["-m", "cProfile", "-o", self.profile]
            self.profile = None
        cmd += ["-m", "magnetar", "bookie", "--journal-dir", str(self.base / "journal"),
                "--ledger-dirs", str(self.base / "ledgers"), "--port", "0", "--log-level", "WARNING",
                "--bookie-id", "bench-bookie",
                "--set", "http_enabled=false", "--set", "listen_address=127.0.0.1", *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"bookie did not start: {line!r}")
        self.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])

    def peak_rss_mib(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        """User + system CPU the bookie process used so far (all threads)."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
            self.proc = None


async def pipelined(port: int, frames: list[bytes], window: int, rate: float | None = None
                    ) -> tuple[float, list[float], int, dict[int, bytes]]:
    """Send pre-encoded request frames keeping ``window`` in flight (or at ``rate`` per second).

    Returns (seconds, latencies in ms, bytes of response bodies, {txn: status != 0}).
    """
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    sent_at = [0.0] * (len(frames) + 1)
    lat: list[float] = []
    room = trio.Semaphore(window)
    errors: dict[int, bytes] = {}
    body_bytes = 0
    start = time.perf_counter()

    async def sender() -> None:
        i = 0
        n = len(frames)
        while i < n:
            if rate is not None:
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await trio.sleep(delay)
                batch = [i]
            else:
                await room.acquire()
                batch = [i]
                while len(batch) < 256 and i + len(batch) < n:
                    try:
                        room.acquire_nowait()
                    except trio.WouldBlock:
                        break
                    batch.append(i + len(batch))
            now = time.perf_counter()
            for j in batch:
                sent_at[j + 1] = now
            await stream.send_all(b"".join(frames[j] for j in batch))
            i += len(batch)

    async def receiver() -> None:
        nonlocal body_bytes
        decoder = FrameDecoder(64 << 20)
        got = 0
        while got < len(frames):
            data = await stream.receive_some(1 << 20)
            if not data:
                raise RuntimeError("bookie closed the connection")
            decoder.feed(data)
            now = time.perf_counter()
            while (resp := decoder.next_response()) is not None:
                txn = resp.header.txnId
                lat.append((now - sent_at[txn]) * 1000)
                if resp.status != 0:
                    errors[txn] = resp.status
                if resp.HasField("readResponse"):
                    body_bytes += len(resp.readResponse.body)
                got += 1
                if rate is None:
                    room.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        nursery.start_soon(receiver)
    elapsed = time.perf_counter() - start
    await stream.aclose()
    return elapsed, lat, body_bytes, errors


def add_frames(ledger: int, count: int, size: int) -> list[bytes]:
    payload = os.urandom(size)
    return [encode_request(add_request(i + 1, ledger, i, KEY, encode_entry(ledger, i, i - 1, 0, payload)))
            for i in range(count)]


def read_frames(ledger: int, count: int) -> list[bytes]:
    return [encode_request(read_request(i + 1, ledger, i)) for i in range(count)]


def report_adds(name: str, count: int, size: int, elapsed: float, lat: list[float], errors: dict,
                cpu: float) -> None:
    print(f"{name}: {count} adds of {size} B in {elapsed:.2f} s = {count / elapsed:,.0f} adds/s, "
          f"{count * size / elapsed / 1e6:,.1f} MB/s; latency ms p50 {pct(lat, 50):.2f} p99 {pct(lat, 99):.2f} "
          f"p999 {pct(lat, 99.9):.2f}; errors {len(errors)}; bookie CPU {cpu / count * 1e6:.1f} us/add")


async def main(args: argparse.Namespace) -> None:
    base = Path(args.dir or tempfile.mkdtemp(prefix="bookie-bench-"))
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    bk = Bookie(base, args.profile, args.set)
    bk.start()
    try:
        # the moderate rate first, on a fresh bookie: later phases leave flushes running
        n = int(args.rate * args.rate_seconds)
        frames = add_frames(3, n, 1024)
        elapsed, lat, _, errors = await pipelined(bk.port, frames, n, rate=args.rate)
        print(f"load average {os.getloadavg()[0]:.1f}")
        print(f"1 KiB at {args.rate:.0f} adds/s: latency ms p50 {pct(lat, 50):.2f} p99 {pct(lat, 99):.2f} "
              f"p999 {pct(lat, 99.9):.2f}; errors {len(errors)}")
        frames = add_frames(1, args.small, 1024)
        cpu0 = bk.cpu_seconds()
        elapsed, lat, _, errors = await pipelined(bk.port, frames, args.window)
        report_adds("1 KiB full rate", args.small, 1024, elapsed, lat, errors, bk.cpu_seconds() - cpu0)
        del frames
        frames = add_frames(2, args.large, 64 * 1024)
        cpu0 = bk.cpu_seconds()
        elapsed, lat, _, errors = await pipelined(bk.port, frames, max(16, args.window // 64))
        report_adds("64 KiB full rate", args.large, 64 * 1024, elapsed, lat, errors, bk.cpu_seconds() - cpu0)
        del frames
        # tailing: the most recent entries of ledger 2 (still in the write / read cache)
        tail = min(args.large, 2000)
        frames = [encode_request(read_request(i + 1, 2, args.large - tail + i)) for i in range(tail)]
        elapsed, lat, nbytes, errors = await pipelined(bk.port, frames, 256)
        print(f"tailing read: {tail} entries, {nbytes / elapsed / 1e6:,.1f} MB/s, p50 {pct(lat, 50):.2f} ms; "
              f"errors {len(errors)}")
        rss_before_restart = bk.peak_rss_mib()
        # catch-up: restart (cold caches), read ledger 2 from the entry logs
        bk.stop()
        bk.start()
        frames = read_frames(2, args.large)
        elapsed, lat, nbytes, errors = await pipelined(bk.port, frames, 256)
        print(f"catch-up read (cold caches): {args.large} entries, {nbytes / elapsed / 1e6:,.1f} MB/s, "
              f"p50 {pct(lat, 50):.2f} ms; errors {len(errors)}")
        print(f"bookie peak RSS: {rss_before_restart:.0f} MiB during writes; "
              f"{bk.peak_rss_mib():.0f} MiB during the catch-up read")
    finally:
        bk.stop()
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="Data directory (default: a temp dir, removed after).")
    parser.add_argument("--small", type=int, default=200_000, help="1 KiB adds at full rate.")
    parser.add_argument("--large", type=int, default=8_000, help="64 KiB adds at full rate.")
    parser.add_argument("--window", type=int, default=4000, help="1 KiB adds in flight.")
    parser.add_argument("--rate", type=float, default=2000.0, help="Moderate rate (adds/s).")
    parser.add_argument("--rate-seconds", type=float, default=3.0)
    parser.add_argument("--profile", default=None, help="Run the bookie under cProfile, writing this file.")
    parser.add_argument("--set", action="append", default=[], help="Extra bookie flags, e.g. --set=--set=k=v")
    trio.run(main, parser.parse_args())
