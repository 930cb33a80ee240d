"""Deterministic scenarios, checked with the same `History` as the random cycles.

``holes-after-restart`` (a user's report of skipped messages): a Shared subscription; messages
0..999; ack 0..499 and the even ids of 500..599; a clean restart (the exact unacked set must come
back: odd 501..599 and 600..999); produce 1,000..1,099; ack 600..1,049 individually; wait 1.5 s;
SIGKILL the broker (or standalone); restart. Every message not acknowledged (odd 501..599 and
1,050..1,099) must be delivered again; a redelivery of 600..1,049 is allowed (their acks may not
have been persisted).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pulsar

from .checker import History, Violation
from .deploy import DeployOptions, make_deployment
from .producer import payload_key
from .workload import position

__all__ = ["ScenarioReport", "holes_after_restart", "SCENARIOS"]


@dataclass
class ScenarioReport:
    """What a scenario found: invariant violations, and its own expectations that failed."""

    name: str
    violations: list[Violation] = field(default_factory=list)
    failed_expectations: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    workdir: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.violations and not self.failed_expectations


def _ids(keys: set[tuple[str, int]]) -> list[int]:
    return sorted(s for _, s in keys)


def _ranges_text(ids: list[int]) -> str:
    """Sorted ids as arithmetic runs: ``[501, 503, 505, 600, 601]`` -> ``501..505/2, 600..601``."""
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i + 1
        step = ids[j] - ids[i] if j < len(ids) else 1
        while j + 1 < len(ids) and ids[j + 1] - ids[j] == step:
            j += 1
        if j < len(ids) and j - i >= 2:
            parts.append(f"{ids[i]}..{ids[j]}" + (f"/{step}" if step != 1 else ""))
            i = j + 1
        else:
            parts.append(str(ids[i]))
            i += 1
    text = ", ".join(parts[:40]) + (" ..." if len(parts) > 40 else "")
    return f"[{text}] ({len(ids)})"


class _Session:
    """The scenario's one producer and one Shared consumer, recording into a `History`."""

    def __init__(self, history: History, url: str, topic: str, batching: bool, log: Path) -> None:
        self.history = history
        self.topic = topic
        self.client = pulsar.Client(
            url, operation_timeout_seconds=30, logger=pulsar.FileLogger(pulsar.LoggerLevel.Info, str(log))
        )
        history.add_subscription(topic, "s", ordered=False)
        history.add_producer(topic, "p")
        self.consumer = self.client.subscribe(
            topic,
            "s",
            consumer_type=pulsar.ConsumerType.Shared,
            consumer_name="c",
            initial_position=pulsar.InitialPosition.Earliest,
            batch_index_ack_enabled=batching,
        )
        self.producer = self.client.create_producer(
            topic, producer_name="p", batching_enabled=batching, block_if_queue_full=True, send_timeout_millis=0
        )
        self.held: dict[int, Any] = {}  # seq -> last message received and not acked

    def produce(self, ids: range) -> None:
        """Send ``ids`` (sequence id = id) and wait for every receipt."""
        done = threading.Semaphore(0)

        def callback(seq: int) -> Callable[[Any, Any], None]:
            def cb(res: Any, _mid: Any) -> None:
                if res == pulsar.Result.Ok:
                    self.history.receipt("p", seq)
                done.release()

            return cb

        for i in ids:
            self.producer.send_async(f"p|{i}|".encode(), callback(i), sequence_id=i)
        for _ in ids:
            if not done.acquire(timeout=120):
                raise RuntimeError("a send got no answer within 120 s")

    def receive(self, until: Callable[[set[int]], bool], timeout: float, quiet_ms: int = 2000) -> set[int]:
        """Receive (without acking) until ``until(ids received in this call)`` holds and nothing
        more came for ``quiet_ms``, or ``timeout``; the ids received."""
        got: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.consumer.receive(timeout_millis=quiet_ms if until(got) else 200)
            except pulsar.Timeout:
                if until(got):
                    break
                continue
            key = payload_key(msg.data())
            self.history.delivered(self.topic, "s", "c", key, position(msg))
            self.held[key[1]] = msg
            got.add(key[1])
        return got

    def ack(self, ids: Callable[[int], bool]) -> int:
        """Acknowledge (individually) every held message whose id satisfies ``ids``."""
        n = 0
        for seq in sorted(s for s in self.held if ids(s)):
            msg = self.held.pop(seq)
            self.history.acked(self.topic, "s", ("p", seq), position(msg))
            self.consumer.acknowledge(msg)
            n += 1
        return n

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:
            pass


def holes_after_restart(
    deploy: str,
    *,
    persist_interval_s: float = 1.0,
    batching: bool = False,
    ledger_entries: int = 0,
    workdir: Path | None = None,
    keep: bool = False,
    out: TextIO = sys.stdout,
) -> ScenarioReport:
    """Run the scenario of the module header on a fresh ``deploy`` (cluster or standalone);
    ``ledger_entries`` rolls ledgers after that many entries (0: the servers' default)."""
    name = f"holes-after-restart/{deploy}/persist={persist_interval_s:g}s/{'batched' if batching else 'unbatched'}" + (
        f"/ledgers of {ledger_entries}" if ledger_entries else ""
    )
    report = ScenarioReport(name)
    base = workdir or Path(tempfile.mkdtemp(prefix="magnetar-chaos-scenario-"))
    report.workdir = base
    dep = make_deployment(
        deploy, base / "servers", DeployOptions(persist_interval_s=persist_interval_s, ledger_entries=ledger_entries)
    )
    history = History()
    topic = "persistent://public/holes/t"
    internal = "/admin/v2/persistent/public/holes/t/internalStats"

    def say(text: str) -> None:
        print(f"[{name}] {text}", file=out, flush=True)

    def cursor() -> dict[str, Any]:
        stats: Any = dep.admin("GET", internal)
        report.stats.setdefault("snapshots", []).append(stats)
        return dict((stats.get("cursors") or {}).get("s") or {})

    def expect(what: str, ok: bool) -> None:
        if not ok:
            report.failed_expectations.append(what)
            say(f"EXPECTATION FAILED: {what}")

    session: _Session | None = None
    try:
        dep.start()
        dep.admin("PUT", "/admin/v2/namespaces/public/holes", ok=(200, 204, 409))
        session = _Session(history, dep.service_url, topic, batching, base / "client.log")
        session.produce(range(1000))
        got = session.receive(lambda g: len(g) >= 1000, 60)
        expect(f"first delivery of 0..999 (got {len(got)})", got == set(range(1000)))
        session.ack(lambda i: i < 500 or (i < 600 and i % 2 == 0))
        time.sleep(1.5)  # grouped acks flushed (100 ms) and persisted
        node = dep.serving()[0]
        node.stop()
        with history.lock:
            history.crash_locked("clean restart")
        node.start()
        c = cursor()
        say(
            f"after the clean restart: markDelete {c.get('markDeletePosition')}, "
            f"{c.get('totalNonContiguousDeletedMessagesRange')} acked ranges"
        )
        unacked = set(range(501, 600, 2)) | set(range(600, 1000))
        session.held.clear()
        got = session.receive(lambda g: unacked <= g, 60)
        say(f"redelivered after the clean restart: {_ranges_text(sorted(got))}")
        expect(
            f"after the clean restart exactly the unacked set comes back; missing "
            f"{_ranges_text(sorted(unacked - got))}, acked but redelivered {_ranges_text(sorted(got - unacked))}",
            got == unacked,
        )
        session.produce(range(1000, 1100))
        got = session.receive(lambda g: set(range(1000, 1100)) <= g, 60)
        session.ack(lambda i: 600 <= i <= 1049)
        time.sleep(1.5)
        c = cursor()
        say(
            f"before SIGKILL: markDelete {c.get('markDeletePosition')}, "
            f"{c.get('totalNonContiguousDeletedMessagesRange')} acked ranges"
        )
        with history.lock:
            history.crash_locked("SIGKILL")
            node.kill()
        node.start()
        c = cursor()
        say(
            f"after SIGKILL + restart: markDelete {c.get('markDeletePosition')}, "
            f"ranges {str(c.get('individuallyDeletedMessages'))[:200]}"
        )
        owed = set(range(501, 600, 2)) | set(range(1050, 1100))
        session.held.clear()
        got = session.receive(lambda g: owed <= g, 60, quiet_ms=3000)
        say(f"delivered after the restart: {_ranges_text(sorted(got))}")
        report.violations = history.check()
        expect(
            f"after SIGKILL every unacked message comes back; missing {_ranges_text(sorted(owed - got))}", owed <= got
        )
    finally:
        if session is not None:
            session.close()
        dep.stop(keep_data=keep or not report.ok)
        if report.ok and not keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            (base / "scenario-stats.json").write_text(json.dumps(report.stats, indent=1, default=str))
    for v in report.violations:
        say(f"VIOLATION {v}")
    say("ok" if report.ok else f"FAILED; data, logs and internal stats kept in {base}")
    return report


SCENARIOS = {"holes-after-restart": holes_after_restart}
