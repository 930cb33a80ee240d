"""A ``magnetar broker`` process joining a cluster through ZooKeeper, for the cluster tests.

broker = BrokerProcess(base, zk_url, "--set", "managed_ledger.managedLedgerDefaultEnsembleSize=3")
broker.start()           # waits for the "magnetar broker: pulsar://..." line
broker.kill()            # SIGKILL, by pid
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from bk_client import LedgerManager
from metadata import open_metadata_store
from tests.support.bookies import REPO

__all__ = ["BrokerProcess", "ledger_ensembles", "wait_bookies"]

_READY = re.compile(r"magnetar broker: (pulsar://\S+)\s+admin REST: (http://\S+)")


class BrokerProcess:
    """One ``python -m magnetar broker`` child on free ports; its output goes to ``base/broker-N.log``.
    ``wrap`` prefixes the command with one that execs it (``ip netns exec NS``), keeping the pid."""

    def __init__(self, base: Path, metadata_url: str, *extra: str, wrap: tuple[str, ...] = ()) -> None:
        self.base = base
        self.wrap = list(wrap)
        self.metadata_url = metadata_url
        self.extra = list(extra)
        self.proc: subprocess.Popen[str] | None = None
        self.service_url = ""
        self.admin_url = ""
        self.log_path = base / "broker.log"

    def start(self, timeout: float = 60.0) -> None:
        """Start and wait until both listeners are up; RuntimeError (with the log) if not."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.log_path = self.base / f"broker-{time.monotonic_ns()}.log"
        cmd = [
            *self.wrap,
            sys.executable,
            "-m",
            "magnetar",
            "broker",
            "--metadata-url",
            self.metadata_url,
            "--port",
            "0",
            "--web-port",
            "0",
            *self.extra,
        ]
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _READY.search(self.log())
            if match:
                self.service_url, self.admin_url = match.group(1), match.group(2)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"broker did not become ready:\n{self.log()[-3000:]}")

    def log(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL and reap: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> int | None:
        """SIGINT (clean shutdown), SIGKILL after 30 s; the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


def ledger_ensembles(metadata_url: str, ledger_id: int) -> list[tuple[int, tuple[str, ...]]]:
    """``[(first entry id, ensemble), ...]`` of a ledger, read from the metadata store."""

    async def read() -> list[tuple[int, tuple[str, ...]]]:
        async with open_metadata_store(metadata_url) as store:
            md, _ = await LedgerManager(store).read(ledger_id)
            return [(s.first_entry_id, s.ensemble) for s in md.segments]

    return trio.run(read)


def wait_bookies(metadata_url: str, expected: set[str], timeout: float = 30.0) -> None:
    """Block until exactly ``expected`` bookies are registered as available; AssertionError if not."""

    async def wait() -> None:
        async with open_metadata_store(metadata_url) as store:
            manager = LedgerManager(store)
            with trio.move_on_after(timeout):
                while set(await manager.list_bookies()) != expected:
                    await trio.sleep(0.1)
                return
            raise AssertionError(f"registered bookies {sorted(await manager.list_bookies())} != {sorted(expected)}")

    trio.run(wait)
