"""Real bookies for the managed-ledger tests: ``magnetar bookie`` subprocesses registered in a
ZooKeeper chroot, started together and stopped by pid; and worker subprocesses
(``python -m tests.managed_ledger_real.mlr_worker``) that own a managed ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.bookies import RealBookie, RealCluster, wait_registered

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


class BookieCluster(RealCluster):
    """Bookie processes registered under ``url`` (a ``zk://`` url with its own chroot)."""

    def __init__(self, url: str, base: Path) -> None:
        super().__init__(base, url)

    @property
    def url(self) -> str:
        """The metadata store url the bookies registered in."""
        return self.metadata_url

    def start(self, n: int) -> list[RealBookie]:
        """Start ``n`` bookies at once and wait until each listens and is registered."""
        new = super().start(n)
        wait_registered(self.metadata_url, len(self.bookies), ROOT)
        return new

    def stop(self) -> None:
        """SIGTERM every bookie (SIGKILL if one lingers)."""
        self.stop_all()


class Worker:
    """A ``mlr_worker`` subprocess: JSON lines on stdout, commands on stdin."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log_path = log
        with open(log, "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.managed_ledger_real.mlr_worker", *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

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
