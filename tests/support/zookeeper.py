"""A real ZooKeeper (Debian's package) for tests: one server per test run, one chroot per test.

Use the fixtures (registered for every test in ``tests/conftest.py``):

* ``zookeeper`` (session scope): the running `ZooKeeperServer`; ``.hosts`` is ``127.0.0.1:port``.
* ``zk_url`` (per test): ``zk://127.0.0.1:port/t-<random>``, a fresh chroot for the test, with a
  short session timeout (2 s) so that expiry tests stay quick.

The server listens on a free loopback port with its own temporary data directory, and is stopped
by its pid at the end of the run. Tests that use it should be marked ``@pytest.mark.slow``.
If ZooKeeper or Java is not installed, the tests that need it are skipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# The Debian jar's manifest lists its dependencies (netty, jute, slf4j-api, ...) in Class-Path;
# slf4j-simple only makes the server log somewhere.
LOGGING_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
START_TIMEOUT_S = 30.0


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the whole answer ('' if refused)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ZooKeeperServer:
    """A ZooKeeper process started by `start_zookeeper`; stop it with `stop`."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "", **params: int) -> str:
        """A ``zk://`` url for this server; ``params`` become query parameters."""
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"zk://{self.hosts}{chroot}" + (f"?{query}" if query else "")

    def is_ok(self) -> bool:
        try:
            return four_letter_word("127.0.0.1", self.port, "ruok") == "imok"
        except OSError:
            return False

    def log_tail(self, lines: int = 30) -> str:
        log = self.directory / "zookeeper.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def stop(self) -> None:
        """SIGTERM the server by pid (SIGKILL if it lingers) and remove its directory."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def zookeeper_available() -> bool:
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


def start_zookeeper(directory: Path | None = None) -> ZooKeeperServer:
    """Start a standalone ZooKeeper on a free loopback port; returns once it answers ``imok``."""
    directory = directory or Path(tempfile.mkdtemp(prefix="magnetar-zk-"))
    last_error = ""
    for _ in range(3):  # a free port can be taken between probing and binding
        port = free_port()
        data = directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = directory / "zoo.cfg"
        cfg.write_text(
            "tickTime=2000\n"
            "minSessionTimeout=2000\n"
            f"dataDir={data}\n"
            f"clientPort={port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi\n"
        )
        classpath = [str(ZOOKEEPER_JAR)] + ([str(LOGGING_JAR)] if LOGGING_JAR.exists() else [])
        with open(directory / "zookeeper.log", "ab") as log:
            process = subprocess.Popen(
                ["java", "-Xmx256m", "-cp", ":".join(classpath), MAIN_CLASS, str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=directory,
            )
        server = ZooKeeperServer(port, directory, process)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            if server.is_ok():
                return server
            time.sleep(0.1)
        last_error = server.log_tail()
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    shutil.rmtree(directory, ignore_errors=True)
    raise RuntimeError(f"ZooKeeper did not start; log tail:\n{last_error}")


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole test run (skips the test if it is not installed)."""
    if not zookeeper_available():
        pytest.skip("ZooKeeper (Debian's zookeeper package) or java is not installed")
    server = start_zookeeper()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_url(zookeeper: ZooKeeperServer) -> str:
    """A ``zk://`` url with a fresh chroot for this test and a 2 s session timeout."""
    return zookeeper.url(f"/t-{uuid.uuid4().hex[:12]}", session_timeout_ms=2000)
