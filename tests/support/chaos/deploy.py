"""Real-process deployments for the chaos run: every server is a node that can be SIGKILLed,
stopped cleanly and started again on the same ports and data, so clients reconnect by themselves.

* `ClusterDeployment`: ZooKeeper (Debian's), ``bookies`` ``magnetar bookie`` processes and
  ``brokers`` ``magnetar broker`` processes. Only one broker is supported until topic ownership
  exists (two brokers would both serve every topic); the deployment is a list of broker nodes so
  that more can be added then.
* `StandaloneDeployment`: one ``magnetar standalone`` process (broker and bookie together); a
  kill of it is a broker crash.

Node kinds: ``bookie``, ``broker``, ``standalone``. ``broker`` and ``standalone`` nodes serve
topics (`Node.serves_topics`): their death owes redeliveries in the checker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tests.support.admin import rest
from tests.support.bookies import RealBookie
from tests.support.brokers import BrokerProcess, wait_bookies
from tests.support.ports import free_port
from tests.support.standalone import Standalone, start_standalone
from tests.support.zookeeper import ZooKeeperServer, start_zookeeper

__all__ = ["DeployOptions", "Node", "Deployment", "ClusterDeployment", "StandaloneDeployment",
           "make_deployment"]


@dataclass(frozen=True)
class DeployOptions:
    """How the servers are configured.

    ``persist_interval_s``: ``managed_ledger.cursor_persist_interval_s`` (how often acks reach the
    metadata store; low values make crashes land after persists with holes).
    ``ledger_entries``: roll a ledger after this many entries (0: the default), so that cursors
    and holes span several ledgers. ``ensemble``/``write_quorum``/``ack_quorum``: for clusters.
    """

    bookies: int = 3
    brokers: int = 1
    ensemble: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    persist_interval_s: float = 1.0
    ledger_entries: int = 0
    session_timeout_ms: int = 6000
    extra: tuple[str, ...] = ()

    def broker_settings(self) -> list[str]:
        """``--set`` arguments shared by brokers and standalone."""
        out = ["--set", f"managed_ledger.cursor_persist_interval_s={self.persist_interval_s}",
               "--set", "broker.retention_check_interval_s=10"]
        if self.ledger_entries:
            out += ["--set", f"managed_ledger.max_entries_per_ledger={self.ledger_entries}",
                    "--set", "managed_ledger.min_ledger_rollover_time_minutes=0"]
        return out + list(self.extra)


class Node(Protocol):
    """One server process."""

    kind: str
    name: str
    serves_topics: bool

    @property
    def alive(self) -> bool: ...

    def start(self) -> None:
        """Start (again) on the same ports and data; return once it serves."""

    def kill(self) -> None:
        """SIGKILL and reap."""

    def stop(self) -> None:
        """Clean shutdown (SIGTERM/SIGINT), SIGKILL if it hangs."""

    def log_tail(self, chars: int = 3000) -> str: ...


class BookieNode:
    """A ``magnetar bookie`` that keeps its port (its id and cookie name ``127.0.0.1:PORT``)."""

    kind = "bookie"
    serves_topics = False

    def __init__(self, name: str, base: Path, metadata_url: str) -> None:
        self.name = name
        self.bookie = RealBookie(base, metadata_url)
        self.port = 0

    @property
    def alive(self) -> bool:
        return self.bookie.alive

    def start(self) -> None:
        more = ("--port", str(self.port)) if self.port else ()
        self.bookie.start(*more)
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

    def __init__(self, name: str, base: Path, metadata_url: str, settings: list[str]) -> None:
        self.name = name
        self.port = free_port()
        self.web_port = free_port()
        self.process = BrokerProcess(base, metadata_url, *settings,
                                     "--set", f"broker.broker_service_port={self.port}",
                                     "--set", f"broker.web_service_port={self.web_port}",
                                     "--set", "broker.bind_address=127.0.0.1")
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{self.web_port}"

    @property
    def alive(self) -> bool:
        return self.process.proc is not None and self.process.proc.poll() is None

    def start(self) -> None:
        self.process.start(timeout=120)

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        self.process.stop()

    def log_tail(self, chars: int = 3000) -> str:
        return self.process.log()[-chars:]


class StandaloneNode:
    """``magnetar standalone`` on fixed ports with one data directory."""

    kind = "standalone"
    serves_topics = True

    def __init__(self, name: str, data_dir: Path, settings: list[str]) -> None:
        self.name = name
        self.data_dir = data_dir
        self.port = free_port()
        self.web_port = free_port()
        self.settings = [*settings, "--set", f"broker.broker_service_port={self.port}",
                         "--set", f"broker.web_service_port={self.web_port}",
                         "--set", "broker.bind_address=127.0.0.1"]
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{self.web_port}"
        self.process: Standalone | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None

    def start(self) -> None:
        self.process = start_standalone(self.data_dir, *self.settings, timeout=120)

    def kill(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.kill()

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            try:
                self.process.stop()
            except Exception:
                self.process.kill()

    def log_tail(self, chars: int = 3000) -> str:
        return self.process.log()[-chars:] if self.process is not None else ""


class Deployment:
    """Nodes plus where clients connect. `start` starts every node; `stop` stops them all."""

    kind = ""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    @property
    def service_url(self) -> str:
        raise NotImplementedError

    @property
    def admin_url(self) -> str:
        raise NotImplementedError

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

    def admin(self, method: str, path: str, json: object = None, ok: tuple[int, ...] = (200, 204)) -> object:
        """One admin REST call on the first broker; the decoded JSON ('' when empty)."""
        r = rest(method, self.admin_url, path, json=json, ok=ok)
        return r.json() if r.content else ""


class ClusterDeployment(Deployment):
    """ZooKeeper + bookies + brokers (see the module header)."""

    kind = "cluster"

    def __init__(self, base: Path, options: DeployOptions) -> None:
        super().__init__()
        if options.brokers != 1:
            raise ValueError("only one broker until topic ownership exists (two would serve the same topics)")
        self.base = base
        self.options = options
        self.zk: ZooKeeperServer | None = None
        self.metadata_url = ""

    def start(self) -> None:
        self.zk = start_zookeeper(self.base / "zk")
        self.metadata_url = self.zk.url(f"/chaos-{uuid.uuid4().hex[:8]}",
                                        session_timeout_ms=self.options.session_timeout_ms)
        o = self.options
        bookies = [BookieNode(f"bookie-{i}", self.base / f"bookie-{i}", self.metadata_url) for i in range(o.bookies)]
        for b in bookies:
            b.bookie.launch()
        for b in bookies:
            b.bookie.wait_started()
            b.port = b.bookie.port
        wait_bookies(self.metadata_url, {b.bookie.bookie_id for b in bookies})
        settings = ["--set", f"managed_ledger.ensemble_size={o.ensemble}",
                    "--set", f"managed_ledger.write_quorum={o.write_quorum}",
                    "--set", f"managed_ledger.ack_quorum={o.ack_quorum}",
                    "--set", "bk_client.add_entry_timeout_s=2", *o.broker_settings()]
        brokers = [BrokerNode(f"broker-{i}", self.base / f"broker-{i}", self.metadata_url, settings)
                   for i in range(o.brokers)]
        self.nodes = [*bookies, *brokers]
        for b in brokers:
            b.start()

    @property
    def brokers(self) -> list[BrokerNode]:
        return [n for n in self.nodes if isinstance(n, BrokerNode)]

    @property
    def service_url(self) -> str:
        return self.brokers[0].service_url

    @property
    def admin_url(self) -> str:
        return self.brokers[0].admin_url

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

    def __init__(self, base: Path, options: DeployOptions) -> None:
        super().__init__()
        self.node = StandaloneNode("standalone", base / "data", options.broker_settings())
        self.nodes = [self.node]

    @property
    def service_url(self) -> str:
        return self.node.service_url

    @property
    def admin_url(self) -> str:
        return self.node.admin_url

    def start(self) -> None:
        self.node.start()


def make_deployment(kind: str, base: Path, options: DeployOptions) -> Deployment:
    """``cluster`` or ``standalone``, with its data under ``base`` (not started)."""
    base.mkdir(parents=True, exist_ok=True)
    if kind == "cluster":
        return ClusterDeployment(base, options)
    if kind == "standalone":
        return StandaloneDeployment(base, options)
    raise ValueError(f"unknown deployment {kind!r}: expected cluster or standalone")

