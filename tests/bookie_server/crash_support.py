"""Real bookie processes for the crash tests, and a writer that records what was acknowledged."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bookie.protocol import StatusCode, add_request, encode_entry, read_request

from .helpers import KEY, SyncClient

ROOT = Path(__file__).resolve().parents[2]


def payload(ledger: int, entry: int) -> bytes:
    """Deterministic entry bytes of a size between 100 and ~3000, digest-framed."""
    rnd = random.Random(ledger * 1_000_003 + entry)
    body = rnd.randbytes(rnd.randint(100, 3000))
    return encode_entry(ledger, entry, entry - 1, 0, body)


class BookieProcess:
    """``python -m magnetar bookie`` with a fixed id, data under ``base``; started by `start`."""

    def __init__(self, base: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.base = base
        self.extra = list(extra)
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.log = base / "bookie.log"

    def start(self, *more: str, env: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        cmd = [sys.executable, "-m", "magnetar", "bookie", "--bookie-id", "crash-bookie",
               "--journal-dir", str(self.base / "journal"), "--ledger-dirs", str(self.base / "ledgers"),
               "--port", "0", "--metadata-url", f"embedded://{self.base / 'meta'}",
               "--set", "http_enabled=false", "--set", "listen_address=127.0.0.1",
               "--set", "journal_prealloc_size_mb=1", *self.extra, *more]
        full_env = {**os.environ, **self.env, **(env or {})}
        log = open(self.log, "a")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT, env=full_env)
        log.close()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = self.proc.stdout.readline()
        if "listening on" not in line or time.monotonic() > deadline:
            self.proc.kill()
            raise RuntimeError(f"bookie did not start ({line!r}); log:\n{self.log.read_text()[-3000:]}")
        self.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
            self.proc = None

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        self.proc = None
        return rc

    def wait_exit(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.proc = None
        return rc


@dataclass
class Writer:
    """Adds entries ``0, 1, ...`` to ``ledger`` with ``window`` in flight, in a thread, until the
    connection breaks or `stop` is called; records what was acknowledged and what was sent."""

    port: int
    ledger: int
    window: int = 64
    acked: set[int] = field(default_factory=set)
    errors: dict[int, int] = field(default_factory=dict)
    sent: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Writer:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(30)

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(30)

    def _run(self) -> None:
        client = SyncClient(self.port)
        try:
            in_flight = 0
            while True:
                while in_flight < self.window and not self.stopped.is_set():
                    e = self.sent
                    client.send(add_request(e + 1, self.ledger, e, KEY, payload(self.ledger, e)))
                    self.sent += 1
                    in_flight += 1
                if in_flight == 0:
                    return
                resp = client.next_response()
                if resp is None:
                    return
                in_flight -= 1
                e = resp.addResponse.entryId
                if resp.status == StatusCode.EOK and resp.addResponse.status == StatusCode.EOK:
                    self.acked.add(e)
                else:
                    self.errors[e] = resp.addResponse.status
        except OSError:
            return
        finally:
            client.close()


def read_back(port: int, ledger: int, entries: range) -> dict[int, tuple[int, bytes]]:
    """{entry: (status, body)} for every entry id of the range (pipelined reads)."""
    out: dict[int, tuple[int, bytes]] = {}
    client = SyncClient(port, timeout=30)
    try:
        ids = list(entries)
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            client.send(*[read_request(e + 1, ledger, e) for e in chunk])
            for _ in chunk:
                resp = client.next_response()
                assert resp is not None, "bookie closed the connection during reads"
                out[resp.readResponse.entryId] = (resp.status, resp.readResponse.body)
    finally:
        client.close()
    return out


def check_round(port: int, ledger: int, writer: Writer) -> None:
    """Every acknowledged entry reads back byte for byte; an unacknowledged one is absent or whole."""
    got = read_back(port, ledger, range(writer.sent))
    for e in range(writer.sent):
        status, body = got[e]
        if e in writer.acked:
            assert status == StatusCode.EOK, f"acknowledged entry {ledger}/{e} lost: status {status}"
            assert body == payload(ledger, e), f"acknowledged entry {ledger}/{e} differs"
        elif status == StatusCode.EOK:
            assert body == payload(ledger, e), f"unacknowledged entry {ledger}/{e} is half-visible"
        else:
            assert status in (StatusCode.ENOENTRY, StatusCode.ENOLEDGER), status
