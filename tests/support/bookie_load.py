"""Load on one ``magnetar bookie`` process for the benchmarks: the process (profiled, its peak RSS
and CPU time read from /proc), pre-encoded add and read frames, a pipelined request loop with a
window or a fixed rate, and percentiles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from protocols.bookkeeper import FrameDecoder, add_request, encode_entry, encode_request, read_request

__all__ = ["KEY", "Bookie", "add_frames", "pct", "pipelined", "read_frames"]

KEY = b"bench-key"


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile of ``values`` (nearest rank; NaN when empty)."""
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
        """Start it (profiled on the first start when asked) and read its port."""
        cmd = [sys.executable]
        if self.profile:  # only the first start: the restart for the catch-up read would overwrite it
            cmd += ["-m", "cProfile", "-o", self.profile]
            self.profile = None
        cmd += [
            "-m",
            "magnetar",
            "bookie",
            "--journal-dir",
            str(self.base / "journal"),
            "--ledger-dirs",
            str(self.base / "ledgers"),
            "--port",
            "0",
            "--log-level",
            "WARNING",
            "--bookie-id",
            "bench-bookie",
            "--set",
            "http_enabled=false",
            "--set",
            "listen_address=127.0.0.1",
            *self.extra,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"bookie did not start: {line!r}")
        self.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])

    def peak_rss_mib(self) -> float:
        """The process's peak resident memory (VmHWM) in MiB."""
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
        """SIGTERM and wait for it to exit."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
            self.proc = None


async def pipelined(
    port: int, frames: list[bytes], window: int, rate: float | None = None
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
    """Pre-encoded ADD requests of ``count`` random entries of ``size`` bytes to ``ledger``."""
    payload = os.urandom(size)
    return [
        encode_request(add_request(i + 1, ledger, i, KEY, encode_entry(ledger, i, i - 1, 0, payload)))
        for i in range(count)
    ]


def read_frames(ledger: int, count: int) -> list[bytes]:
    """Pre-encoded READ requests of entries ``0..count-1`` of ``ledger``."""
    return [encode_request(read_request(i + 1, ledger, i)) for i in range(count)]
