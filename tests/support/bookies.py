"""Real ``magnetar bookie`` processes for integration tests (and benchmarks): started in parallel,
stopped by their pid, killed with SIGKILL or paused with SIGSTOP on cue.

    cluster = RealCluster(tmp_dir, zk_url)
    cluster.start(4)              # four ``magnetar bookie`` processes, in parallel
    cluster.kill(bookie_id)       # SIGKILL: a crash (the registration lingers until ZK expiry)
    cluster.stop_all()

A bookie prints ``bookie ID listening on HOST:PORT (http: URL; metadata: ...)`` as its first line
on stdout; `RealBookie.wait_started` reads it (id, port, HTTP URL). Its stderr goes to
``base/bookie.log``. Every bookie listens on a free loopback port with HTTP off unless asked, and
by default preallocates its journal in 1 MiB chunks so that it starts quickly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_SIGTERM = signal.SIGTERM  # a default argument: the classes below have a method named `signal`

__all__ = ["REPO", "MagnetarProcess", "RealBookie", "RealCluster", "wait_registered"]


class MagnetarProcess:
    """A ``python -m magnetar ARGS`` child: stdout piped (read it with `first_line`), stderr
    appended to ``log``; stopped by its pid. ``wrap`` prefixes the command with one that execs
    it (``ip netns exec NS``, ``env ...``), so the pid stays the program's."""

    def __init__(
        self, args: Sequence[str], log: Path, env: Mapping[str, str] | None = None, wrap: Sequence[str] = ()
    ) -> None:
        self.log = log
        with open(log, "a") as err:
            self.proc: subprocess.Popen[str] = subprocess.Popen(
                [*wrap, sys.executable, "-m", "magnetar", *args],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=REPO,
                env={**os.environ, **(env or {})},
            )

    def first_line(self) -> str:
        """The next line the child prints ('' once its stdout is closed)."""
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    @property
    def alive(self) -> bool:
        """True while the process runs (stopped with SIGSTOP counts as running)."""
        return self.proc.poll() is None

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process (by pid) if it still runs."""
        if self.alive:
            os.kill(self.pid, sig)

    def stop(self, sig: int = _SIGTERM, timeout: float = 20.0) -> int:
        """Send ``sig`` (after SIGCONT, in case it is paused), SIGKILL if it outlives ``timeout``;
        return the exit code."""
        self.signal(signal.SIGCONT)
        self.signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.proc.wait()

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the process ends by itself within ``timeout`` s, else None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


class RealBookie:
    """One ``magnetar bookie`` child with its data under ``base``; `start` it again after a stop.

    ``extra`` are more ``magnetar bookie`` arguments (``--set key=value`` ...); ``bookie_id`` fixes
    the id (default: ``ADDRESS:PORT``); ``http`` serves HTTP on a free port (see ``http_url``);
    ``small_journal=False`` keeps the default journal preallocation (benchmarks). ``address`` is
    where it listens and what it advertises (loopback by default); ``wrap`` as `MagnetarProcess`.
    """

    def __init__(
        self,
        base: Path,
        metadata_url: str,
        extra: Sequence[str] = (),
        *,
        bookie_id: str = "",
        http: bool = False,
        small_journal: bool = True,
        log_level: str = "WARNING",
        env: Mapping[str, str] | None = None,
        address: str = "127.0.0.1",
        wrap: Sequence[str] = (),
    ) -> None:
        self.base = base
        self.address = address
        self.wrap = list(wrap)
        self.metadata_url = metadata_url
        self.extra = list(extra)
        self.fixed_id = bookie_id
        self.http = http
        self.small_journal = small_journal
        self.log_level = log_level
        self.env = dict(env or {})
        self.log = base / "bookie.log"
        self.process: MagnetarProcess | None = None
        self.bookie_id = ""
        self.port = 0
        self.http_url = ""

    def command(self, *more: str) -> list[str]:
        """The ``magnetar`` arguments this bookie is started with."""
        args = [
            "bookie",
            "--journal-dir",
            str(self.base / "journal"),
            "--ledger-dirs",
            str(self.base / "ledgers"),
            "--port",
            "0",
            "--metadata-url",
            self.metadata_url,
            "--log-level",
            self.log_level,
            "--set",
            f"listen_address={self.address}",
        ]
        if self.address != "127.0.0.1":
            args += ["--set", f"advertised_address={self.address}"]
        if self.fixed_id:
            args += ["--bookie-id", self.fixed_id]
        if self.http:
            args += ["--http-port", "0", "--set", f"http_address={self.address}"]
        else:
            args += ["--set", "http_enabled=false"]
        if self.small_journal:
            args += ["--set", "journal_prealloc_size_mb=1"]
        return args + self.extra + list(more)

    def launch(self, *more: str, env: Mapping[str, str] | None = None) -> None:
        """Start the process (returns at once; `wait_started` reads its first line)."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.process = MagnetarProcess(self.command(*more), self.log, {**self.env, **(env or {})}, self.wrap)

    def wait_started(self) -> str:
        """Block until the bookie prints ``listening on``; return its id. RuntimeError if it does not."""
        assert self.process is not None
        line = self.process.first_line()
        if "listening on" not in line:
            self.process.stop(signal.SIGKILL)
            raise RuntimeError(f"bookie did not start: {line!r}\n{self.log.read_text(errors='replace')[-3000:]}")
        # "bookie ID listening on HOST:PORT (http: URL; metadata: ...)"
        self.bookie_id = line.split()[1]
        self.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        if self.http:
            self.http_url = line.split("(http: ")[1].split(";")[0].split(",")[0].strip()
        return self.bookie_id

    def start(self, *more: str, env: Mapping[str, str] | None = None) -> str:
        """`launch` and `wait_started`; ``more`` and ``env`` apply to this start only."""
        self.launch(*more, env=env)
        return self.wait_started()

    @property
    def alive(self) -> bool:
        """True while the process runs (stopped with SIGSTOP counts as running)."""
        return self.process is not None and self.process.alive

    @property
    def pid(self) -> int:
        """The process id."""
        assert self.process is not None
        return self.process.pid

    def signal(self, sig: int) -> None:
        """Send ``sig`` to this bookie's process (by pid) if it still runs."""
        if self.process is not None:
            self.process.signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap (a crash: no clean shutdown, no unregistration)."""
        if self.process is not None:
            self.process.stop(signal.SIGKILL, timeout=30)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (clean shutdown), SIGKILL after ``timeout`` s; the exit code (None if never started)."""
        if self.process is None:
            return None
        return self.process.stop(signal.SIGTERM, timeout)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the bookie ends by itself within ``timeout`` s, else None."""
        assert self.process is not None
        return self.process.wait_exit(timeout)


class RealCluster:
    """Bookies on one metadata store (``metadata_url``), data under ``base/b<i>``; ``extra`` and
    ``small_journal`` are passed to each `RealBookie`."""

    def __init__(self, base: Path, metadata_url: str, extra: Sequence[str] = (), *, small_journal: bool = True) -> None:
        self.base = base
        self.metadata_url = metadata_url
        self.extra = list(extra)
        self.small_journal = small_journal
        self.bookies: list[RealBookie] = []

    def start(self, n: int) -> list[RealBookie]:
        """Start ``n`` more bookies in parallel and wait until each listens (registration in the
        metadata store follows within moments: `wait_registered`). On a failure every bookie of
        the cluster is stopped and the RuntimeError raised."""
        new = [
            RealBookie(
                self.base / f"b{len(self.bookies) + i}", self.metadata_url, self.extra, small_journal=self.small_journal
            )
            for i in range(n)
        ]
        self.bookies += new
        for b in new:
            b.launch()
        try:
            with ThreadPoolExecutor(max_workers=max(1, n)) as pool:
                list(pool.map(RealBookie.wait_started, new))
        except BaseException:
            self.stop_all()
            raise
        return new

    def by_id(self, bookie_id: str) -> RealBookie:
        """The bookie registered as ``bookie_id``."""
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    @property
    def ids(self) -> list[str]:
        """Ids of every bookie started, in start order."""
        return [b.bookie_id for b in self.bookies]

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


def wait_registered(metadata_url: str, n: int, root: str = "", timeout: float = 20.0) -> None:
    """Block until at least ``n`` bookies are registered under ``root``; RuntimeError after ``timeout`` s."""
    import trio

    from bk_client import LedgerManager
    from metadata import open_metadata_store

    async def wait() -> None:
        async with open_metadata_store(metadata_url) as store:
            lm = LedgerManager(store, root)
            deadline = time.monotonic() + timeout
            while len(await lm.list_bookies()) < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fewer than {n} bookies registered")
                await trio.sleep(0.05)

    trio.run(wait)
