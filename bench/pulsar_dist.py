"""The real Apache Pulsar, from Maven Central, for benchmarks beside Magnetar.

Resolves (once per machine, with Maven) and starts Apache Pulsar's own standalone and runs its own
load tool, ``pulsar-perf``, with no Pulsar download other than Maven Central's jars:

* the broker: ``org.apache.pulsar:pulsar-broker`` (:data:`PULSAR_VERSION`), main class
  ``org.apache.pulsar.PulsarStandaloneStarter``;
* ``pulsar-perf``: ``org.apache.pulsar:pulsar-testclient`` (:data:`PERF_VERSION`), main class
  ``org.apache.pulsar.testclient.PulsarPerfTestTool``, whose first argument is a client config file.

The jars go to ``~/.cache/magnetar/pulsar-<version>/lib`` and ``pulsar-perf-<version>/lib``
(``$MAGNETAR_PULSAR_CACHE`` moves the root), through ``bench/pulsar_maven/pom.xml`` and
``bench/pulsar_maven/settings.xml`` (every repository a Pulsar pom declares is read from Maven Central);
a directory holding a ``.complete`` marker is reused as it is. Pulsar 4 needs Java 21 or newer:
:func:`find_java` takes ``$PULSAR_JAVA_HOME``, else the newest JDK >= 21 under ``/usr/lib/jvm``.
``docs/compatibility.md`` ("Getting the real Pulsar") records which versions worked and why.

:class:`PulsarStandalone` writes a ``standalone.conf`` equivalent to ``magnetar standalone``'s
defaults (one bookie, journal fsync before every acknowledgement, the same group commit, caches
and retention; no functions worker, no stream storage, no transactions), binds only loopback and
free ports, keeps its data in the directory it is given, runs with a 1 GiB heap and 1 GiB of
direct memory, and is always stopped on leaving its ``with`` block::

    python bench/pulsar_dist.py fetch                  # resolve the jars, print where they are
    python bench/pulsar_dist.py standalone --dir /tmp/p  # run one in the foreground until Ctrl-C
    python bench/pulsar_dist.py perf -- produce -u pulsar://127.0.0.1:PORT -r 1000 topic
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.ports import free_port

PULSAR_VERSION = "4.2.4"
"""Broker version: the newest 4.x whose whole dependency set Maven Central serves here (4.0.x's
``pulsar-opentelemetry`` jar is not served, and the broker cannot start without it)."""
PERF_VERSION = "4.0.8"
"""``pulsar-perf`` version: the newest ``pulsar-testclient`` served here (there is no 4.2.x)."""
MIN_JAVA = 21

BENCH = Path(__file__).resolve().parent
POM = BENCH / "pulsar_maven" / "pom.xml"
SETTINGS = BENCH / "pulsar_maven" / "settings.xml"

HEAP_MB = 1024
DIRECT_MB = 1024

# Pulsar's distribution starts the JVM with G1 tuned for short pauses and opens the JDK internals
# that Netty and its metrics use; the GC thread counts are left to the JVM (the distribution's 32
# would oversubscribe a small machine). Java 25 also wants native access and Unsafe allowed.
GC_FLAGS = [
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=10",
    "-XX:+ParallelRefProcEnabled",
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:+DoEscapeAnalysis",
    "-XX:G1NewSizePercent=50",
    "-XX:+DisableExplicitGC",
    "-Dpulsar.allocator.exit_on_oom=true",
    "-Dio.netty.recycler.maxCapacityPerThread=4096",
]
OPEN_FLAGS = [
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.net=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.platform=ALL-UNNAMED",
    "--add-opens",
    "java.management/sun.management=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--enable-native-access=ALL-UNNAMED",
]


def version_flags(java: Path) -> list[str]:
    """Flags a given JDK needs on top of the others: from Java 23 Netty's use of Unsafe's memory
    access is allowed explicitly (otherwise the JVM warns on every start)."""
    return ["--sun-misc-unsafe-memory-access=allow"] if _java_major(java) >= 23 else []


def cache_root() -> Path:
    """Where resolved jars live (outside any repository)."""
    return Path(os.environ.get("MAGNETAR_PULSAR_CACHE", Path.home() / ".cache" / "magnetar"))


# ------------------------------------------------------------------------------- resolving


def _resolve(artifact: str, version: str, dest: Path, extra: Sequence[str] = ()) -> Path:
    marker = dest / ".complete"
    if marker.exists():
        return dest
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven is needed to fetch Apache Pulsar: apt-get install -y maven")
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        "-s",
        str(SETTINGS),
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-Dpulsar.artifact={artifact}",
        f"-Dpulsar.version={version}",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={dest}",
        *extra,
    ]
    print(f"resolving {artifact} {version} into {dest} (once per machine) ...", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"mvn failed ({done.returncode}) resolving {artifact} {version}:\n{done.stdout[-4000:]}")
    marker.write_text(" ".join(cmd) + "\n")
    return dest


def broker_lib(version: str = PULSAR_VERSION) -> Path:
    """The directory of the broker's jars, resolved on first use."""
    return _resolve("pulsar-broker", version, cache_root() / f"pulsar-{version}" / "lib")


def perf_lib(version: str = PERF_VERSION) -> Path:
    """The directory of ``pulsar-perf``'s jars, resolved on first use.

    ``pulsar-testclient`` 4.0.x depends on ``pulsar-broker`` and so on ``pulsar-opentelemetry``,
    which the registry here does not serve; produce and consume never load it, so it is excluded.
    """
    return _resolve(
        "pulsar-testclient",
        version,
        cache_root() / f"pulsar-perf-{version}" / "lib",
        ["-Dpulsar.extra.exclusion=pulsar-opentelemetry"],
    )


def _java_major(java: Path) -> int:
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return 0
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def find_java(minimum: int = MIN_JAVA) -> Path:
    """A ``java`` of at least ``minimum``: ``$PULSAR_JAVA_HOME``, else the newest under /usr/lib/jvm.

    Raises ``RuntimeError`` naming what was found when none is new enough.
    """
    candidates: list[Path] = []
    if os.environ.get("PULSAR_JAVA_HOME"):
        candidates.append(Path(os.environ["PULSAR_JAVA_HOME"]) / "bin" / "java")
    jvm = Path("/usr/lib/jvm")
    if jvm.is_dir():
        candidates += sorted(p / "bin" / "java" for p in jvm.iterdir() if (p / "bin" / "java").exists())
    found = [(_java_major(c), c) for c in candidates]
    good = sorted((v, c) for v, c in found if v >= minimum)
    if not good:
        raise RuntimeError(f"Apache Pulsar 4 needs Java {minimum}+; found {[(str(c), v) for v, c in found]}")
    return good[-1][1]


def fetch() -> tuple[Path, Path, Path]:
    """Resolve everything a run needs: (java, broker lib dir, pulsar-perf lib dir)."""
    return find_java(), broker_lib(), perf_lib()


# ------------------------------------------------------------------------------- config


def standalone_conf(*, broker_port: int, web_port: int) -> dict[str, str]:
    """Pulsar ``standalone.conf`` keys equivalent to ``magnetar standalone``'s defaults.

    Keys not given keep Pulsar's built-in defaults (``ServiceConfiguration`` and BookKeeper's
    ``ServerConfiguration``), as a user who starts from an empty file gets.
    """
    return {
        # where it listens: loopback only, on the ports given
        "clusterName": "standalone",
        "bindAddress": "127.0.0.1",
        "advertisedAddress": "127.0.0.1",
        "brokerServicePort": str(broker_port),
        "webServicePort": str(web_port),
        "metadataStoreUrl": "",  # standalone then keeps metadata in RocksDB under --metadata-dir
        # one bookie, one copy, as magnetar standalone with one bookie
        "managedLedgerDefaultEnsembleSize": "1",
        "managedLedgerDefaultWriteQuorum": "1",
        "managedLedgerDefaultAckQuorum": "1",
        # durability: fsync the journal before every acknowledgement (Pulsar's standalone.conf
        # turns this off; Magnetar keeps it on), the same group commit as Magnetar's defaults
        "journalSyncData": "true",
        "journalWriteData": "true",
        "journalMaxGroupWaitMSec": "2",
        "journalFlushWhenQueueEmpty": "true",
        # storage and caches, sized as Magnetar's defaults (64 MiB each)
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": "64",
        "dbStorage_readAheadCacheMaxSizeMb": "64",
        "dbStorage_readAheadCacheBatchSize": "100",
        "managedLedgerCacheSizeMB": "64",
        "flushInterval": "60000",
        "managedLedgerMaxEntriesPerLedger": "50000",
        "managedLedgerMinLedgerRolloverTimeMinutes": "10",
        "managedLedgerMaxLedgerRolloverTimeMinutes": "240",
        # retention and expiry: none by default, as Magnetar
        "defaultRetentionTimeInMinutes": "0",
        "defaultRetentionSizeInMB": "0",
        "ttlDurationDefaultInSeconds": "0",
        "brokerDeleteInactiveTopicsEnabled": "false",
        "maxPendingPublishRequestsPerConnection": "1000",
        "maxMessageSize": "5242880",
        # what Magnetar's standalone does not run
        "functionsWorkerEnabled": "false",
        "transactionCoordinatorEnabled": "false",
        "webSocketServiceEnabled": "false",
        "allowAutoTopicCreation": "true",
        "allowAutoTopicCreationType": "non-partitioned",
        "loadBalancerEnabled": "false",
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
        "diskUsageThreshold": "0.99",
        "diskUsageWarnThreshold": "0.99",
        "allowLoopback": "true",
        "exposeTopicLevelMetricsInPrometheus": "true",
    }


_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <File name="file" fileName="{log}" append="true">
      <PatternLayout pattern="%d{{ISO8601}} [%t] %-5level %logger{{36}} - %msg%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="info"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


def write_config(work: Path, conf: dict[str, str]) -> tuple[Path, Path]:
    """Write ``standalone.conf`` and a log4j2 file (INFO to ``pulsar.log``) into ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "standalone.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    log4j = work / "log4j2.xml"
    log4j.write_text(_LOG4J2.format(log=work / "pulsar.log"))
    return path, log4j


# ------------------------------------------------------------------------------- running


def die_with_parent() -> None:
    """In a child before exec: have the kernel send it SIGTERM when its parent dies, so a server
    started in its own session never outlives a benchmark that was killed."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def sigterm_raises() -> None:
    """Make SIGTERM raise ``KeyboardInterrupt`` in the main thread, so ``with`` blocks that own
    servers stop them when the benchmark itself is asked to stop."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def quiet_logger() -> logging.Logger:
    """A logger for the official Python client that drops everything below CRITICAL (while a
    broker starts, every refused attempt would print errors)."""
    log = logging.getLogger("magnetar.bench.pulsar-client")
    log.setLevel(logging.CRITICAL)
    log.propagate = False
    return log


def wait_first_ack(
    service_url: str, topic: str, timeout: float = 180.0, alive: Callable[[], bool] = lambda: True
) -> float:
    """Publish one message with the official client until the broker acknowledges it; return the
    ``time.monotonic()`` of that acknowledgement.

    A broker's port may accept connections before the broker serves them (Pulsar's does), so
    readiness is an acknowledged message, not an open port. Raises ``RuntimeError`` when ``alive()``
    turns false or ``timeout`` passes.
    """
    import pulsar  # the official client, as a user would connect

    deadline = time.monotonic() + timeout
    quiet = quiet_logger()
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("the broker exited before acknowledging a message")
        try:
            with socket.create_connection(("127.0.0.1", int(service_url.rsplit(":", 1)[1])), 0.5):
                pass
        except OSError:
            time.sleep(0.02)
            continue
        client = pulsar.Client(service_url, operation_timeout_seconds=5, connection_timeout_ms=2000, logger=quiet)
        try:
            producer = client.create_producer(topic, send_timeout_millis=5000)
            producer.send(b"first")
            acked = time.monotonic()
            producer.close()
            return acked
        except Exception:  # any client error means "not ready yet"
            time.sleep(0.05)
        finally:
            client.close()
    raise RuntimeError(f"no acknowledged message from {service_url} after {timeout} s")


class PulsarStandalone:
    """One Apache Pulsar standalone process on free loopback ports, data under ``work``.

    Use as a context manager: ``__enter__`` starts the JVM (it does not wait for it: see
    :meth:`wait_ready`), ``__exit__`` always stops it (SIGTERM, then SIGKILL after 60 s) and its
    whole process group, so no JVM outlives the block. ``started_at`` is the ``time.monotonic()``
    just before the process was spawned.
    """

    name = "pulsar"

    def __init__(self, work: Path, *, heap_mb: int = HEAP_MB, direct_mb: int = DIRECT_MB) -> None:
        self.work = work
        self.java, self.lib, _ = fetch()
        self.broker_port, self.web_port, self.bookie_port = free_port(), free_port(), free_port()
        self.heap_mb, self.direct_mb = heap_mb, direct_mb
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def service_url(self) -> str:
        """The broker's ``pulsar://`` URL."""
        return f"pulsar://127.0.0.1:{self.broker_port}"

    @property
    def web_url(self) -> str:
        """The broker's admin and metrics base URL."""
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def pid(self) -> int:
        """The JVM's process id (raises if not started)."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    def command(self) -> list[str]:
        """The full command line (config files are written by ``__enter__``)."""
        conf, log4j = self.work / "standalone.conf", self.work / "log4j2.xml"
        return [
            str(self.java),
            f"-Xms{self.heap_mb}m",
            f"-Xmx{self.heap_mb}m",
            f"-XX:MaxDirectMemorySize={self.direct_mb}m",
            *GC_FLAGS,
            *OPEN_FLAGS,
            *version_flags(self.java),
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dpulsar.log.dir={self.work}",
            "-cp",
            f"{self.lib}/*",
            "org.apache.pulsar.PulsarStandaloneStarter",
            "--config",
            str(conf),
            "--no-functions-worker",
            "--no-stream-storage",
            "--bookkeeper-port",
            str(self.bookie_port),
            "--bookkeeper-dir",
            str(self.work / "bookkeeper"),
            "--metadata-dir",
            str(self.work / "metadata"),
            "--advertised-address",
            "127.0.0.1",
        ]

    def __enter__(self) -> PulsarStandalone:
        write_config(self.work, standalone_conf(broker_port=self.broker_port, web_port=self.web_port))
        out = open(self.work / "stdout.log", "ab")
        self.started_at = time.monotonic()
        # its own session, so that stopping it reaches every thread and child of the JVM
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.work,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        out.close()
        return self

    def wait_ready(self, timeout: float = 180.0) -> float:
        """Wait for the first acknowledged message (see :func:`wait_first_ack`) and return its
        ``time.monotonic()``; raises with the log's tail if the JVM exits or the time runs out."""
        try:
            return wait_first_ack(
                self.service_url,
                "persistent://public/default/first-ack",
                timeout,
                alive=lambda: self.proc is not None and self.proc.poll() is None,
            )
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker's log and stdout, for error messages."""
        text = ""
        for name in ("pulsar.log", "stdout.log"):
            p = self.work / name
            if p.exists():
                text += f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def stop(self) -> None:
        """Stop the JVM and its process group; idempotent."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def perf_command(args: Sequence[str], *, work: Path, heap_mb: int = 512) -> list[str]:
    """The ``pulsar-perf`` command line for ``args`` (``produce ...`` / ``consume ...``)."""
    java, _, lib = fetch()
    conf = work / "client.conf"
    if not conf.exists():
        work.mkdir(parents=True, exist_ok=True)
        conf.write_text("")
    return [
        str(java),
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        *OPEN_FLAGS,
        *version_flags(java),
        f"-Dlog4j2.configurationFile={work / 'perf-log4j2.xml'}",
        "-cp",
        f"{lib}/*",
        "org.apache.pulsar.testclient.PulsarPerfTestTool",
        str(conf),
        *args,
    ]


@contextlib.contextmanager
def _sigint_stops(ps: PulsarStandalone) -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        pass
    finally:
        ps.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="resolve the jars and print where they are")
    st = sub.add_parser("standalone", help="run Apache Pulsar standalone in the foreground until Ctrl-C")
    st.add_argument("--dir", required=True, help="data and config directory (outside the repository)")
    pp = sub.add_parser("perf", help="run pulsar-perf with the arguments after --")
    pp.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    sigterm_raises()
    if ns.cmd == "fetch":
        java, broker, perf = fetch()
        print(f"java        {java} (Java {_java_major(java)})\nbroker lib  {broker}\nperf lib    {perf}")
    elif ns.cmd == "standalone":
        with PulsarStandalone(Path(ns.dir).resolve()) as ps, _sigint_stops(ps):
            ps.wait_ready()
            print(
                f"Apache Pulsar {PULSAR_VERSION} standalone: {ps.service_url}  {ps.web_url}  pid {ps.pid}", flush=True
            )
            assert ps.proc is not None
            ps.proc.wait()
    else:
        args = [a for a in ns.args if a != "--"]
        work = cache_root() / "perf-work"
        write_perf_log4j(work)
        raise SystemExit(subprocess.call(perf_command(args, work=work)))


def write_perf_log4j(work: Path) -> None:
    """Write ``perf-log4j2.xml`` into ``work``: pulsar-perf's own lines at INFO on stdout, the rest
    of its client at WARN."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "perf-log4j2.xml").write_text(_PERF_LOG4J2)


_PERF_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT"><PatternLayout pattern="%d{HH:mm:ss.SSS} %-5level %msg%n"/></Console>
  </Appenders>
  <Loggers>
    <Root level="warn"><AppenderRef ref="out"/></Root>
    <Logger name="org.apache.pulsar.testclient" level="info" additivity="false"><AppenderRef ref="out"/></Logger>
  </Loggers>
</Configuration>
"""


if __name__ == "__main__":
    main()
