"""Real bookie processes on one ZooKeeper chroot for the client's integration tests (and the
benchmark): started in parallel, stopped by their pid, killed with SIGKILL or paused with SIGSTOP
on cue.

    cluster = RealCluster(tmp_dir, zk_url)
    cluster.start(4)              # four ``magnetar bookie`` processes, in parallel
    cluster.kill(bookie_id)       # SIGKILL: a crash (the registration lingers until ZK expiry)
    cluster.stop_all()
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "RealBookie", "RealCluster"]


class RealBookie:
    """One ``python -m magnetar bookie`` child with its data under ``base``."""

    def __init__(self, base: Path, metadata_url: str, extra: Sequence[str] = ()) -> None:
        self.base = base
        self.metadata_url = metadata_url
        self.extra = list(extra)
        self.proc: subprocess.Popen[str] | None = None
        self.bookie_id = ""
        self.log = base / "bookie.log"

    def launch(self) -> None:
        """Start the process (returns at once; ``wait_started`` reads its first line)."""
        self.base.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "magnetar", "bookie", "--journal-dir", str(self.base / "journal"),
               "--ledger-dirs", str(self.base / "ledgers"), "--port", "0", "--metadata-url", self.metadata_url,
               "--log-level", "WARNING", "--set", "http_enabled=false", "--set", "listen_address=127.0.0.1",
               *self.extra]
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO,
                                         env=dict(os.environ))

    def wait_started(self) -> str:
        """Block until the bookie prints ``listening on <id>``; return its id. RuntimeError if not."""
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.signal(signal.SIGKILL)
            raise RuntimeError(f"bookie did not start: {line!r}\n{self.log.read_text()[-3000:]}")
        self.bookie_id = line.split("listening on ")[1].split()[0]
        return self.bookie_id

    @property
    def alive(self) -> bool:
        """True while the process runs (stopped with SIGSTOP counts as running)."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        """The process id."""
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        """Send ``sig`` to this bookie's process (by pid) if it still runs."""
        if self.alive:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL and reap (a crash: no clean shutdown, no unregistration)."""
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM (clean shutdown), SIGKILL after 20 s."""
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()


class RealCluster:
    """Bookies on one metadata store (``metadata_url``), data under ``base``; ``extra`` are more
    ``magnetar bookie`` arguments. Tests preallocate 1 MiB journal chunks (quick to start);
    ``small_journal=False`` keeps the bookie's defaults (the benchmark)."""

    def __init__(self, base: Path, metadata_url: str, extra: Sequence[str] = (), *,
                 small_journal: bool = True) -> None:
        self.base = base
        self.metadata_url = metadata_url
        self.extra = (["--set", "journal_prealloc_size_mb=1"] if small_journal else []) + list(extra)
        self.bookies: list[RealBookie] = []

    def start(self, n: int) -> list[RealBookie]:
        """Start ``n`` more bookies in parallel and wait until each listens (registration in the
        metadata store follows within moments: wait for it with the client)."""
        new = [RealBookie(self.base / f"b{len(self.bookies) + i}", self.metadata_url, self.extra) for i in range(n)]
        self.bookies += new
        for b in new:
            b.launch()
        with ThreadPoolExecutor(max_workers=max(1, n)) as pool:
            list(pool.map(RealBookie.wait_started, new))
        return new

    def by_id(self, bookie_id: str) -> RealBookie:
        """The bookie registered as ``bookie_id``."""
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    @property
    def live_ids(self) -> list[str]:
        """Ids of the bookies whose process runs."""
        return [b.bookie_id for b in self.bookies if b.alive]

    def kill(self, bookie_id: str) -> None:
        """SIGKILL one bookie."""
        self.by_id(bookie_id).kill()

    def stop_all(self) -> None:
        """Stop every bookie (clean shutdown, in parallel)."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.bookies))) as pool:
            list(pool.map(RealBookie.stop, self.bookies))

