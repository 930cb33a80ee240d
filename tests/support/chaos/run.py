"""The chaos run: cycles of a random fault plan against a real deployment while the workload
runs, each ending with a drain and a check of every invariant (see `checker`).

One cycle:

1. producers resume (a killed producer process was restarted by its own event);
2. the cycle's plan runs: at random offsets within ``duration_s``, SIGKILL a node kind from
   ``targets`` (``bookie``: one or two bookies; ``broker`` / ``standalone``: the process serving
   the topics, at most once per cycle; ``broker-clean`` / ``standalone-clean``: a clean restart;
   ``producer``: one producer process), keep it down a random while, start it again on the same
   ports and data;
3. producers pause (everything they sent is answered), every node is up, consumers drain until
   every receipted message was delivered and every redelivery a crash owes has happened (or
   ``drain_timeout_s`` passes);
4. the checker reports loss, skip and order violations.

After the last cycle a reader scans each retained topic from the earliest position: loss at the
storage level, storage order and, with deduplication on, duplicates. The plan of cycle ``c`` is
drawn from ``random.Random(f"{seed}:{c}")``, so a seed replays the same faults (their timing
against the traffic still varies).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .checker import History, ScanResult, Violation, check_scan, resolve_order
from .deploy import Deployment, DeployOptions, Node, make_deployment
from .producer import ProducerSpec
from .workload import AckPolicy, SubSpec, TopicSpec, Workload, scan_topic

__all__ = ["RunOptions", "RunReport", "ChaosRun", "DEFAULT_TARGETS", "build_topics"]

DEFAULT_TARGETS = {"cluster": ("bookie", "broker", "broker-clean", "producer"),
                   "standalone": ("standalone", "standalone-clean", "producer")}
_WEIGHTS = {"bookie": 4, "broker": 4, "standalone": 4, "broker-clean": 1, "standalone-clean": 1, "producer": 2}
_SERVING = {"broker", "broker-clean", "standalone", "standalone-clean"}


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
    batching: str = "mixed"       # off | on | mixed
    dedup: str = "both"           # off | on | both
    trim_topic: bool = True
    rate: float = 50.0
    size: int = 100
    batch_size: int = 10
    ledger_entries: int = 200
    drain_timeout_s: float = 90.0
    pause_timeout_s: float = 120.0
    stop_on_violation: bool = True
    workdir: Path | None = None
    keep: bool = False

    def kill_targets(self) -> tuple[str, ...]:
        targets = self.targets or DEFAULT_TARGETS[self.deploy]
        allowed = set(DEFAULT_TARGETS[self.deploy])
        bad = [t for t in targets if t not in allowed]
        if bad:
            raise ValueError(f"kill targets {bad} do not exist in a {self.deploy} deployment "
                             f"(choose from {sorted(allowed)})")
        return tuple(targets)


@dataclass
class RunReport:
    """What a run did and found."""

    cycles_done: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    totals: dict[str, int] = field(default_factory=dict)
    owed_checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stalls: list[str] = field(default_factory=list)
    workdir: Path | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def build_topics(options: RunOptions) -> list[TopicSpec]:
    """The topics a run uses: per deduplication mode a retained topic with a batched and/or an
    unbatched producer and three subscriptions (Shared with 2 consumers and batch-index acks,
    Exclusive with cumulative acks, Failover with 2 consumers); optionally a topic with the
    default retention (consumed ledgers are trimmed) and an unbatched producer."""
    modes = {"off": [False], "on": [True], "both": [False, True]}[options.dedup]
    batches = {"off": [1], "on": [options.batch_size], "mixed": [1, options.batch_size]}[options.batching]
    subs = [SubSpec("shared", "shared", 2, batch_index_ack=True), SubSpec("excl", "exclusive", 1),
            SubSpec("fail", "failover", 2)]
    topics = []
    for dedup in modes:
        label = "dedup" if dedup else "plain"
        t = TopicSpec(f"persistent://public/chaos-{label}/{label}", dedup=dedup, retained=True, subs=list(subs))
        for b in batches:
            kind = "b" if b > 1 else "u"
            t.producers.append(ProducerSpec(t.topic, f"{label}-{kind}", batch=b, rate=options.rate, size=options.size))
        topics.append(t)
    if options.trim_topic:
        t = TopicSpec("persistent://public/chaos-trim/trim", dedup=False, retained=False,
                      subs=[SubSpec("shared", "shared", 2), SubSpec("excl", "exclusive", 1)])
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


class ChaosRun:
    """One run (see the module header); `run` returns the `RunReport` and prints as it goes."""

    def __init__(self, options: RunOptions, out: TextIO = sys.stdout) -> None:
        self.options = options
        self.out = out
        self.targets = options.kill_targets()
        self.report = RunReport()
        self.workdir = options.workdir or Path(tempfile.mkdtemp(prefix="magnetar-chaos-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.trace = open(self.workdir / "trace.txt", "w", buffering=1 << 20)  # noqa: SIM115 - closed by run
        self.history = History(trace=self.trace)
        self.report.workdir = self.workdir
        self.deployment: Deployment = make_deployment(
            options.deploy, self.workdir / "servers",
            DeployOptions(persist_interval_s=options.persist_interval_s, ledger_entries=options.ledger_entries))
        self.topics = build_topics(options)
        self.workload: Workload | None = None

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # --- plan ---------------------------------------------------------------------------------

    def plan(self, cycle: int) -> list[_Event]:
        """The faults of ``cycle`` (deterministic in seed and cycle)."""
        rng = random.Random(f"{self.options.seed}:{cycle}")
        d = self.options.duration_s
        events: list[_Event] = []
        serving_used = False
        for _ in range(rng.randint(1, max(1, self.options.max_kills))):
            kinds = [k for k in self.targets if not (k in _SERVING and serving_used)]
            if not kinds:
                break
            kind = rng.choices(kinds, weights=[_WEIGHTS[k] for k in kinds])[0]
            serving_used = serving_used or kind in _SERVING
            at = rng.uniform(0.1, 0.8) * d
            if kind == "bookie":
                events.append(_Event(at, kind, rng.uniform(0.5, 4.0), 2 if rng.random() < 0.2 else 1))
            elif kind == "producer":
                events.append(_Event(at, kind, rng.uniform(0.0, 1.5)))
            else:
                events.append(_Event(at, kind, rng.uniform(0.0, 2.0)))
        events.sort(key=lambda e: e.at_s)
        return events

    # --- faults -------------------------------------------------------------------------------

    def _restart(self, node: Node) -> None:
        try:
            node.start()
        except Exception as exc:
            self.say(f"  ! {node.name} did not start ({exc.__class__.__name__}); retrying in 2 s")
            time.sleep(2)
            node.start()

    def execute(self, cycle: int, event: _Event, rng: random.Random) -> str:
        """Apply one fault; a description of what was done."""
        assert self.workload is not None
        label = f"cycle {cycle} {event.kind}"
        if event.kind == "bookie":
            live = [n for n in self.deployment.of_kind("bookie") if n.alive]
            victims = rng.sample(live, min(event.count, len(live)))
            for v in victims:
                v.kill()
            self.report.kills["bookie"] += len(victims)
            time.sleep(event.down_s)
            for v in victims:
                self._restart(v)
            return f"SIGKILL {'+'.join(v.name for v in victims)} ({event.down_s:.1f}s down)"
        if event.kind == "producer":
            agent = rng.choice(sorted(self.workload.producers.values(), key=lambda a: a.spec.name))
            agent.kill()
            self.report.kills["producer"] += 1
            time.sleep(event.down_s)
            agent.start()
            return f"SIGKILL producer {agent.spec.name} (resumes at {agent.next_seq})"
        node = rng.choice(self.deployment.serving())
        if event.kind.endswith("-clean"):
            node.stop()
            with self.history.lock:
                self.history.crash_locked(f"{label}: clean restart of {node.name}")
            self.report.kills[event.kind] += 1
            what = f"clean restart {node.name}"
        else:
            with self.history.lock:
                self.history.crash_locked(f"{label}: SIGKILL {node.name}")
                node.kill()
            self.report.kills[event.kind] += 1
            what = f"SIGKILL {node.name}"
        time.sleep(event.down_s)
        self._restart(node)
        return f"{what} ({event.down_s:.1f}s down)"

    # --- run ----------------------------------------------------------------------------------

    def run(self) -> RunReport:
        started = time.monotonic()
        o = self.options
        self.say(f"chaos: {o.deploy}, {o.cycles} cycles of {o.duration_s:g}s, seed {o.seed}, kill targets "
                 f"{','.join(self.targets)}, cursor persist every {o.persist_interval_s:g}s, batching {o.batching}, "
                 f"dedup {o.dedup}, workdir {self.workdir}")
        try:
            self.deployment.start()
            self.workload = Workload(self.history, self.topics, self.deployment.service_url, self.deployment.admin,
                                     self.workdir, AckPolicy(), random.Random(o.seed))
            self.workload.open()
            for t in self.topics:
                self.say(f"  topic {t.topic}: dedup {'on' if t.dedup else 'off'}, "
                         f"{'retained' if t.retained else 'default retention'}; producers "
                         f"{', '.join(p.describe() for p in t.producers)}; subscriptions "
                         f"{', '.join(f'{s.name} ({s.kind} x{s.consumers})' for s in t.subs)}")
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
            for node in self.deployment.nodes:
                if not node.alive:
                    self.say(f"--- {node.name} (down) log tail:\n{node.log_tail()}")
            raise
        finally:
            self.report.totals = self.history.totals()
            self.report.owed_checked = self.history.owed_total
            self.report.seconds = time.monotonic() - started
            if self.workload is not None:
                self.workload.close()
            self.trace.close()
            self.deployment.stop(keep_data=not self.report.ok or bool(self.report.stalls) or o.keep)
            self.summary()
            if self.report.ok and not self.report.stalls and not o.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)
        return self.report

    def cycle(self, cycle: int) -> bool:
        """One cycle; True when it found a violation."""
        assert self.workload is not None
        o = self.options
        t0 = time.monotonic()
        rng = random.Random(f"{o.seed}:{cycle}:targets")
        before = self.history.totals()
        owed_before = self.history.owed_total
        self.workload.resume_producers()
        done = []
        for event in self.plan(cycle):
            delay = t0 + event.at_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            done.append(f"@{time.monotonic() - t0:.1f}s {self.execute(cycle, event, rng)}")
        rest = t0 + o.duration_s - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        late = self.workload.pause_producers(o.pause_timeout_s)
        if late:
            self.report.stalls.append(f"cycle {cycle}: producers {late} still had unanswered sends after "
                                      f"{o.pause_timeout_s:g}s")
        restarted = self.deployment.ensure_up()
        drained = self.workload.drain(o.drain_timeout_s)
        violations = self.history.check()
        if self.workload.broker_seq_regressions:
            self.report.notes += [f"cycle {cycle}: {r}" for r in self.workload.broker_seq_regressions]
            self.workload.broker_seq_regressions.clear()
        after = self.history.totals()
        diff = {k: after[k] - before.get(k, 0) for k in after}
        counts = Counter(v.invariant for v in violations)
        self.say(f"cycle {cycle}/{o.cycles}: {'; '.join(done) or 'no faults'}"
                 + (f"; restarted {restarted}" if restarted else "")
                 + f" | sent {diff['sent']} receipted {diff['receipted']} delivered {diff['delivered']} "
                   f"(redelivered {diff['redelivered']}) acks {diff['acks']}, owed after crashes "
                   f"{self.history.owed_total - owed_before}"
                 + f" | loss {counts['loss']} skip {counts['skip']} order {counts['order']}"
                 + ("" if drained else " (drain timed out)") + (f" | late producers {late}" if late else "")
                 + f" | {time.monotonic() - t0:.0f}s")
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
            found, notes = check_scan(self.history, scan, dedup=t.dedup,
                                      batch_sizes={p.name: p.batch for p in t.producers})
            violations += found
            self.report.notes += notes
            self.say(f"scan {t.topic}: {len(scan.messages)} stored messages, "
                     f"{len({k for _, k in scan.messages})} distinct keys; {len(found)} violations")
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
                stats: Any = self.deployment.admin("GET", f"{t.rest_path}/internalStats")
            except Exception as exc:
                self.say(f"  (internalStats of {t.topic} failed: {exc})")
                stats = {}
            path = self.workdir / f"{label}-{short}-internalStats.json"
            path.write_text(json.dumps(stats, indent=2))
            self.say(f"  internalStats of {t.topic} -> {path}")
            for name, cursor in sorted((stats.get("cursors") or {}).items()):
                ranges = str(cursor.get("individuallyDeletedMessages", ""))
                self.say(f"    cursor {name}: markDelete {cursor.get('markDeletePosition')} read "
                         f"{cursor.get('readPosition')} ranges {ranges[:300]}{'...' if len(ranges) > 300 else ''}")
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
        self.say(f"summary: {r.cycles_done} cycles in {r.seconds:.0f}s; kills: {kills}; sent {t.get('sent', 0)}, "
                 f"receipted {t.get('receipted', 0)}, send failures {t.get('failed', 0)}, delivered "
                 f"{t.get('delivered', 0)} (redelivered {t.get('redelivered', 0)}), acks {t.get('acks', 0)}, "
                 f"unacked positions owed a redelivery after crashes {r.owed_checked}")
        for n in r.notes:
            self.say(f"  note: {n}")
        for s in r.stalls:
            self.say(f"  stall: {s}")
        counts = Counter(v.invariant for v in r.violations)
        keys: dict[str, set[tuple[str, str, int]]] = {}
        for v in r.violations:
            keys.setdefault(v.invariant, set()).update((v.topic, p, s) for p, s in v.keys)
        distinct = ", ".join(f"{k} {len(ks)}" for k, ks in sorted(keys.items()))
        self.say(f"violations: {len(r.violations)} (loss {counts['loss']}, skip {counts['skip']}, order "
                 f"{counts['order']}, duplicate {counts['duplicate']})"
                 + (f"; distinct messages involved: {distinct}" if distinct else "")
                 + (f"; data and logs kept in {r.workdir}" if not r.ok or r.stalls or self.options.keep else ""))
