"""The chaos run: cycles of a random fault plan against a real deployment while the workload
runs, each ending with a drain and a check of every invariant (see `checker` and `audit`).

One cycle:

1. producers resume (a killed producer process was restarted by its own event);
2. the cycle's plan runs: at random offsets within ``duration_s`` a fault starts, and each is
   healed after its own random time (faults may overlap; a node or host has one fault at a
   time). Kills (``targets``): ``bookie`` (one or two bookies), ``broker`` / ``standalone`` (a
   process serving topics, at most once per cycle), ``broker-clean`` / ``standalone-clean`` (a
   clean restart), ``producer`` (one producer process); healed by a start on the same ports and
   data. With test hosts (``netns``, `netns`) also: ``isolate`` (a host's link down),
   ``cut`` (one host drops what it sends to another), ``partition`` (both ways), ``pause``
   (SIGSTOP of a broker, bookie or ZooKeeper past the session timeout, then SIGCONT: the old owner
   wakes up), ``clock`` (one server's wall clock jumps forward or back) and ``disk-full`` (a
   bookie's disk filled to the last byte while it writes);
3. once every fault is healed: in test hosts, ownership must converge (every broker's lookup
   names one live owner that serves the topic) within ``converge_timeout_s`` and every producer
   must have a receipt after the last heal within ``pause_timeout_s``; in every run, once
   producers pause, everything they sent must be answered within ``pause_timeout_s`` (else
   **unavailable**); every node is up;
   consumers drain until every receipted message was delivered and every redelivery a crash
   owes has happened (or ``drain_timeout_s`` passes);
4. the checker reports loss, skip, order and two-writers violations; the storage audit checks
   this cycle's receipts against the bookies (quorum, two-writers) and the cursor watch reports
   a persisted cursor that moved back.

Time to recover: for each heal, the time until every producer had a receipt after it (the
figures per fault kind); a heal while another fault was active is counted apart (overlapped).

After the last cycle a reader scans each retained topic from the earliest position: loss at the
storage level, storage order and, with deduplication on, duplicates. The plan of cycle ``c`` is
drawn from ``random.Random(f"{seed}:{c}")``, so a seed replays the same faults (their timing
against the traffic still varies).
"""

from __future__ import annotations

import heapq
import json
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

from .audit import CursorWatch, MetadataView, SqliteView, StorageAudit, ZkView
from .checker import INVARIANTS, History, ScanResult, Violation, check_scan, resolve_order
from .deploy import Deployment, DeployOptions, Node, StandaloneDeployment, make_deployment, signal_node
from .netns import TestNetwork, faketime_problem
from .producer import ProducerSpec
from .workload import AckPolicy, SubSpec, TopicSpec, Workload, scan_topic

__all__ = ["RunOptions", "RunReport", "ChaosRun", "DEFAULT_TARGETS", "NETNS_TARGETS", "build_topics"]

DEFAULT_TARGETS = {
    "cluster": ("bookie", "broker", "broker-clean", "producer"),
    "standalone": ("standalone", "standalone-clean", "producer"),
}
NETWORK_FAULTS = ("isolate", "cut", "partition", "pause", "clock", "disk-full")
NETNS_TARGETS = {kind: (*kills, *NETWORK_FAULTS) for kind, kills in DEFAULT_TARGETS.items()}
_WEIGHTS = {
    "bookie": 4,
    "broker": 4,
    "standalone": 4,
    "broker-clean": 1,
    "standalone-clean": 1,
    "producer": 2,
    "isolate": 3,
    "cut": 3,
    "partition": 3,
    "pause": 3,
    "clock": 2,
    "disk-full": 2,
}
_SERVING = {"broker", "broker-clean", "standalone", "standalone-clean"}
_KILLS = {"bookie", "broker", "broker-clean", "standalone", "standalone-clean", "producer"}


@dataclass(frozen=True)
class RunOptions:
    """Everything a run is told (the CLI's flags: ``bench/chaos.py --help``)."""

    deploy: str = "cluster"
    cycles: int = 5
    seed: int = 1
    duration_s: float = 15.0
    targets: tuple[str, ...] = ()
    max_kills: int = 2
    persist_interval_s: float = 1.0
    batching: str = "mixed"  # off | on | mixed
    dedup: str = "both"  # off | on | both
    trim_topic: bool = True
    rate: float = 50.0
    size: int = 100
    batch_size: int = 10
    ledger_entries: int = 200
    drain_timeout_s: float = 90.0
    pause_timeout_s: float = 120.0
    converge_timeout_s: float = 60.0
    stop_on_violation: bool = True
    workdir: Path | None = None
    keep: bool = False
    netns: bool = False  # every server and producer in a test host of its own
    brokers: int = 0  # cluster brokers (0: 2 with test hosts, else 1)
    session_timeout_ms: int = 6000
    disk_mb: int = 512  # per bookie (standalone) tmpfs, with the disk-full fault
    schedule: tuple[tuple[str, ...], ...] = ()  # fixed fault kinds per cycle (cycled), instead of random ones

    def kill_targets(self) -> tuple[str, ...]:
        table = NETNS_TARGETS if self.netns else DEFAULT_TARGETS
        targets = self.targets or tuple(dict.fromkeys(k for c in self.schedule for k in c)) or table[self.deploy]
        allowed = set(table[self.deploy])
        bad = [t for t in targets if t not in allowed]
        if bad:
            more = "" if self.netns else f" ({', '.join(NETWORK_FAULTS)} need --netns)"
            raise ValueError(
                f"fault kinds {bad} do not exist in a {self.deploy} deployment (choose from {sorted(allowed)}){more}"
            )
        return tuple(targets)

    @property
    def broker_count(self) -> int:
        return self.brokers or (2 if self.netns else 1)


@dataclass
class RunReport:
    """What a run did and found. ``recovery``: seconds from each heal until every producer had a
    receipt again, per fault label (heals that overlapped another fault in ``recovery_overlapped``)."""

    cycles_done: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    totals: dict[str, int] = field(default_factory=dict)
    owed_checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stalls: list[str] = field(default_factory=list)
    workdir: Path | None = None
    seconds: float = 0.0
    recovery: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    recovery_overlapped: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    converge: list[float] = field(default_factory=list)
    audited_entries: int = 0
    inconclusive_entries: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def recovery_table(self) -> list[tuple[str, int, float, float, int]]:
        """Per fault label: (label, heals counted, p50 s, max s, overlapped heals)."""
        rows = []
        for label in sorted(set(self.recovery) | set(self.recovery_overlapped)):
            xs = self.recovery.get(label, [])
            rows.append(
                (
                    label,
                    len(xs),
                    statistics.median(xs) if xs else float("nan"),
                    max(xs) if xs else float("nan"),
                    len(self.recovery_overlapped.get(label, [])),
                )
            )
        return rows


def build_topics(options: RunOptions) -> list[TopicSpec]:
    """The topics a run uses: per deduplication mode a retained topic with a batched and/or an
    unbatched producer and three subscriptions (Shared with 2 consumers and batch-index acks,
    Exclusive with cumulative acks, Failover with 2 consumers); optionally a topic with the
    default retention (consumed ledgers are trimmed) and an unbatched producer."""
    modes = {"off": [False], "on": [True], "both": [False, True]}[options.dedup]
    batches = {"off": [1], "on": [options.batch_size], "mixed": [1, options.batch_size]}[options.batching]
    subs = [
        SubSpec("shared", "shared", 2, batch_index_ack=True),
        SubSpec("excl", "exclusive", 1),
        SubSpec("fail", "failover", 2),
    ]
    topics = []
    for dedup in modes:
        label = "dedup" if dedup else "plain"
        t = TopicSpec(f"persistent://public/chaos-{label}/{label}", dedup=dedup, retained=True, subs=list(subs))
        for b in batches:
            kind = "b" if b > 1 else "u"
            t.producers.append(ProducerSpec(t.topic, f"{label}-{kind}", batch=b, rate=options.rate, size=options.size))
        topics.append(t)
    if options.trim_topic:
        t = TopicSpec(
            "persistent://public/chaos-trim/trim",
            dedup=False,
            retained=False,
            subs=[SubSpec("shared", "shared", 2), SubSpec("excl", "exclusive", 1)],
        )
        t.producers.append(ProducerSpec(t.topic, "trim-u", batch=1, rate=options.rate, size=options.size))
        topics.append(t)
    return topics


@dataclass
class _Event:
    at_s: float
    kind: str
    down_s: float
    count: int = 1

    def describe(self) -> str:
        times = f"x{self.count}" if self.count > 1 else ""
        return f"{self.kind}{times} @{self.at_s:.1f}s down {self.down_s:.1f}s"


@dataclass
class _Fault:
    """A fault in effect: what it holds (node and host names), how to heal it, when."""

    label: str  # the fault kind and what it hit, for the recovery table ("cut broker->zk")
    what: str  # the line printed
    holds: set[str]
    heal: Callable[[], None]
    heal_at: float
    injected: float
    healed: float = 0.0
    done: float = 0.0
    thread: threading.Thread | None = None


class ChaosRun:
    """One run (see the module header); `run` returns the `RunReport` and prints as it goes."""

    def __init__(self, options: RunOptions, out: TextIO = sys.stdout) -> None:
        self.options = options
        self.out = out
        self.targets = options.kill_targets()
        if "clock" in self.targets and faketime_problem():
            raise RuntimeError(f"clock jumps: {faketime_problem()}")
        self.report = RunReport()
        self.workdir = options.workdir or Path(tempfile.mkdtemp(prefix="magnetar-chaos-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.trace = open(self.workdir / "trace.txt", "w", buffering=1 << 20)  # noqa: SIM115 - closed by run
        self.history = History(trace=self.trace)
        self.report.workdir = self.workdir
        self.network: TestNetwork | None = TestNetwork() if options.netns else None
        self.deploy_options = DeployOptions(
            persist_interval_s=options.persist_interval_s,
            ledger_entries=options.ledger_entries,
            brokers=options.broker_count if options.deploy == "cluster" else 1,
            session_timeout_ms=options.session_timeout_ms,
            clock="clock" in self.targets,
            disk_mb=options.disk_mb if "disk-full" in self.targets else 0,
        )
        self.deployment: Deployment | None = None
        self.topics = build_topics(options)
        self.workload: Workload | None = None
        self.view: MetadataView | None = None
        self.audit: StorageAudit | None = None
        self.cursors: CursorWatch | None = None
        self.marks: list[tuple[str, dict[str, dict[tuple[str, str, str], tuple[str, str]] | None]]] = []
        self.busy: set[str] = set()
        self.mark_seq = 0
        self.unconverged: list[str] = []

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    @property
    def dep(self) -> Deployment:
        assert self.deployment is not None
        return self.deployment

    # --- plan ---------------------------------------------------------------------------------

    def plan(self, cycle: int) -> list[_Event]:
        """The faults of ``cycle`` (deterministic in seed and cycle)."""
        rng = random.Random(f"{self.options.seed}:{cycle}")
        d = self.options.duration_s
        session_s = self.options.session_timeout_ms / 1000
        events: list[_Event] = []
        serving_used = False
        fixed = self.options.schedule[(cycle - 1) % len(self.options.schedule)] if self.options.schedule else ()
        for i in range(len(fixed) or rng.randint(1, max(1, self.options.max_kills))):
            kinds = [k for k in self.targets if not (k in _SERVING and serving_used)]
            if fixed:
                kind = fixed[i]
            elif not kinds:
                break
            else:
                kind = rng.choices(kinds, weights=[_WEIGHTS[k] for k in kinds])[0]
            serving_used = serving_used or kind in _SERVING
            at = (i + rng.uniform(0.1, 0.6)) * d / len(fixed) if fixed else rng.uniform(0.1, 0.8) * d
            if kind == "bookie":
                events.append(_Event(at, kind, rng.uniform(0.5, 4.0), 2 if rng.random() < 0.2 else 1))
            elif kind == "producer":
                events.append(_Event(at, kind, rng.uniform(0.0, 1.5)))
            elif kind in ("isolate", "cut", "partition"):
                events.append(_Event(at, kind, rng.uniform(1.0, 2 * session_s)))
            elif kind == "pause":
                events.append(_Event(at, kind, session_s + rng.uniform(0.5, 6.0)))
            elif kind == "clock":
                events.append(_Event(at, kind, rng.uniform(2.0, 10.0)))
            elif kind == "disk-full":
                events.append(_Event(at, kind, rng.uniform(1.0, 8.0)))
            else:
                events.append(_Event(at, kind, rng.uniform(0.0, 2.0)))
            if fixed:
                # a fixed schedule gives each fault a slot of its own, so that none finds its
                # target held by the one before (a pause still outlasts the session timeout)
                slot_end = (i + 1) * d / len(fixed)
                floor = session_s + 0.5 if kind == "pause" else 0.5
                events[-1].down_s = max(floor, min(events[-1].down_s, 0.9 * (slot_end - at)))
        events.sort(key=lambda e: e.at_s)
        return events

    # --- faults -------------------------------------------------------------------------------

    def _restart(self, node: Node) -> None:
        for attempt in range(3):
            try:
                node.start()
                return
            except Exception as exc:
                if attempt == 2:
                    raise
                self.say(f"  ! {node.name} did not start ({exc.__class__.__name__}); retrying in 2 s")
                node.kill()
                time.sleep(2)

    def _free(self, names: list[str]) -> list[str]:
        return [n for n in names if n not in self.busy]

    def _hosts_of(self, role: str) -> list[str]:
        net = self.network
        assert net is not None
        if role == "producer":
            return self._free([n for n in net.hosts if n.startswith("p-")])
        return self._free([n for n in net.hosts if n == role or n.startswith(f"{role}-")])

    def mark(self, label: str) -> None:
        """A tentative crash now and a look at every consumer's connection (`History.settle`)."""
        with self.history.lock:
            self.history.mark_locked(label)
        self.marks.append((label, self.consumer_connections()))

    def consumer_connections(self) -> dict[str, dict[tuple[str, str, str], tuple[str, str]] | None]:
        """Per topic, each connected consumer's (address, connectedSince) by (topic, sub, name);
        None for a topic whose stats could not be read (within 3 s: the topics are asked at once)."""

        def one(t: TopicSpec) -> dict[tuple[str, str, str], tuple[str, str]] | None:
            try:
                stats: Any = self.dep.admin("GET", f"{t.rest_path}/stats", timeout=3)
            except Exception:
                return None
            conns = {}
            for sub, s in (stats.get("subscriptions") or {}).items():
                for c in s.get("consumers") or []:
                    conns[(t.topic, sub, c.get("consumerName", ""))] = (
                        str(c.get("address")),
                        str(c.get("connectedSince")),
                    )
            return conns

        with ThreadPoolExecutor(max_workers=len(self.topics)) as pool:
            return dict(zip([t.topic for t in self.topics], pool.map(one, self.topics), strict=True))

    def settle_marks(self) -> int:
        """Owe the marks' positions to the consumers whose connection closed after them."""
        final = ("", self.consumer_connections())
        snaps = [*self.marks, final]
        closed: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
        consumers = {
            (t.topic, s.name, f"{t.topic.rsplit('/', 1)[1]}-{s.name}-{i}")
            for t in self.topics
            for s in t.subs
            for i in range(s.consumers)
        }
        for c in consumers:
            last_label, last_conn = "", None
            for label, snap in snaps:
                conns = snap.get(c[0])
                if conns is None:
                    continue
                conn = conns.get(c)
                if last_conn is not None and conn != last_conn:
                    closed[last_label].add(c)
                last_conn = conn
                last_label = label if conn is not None else ""
        owed = sum(self.history.settle(label, closed.get(label, set())) for label, _ in self.marks)
        self.marks = []
        return owed

    def inject(self, cycle: int, event: _Event, rng: random.Random) -> _Fault | None:
        """Start one fault; None when it has no free target."""
        assert self.workload is not None
        now = time.monotonic()
        heal_at = now + event.down_s
        label = f"cycle {cycle} {event.kind}"
        net = self.network
        self.mark_seq += 1
        mark = f"{label} #{self.mark_seq}"
        multi = len(self.dep.serving()) > 1
        if event.kind == "bookie":
            live = self._free([n.name for n in self.dep.of_kind("bookie") if n.alive])
            if not live:
                return None
            victims = [self.dep.by_name(n) for n in rng.sample(live, min(event.count, len(live)))]
            for v in victims:
                v.kill()

            def heal() -> None:
                for v in victims:
                    self._restart(v)

            return _Fault(
                f"kill bookie{' x2' if len(victims) > 1 else ''}",
                f"SIGKILL {'+'.join(v.name for v in victims)}",
                {v.name for v in victims},
                heal,
                heal_at,
                now,
            )
        if event.kind == "producer":
            agents = [
                a
                for a in sorted(self.workload.producers.values(), key=lambda a: a.spec.name)
                if f"p-{a.spec.name}" not in self.busy
            ]
            if not agents:
                return None
            agent = rng.choice(agents)
            agent.kill()
            return _Fault(
                "kill producer",
                f"SIGKILL producer {agent.spec.name}",
                {f"p-{agent.spec.name}"},
                agent.start,
                heal_at,
                now,
            )
        if event.kind in _SERVING:
            nodes = self._free([n.name for n in self.dep.serving() if n.alive])
            if not nodes:
                return None
            node = self.dep.by_name(rng.choice(nodes))
            clean = event.kind.endswith("-clean")
            if multi:
                self.mark(mark)
                (node.stop if clean else node.kill)()
            elif clean:
                node.stop()
                with self.history.lock:
                    self.history.crash_locked(f"{label}: clean restart of {node.name}")
            else:
                with self.history.lock:
                    self.history.crash_locked(f"{label}: SIGKILL {node.name}")
                    node.kill()
            return _Fault(
                f"{'clean restart' if clean else 'kill'} {node.kind}",
                f"{'clean restart' if clean else 'SIGKILL'} {node.name}",
                {node.name},
                lambda: self._restart(node),
                heal_at,
                now,
            )
        assert net is not None
        return self._inject_network(event, rng, mark, heal_at, now)

    def _inject_network(
        self, event: _Event, rng: random.Random, mark: str, heal_at: float, now: float
    ) -> _Fault | None:
        net = self.network
        assert net is not None
        cluster = not isinstance(self.dep, StandaloneDeployment)

        def role(name: str) -> str:
            return "producer" if name.startswith("p-") else name.split("-")[0]

        if event.kind == "isolate":
            choices = self._free(list(net.hosts))
            if not choices:
                return None
            weights = [
                0.5 if n.startswith("p-") else 2.0 if role(n) in ("broker", "standalone") else 1.0 for n in choices
            ]
            host = rng.choices(choices, weights=weights)[0]
            self.mark(mark)
            net.set_link(host, False)
            return _Fault(
                f"isolate {role(host)}", f"isolate {host}", {host}, lambda: net.set_link(host, True), heal_at, now
            )
        if event.kind in ("cut", "partition"):
            if cluster:
                pairs = [
                    ("broker", "zk"),
                    ("broker", "bookie"),
                    ("bookie", "zk"),
                    ("broker", "broker"),
                    ("producer", "broker"),
                ]
                if event.kind == "cut":
                    pairs += [(b, a) for a, b in pairs if a != b]
            else:
                pairs = [("producer", "standalone")] + ([("standalone", "producer")] if event.kind == "cut" else [])
            rng.shuffle(pairs)
            for a_role, b_role in pairs:
                srcs = self._hosts_of(a_role)
                dsts = [d for d in self._hosts_of(b_role) if d not in srcs or a_role != b_role]
                if not srcs or not dsts:
                    continue
                src = rng.choice(srcs)
                dst = rng.choice([d for d in dsts if d != src] or [""])
                if not dst:
                    continue
                self.mark(mark)
                net.block(src, dst)
                if event.kind == "partition":
                    net.block(dst, src)

                def heal(src: str = src, dst: str = dst) -> None:
                    net.block(src, dst, False)
                    net.block(dst, src, False)

                arrow = "->" if event.kind == "cut" else "|"
                return _Fault(
                    f"{event.kind} {a_role}{arrow}{b_role}",
                    f"{event.kind} {src}{arrow}{dst}",
                    {src, dst},
                    heal,
                    heal_at,
                    now,
                )
            return None
        if event.kind == "pause":
            names = [n.name for n in self.dep.nodes if n.alive and n.kind in ("broker", "bookie", "standalone")]
            names = self._free(names)
            zk = getattr(self.dep, "zk", None)
            if cluster and zk is not None and "zk" not in self.busy:
                names.append("zk")
            if not names:
                return None
            name = rng.choices(
                names, weights=[0.5 if n == "zk" else 2.0 if n.startswith("broker") else 1.0 for n in names]
            )[0]
            self.mark(mark)
            if name == "zk":
                pid = zk.process.pid

                def stop_zk(sig: int) -> None:
                    if zk.process.poll() is None:
                        import os

                        os.kill(pid, sig)

                stop_zk(signal.SIGSTOP)
                return _Fault(
                    "pause zk",
                    f"SIGSTOP zk ({event.down_s:.1f}s)",
                    {"zk"},
                    lambda: stop_zk(signal.SIGCONT),
                    heal_at,
                    now,
                )
            node = self.dep.by_name(name)
            signal_node(node, signal.SIGSTOP)
            return _Fault(
                f"pause {node.kind}", f"SIGSTOP {name}", {name}, lambda: signal_node(node, signal.SIGCONT), heal_at, now
            )
        if event.kind == "clock":
            names = self._free([n.name for n in self.dep.nodes if n.clock is not None])
            if not names:
                return None
            node = self.dep.by_name(rng.choice(names))
            clock = node.clock
            assert clock is not None
            offset = int(rng.choice([-1, 1]) * rng.uniform(30, 900))
            self.mark(mark)
            clock.set(offset)
            return _Fault(
                f"clock {'forward' if offset > 0 else 'back'} {node.kind}",
                f"clock of {node.name} {offset:+d}s",
                {node.name},
                lambda: clock.set(0),
                heal_at,
                now,
            )
        if event.kind == "disk-full":
            names = self._free([n for n in net.disks])
            if not names:
                return None
            name = rng.choice(names)
            self.mark(mark)
            filled = net.fill_disk(name)
            return _Fault(
                f"disk-full {name.split('-')[0]}",
                f"disk of {name} full (+{filled >> 20} MiB)",
                {name},
                lambda: net.free_disk(name),
                heal_at,
                now,
            )
        raise ValueError(f"unknown fault kind {event.kind}")

    # --- run ----------------------------------------------------------------------------------

    def run(self) -> RunReport:
        started = time.monotonic()
        o = self.options
        self.say(
            f"chaos: {o.deploy}{' in test hosts' if o.netns else ''}"
            + (f" ({o.broker_count} brokers)" if o.deploy == "cluster" else "")
            + f", {o.cycles} cycles of {o.duration_s:g}s, seed {o.seed}, faults "
            f"{','.join(self.targets)}, cursor persist every {o.persist_interval_s:g}s, batching {o.batching}, "
            f"dedup {o.dedup}, workdir {self.workdir}"
        )
        try:
            if self.network is not None:
                self.network.create()
                self.say(
                    f"  test hosts on {self.network.subnet}.0/24 (harness {self.network.harness_address}), "
                    f"run {self.network.run}"
                )
            self.deployment = make_deployment(o.deploy, self.workdir / "servers", self.deploy_options, self.network)
            self.dep.start()
            wraps: dict[str, tuple[str, ...]] = {}
            if self.network is not None:
                for t in self.topics:
                    for p in t.producers:
                        wraps[p.name] = tuple(self.network.add_host(f"p-{p.name}").wrap())
            self.workload = Workload(
                self.history,
                self.topics,
                self.dep.service_url,
                self.dep.admin,
                self.workdir,
                AckPolicy(),
                random.Random(o.seed),
                producer_wrap=lambda name: wraps.get(name, ()),
            )
            self.workload.open()
            self.open_audits()
            for t in self.topics:
                self.say(
                    f"  topic {t.topic}: dedup {'on' if t.dedup else 'off'}, "
                    f"{'retained' if t.retained else 'default retention'}; producers "
                    f"{', '.join(p.describe() for p in t.producers)}; subscriptions "
                    f"{', '.join(f'{s.name} ({s.kind} x{s.consumers})' for s in t.subs)}"
                )
            for cycle in range(1, o.cycles + 1):
                found = self.cycle(cycle)
                self.report.cycles_done = cycle
                if found and o.stop_on_violation:
                    self.say("stopping at the first violation (the servers' data and logs are kept)")
                    break
            if self.report.ok or not o.stop_on_violation:
                self.final_checks()
        except Exception as exc:
            self.report.stalls.append(f"run aborted: {exc!r}")
            self.say(f"run aborted: {exc!r}")
            if self.deployment is not None:
                for node in self.deployment.nodes:
                    if not node.alive:
                        self.say(f"--- {node.name} (down) log tail:\n{node.log_tail()}")
            raise
        finally:
            self.report.totals = self.history.totals()
            self.report.owed_checked = self.history.owed_total
            self.report.seconds = time.monotonic() - started
            if self.cursors is not None:
                self.cursors.stop()
            if self.workload is not None:
                self.workload.close()
            if self.view is not None:
                self.view.close()
            self.trace.close()
            keep = not self.report.ok or bool(self.report.stalls) or o.keep
            if self.network is not None:
                self.network.heal()
            if self.deployment is not None:
                self.deployment.stop(keep_data=keep)
            if self.network is not None:
                if keep:
                    for name, disk in self.network.disks.items():
                        shutil.copytree(
                            disk, self.workdir / f"disk-{name}", dirs_exist_ok=True, ignore_dangling_symlinks=True
                        )
                self.network.destroy()
            self.summary()
            if self.report.ok and not self.report.stalls and not o.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)
        return self.report

    def open_audits(self) -> None:
        """The metadata view, storage audit and cursor watch of the deployment."""
        if self.dep.metadata_url:
            self.view = ZkView(self.dep.metadata_url)
        elif isinstance(self.dep, StandaloneDeployment):
            self.view = SqliteView(str(self.dep.node.data_dir / "metadata"))
        if self.view is None:
            return
        self.audit = StorageAudit(self.view, {t.topic for t in self.topics if t.retained})
        self.cursors = CursorWatch(self.view, [t.topic for t in self.topics])
        self.cursors.start()

    def run_faults(self, cycle: int) -> list[_Fault]:
        """The cycle's plan: inject at the planned offsets, heal each at its own time (heals that
        restart a process run on a thread of their own, so a later heal is never held up)."""
        o = self.options
        t0 = time.monotonic()
        rng = random.Random(f"{o.seed}:{cycle}:targets")
        queue: list[tuple[float, int, str, Any]] = []
        for i, event in enumerate(self.plan(cycle)):
            heapq.heappush(queue, (t0 + event.at_s, i, "inject", event))
        faults: list[_Fault] = []
        n = 1000
        while queue:
            at, _, action, item = heapq.heappop(queue)
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if action == "inject":
                fault = self.inject(cycle, item, rng)
                if fault is None and o.schedule and time.monotonic() < t0 + o.duration_s + 30:
                    # a fixed schedule's fault waits for its target to be free (a heal to finish)
                    n += 1
                    heapq.heappush(queue, (time.monotonic() + 0.2, n, "inject", item))
                    continue
                if fault is None:
                    self.say(f"  (no free target for {item.kind} @{item.at_s:.1f}s)")
                    continue
                # the fault is in effect from now (a mark's stats calls may have taken a while)
                fault.injected = time.monotonic()
                fault.heal_at = fault.injected + item.down_s
                self.busy |= fault.holds
                self.report.kills[fault.label] += 1
                fault.what = f"@{fault.injected - t0:.1f}s {fault.what}"
                faults.append(fault)
                n += 1
                heapq.heappush(queue, (fault.heal_at, n, "heal", fault))
            else:
                fault = item
                fault.healed = time.monotonic()

                def heal(f: _Fault = fault) -> None:
                    try:
                        f.heal()
                    finally:
                        f.done = time.monotonic()
                        self.busy -= f.holds

                fault.thread = threading.Thread(target=heal, daemon=True, name=f"heal-{fault.label}")
                fault.thread.start()
                fault.what += f" (healed after {fault.healed - fault.injected:.1f}s)"
        for f in faults:
            if f.thread is not None:
                f.thread.join(300)
        rest = t0 + o.duration_s - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        return faults

    def converge(self, since: float) -> float | None:
        """Wait until every running broker's lookup of every topic names one running owner that
        serves it; the seconds from ``since`` (the last heal), or None after the bound."""
        start = time.monotonic()
        deadline = start + self.options.converge_timeout_s
        self.unconverged = []
        first: list[str] = []
        while time.monotonic() < deadline:
            self.unconverged = [why for t in self.topics if (why := self._unconverged(t))]
            if not self.unconverged:
                took = time.monotonic() - since
                if first and time.monotonic() - start > 5:  # say what held it up
                    self.report.notes.append(f"converged {took:.1f}s after the last heal; first seen: {first[0]}")
                return took
            first = first or self.unconverged
            time.sleep(0.25)
        return None

    def _unconverged(self, topic: TopicSpec) -> str:
        """'' when every running broker's lookup names one running owner that serves ``topic``,
        else what is wrong."""
        nodes = [n for n in self.dep.serving_nodes() if n.alive]
        if not nodes:
            return "no serving node runs"
        owners: dict[str, str] = {}
        for n in nodes:
            try:
                r = httpx.get(
                    f"{n.admin_url}/lookup/v2/topic/{topic.rest_path.removeprefix('/admin/v2/')}",
                    timeout=10,
                    follow_redirects=True,
                )
            except httpx.HTTPError as exc:
                return f"{topic.topic}: lookup on {n.name} failed: {exc!r}"
            if r.status_code != 200:
                return f"{topic.topic}: lookup on {n.name}: {r.status_code} {r.text[:200]}"
            owners[n.name] = str(r.json().get("brokerUrl"))
        if len(set(owners.values())) != 1:
            return f"{topic.topic}: lookups disagree: {owners}"
        owner = next(iter(owners.values()))
        serving = [n for n in nodes if n.service_url == owner]
        if not serving:
            return f"{topic.topic}: lookups name {owner}, which is not a running broker"
        try:
            r = httpx.get(f"{serving[0].admin_url}{topic.rest_path}/stats", timeout=10)
        except httpx.HTTPError as exc:
            return f"{topic.topic}: stats on the owner {serving[0].name} failed: {exc!r}"
        return "" if r.status_code == 200 else f"{topic.topic}: stats on the owner {serving[0].name}: {r.status_code}"

    def await_receipts(self, since: float, timeout_s: float) -> list[str]:
        """Wait until every producer has had a receipt after ``since`` (writes are available
        again); the producers that had none within ``timeout_s``."""
        assert self.workload is not None
        deadline = time.monotonic() + timeout_s
        while True:
            with self.history.lock:
                times = self.history.receipt_times
                missing = [p for p in self.workload.producers if not any(t > since for t in times.get(p, ()))]
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.2)

    def recovery(self, faults: list[_Fault], times: dict[str, list[float]]) -> list[str]:
        """Record each heal's time to recover (module header); the lines for the cycle's report."""
        assert self.workload is not None
        out = []
        names = list(self.workload.producers)
        for f in faults:
            if not f.healed:
                continue
            ends = []
            for p in names:
                after = [t for t in times.get(p, []) if t > f.healed]
                ends.append(min(after) if after else None)
            if any(e is None for e in ends):
                out.append(f"{f.label}: not recovered")
                continue
            end = max(e for e in ends if e is not None)
            took = end - f.healed
            overlapped = any(g is not f and g.injected < end and (g.done or end) > f.healed for g in faults)
            (self.report.recovery_overlapped if overlapped else self.report.recovery)[f.label].append(took)
            out.append(f"{f.label} {took:.1f}s" + (" (overlapped)" if overlapped else ""))
        return out

    def cycle(self, cycle: int) -> bool:
        """One cycle; True when it found a violation."""
        assert self.workload is not None
        o = self.options
        t0 = time.monotonic()
        before = self.history.totals()
        owed_before = self.history.owed_total
        self.workload.resume_producers()
        if self.network is not None:
            self.mark(f"cycle {cycle} start")
        faults = self.run_faults(cycle)
        last_heal = max((f.done for f in faults), default=time.monotonic())
        extra: list[Violation] = []
        converged = None
        if self.network is not None:
            self.network.heal()  # nothing should be left; a fault whose heal failed is lifted here
        restarted = self.dep.ensure_up()
        # the invariants of network faults (ownership converging, writes answered after the last
        # heal) belong to runs in test hosts; runs with kills only keep their drain-and-check cycle
        if self.network is not None:
            converged = self.converge(last_heal)
            if converged is None:
                extra.append(
                    Violation(
                        "ownership",
                        "*",
                        "",
                        f"ownership did not converge within "
                        f"{o.converge_timeout_s:g}s of the last heal: {'; '.join(self.unconverged)}",
                    )
                )
            else:
                self.report.converge.append(converged)
        stuck = self.await_receipts(last_heal, o.pause_timeout_s) if self.network is not None else []
        if stuck:
            extra.append(
                Violation(
                    "unavailable",
                    "*",
                    "",
                    f"producers {stuck} had no receipt within {o.pause_timeout_s:g}s of the last heal",
                )
            )
        late = self.workload.pause_producers(o.pause_timeout_s)
        if late:
            extra.append(
                Violation(
                    "unavailable",
                    "*",
                    "",
                    f"producers {late} still had unanswered sends {o.pause_timeout_s:g}s after every fault was healed",
                )
            )
        restarted += self.dep.ensure_up()
        owed_now = self.settle_marks() if self.network is not None else 0
        drained = self.workload.drain(o.drain_timeout_s)
        violations = self.history.check() + extra
        receipts, times = self.history.take_receipts()
        recovered = self.recovery(faults, times)
        audit_line = ""
        if self.audit is not None:
            result = self.audit.audit(receipts)
            violations += result.violations
            self.report.audited_entries += result.entries
            self.report.notes += [f"cycle {cycle}: {n}" for n in result.notes]
            self.report.inconclusive_entries += result.inconclusive
            audit_line = f" | audit {result.entries} entries" + (
                f" ({result.inconclusive} inconclusive)" if result.inconclusive else ""
            )
        if self.cursors is not None:
            try:
                self.cursors.poll()
            except Exception as exc:
                self.report.notes.append(f"cycle {cycle}: cursor poll failed: {exc!r}")
            violations += self.cursors.take()
        if self.workload.broker_seq_regressions:
            self.report.notes += [f"cycle {cycle}: {r}" for r in self.workload.broker_seq_regressions]
            self.workload.broker_seq_regressions.clear()
        after = self.history.totals()
        diff = {k: after[k] - before.get(k, 0) for k in after}
        counts = Counter(v.invariant for v in violations)
        self.say(
            f"cycle {cycle}/{o.cycles}: {'; '.join(f.what for f in faults) or 'no faults'}"
            + (f"; restarted {restarted}" if restarted else "")
            + f" | sent {diff['sent']} receipted {diff['receipted']} delivered {diff['delivered']} "
            f"(redelivered {diff['redelivered']}) acks {diff['acks']}, owed after crashes "
            f"{self.history.owed_total - owed_before}"
            + (f" ({owed_now} after reconnects)" if owed_now else "")
            + (f" | recovered: {', '.join(recovered)}" if recovered else "")
            + (f" | converged {converged:.1f}s" if converged is not None else "")
            + audit_line
            + " | "
            + " ".join(f"{k} {counts[k]}" for k in INVARIANTS if counts[k] or k in ("loss", "skip", "order"))
            + ("" if drained else " (drain timed out)")
            + f" | {time.monotonic() - t0:.0f}s"
        )
        if violations:
            self.report.violations += violations
            for v in violations:
                self.say(f"  VIOLATION {v}")
            self.dump_diagnostics(f"cycle-{cycle}", violations)
        return bool(violations)

    def final_checks(self) -> None:
        """Ack everything, drain, then scan every retained topic with a reader."""
        assert self.workload is not None
        self.workload.pause_producers(self.options.pause_timeout_s)
        for c in self.workload.consumers:
            c.ack_all = True
        self.workload.drain(self.options.drain_timeout_s)
        violations = self.history.check()
        scans: dict[str, ScanResult] = {}
        for t in self.topics:
            if not t.retained:
                continue
            scan = scan_topic(self.workload.client, t.topic)
            scans[t.topic] = scan
            found, notes = check_scan(
                self.history, scan, dedup=t.dedup, batch_sizes={p.name: p.batch for p in t.producers}
            )
            violations += found
            self.report.notes += notes
            self.say(
                f"scan {t.topic}: {len(scan.messages)} stored messages, "
                f"{len({k for _, k in scan.messages})} distinct keys; {len(found)} violations"
            )
        # an earlier order candidate may be explained by a copy at a lower position
        self.report.violations, explained = resolve_order(self.report.violations + violations, scans)
        if explained:
            self.report.notes.append(f"{explained} order candidates explained by an earlier stored copy")
        for v in violations:
            if v in self.report.violations:
                self.say(f"  VIOLATION {v}")
        if violations:
            self.dump_diagnostics("final", violations)

    def dump_diagnostics(self, label: str, violations: list[Violation]) -> None:
        """Write each affected topic's internal stats (ledgers, cursors) and, for a retained topic,
        a reader's scan next to the logs; print the cursors and where the violating keys are stored."""
        assert self.workload is not None
        for t in self.topics:
            keys = {k for v in violations if v.topic == t.topic for k in v.keys}
            if not any(v.topic == t.topic for v in violations):
                continue
            short = t.topic.rsplit("/", 1)[1]
            try:
                stats: Any = self.dep.admin("GET", f"{t.rest_path}/internalStats")
            except Exception as exc:
                self.say(f"  (internalStats of {t.topic} failed: {exc})")
                stats = {}
            path = self.workdir / f"{label}-{short}-internalStats.json"
            path.write_text(json.dumps(stats, indent=2))
            self.say(f"  internalStats of {t.topic} -> {path}")
            for name, cursor in sorted((stats.get("cursors") or {}).items()):
                ranges = str(cursor.get("individuallyDeletedMessages", ""))
                self.say(
                    f"    cursor {name}: markDelete {cursor.get('markDeletePosition')} read "
                    f"{cursor.get('readPosition')} ranges {ranges[:300]}{'...' if len(ranges) > 300 else ''}"
                )
            if not t.retained:
                continue
            try:
                scan = scan_topic(self.workload.client, t.topic)
            except Exception as exc:
                self.say(f"  (scan of {t.topic} failed: {exc})")
                continue
            path = self.workdir / f"{label}-{short}-scan.txt"
            path.write_text("".join(f"{p[0]}:{p[1]}:{p[2]} {k[0]}:{k[1]}\n" for p, k in scan.messages))
            where: dict[tuple[str, int], list[str]] = {}
            for p, k in scan.messages:
                if k in keys:
                    where.setdefault(k, []).append(f"{p[0]}:{p[1]}:{p[2]}")
            self.say(f"  reader scan of {t.topic} ({len(scan.messages)} messages) -> {path}")
            for k in sorted(keys)[:20]:
                self.say(f"    {k[0]}:{k[1]} stored at {where.get(k, ['nowhere'])}")

    def summary(self) -> None:
        r = self.report
        t = r.totals
        kills = ", ".join(f"{k} {n}" for k, n in sorted(r.kills.items())) or "none"
        self.say(
            f"summary: {r.cycles_done} cycles in {r.seconds:.0f}s; faults: {kills}; sent {t.get('sent', 0)}, "
            f"receipted {t.get('receipted', 0)}, send failures {t.get('failed', 0)}, delivered "
            f"{t.get('delivered', 0)} (redelivered {t.get('redelivered', 0)}), acks {t.get('acks', 0)}, "
            f"unacked positions owed a redelivery after crashes {r.owed_checked}"
        )
        if r.audited_entries:
            self.say(
                f"storage audit: {r.audited_entries} receipted entries read back from their write sets"
                + (
                    f", {r.inconclusive_entries} inconclusive (a bookie did not answer)"
                    if r.inconclusive_entries
                    else ""
                )
            )
        if r.converge:
            self.say(
                f"ownership converged after the last heal of each cycle: p50 "
                f"{statistics.median(r.converge):.1f}s, max {max(r.converge):.1f}s"
            )
        rows = r.recovery_table()
        if rows:
            self.say("time to recover after each heal (every producer receipted again):")
            for label, n, p50, top, overlapped in rows:
                self.say(
                    f"  {label:<28} {n:>4} heals  p50 {p50:6.1f}s  max {top:6.1f}s"
                    + (f"  (+{overlapped} overlapped)" if overlapped else "")
                )
        for n in r.notes:
            self.say(f"  note: {n}")
        for s in r.stalls:
            self.say(f"  stall: {s}")
        counts = Counter(v.invariant for v in r.violations)
        keys: dict[str, set[tuple[str, str, int]]] = {}
        for v in r.violations:
            keys.setdefault(v.invariant, set()).update((v.topic, p, s) for p, s in v.keys)
        distinct = ", ".join(f"{k} {len(ks)}" for k, ks in sorted(keys.items()))
        self.say(
            f"violations: {len(r.violations)} ({', '.join(f'{k} {counts[k]}' for k in INVARIANTS)})"
            + (f"; distinct messages involved: {distinct}" if distinct else "")
            + (f"; data and logs kept in {r.workdir}" if not r.ok or r.stalls or self.options.keep else "")
        )
