"""A multi-broker cluster of real processes for the ownership tests: ZooKeeper (the session
fixture, one chroot per test), 3 ``magnetar bookie`` processes and N ``magnetar broker``
processes on free ports, plus helpers reading bundle ownership straight from the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from metadata import NoNodeError, open_metadata_store
from tests.support.bookies import REPO, RealCluster, wait_registered
from tests.support.brokers import BrokerProcess

__all__ = ["BROKER_ARGS", "MultiBrokerCluster", "owners", "run_magnetar", "terminate", "sigstop", "sigcont"]

BROKER_ARGS = (
    "--set",
    "managed_ledger.managedLedgerDefaultEnsembleSize=2",
    "--set",
    "managed_ledger.managedLedgerDefaultWriteQuorum=2",
    "--set",
    "managed_ledger.managedLedgerDefaultAckQuorum=2",
)


class MultiBrokerCluster:
    """3 bookies and ``n`` brokers over one ZooKeeper chroot; `close` stops everything."""

    def __init__(self, base: Path, metadata_url: str, n_brokers: int, *extra: str) -> None:
        self.url = metadata_url
        self.bookies = RealCluster(base / "bookies", metadata_url)
        self.brokers = [
            BrokerProcess(base / f"broker{i}", metadata_url, *BROKER_ARGS, *extra) for i in range(n_brokers)
        ]

    def start(self) -> MultiBrokerCluster:
        """Start the bookies, wait for their registration, then start the brokers."""
        self.bookies.start(3)
        wait_registered(self.url, 3)
        for b in self.brokers:
            b.start()
        return self

    def close(self) -> None:
        """Stop the brokers (SIGCONT first, in case a test paused one) and the bookies."""
        for b in self.brokers:
            if b.proc is not None and b.proc.poll() is None:
                os.kill(b.proc.pid, signal.SIGCONT)
            b.stop()
        self.bookies.stop_all()


def run_magnetar(*args: str, timeout: float = 240) -> str:
    """Run ``magnetar ARGS`` from the repository and return its stdout; AssertionError with its
    output when it exits non-zero."""
    r = subprocess.run(
        [sys.executable, "-m", "magnetar", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert r.returncode == 0, f"magnetar {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def terminate(broker: BrokerProcess, timeout: float = 60.0) -> int | None:
    """SIGTERM (graceful: bundles unloaded) and wait; the exit code."""
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGTERM)
    return broker.proc.wait(timeout)


def sigstop(broker: BrokerProcess) -> None:
    """Pause the broker process (it keeps its sockets, its ZooKeeper session times out)."""
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGSTOP)


def sigcont(broker: BrokerProcess) -> None:
    """Resume a paused broker."""
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGCONT)


def owners(metadata_url: str, namespace: str) -> dict[str, str]:
    """``{bundle: owner's pulsar:// URL}`` of the namespace's owned bundles, from the store."""

    async def read() -> dict[str, str]:
        async with open_metadata_store(metadata_url) as store:
            try:
                names = await store.children(f"/namespace/{namespace}")
            except NoNodeError:
                return {}
            out = {}
            for name in names:
                try:
                    data, _ = await store.get(f"/namespace/{namespace}/{name}")
                except NoNodeError:
                    continue
                out[name] = json.loads(data)["nativeUrl"]
            return out

    return trio.run(read)
