"""The chaos run's clients: producer processes (`producer`) and consumer threads that
acknowledge at random, leaving holes, all recording into one `History`.

Topics and subscriptions (`TopicSpec`, `SubSpec`) are declared up front; `Workload.open`
subscribes every subscription before any producer starts, so every durable subscription exists
before the first message is sent.

Ack policy (`AckPolicy`), drawn for every delivery, redeliveries included:

* ack at once (individually, or on Exclusive/Failover with probability ``cumulative``
  cumulatively up to this message);
* hold: ack later, after a random delay up to ``hold_max_s`` (a hole that closes by itself); a
  held ack whose delivery came before a broker crash is dropped (the message is redelivered);
* never ack this delivery (a hole that stays until the message is delivered again).

A delivery and the ack decided for it are recorded in one critical section of the history lock,
and the crash is recorded under the same lock while the process is killed, so the checker knows
exactly which acks were issued before each crash.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

from .checker import History, Pos, ScanResult
from .producer import ProducerAgent, ProducerSpec, payload_key

__all__ = ["AckPolicy", "SubSpec", "TopicSpec", "ConsumerWorker", "Workload", "scan_topic", "position"]

_TYPES = {
    "shared": pulsar.ConsumerType.Shared,
    "exclusive": pulsar.ConsumerType.Exclusive,
    "failover": pulsar.ConsumerType.Failover,
}


def position(msg: Any) -> Pos:
    """(ledger, entry, batch index) of a received message."""
    mid = msg.message_id()
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


@dataclass(frozen=True)
class AckPolicy:
    """Probabilities per delivery (the rest: never ack this delivery)."""

    ack: float = 0.75
    hold: float = 0.17
    cumulative: float = 0.05
    hold_max_s: float = 4.0


@dataclass(frozen=True)
class SubSpec:
    """A subscription: ``kind`` shared, exclusive or failover; ``consumers`` in it."""

    name: str
    kind: str
    consumers: int = 1
    batch_index_ack: bool = False

    @property
    def ordered(self) -> bool:
        return self.kind in ("exclusive", "failover")


@dataclass
class TopicSpec:
    """A topic and its namespace policies: ``dedup`` (namespace deduplication), ``retained``
    (infinite retention, so a reader can scan everything at the end)."""

    topic: str
    dedup: bool
    retained: bool
    producers: list[ProducerSpec] = field(default_factory=list)
    subs: list[SubSpec] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return "/".join(self.topic.removeprefix("persistent://").split("/")[:2])

    @property
    def rest_path(self) -> str:
        return "/admin/v2/persistent/" + self.topic.removeprefix("persistent://")


@dataclass
class _Held:
    due: float
    msg: Any
    key: tuple[str, int]
    pos: Pos


class ConsumerWorker:
    """One consumer and the thread that receives and acknowledges for it."""

    def __init__(
        self,
        history: History,
        consumer: Any,
        topic: str,
        sub: SubSpec,
        name: str,
        policy: AckPolicy,
        rng: random.Random,
    ) -> None:
        self.history = history
        self.consumer = consumer
        self.topic = topic
        self.sub = sub
        self.name = name
        self.policy = policy
        self.rng = rng
        self.held: list[_Held] = []
        self.epoch = history.crash_epoch
        self.ack_all = False
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"consumer-{name}")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._release_due()
            try:
                msg = self.consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            except Exception:
                time.sleep(0.1)
                continue
            self._handle(msg)

    def _choose(self) -> str:
        if self.ack_all:
            return "ack"
        p = self.policy
        r = self.rng.random()
        if self.sub.ordered and r < p.cumulative:
            return "cumulative"
        if r < p.ack:
            return "ack"
        if r < p.ack + p.hold:
            return "hold"
        return "hole"

    def _handle(self, msg: Any) -> None:
        key = payload_key(msg.data())
        pos = position(msg)
        action = self._choose()
        h = self.history
        with h.lock:
            h.delivered_locked(self.topic, self.sub.name, self.name, key, pos)
            if h.crash_epoch != self.epoch:
                self.held.clear()
                self.epoch = h.crash_epoch
            if action == "ack":
                h.acked_locked(self.topic, self.sub.name, key, pos)
            elif action == "cumulative":
                h.acked_locked(self.topic, self.sub.name, key, pos, cumulative=True)
                self.held = [x for x in self.held if x.pos > pos]
            elif action == "hold":
                release_at = time.monotonic() + self.rng.uniform(0.05, self.policy.hold_max_s)
                self.held.append(_Held(release_at, msg, key, pos))
        try:
            if action == "ack":
                self.consumer.acknowledge(msg)
            elif action == "cumulative":
                self.consumer.acknowledge_cumulative(msg)
        except Exception:
            pass

    def _release_due(self) -> None:
        if not self.held:
            return
        now = time.monotonic()
        due = [x for x in self.held if x.due <= now or self.ack_all]
        if not due:
            return
        h = self.history
        with h.lock:
            if h.crash_epoch != self.epoch:
                self.held.clear()
                self.epoch = h.crash_epoch
                return
            for x in due:
                h.acked_locked(self.topic, self.sub.name, x.key, x.pos)
            self.held = [x for x in self.held if not (x.due <= now or self.ack_all)]
        for x in due:
            try:
                self.consumer.acknowledge(x.msg)
            except Exception:
                pass


class Workload:
    """Producers (processes) and consumers (threads) of the given topics, on one deployment;
    ``producer_wrap(name)`` is the command prefix of producer ``name``'s process (its test host)."""

    def __init__(
        self,
        history: History,
        topics: list[TopicSpec],
        service_url: str,
        admin: Callable[..., Any],
        log_dir: Path,
        policy: AckPolicy,
        rng: random.Random,
        producer_wrap: Callable[[str], tuple[str, ...]] = lambda name: (),
    ) -> None:
        self.history = history
        self.producer_wrap = producer_wrap
        self.topics = topics
        self.service_url = service_url
        self.admin = admin
        self.log_dir = log_dir
        self.policy = policy
        self.rng = rng
        self.client: Any = None
        self.consumers: list[ConsumerWorker] = []
        self.producers: dict[str, ProducerAgent] = {}
        self.broker_seq_regressions: list[str] = []

    def open(self) -> None:
        """Create namespaces and policies, subscribe everything, then start the producers."""
        for ns in sorted({t.namespace for t in self.topics}):
            self.admin("PUT", f"/admin/v2/namespaces/{ns}", ok=(200, 204, 409))
        for t in self.topics:
            if t.retained:
                self.admin(
                    "POST",
                    f"/admin/v2/namespaces/{t.namespace}/retention",
                    json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
                )
            if t.dedup:
                self.admin("POST", f"/admin/v2/namespaces/{t.namespace}/deduplication", json=True)
        self.client = pulsar.Client(
            self.service_url,
            operation_timeout_seconds=30,
            logger=pulsar.FileLogger(pulsar.LoggerLevel.Info, str(self.log_dir / "client.log")),
        )
        for t in self.topics:
            for sub in t.subs:
                self.history.add_subscription(t.topic, sub.name, ordered=sub.ordered)
                for i in range(sub.consumers):
                    name = f"{t.topic.rsplit('/', 1)[1]}-{sub.name}-{i}"
                    consumer = self.client.subscribe(
                        t.topic,
                        sub.name,
                        consumer_type=_TYPES[sub.kind],
                        consumer_name=name,
                        initial_position=pulsar.InitialPosition.Earliest,
                        batch_index_ack_enabled=sub.batch_index_ack,
                    )
                    self.consumers.append(
                        ConsumerWorker(
                            self.history, consumer, t.topic, sub, name, self.policy, random.Random(self.rng.random())
                        )
                    )
        for c in self.consumers:
            c.start()
        for t in self.topics:
            for spec in t.producers:
                self.history.add_producer(t.topic, spec.name)
                agent = ProducerAgent(
                    spec,
                    self.service_url,
                    self.log_dir,
                    self.history.receipt,
                    self._event,
                    self.producer_wrap(spec.name),
                )
                self.producers[spec.name] = agent
                agent.start()

    def _event(self, kind: str, producer: str, value: int) -> None:
        if kind == "S":
            self.history.note_sent(value)
        elif kind == "F":
            self.history.note_failed()
        elif kind == "READY":
            agent = self.producers.get(producer)
            # with deduplication on the broker must remember at least what it receipted
            topic = next(t for t in self.topics if any(p.name == producer for p in t.producers))
            if agent is not None and topic.dedup and value < agent.receipted_top:
                self.broker_seq_regressions.append(
                    f"{producer}: the broker's last sequence id {value} < receipted {agent.receipted_top}"
                )

    # --- control ------------------------------------------------------------------------------

    def pause_producers(self, timeout: float) -> list[str]:
        """Pause every producer and wait until each has its answers; the names that did not."""
        for agent in self.producers.values():
            agent.request_pause()
        deadline = time.monotonic() + timeout
        late = []
        for name, agent in self.producers.items():
            if agent.alive and not agent.paused.wait(max(0.0, deadline - time.monotonic())):
                late.append(name)
            elif agent.died():
                late.append(agent.died())
        return late

    def resume_producers(self) -> None:
        for agent in self.producers.values():
            if agent.alive:
                agent.resume()
            else:
                agent.start()

    def drain(self, timeout: float, quiet_s: float = 1.0) -> bool:
        """Wait until nothing is awaited or owed (then ``quiet_s`` more); False on time-out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.history.pending()
            if p["awaiting"] == 0 and p["owed"] == 0:
                time.sleep(quiet_s)
                return True
            time.sleep(0.2)
        return False

    def close(self) -> None:
        for agent in self.producers.values():
            agent.stop()
        for c in self.consumers:
            c.stop()
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass


def scan_topic(client: Any, topic: str, *, idle_ms: int = 3000, timeout_s: float = 300.0) -> ScanResult:
    """Every message of ``topic`` from the earliest position, read with a reader (non-durable)."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                msg = reader.read_next(timeout_millis=idle_ms)
            except pulsar.Timeout:
                if not reader.has_message_available():
                    break
                continue
            out.append((position(msg), payload_key(msg.data())))
    finally:
        reader.close()
    return ScanResult(topic, out)
