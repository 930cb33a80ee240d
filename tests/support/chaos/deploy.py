"""Real-process deployments for the chaos run: every server is a node that can be SIGKILLed,
paused, stopped cleanly and started again on the same ports and data, so clients reconnect by
themselves.

* `ClusterDeployment`: ZooKeeper (Debian's), ``bookies`` ``magnetar bookie`` processes and
  ``brokers`` ``magnetar broker`` processes sharing the topics through bundle ownership; clients
  are given every broker's URL and follow lookups to the owner.
* `StandaloneDeployment`: one ``magnetar standalone`` process (broker and bookie together); a
  kill of it is a broker crash.

With a `TestNetwork` every server runs in a test host of its own (``zk``, ``bookie-i``,
``broker-i``, ``standalone``), listening on and advertising that host's address on fixed ports;
``DeployOptions.clock`` starts brokers, bookies and standalone under libfaketime with a
`ClockFile` each, and ``disk_mb`` gives each bookie (and standalone) a tmpfs of its own for its
data, so that one disk can be made full. Without a network everything listens on free loopback
ports, as before.

Node kinds: ``bookie``, ``broker``, ``standalone``. ``broker`` and ``standalone`` nodes serve
topics (`Node.serves_topics`): their death owes redeliveries in the checker.
"""

from __future__ import annotations

import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from tests.support.bookies import RealBookie
from tests.support.brokers import BrokerProcess, wait_bookies
from tests.support.ports import free_port
from tests.support.standalone import Standalone, start_standalone
from tests.support.zookeeper import ZooKeeperServer, start_zookeeper

from .netns import ClockFile, Host, TestNetwork

# fixed ports inside test hosts (each host has an address of its own, so they never collide)
ZK_PORT, BOOKIE_PORT, BROKER_PORT, WEB_PORT = 12181, 13181, 16650, 18080

__all__ = ["DeployOptions", "Node", "Deployment", "ClusterDeployment", "StandaloneDeployment", "make_deployment"]


@dataclass(frozen=True)
class DeployOptions:
    """How the servers are configured.

    ``persist_interval_s``: ``managed_ledger.cursor_persist_interval_s`` (how often acks reach the
    metadata store; low values make crashes land after persists with holes).
    ``ledger_entries``: roll a ledger after this many entries (0: the default), so that cursors
    and holes span several ledgers. ``ensemble``/``write_quorum``/``ack_quorum``: for clusters.
    ``clock``: servers run under libfaketime (a `ClockFile` each); ``disk_mb``: each bookie's (or
    standalone's) data on a tmpfs of that size (both need a `TestNetwork`).
    """

    bookies: int = 3
    brokers: int = 1
    ensemble: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    persist_interval_s: float = 1.0
    ledger_entries: int = 0
    session_timeout_ms: int = 6000
    clock: bool = False
    disk_mb: int = 0
    extra: tuple[str, ...] = ()

    def broker_settings(self) -> list[str]:
        """``--set`` arguments shared by brokers and standalone."""
        out = [
            "--set",
            f"managed_ledger.cursor_persist_interval_s={self.persist_interval_s}",
            "--set",
            "broker.retention_check_interval_s=10",
        ]
        if self.ledger_entries:
            out += [
                "--set",
                f"managed_ledger.max_entries_per_ledger={self.ledger_entries}",
                "--set",
                "managed_ledger.min_ledger_rollover_time_minutes=0",
            ]
        return out + list(self.extra)


class Node(Protocol):
    """One server process."""

    kind: str
    name: str
    serves_topics: bool
    host: Host | None
    clock: ClockFile | None

    @property
    def alive(self) -> bool: ...

    @property
    def pid(self) -> int: ...

    def start(self) -> None:
        """Start (again) on the same ports and data; return once it serves."""

    def kill(self) -> None:
        """SIGKILL and reap."""

    def stop(self) -> None:
        """Clean shutdown (SIGTERM/SIGINT), SIGKILL if it hangs."""

    def log_tail(self, chars: int = 3000) -> str: ...


def _wrap(host: Host | None, clock: ClockFile | None) -> tuple[str, ...]:
    out = host.wrap() if host is not None else []
    if clock is not None:
        out += ["env", *(f"{k}={v}" for k, v in clock.env().items())]
    return tuple(out)


def signal_node(node: Node, sig: int) -> None:
    """Send ``sig`` to a running node's process (SIGSTOP / SIGCONT pause and resume it)."""
    if node.alive:
        os.kill(node.pid, sig)


class BookieNode:
    """A ``magnetar bookie`` that keeps its port (its id and cookie name ``ADDRESS:PORT``)."""

    kind = "bookie"
    serves_topics = False

    def __init__(
        self, name: str, base: Path, metadata_url: str, host: Host | None = None, clock: ClockFile | None = None
    ) -> None:
        self.name = name
        self.host = host
        self.clock = clock
        address = host.address if host is not None else "127.0.0.1"
        self.bookie = RealBookie(base, metadata_url, address=address, wrap=_wrap(host, clock))
        self.port = BOOKIE_PORT if host is not None else 0

    @property
    def alive(self) -> bool:
        return self.bookie.alive

    @property
    def pid(self) -> int:
        return self.bookie.pid

    def launch(self) -> None:
        more = ("--port", str(self.port)) if self.port else ()
        self.bookie.launch(*more)

    def start(self) -> None:
        self.launch()
        self.bookie.wait_started()
        self.port = self.bookie.port

    def kill(self) -> None:
        self.bookie.kill()

    def stop(self) -> None:
        self.bookie.stop()

    def log_tail(self, chars: int = 3000) -> str:
        return self.bookie.log.read_text(errors="replace")[-chars:] if self.bookie.log.exists() else ""


class BrokerNode:
    """A ``magnetar broker`` on fixed ports (chosen once, reused by every restart)."""

    kind = "broker"
    serves_topics = True

    def __init__(
        self,
        name: str,
        base: Path,
        metadata_url: str,
        settings: list[str],
        host: Host | None = None,
        clock: ClockFile | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.clock = clock
        address = host.address if host is not None else "127.0.0.1"
        self.port = BROKER_PORT if host is not None else free_port()
        self.web_port = WEB_PORT if host is not None else free_port()
        self.process = BrokerProcess(
            base,
            metadata_url,
            *settings,
            "--set",
            f"broker.broker_service_port={self.port}",
            "--set",
            f"broker.web_service_port={self.web_port}",
            "--set",
            f"broker.bind_address={address}",
            "--set",
            f"broker.advertised_address={address}",
            wrap=_wrap(host, clock),
        )
        self.service_url = f"pulsar://{address}:{self.port}"
        self.admin_url = f"http://{address}:{self.web_port}"

    @property
    def alive(self) -> bool:
        return self.process.proc is not None and self.process.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.process.proc is not None
        return self.process.proc.pid

    def start(self) -> None:
        self.process.start(timeout=120)

    def kill(self) -> None:
        signal_node(self, signal.SIGCONT)
        self.process.kill()

    def stop(self) -> None:
        signal_node(self, signal.SIGCONT)
        self.process.stop()

    def log_tail(self, chars: int = 3000) -> str:
        return self.process.log()[-chars:]


class StandaloneNode:
    """``magnetar standalone`` on fixed ports with one data directory."""

    kind = "standalone"
    serves_topics = True

    def __init__(
        self, name: str, data_dir: Path, settings: list[str], host: Host | None = None, clock: ClockFile | None = None
    ) -> None:
        self.name = name
        self.host = host
        self.clock = clock
        self.data_dir = data_dir
        address = host.address if host is not None else "127.0.0.1"
        self.port = BROKER_PORT if host is not None else free_port()
        self.web_port = WEB_PORT if host is not None else free_port()
        self.settings = [
            *settings,
            "--set",
            f"broker.broker_service_port={self.port}",
            "--set",
            f"broker.web_service_port={self.web_port}",
            "--set",
            f"broker.bind_address={address}",
        ]
        if host is not None:
            self.settings += [
                "--set",
                f"broker.advertised_address={address}",
                "--set",
                f"bookie.advertised_address={address}",
                "--set",
                f"bookie.listen_address={address}",
                "--set",
                f"standalone.bookie_port={BOOKIE_PORT}",
            ]
        self.bookie_id = f"{address}:{BOOKIE_PORT}" if host is not None else ""
        self.service_url = f"pulsar://{address}:{self.port}"
        self.admin_url = f"http://{address}:{self.web_port}"
        self.process: Standalone | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    def start(self) -> None:
        self.process = start_standalone(self.data_dir, *self.settings, timeout=120, wrap=_wrap(self.host, self.clock))

    def kill(self) -> None:
        if self.alive:
            assert self.process is not None
            signal_node(self, signal.SIGCONT)
            self.process.kill()

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            signal_node(self, signal.SIGCONT)
            try:
                self.process.stop()
            except Exception:
                self.process.kill()

    def log_tail(self, chars: int = 3000) -> str:
        return self.process.log()[-chars:] if self.process is not None else ""


class Deployment:
    """Nodes plus where clients connect. `start` starts every node; `stop` stops them all."""

    kind = ""

    def __init__(self, network: TestNetwork | None = None) -> None:
        self.nodes: list[Node] = []
        self.network = network

    @property
    def service_url(self) -> str:
        """Where clients connect: every serving node's URL (the client follows lookups)."""
        return "pulsar://" + ",".join(n.service_url.removeprefix("pulsar://") for n in self.serving_nodes())

    @property
    def admin_url(self) -> str:
        return self.serving_nodes()[0].admin_url

    def serving_nodes(self) -> list[Any]:
        return [n for n in self.nodes if n.serves_topics]

    @property
    def metadata_url(self) -> str:
        """The metadata store's URL as seen from the harness ('' when the harness cannot open it:
        standalone's embedded store belongs to its process)."""
        return ""

    def by_name(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def of_kind(self, kind: str) -> list[Node]:
        return [n for n in self.nodes if n.kind == kind]

    def serving(self) -> list[Node]:
        """The nodes that serve topics (brokers, or the standalone process)."""
        return [n for n in self.nodes if n.serves_topics]

    def start(self) -> None:
        raise NotImplementedError

    def stop(self, keep_data: bool = False) -> None:
        """Stop every node (clean shutdown; SIGKILL if that fails). ``keep_data``: leave every
        data directory in place (ZooKeeper's too) for diagnosis."""
        for node in reversed(self.nodes):
            try:
                node.stop()
            except Exception:
                node.kill()

    def ensure_up(self) -> list[str]:
        """Start every node that is not running; the names started."""
        started = []
        for node in self.nodes:
            if not node.alive:
                node.start()
                started.append(node.name)
        return started

    def admin(
        self, method: str, path: str, json: object = None, ok: tuple[int, ...] = (200, 204), timeout: float = 15.0
    ) -> object:
        """One admin REST call, redirects followed; the decoded JSON ('' when empty). Tried on each
        running serving node in turn until one answers with a status in ``ok``; the last failure
        (AssertionError with the body, or the connection error) when none does."""
        failure: BaseException | None = None
        for node in self.serving_nodes():
            if not node.alive:
                continue
            try:
                r = httpx.request(method, f"{node.admin_url}{path}", json=json, timeout=timeout, follow_redirects=True)
            except httpx.HTTPError as exc:
                failure = exc
                continue
            if r.status_code in ok:
                return r.json() if r.content else ""
            failure = AssertionError(f"{method} {path} -> {r.status_code} {r.text}")
        raise failure or AssertionError(f"{method} {path}: no serving node runs")


class ClusterDeployment(Deployment):
    """ZooKeeper + bookies + brokers (see the module header)."""

    kind = "cluster"

    def __init__(self, base: Path, options: DeployOptions, network: TestNetwork | None = None) -> None:
        super().__init__(network)
        if options.brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.base = base
        self.options = options
        self.zk: ZooKeeperServer | None = None
        self.zk_host: Host | None = None
        self._metadata_url = ""

    @property
    def metadata_url(self) -> str:
        return self._metadata_url

    def _host(self, name: str) -> Host | None:
        return self.network.add_host(name) if self.network is not None else None

    def _clock(self, name: str) -> ClockFile | None:
        return ClockFile(self.base / f"clock-{name}") if self.options.clock else None

    def _data_dir(self, name: str) -> Path:
        if self.network is not None and self.options.disk_mb:
            return self.network.disk(name, self.base, self.options.disk_mb) / "data"
        return self.base / name

    def start(self) -> None:
        o = self.options
        self.zk_host = self._host("zk")
        if self.zk_host is not None:
            self.zk = start_zookeeper(
                self.base / "zk", address=self.zk_host.address, port=ZK_PORT, wrap=tuple(self.zk_host.wrap())
            )
        else:
            self.zk = start_zookeeper(self.base / "zk")
        self._metadata_url = self.zk.url(f"/chaos-{uuid.uuid4().hex[:8]}", session_timeout_ms=o.session_timeout_ms)
        bookies = [
            BookieNode(
                f"bookie-{i}",
                self._data_dir(f"bookie-{i}"),
                self.metadata_url,
                self._host(f"bookie-{i}"),
                self._clock(f"bookie-{i}"),
            )
            for i in range(o.bookies)
        ]
        for b in bookies:
            b.launch()
        for b in bookies:
            b.bookie.wait_started()
            b.port = b.bookie.port
        wait_bookies(self.metadata_url, {b.bookie.bookie_id for b in bookies})
        settings = [
            "--set",
            f"managed_ledger.ensemble_size={o.ensemble}",
            "--set",
            f"managed_ledger.write_quorum={o.write_quorum}",
            "--set",
            f"managed_ledger.ack_quorum={o.ack_quorum}",
            "--set",
            "bk_client.add_entry_timeout_s=2",
            *o.broker_settings(),
        ]
        brokers = [
            BrokerNode(
                f"broker-{i}",
                self.base / f"broker-{i}",
                self.metadata_url,
                settings,
                self._host(f"broker-{i}"),
                self._clock(f"broker-{i}"),
            )
            for i in range(o.brokers)
        ]
        self.nodes = [*bookies, *brokers]
        for b in brokers:
            b.start()

    @property
    def brokers(self) -> list[BrokerNode]:
        return [n for n in self.nodes if isinstance(n, BrokerNode)]

    def stop(self, keep_data: bool = False) -> None:
        super().stop(keep_data)
        if self.zk is None:
            return
        if keep_data:  # ZooKeeperServer.stop removes its directory
            self.zk.process.terminate()
            self.zk.process.wait(30)
        else:
            self.zk.stop()


class StandaloneDeployment(Deployment):
    """One standalone process."""

    kind = "standalone"

    def __init__(self, base: Path, options: DeployOptions, network: TestNetwork | None = None) -> None:
        super().__init__(network)
        host = network.add_host("standalone") if network is not None else None
        data = base / "data"
        if network is not None and options.disk_mb:
            data = network.disk("standalone", base, options.disk_mb) / "data"
        clock = ClockFile(base / "clock-standalone") if options.clock else None
        self.node = StandaloneNode("standalone", data, options.broker_settings(), host, clock)
        self.nodes = [self.node]

    @property
    def service_url(self) -> str:
        return self.node.service_url

    @property
    def admin_url(self) -> str:
        return self.node.admin_url

    def start(self) -> None:
        self.node.start()


def make_deployment(kind: str, base: Path, options: DeployOptions, network: TestNetwork | None = None) -> Deployment:
    """``cluster`` or ``standalone``, with its data under ``base`` (not started); with ``network``
    every server gets a test host of its own."""
    base.mkdir(parents=True, exist_ok=True)
    if (options.clock or options.disk_mb) and network is None:
        raise ValueError("clock jumps and per-node disks need test hosts (a TestNetwork)")
    if kind == "cluster":
        return ClusterDeployment(base, options, network)
    if kind == "standalone":
        return StandaloneDeployment(base, options, network)
    raise ValueError(f"unknown deployment {kind!r}: expected cluster or standalone")
