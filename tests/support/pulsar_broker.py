"""Apache Pulsar's own broker (not standalone) on a ZooKeeper and bookies the test runs.

The jars and the JDK come from ``bench/pulsar_dist.py`` (Maven Central, cached in
``~/.cache/magnetar``; nothing enters the repository). :func:`initialize_cluster` runs Pulsar's
``PulsarClusterMetadataSetup`` (``pulsar initialize-cluster-metadata``) against the ZooKeeper
chroot, pointing it at the BookKeeper metadata the bookies already registered in, so it leaves
``ledgers/`` alone and writes the cluster, the ``public``/``pulsar`` tenants and their namespaces
as a Pulsar operator's cluster has them. :class:`PulsarBroker` then runs
``org.apache.pulsar.PulsarBrokerStarter`` on free loopback ports with:

* ``metadataStoreUrl`` = ``configurationMetadataStoreUrl`` = ``zk:HOST:PORT/CHROOT``;
* ``bookkeeperMetadataServiceUri`` = ``zk+hierarchical://HOST:PORT/CHROOT/ledgers`` (the layout
  the bookies wrote);
* the ensemble, write and ack quorums it is given;
* no system topics and no topic-level policies (their ``__change_events`` topic would be one
  more managed ledger per namespace), no functions worker, no WebSocket service, the no-op load
  manager (one broker at a time).

``stop`` sends SIGTERM to its process group: Pulsar then closes its topics, which writes each
cursor's state into its ZooKeeper node, and waits up to 60 s before SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from bench import pulsar_dist
from tests.support.ports import free_port

__all__ = ["PulsarBroker", "PulsarUnavailable", "initialize_cluster", "pulsar_jars"]

HEAP_MB = 384
DIRECT_MB = 256


class PulsarUnavailable(RuntimeError):
    """Pulsar's jars or a JDK >= 21 cannot be had on this machine."""


def pulsar_jars() -> tuple[Path, Path]:
    """(java, broker lib dir), resolving them once per machine; `PulsarUnavailable` if not possible."""
    try:
        return pulsar_dist.find_java(), pulsar_dist.broker_lib()
    except RuntimeError as exc:
        raise PulsarUnavailable(str(exc)) from exc


def _java_command(java: Path, lib: Path, work: Path, main: str, *args: str) -> list[str]:
    log4j = work / "log4j2.xml"
    if not log4j.exists():
        pulsar_dist.write_config(work, {})
    return [
        str(java),
        f"-Xms{HEAP_MB}m",
        f"-Xmx{HEAP_MB}m",
        f"-XX:MaxDirectMemorySize={DIRECT_MB}m",
        "-XX:+UseG1GC",
        "-XX:TieredStopAtLevel=1",
        *pulsar_dist.OPEN_FLAGS,
        *pulsar_dist.version_flags(java),
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dpulsar.log.dir={work}",
        "-cp",
        f"{lib}/*",
        main,
        *args,
    ]


def zk_store_url(hosts: str, chroot: str) -> str:
    """Pulsar's metadata store URL for a ZooKeeper chroot: ``zk:host:port/chroot``."""
    return f"zk:{hosts}{chroot}"


def bk_service_uri(hosts: str, chroot: str) -> str:
    """BookKeeper's metadata service URI of the bookies under ``chroot``."""
    return f"zk+hierarchical://{hosts}{chroot}/ledgers"


def initialize_cluster(
    work: Path, hosts: str, chroot: str, cluster: str, *, broker_port: int, web_port: int, timeout: float = 300.0
) -> str:
    """Run Pulsar's ``PulsarClusterMetadataSetup`` for ``cluster`` on an existing BookKeeper
    cluster; return its output. RuntimeError with that output when it fails."""
    java, lib = pulsar_jars()
    work.mkdir(parents=True, exist_ok=True)
    store = zk_store_url(hosts, chroot)
    cmd = _java_command(
        java,
        lib,
        work,
        "org.apache.pulsar.PulsarClusterMetadataSetup",
        "--cluster",
        cluster,
        "--metadata-store",
        store,
        "--configuration-metadata-store",
        store,
        "--web-service-url",
        f"http://127.0.0.1:{web_port}",
        "--broker-service-url",
        f"pulsar://127.0.0.1:{broker_port}",
        "--existing-bk-metadata-service-uri",
        bk_service_uri(hosts, chroot),
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=work)
    out = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"PulsarClusterMetadataSetup failed ({done.returncode}):\n{out[-3000:]}")
    return out


class PulsarBroker:
    """One ``PulsarBrokerStarter`` process over ZooKeeper ``hosts`` + ``chroot``. Start with
    `start`, stop with `stop` (also on leaving a ``with`` block); `start` again after a stop, on
    fresh free ports (a port free at construction may be taken by then; clients look the broker
    up by its advertised address, not by the cluster record's URLs)."""

    def __init__(
        self, work: Path, hosts: str, chroot: str, cluster: str, *, ensemble: int, write_quorum: int, ack_quorum: int
    ) -> None:
        self.work = work
        self.hosts, self.chroot, self.cluster = hosts, chroot, cluster
        self.broker_port, self.web_port = free_port(), free_port()
        self.quorums = (ensemble, write_quorum, ack_quorum)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def service_url(self) -> str:
        """The broker's ``pulsar://`` URL."""
        return f"pulsar://127.0.0.1:{self.broker_port}"

    @property
    def web_url(self) -> str:
        """The broker's admin REST base URL."""
        return f"http://127.0.0.1:{self.web_port}"

    def config(self) -> dict[str, str]:
        """The ``broker.conf`` keys this broker runs with (the rest keep Pulsar's defaults)."""
        store = zk_store_url(self.hosts, self.chroot)
        e, w, a = self.quorums
        return {
            "clusterName": self.cluster,
            "metadataStoreUrl": store,
            "configurationMetadataStoreUrl": store,
            "bookkeeperMetadataServiceUri": bk_service_uri(self.hosts, self.chroot),
            "bindAddress": "127.0.0.1",
            "advertisedAddress": "127.0.0.1",
            "brokerServicePort": str(self.broker_port),
            "webServicePort": str(self.web_port),
            "managedLedgerDefaultEnsembleSize": str(e),
            "managedLedgerDefaultWriteQuorum": str(w),
            "managedLedgerDefaultAckQuorum": str(a),
            "systemTopicEnabled": "false",
            "topicLevelPoliciesEnabled": "false",
            "functionsWorkerEnabled": "false",
            "webSocketServiceEnabled": "false",
            "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
            "loadBalancerEnabled": "false",
            "allowAutoTopicCreationType": "non-partitioned",
            "brokerDeleteInactiveTopicsEnabled": "false",
            "metadataStoreSessionTimeoutMillis": "5000",
            "numIOThreads": "2",
            "numOrderedExecutorThreads": "2",
            "numHttpServerThreads": "4",
            "bookkeeperClientNumWorkerThreads": "2",
            "bookkeeperClientNumIoThreads": "2",
            "managedLedgerNumSchedulerThreads": "2",
        }

    def start(self, timeout: float = 300.0) -> None:
        """Start the JVM and wait until it acknowledges a message (`pulsar_dist.wait_first_ack`);
        RuntimeError with its log's tail if it exits or the time runs out."""
        java, lib = pulsar_jars()
        if self.proc is not None:
            self.broker_port, self.web_port = free_port(), free_port()
        self.work.mkdir(parents=True, exist_ok=True)
        conf = self.work / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))
        cmd = _java_command(java, lib, self.work, "org.apache.pulsar.PulsarBrokerStarter", "--broker-conf", str(conf))
        with open(self.work / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.work,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=pulsar_dist.die_with_parent,
            )
        try:
            pulsar_dist.wait_first_ack(
                self.service_url,
                "persistent://public/default/pulsar-ready",
                timeout,
                alive=lambda: self.proc is not None and self.proc.poll() is None,
            )
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker's log and stdout."""
        text = ""
        for name in ("pulsar.log", "stdout.log"):
            p = self.work / name
            if p.exists():
                text += f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM to the process group (a graceful close), SIGKILL after ``timeout`` s; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        return self.proc.returncode

    def __enter__(self) -> PulsarBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
