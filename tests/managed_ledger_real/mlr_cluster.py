"""Real bookies for the managed-ledger tests: ``magnetar bookie`` subprocesses registered in a
ZooKeeper chroot, started together and stopped by pid; and worker subprocesses
(``python -m tests.managed_ledger_real.mlr_worker``) that own a managed ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from metadata import open_metadata_store

REPO = Path(__file__).resolve().parents[2]
ROOT = ""  # the bookies' default cluster root (``{root}/ledgers/available``)


def _stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class BookieCluster:
    """``n`` bookie processes registered under ``url`` (a ``zk://`` url with its own chroot)."""

    url: str
    base: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def start(self, n: int) -> None:
        """Start ``n`` bookies at once and wait until each prints its listening line."""
        logs = []
        for i in range(n):
            d = self.base / f"bookie{i}"
            d.mkdir(parents=True)
            log = open(d / "bookie.log", "a")  # noqa: SIM115 - closed below, the child keeps its copy
            logs.append(log)
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "magnetar", "bookie", "--journal-dir", str(d / "journal"),
                 "--ledger-dirs", str(d / "ledgers"), "--port", "0", "--metadata-url", self.url,
                 "--log-level", "WARNING", "--set", "http_enabled=false",
                 "--set", "listen_address=127.0.0.1", "--set", "journal_prealloc_size_mb=1"],
                stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO))
        for log in logs:
            log.close()
        for i, proc in enumerate(self.procs):
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if "listening on" not in line:
                self.stop()
                tail = (self.base / f"bookie{i}" / "bookie.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"bookie {i} did not start: {line!r}\n{tail}")
            self.ids.append(line.split()[1])
        trio.run(self._wait_registered, n)

    async def _wait_registered(self, n: int) -> None:
        from bk_client import LedgerManager

        async with open_metadata_store(self.url) as store:
            lm = LedgerManager(store, ROOT)
            deadline = time.monotonic() + 20
            while len(await lm.list_bookies()) < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fewer than {n} bookies registered")
                await trio.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM every bookie (SIGKILL if one lingers)."""
        for proc in self.procs:
            _stop(proc)
        self.procs.clear()


class Worker:
    """A ``mlr_worker`` subprocess: JSON lines on stdout, commands on stdin."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log_path = log
        with open(log, "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.managed_ledger_real.mlr_worker", *args],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def read(self) -> dict[str, Any] | None:
        """The next JSON line, or None at end of output."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def read_until(self, event: str) -> list[dict[str, Any]]:
        """Lines up to and including the first whose ``event`` is ``event``; fails on EOF."""
        out = []
        while True:
            msg = self.read()
            if msg is None:
                raise AssertionError(f"worker ended before {event!r}; stderr:\n{self.stderr_tail()}")
            out.append(msg)
            if msg.get("event") == event:
                return out

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (a crashed broker)."""
        _stop(self.proc, signal.SIGKILL)

    def stop(self) -> None:
        _stop(self.proc, signal.SIGKILL)

    def stderr_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


__all__ = ["BookieCluster", "ROOT", "Worker"]
