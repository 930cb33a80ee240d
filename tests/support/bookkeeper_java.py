"""Apache BookKeeper's own Java client and bookie, for the interoperability tests.

Both come from ``org.apache.bookkeeper:bookkeeper-server`` (`BK_VERSION`) on Maven Central,
resolved by ``tests/resources/bk_interop/build.sh`` into a cache outside the repository
(``MAGNETAR_BK_INTEROP_CACHE``, else ``~/.cache/magnetar/bk-interop``) and run on the default
``java`` (17):

* `JavaClient`: ``BkInterop`` (``tests/resources/bk_interop/BkInterop.java``), BookKeeper's client
  driven by one JSON request a line; one JVM serves a whole test module.
* `JavaBookie`: BookKeeper's bookie, ``org.apache.bookkeeper.server.Main --conf bk_server.conf``,
  with a generated configuration: a free loopback port, data under the test's directory.

Fixture ``bk_java`` (session scope) builds once per run and skips the test, saying why, only
when Maven Central cannot be reached; any other build failure fails it.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.zookeeper import free_port

__all__ = ["BK_VERSION", "BkJava", "JavaBookie", "JavaClient", "b64", "bk_java", "build_bk_java", "unb64"]

BK_VERSION = "4.17.3"
"""The newest 4.17 release Maven Central serves (4.17.4 is tagged but not published there)."""
BOOKIE_MAIN = "org.apache.bookkeeper.server.Main"
_BUILD = Path(__file__).resolve().parents[1] / "resources" / "bk_interop" / "build.sh"
_JVM = [
    "-Xms64m",
    "-Xmx256m",
    "-XX:MaxDirectMemorySize=256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.net.preferIPv4Stack=true",
]


def b64(data: bytes) -> str:
    """Bytes as the base64 text the Java side reads."""
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    """The bytes of base64 text the Java side wrote."""
    return base64.b64decode(text)


@dataclass(frozen=True)
class BkJava:
    """A built BookKeeper: the classpath (BkInterop and bookkeeper-server with its dependencies)
    and the log4j2 configuration that sends every log line to standard error."""

    classpath: str
    log_config: str

    def command(self, main: str, *args: str) -> list[str]:
        """The ``java`` command line running ``main`` with ``args``."""
        return ["java", *_JVM, f"-Dlog4j2.configurationFile={self.log_config}", "-cp", self.classpath, main, *args]


class MavenUnreachable(RuntimeError):
    """Maven Central could not be reached to fetch BookKeeper."""


def build_bk_java(version: str = BK_VERSION) -> BkJava:
    """Build (or reuse) the BookKeeper pieces; `MavenUnreachable` or RuntimeError when it fails."""
    built = subprocess.run(["bash", str(_BUILD), version], capture_output=True, text=True, timeout=900)
    if built.returncode == 3:
        raise MavenUnreachable(built.stderr[-800:])
    if built.returncode != 0:
        raise RuntimeError(f"building BkInterop failed ({built.returncode}):\n{built.stderr[-3000:]}")
    classpath, log_config = built.stdout.strip().split("\n")[-2:]
    return BkJava(classpath, log_config)


@pytest.fixture(scope="session")
def bk_java() -> BkJava:
    """BookKeeper's Java pieces, built once per run; skips only when Maven Central is unreachable."""
    try:
        return build_bk_java()
    except MavenUnreachable as exc:
        pytest.skip(
            f"Maven Central could not be reached to fetch org.apache.bookkeeper:bookkeeper-server:{BK_VERSION}: {exc}"
        )


class JavaError(AssertionError):
    """The Java client answered a request with an error (``answer`` holds the whole answer)."""

    def __init__(self, op: str, answer: Mapping[str, Any]) -> None:
        super().__init__(f"{op}: {answer.get('error')} (code {answer.get('code')}): {answer.get('message')}")
        self.answer = dict(answer)


class JavaClient:
    """One ``BkInterop`` JVM: `call` sends a request and returns the answer; `ok` raises
    `JavaError` unless it succeeded. Logs go to ``log``; `kill` is SIGKILL, `close` a clean exit."""

    def __init__(self, java: BkJava, log: Path, *, env: Mapping[str, str] | None = None) -> None:
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                java.command("BkInterop"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, **(env or {})},
            )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def call(self, op: str, timeout: float = 120.0, **fields: Any) -> dict[str, Any]:
        """Send one request and return its answer (a dict with ``ok``). RuntimeError when the JVM
        exits or does not answer within ``timeout`` s (it is then killed: the answers would be out
        of step)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise RuntimeError(
                f"the Java client did not answer {op} within {timeout} s; log tail:\n{self.log_tail()}"
            ) from None
        if not line:
            raise RuntimeError(f"the Java client exited ({self.proc.poll()}); log tail:\n{self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ok(self, op: str, timeout: float = 120.0, **fields: Any) -> dict[str, Any]:
        """`call`, raising `JavaError` when the answer is an error."""
        answer = self.call(op, timeout, **fields)
        if not answer.get("ok"):
            raise JavaError(op, answer)
        return answer

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the JVM logged."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL the JVM (a writer crash: nothing closed, nothing flushed)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        """Ask the client to close and exit; SIGKILL if it does not within 20 s."""
        if self.proc.poll() is None:
            try:
                self.call("exit", timeout=20)
                self.proc.wait(20)
            except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill()


def _conf_text(settings: Mapping[str, object]) -> str:
    return "".join(f"{k}={v}\n" for k, v in settings.items())


class JavaBookie:
    """BookKeeper's own bookie process on a free loopback port, data under ``base``; its id is
    ``127.0.0.1:PORT``. ``extra`` adds or overrides ``bk_server.conf`` settings."""

    def __init__(
        self, java: BkJava, base: Path, metadata_uri: str, *, port: int = 0, extra: Mapping[str, object] | None = None
    ) -> None:
        self.java = java
        self.base = base
        self.port = port or free_port()
        self.bookie_id = f"127.0.0.1:{self.port}"
        self.conf = base / "bk_server.conf"
        self.log = base / "bookie.log"
        self.settings: dict[str, object] = {
            "bookiePort": self.port,
            "advertisedAddress": "127.0.0.1",
            "listeningInterface": "lo",
            "allowLoopback": "true",
            "metadataServiceUri": metadata_uri,
            "journalDirectories": base / "journal",
            "ledgerDirectories": base / "ledgers",
            "zkTimeout": 10000,
            "httpServerEnabled": "false",
            "autoRecoveryDaemonEnabled": "false",
            "journalPreAllocSizeMB": 1,
            "flushInterval": 500,
            # DbLedgerStorage (the default) with small caches: the machine is shared
            "dbStorage_writeCacheMaxSizeMb": 16,
            "dbStorage_readAheadCacheMaxSizeMb": 16,
            "dbStorage_rocksDB_blockCacheSize": 8 * 1024 * 1024,
            "diskUsageThreshold": 0.99,
            "diskUsageWarnThreshold": 0.98,
            **(extra or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Write the configuration and start the process (returns at once; see `wait_listening`)."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(_conf_text(self.settings))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.java.command(BOOKIE_MAIN, "--conf", str(self.conf)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def wait_listening(self, timeout: float = 60.0) -> None:
        """Block until the bookie accepts connections; RuntimeError (with its log) if it exits or
        does not listen within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"BookKeeper bookie {self.bookie_id} did not start; log tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        """The last lines the bookie logged."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the bookie."""
        if self.alive:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (BookKeeper's clean shutdown), SIGKILL after ``timeout`` s."""
        if self.alive:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def start_java_bookies(
    java: BkJava, base: Path, metadata_uri: str, n: int, extra: Mapping[str, object] | None = None
) -> list[JavaBookie]:
    """``n`` BookKeeper bookies started together; each listens when this returns (all are
    stopped and RuntimeError raised if one does not)."""
    bookies = [JavaBookie(java, base / f"bk{i}", metadata_uri, extra=extra) for i in range(n)]
    for b in bookies:
        b.start()
    try:
        for b in bookies:
            b.wait_listening()
    except BaseException:
        for b in bookies:
            b.stop()
        raise
    return bookies


@dataclass
class JavaClients:
    """The JVMs a test module started; `new` starts one more, `close_all` ends them."""

    java: BkJava
    base: Path
    clients: list[JavaClient]

    def new(self, name: str) -> JavaClient:
        """A new ``BkInterop`` JVM logging to ``base/name.log``."""
        client = JavaClient(self.java, self.base / f"{name}.log")
        self.clients.append(client)
        return client

    def close_all(self) -> None:
        """Close every JVM started here."""
        for c in self.clients:
            c.close()


def java_clients(java: BkJava, base: Path) -> Iterator[JavaClients]:
    """A `JavaClients` for a fixture: yields it, closes every JVM afterwards."""
    clients = JavaClients(java, base, [])
    try:
        yield clients
    finally:
        clients.close_all()
