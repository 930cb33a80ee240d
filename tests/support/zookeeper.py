"""A real ZooKeeper (Debian's package) for tests: one server per test run, one chroot per test.

Use the fixtures (registered for every test in ``tests/conftest.py``):

* ``zookeeper`` (session scope): the running `ZooKeeperServer`; ``.hosts`` is ``127.0.0.1:port``.
* ``zk_url`` (per test): ``zk://127.0.0.1:port/t-<random>``, a fresh chroot for the test, with a
  short session timeout (2 s) so that expiry tests stay quick.
* ``zookeeper_tls`` (session scope): another server whose only port is TLS (``secureClientPort``
  on Netty, client certificates required), with its certificates in ``.tls`` (`ZkTlsFiles`).

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

from tests.support.ports import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# The Debian jar's manifest lists its dependencies (netty, jute, slf4j-api, ...) in Class-Path;
# slf4j-simple only makes the server log somewhere.
LOGGING_JAR = Path("/usr/share/java/slf4j-simple.jar")
# The TLS port (secureClientPort) runs on Netty: the manifest lacks these of Netty's own dependencies.
NETTY_JARS = tuple(
    Path(f"/usr/share/java/netty-{name}.jar") for name in ("codec", "resolver", "transport-native-unix-common")
)
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


@dataclass(frozen=True)
class ZkTlsFiles:
    """PEM files of a TLS ZooKeeper: its CA, the server's and a client's key + certificate chain."""

    ca: Path
    server: Path
    client: Path

    @classmethod
    def create(cls, directory: Path) -> ZkTlsFiles:
        """A fresh CA, a server certificate for localhost / 127.0.0.1 and a client certificate.
        Keys are written as PKCS#8, the only PEM key form ZooKeeper's key store reads."""
        import trustme
        from cryptography.hazmat.primitives import serialization

        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        files = cls(directory / "ca.pem", directory / "server.pem", directory / "client.pem")
        ca.cert_pem.write_to_path(str(files.ca))
        for path, cert in (
            (files.server, ca.issue_cert("localhost", "127.0.0.1")),
            (files.client, ca.issue_cert("zk-client.example")),
        ):
            key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
            pem = key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            path.write_bytes(pem + b"".join(c.bytes() for c in cert.cert_chain_pems))
        return files

    def client_config(self, path: Path, *, with_certificate: bool = True, trust: Path | None = None) -> Path:
        """Write a ZooKeeper client configuration file (as Pulsar's metadataStoreConfigPath names)
        for TLS to this server; return its path."""
        lines = [
            "zookeeper.client.secure=true",
            "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
            f"zookeeper.ssl.trustStore.location={trust or self.ca}",
            "zookeeper.ssl.trustStore.type=PEM",
        ]
        if with_certificate:
            lines += [f"zookeeper.ssl.keyStore.location={self.client}", "zookeeper.ssl.keyStore.type=PEM"]
        path.write_text("\n".join(lines) + "\n")
        return path


@dataclass
class ZooKeeperServer:
    """A ZooKeeper process started by `start_zookeeper`; stop it with `stop`. With ``tls`` its only
    port is a TLS port (``secureClientPort``) that requires a client certificate."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes]
    tls: ZkTlsFiles | None = None
    address: str = "127.0.0.1"

    @property
    def hosts(self) -> str:
        return f"{self.address}:{self.port}"

    def url(self, chroot: str = "", **params: int) -> str:
        """A ``zk://`` url for this server; ``params`` become query parameters."""
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"zk://{self.hosts}{chroot}" + (f"?{query}" if query else "")

    def is_ok(self) -> bool:
        if self.tls is not None:
            return _tls_answers(self.port, self.tls)
        try:
            return four_letter_word(self.address, self.port, "ruok") == "imok"
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


def _tls_answers(port: int, tls: ZkTlsFiles) -> bool:
    """Whether the TLS port completes a handshake with the client certificate (the four-letter
    words are not served on it)."""
    import ssl

    ctx = ssl.create_default_context(cafile=str(tls.ca))
    ctx.load_cert_chain(str(tls.client))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def zookeeper_available() -> bool:
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


def zookeeper_tls_available() -> bool:
    """Whether Debian's ZooKeeper can serve a TLS port here (it needs Netty's jars)."""
    return zookeeper_available() and all(jar.exists() for jar in NETTY_JARS)


def start_zookeeper(
    directory: Path | None = None,
    tls: ZkTlsFiles | None = None,
    *,
    address: str = "127.0.0.1",
    port: int = 0,
    wrap: tuple[str, ...] = (),
) -> ZooKeeperServer:
    """Start a standalone ZooKeeper on a free loopback port; returns once it answers ``imok`` (with
    ``tls``: once its TLS port, the only one, completes a handshake). ``address`` and ``port``
    (0: a free one) say where it listens; ``wrap`` prefixes the command with one that execs it
    (``ip netns exec NS``), keeping the pid."""
    directory = directory or Path(tempfile.mkdtemp(prefix="magnetar-zk-"))
    last_error = ""
    fixed = port
    for _ in range(3):  # a free port can be taken between probing and binding
        port = fixed or free_port()
        data = directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = directory / "zoo.cfg"
        if tls is None:
            listener = f"clientPort={port}\nclientPortAddress={address}\n"
        else:
            listener = (
                f"secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n"
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                f"ssl.keyStore.location={tls.server}\nssl.keyStore.type=PEM\n"
                f"ssl.trustStore.location={tls.ca}\nssl.trustStore.type=PEM\nssl.clientAuth=need\n"
            )
        cfg.write_text(
            "tickTime=2000\n"
            "minSessionTimeout=2000\n"
            f"dataDir={data}\n"
            f"{listener}"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi\n"
        )
        classpath = [str(ZOOKEEPER_JAR)] + ([str(LOGGING_JAR)] if LOGGING_JAR.exists() else [])
        if tls is not None:
            classpath += [str(jar) for jar in NETTY_JARS]
        with open(directory / "zookeeper.log", "ab") as log:
            process = subprocess.Popen(
                [*wrap, "java", "-Xmx256m", "-cp", ":".join(classpath), MAIN_CLASS, str(cfg)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=directory,
            )
        server = ZooKeeperServer(port, directory, process, tls, address)
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


@pytest.fixture(scope="session")
def zookeeper_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper serving only TLS (client certificates required), for the whole run."""
    if not zookeeper_tls_available():
        pytest.skip(
            "ZooKeeper's TLS port needs Debian's zookeeper package, java and Netty's jars "
            f"({', '.join(str(j) for j in NETTY_JARS)})"
        )
    server = start_zookeeper(tls=ZkTlsFiles.create(tmp_path_factory.mktemp("zk-tls-certs")))
    try:
        yield server
    finally:
        server.stop()
