"""The chaos run's invariant checker: a thread-safe record of what producers were told, what
consumers received and acknowledged, and when servers crashed, checked against four invariants.

Nothing here touches a process or a socket; the workload (`workload`) and the scenarios
feed it events, and `tests/chaos/test_chaos_checker.py` checks it against made-up histories.

Identities:

* a *key* ``(producer name, sequence id)`` names a message as its producer sent it; a restarted
  producer re-sends unreceipted keys under the same name, so one key may be stored twice (with
  deduplication off);
* a *position* ``(ledger id, entry id, batch index)`` (batch index -1 when not batched) names one
  stored copy; it does not change across restarts.

Invariants (per topic; every subscription is created before anything is produced on it):

* **loss** (a): every receipted key (its producer's send callback said Ok) is delivered at least
  once to every subscription. A cumulative ack does not excuse a key that was never delivered:
  a subscription that never saw it skipped it.
* **skip** (b): at a broker crash (or clean restart) at time T, every position a subscription had
  received before T and not acknowledged before T (the record of acks *issued*; an issued ack
  that the broker never stored only causes a redelivery, which is allowed) must be delivered
  again after T, before the cycle's drain ends. "Acknowledged" is per key: once any copy of a key
  was acked on a subscription, or a cumulative ack at or after the position was issued, the
  position is no longer owed. An ack issued after T also discharges what it covers: a consumer
  may take a message the client had queued before the crash and ack it cumulatively, and the
  client sends that ack once reconnected (the broker then rightly skips what it covers). The
  workload records a delivery and the decision to ack it in one critical section.
* **order** (c): on an Exclusive or Failover subscription, each consumer's first deliveries of
  keys come in increasing sequence id per producer. A second stored copy of a key (possible with
  deduplication off) can make this look broken; `resolve_order` clears the candidates that a copy
  at a lower position explains (known from a reader's scan of the topic).
* **duplicate** (d): with deduplication on, a reader from the earliest position finds no key
  stored twice. A re-sent *batch* whose boundaries differ from the stored one is stored whole
  (the broker keys a batch on its highest sequence id, as Pulsar does), so duplicates inside a
  batch that does not start at a multiple of the producer's batch size, or is shorter, are
  reported as explained, not as violations.

The scan of a retained topic also checks loss at the storage level (every receipted key stored)
and storage order (first copies stored in increasing sequence id per producer).

Faults that do not kill a server (a partition, a pause, a clock jump, a full disk) may or may not
make a topic move or its consumers reconnect; a redelivery is owed only if a consumer's connection
did close. So such a fault takes a *tentative* mark (`mark_locked`): what each consumer has
received and not acknowledged, discharged by later acks and redeliveries like an owed position,
but not awaited. `settle` later turns a mark into owed positions for exactly the consumers whose
connection closed after the mark was taken (the run learns that from the broker's consumer
stats) and forgets it for the others.

**two-writers** (e): no producer is given a receipt on an older ledger of a topic after one on a
newer ledger (ledger ids grow with creation; two owners writing at once would interleave them).
The storage audit (`audit`) adds the other half: no receipt for an entry past the end its
ledger was closed at, nor on a ledger the topic's ledger list does not hold (what an owner's add
acknowledged after the next owner fenced its ledger would be).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

from sortedcontainers import SortedDict

__all__ = [
    "INVARIANTS",
    "Key",
    "Pos",
    "SeqSet",
    "Violation",
    "History",
    "SubscriptionRecord",
    "ScanResult",
    "check_scan",
    "resolve_order",
]

Key = tuple[str, int]
Pos = tuple[int, int, int]


class SeqSet:
    """A set of non-negative sequence ids, one byte each (compact for dense ids)."""

    __slots__ = ("_bits", "count")

    def __init__(self) -> None:
        self._bits = bytearray()
        self.count = 0

    def add(self, seq: int) -> bool:
        """Add ``seq``; True when it was not there."""
        if seq >= len(self._bits):
            self._bits.extend(bytes(max(seq + 1 - len(self._bits), len(self._bits) // 2, 1024)))
        if self._bits[seq]:
            return False
        self._bits[seq] = 1
        self.count += 1
        return True

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and 0 <= seq < len(self._bits) and self._bits[seq] == 1

    def __iter__(self) -> Iterator[int]:
        return (i for i, b in enumerate(self._bits) if b)


@dataclass(frozen=True)
class Violation:
    """One broken invariant: ``invariant`` is loss, skip, order or duplicate; ``subscription`` is
    empty for topic-level findings (from a reader's scan)."""

    invariant: str
    topic: str
    subscription: str
    detail: str
    keys: tuple[Key, ...] = ()
    positions: tuple[Pos, ...] = ()

    def __str__(self) -> str:
        where = f"{self.topic}" + (f" sub={self.subscription}" if self.subscription else "")
        return f"[{self.invariant}] {where}: {self.detail}{_keys_text(self.keys)}"


INVARIANTS = ("loss", "skip", "order", "duplicate", "two-writers", "quorum", "cursor", "ownership", "unavailable")
"""Every invariant the run checks: the four of the module header, the two-writers and quorum
checks of the storage audit, cursors that never move back (`audit.CursorWatch`), ownership
that converges and topics that are available again once every fault is healed (`run`)."""


def _keys_text(keys: tuple[Key, ...], limit: int = 40) -> str:
    if not keys:
        return ""
    by_producer: dict[str, list[int]] = defaultdict(list)
    for producer, seq in keys:
        by_producer[producer].append(seq)
    parts = []
    for producer, seqs in sorted(by_producer.items()):
        seqs.sort()
        shown = ", ".join(str(s) for s in seqs[:limit]) + (f", ... ({len(seqs)} in all)" if len(seqs) > limit else "")
        parts.append(f"{producer}: [{shown}]")
    return " -- " + "; ".join(parts)


@dataclass
class _ConsumerOrder:
    seen: dict[str, SeqSet] = field(default_factory=lambda: defaultdict(SeqSet))
    last: dict[str, tuple[int, Pos]] = field(default_factory=dict)


@dataclass
class OrderCandidate:
    """A first delivery that came after a higher sequence id of the same producer."""

    topic: str
    subscription: str
    consumer: str
    key: Key
    pos: Pos
    after_seq: int
    after_pos: Pos


class SubscriptionRecord:
    """What one subscription received and acknowledged (guarded by the `History` lock)."""

    def __init__(self, topic: str, name: str, ordered: bool) -> None:
        self.topic = topic
        self.name = name
        self.ordered = ordered
        self.delivered: dict[str, SeqSet] = defaultdict(SeqSet)
        self.acked_keys: dict[str, SeqSet] = defaultdict(SeqSet)
        self.cumulative_mark: Pos = (-1, -1, -1)
        self.awaiting: set[Key] = set()  # receipted, never delivered here
        self.outstanding: SortedDict = SortedDict()  # Pos -> (Key, delivery time, consumer): received, not acked
        self.owed: dict[Pos, tuple[Key, str]] = {}  # Pos -> (Key, crash label): owed a redelivery
        self.marked: dict[str, dict[Pos, tuple[Key, str]]] = {}  # mark label -> Pos -> (Key, consumer)
        self.consumers: dict[str, _ConsumerOrder] = defaultdict(_ConsumerOrder)
        self.deliveries = 0
        self.redeliveries = 0
        self.acks = 0

    def is_acked(self, key: Key, pos: Pos) -> bool:
        return key[1] in self.acked_keys[key[0]] or pos <= self.cumulative_mark


class History:
    """The record of one run. Every method takes the lock itself unless its name says
    ``_locked``; a caller that must make several records atomic holds `lock` (re-entrant)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, trace: TextIO | None = None) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self.trace = trace  # one line per delivery, ack and crash, for diagnosis
        self.subs: dict[tuple[str, str], SubscriptionRecord] = {}
        self.receipted: dict[tuple[str, str], SeqSet] = defaultdict(SeqSet)  # (topic, producer)
        self.producers: dict[str, str] = {}  # producer -> topic
        self.crash_epoch = 0
        self.crashes: list[tuple[float, str]] = []
        self.owed_total = 0  # redeliveries owed by crashes, over the run
        self.order_candidates: list[OrderCandidate] = []
        self.sent = 0
        self.failed = 0
        self.receipts = 0
        self.receipt_log: list[tuple[str, str, int, Pos]] = []  # (topic, producer, seq, pos) since last taken
        self.receipt_times: dict[str, list[float]] = defaultdict(list)  # producer -> receipt times since last taken
        self.last_ledger: dict[str, tuple[int, int]] = {}  # producer -> (ledger, seq) of its last receipt
        self.writer_findings: list[Violation] = []

    # --- set-up -------------------------------------------------------------------------------

    def add_subscription(self, topic: str, name: str, *, ordered: bool) -> SubscriptionRecord:
        """Declare a subscription (before anything is produced on ``topic``). ``ordered``: an
        Exclusive or Failover subscription, whose first deliveries are checked for order."""
        with self.lock:
            rec = SubscriptionRecord(topic, name, ordered)
            self.subs[(topic, name)] = rec
            return rec

    def add_producer(self, topic: str, producer: str) -> None:
        with self.lock:
            self.producers[producer] = topic

    def _subs_of(self, topic: str) -> list[SubscriptionRecord]:
        return [s for (t, _), s in self.subs.items() if t == topic]

    # --- producer side ------------------------------------------------------------------------

    def note_sent(self, n: int) -> None:
        with self.lock:
            self.sent += n

    def note_failed(self, n: int = 1) -> None:
        with self.lock:
            self.failed += n

    def receipt(self, producer: str, seq: int, pos: Pos | None = None) -> None:
        """The producer's send callback reported success for ``seq``, stored at ``pos`` (when
        known; a duplicate answered by deduplication has ledger -1)."""
        with self.lock:
            topic = self.producers[producer]
            self.receipt_times[producer].append(self.clock())
            if pos is not None and pos[0] >= 0:
                self.receipt_log.append((topic, producer, seq, pos))
                last = self.last_ledger.get(producer)
                if last is not None and pos[0] < last[0]:
                    self.writer_findings.append(
                        Violation(
                            "two-writers",
                            topic,
                            "",
                            f"producer {producer} got a receipt on ledger {pos[0]} after one on "
                            f"the newer ledger {last[0]} (for sequence id {last[1]})",
                            ((producer, seq),),
                            (pos,),
                        )
                    )
                else:
                    self.last_ledger[producer] = (pos[0], seq)
            if not self.receipted[(topic, producer)].add(seq):
                return
            self.receipts += 1
            for sub in self._subs_of(topic):
                if seq not in sub.delivered[producer]:
                    sub.awaiting.add((producer, seq))

    # --- consumer side ------------------------------------------------------------------------

    def delivered_locked(self, topic: str, sub: str, consumer: str, key: Key, pos: Pos) -> float:
        """Record that ``consumer`` of ``sub`` received ``key`` stored at ``pos``; the caller holds
        `lock` and, if it decides to ack, records that with `acked_locked` before releasing it.
        Returns the delivery time."""
        t = self.clock()
        rec = self.subs[(topic, sub)]
        producer, seq = key
        if self.trace is not None:
            self.trace.write(f"{t:.3f} D {topic} {sub} {consumer} {producer}:{seq} {pos[0]}:{pos[1]}:{pos[2]}\n")
        rec.deliveries += 1
        if not rec.delivered[producer].add(seq):
            rec.redeliveries += 1
        rec.awaiting.discard(key)
        rec.owed.pop(pos, None)
        for marked in rec.marked.values():
            marked.pop(pos, None)
        if not rec.is_acked(key, pos):
            rec.outstanding[pos] = (key, t, consumer)
        if rec.ordered:
            order = rec.consumers[consumer]
            if order.seen[producer].add(seq):
                last = order.last.get(producer)
                if last is not None and seq < last[0]:
                    self.order_candidates.append(OrderCandidate(topic, sub, consumer, key, pos, last[0], last[1]))
                else:
                    order.last[producer] = (seq, pos)
        return t

    def acked_locked(self, topic: str, sub: str, key: Key, pos: Pos, *, cumulative: bool = False) -> None:
        """Record an ack the consumer is about to issue (individual, or cumulative up to ``pos``)."""
        rec = self.subs[(topic, sub)]
        if self.trace is not None:
            self.trace.write(
                f"{self.clock():.3f} {'C' if cumulative else 'A'} {topic} {sub} - {key[0]}:{key[1]} "
                f"{pos[0]}:{pos[1]}:{pos[2]}\n"
            )
        rec.acks += 1
        if cumulative:
            if pos > rec.cumulative_mark:
                rec.cumulative_mark = pos
            for p in list(rec.outstanding.irange(maximum=pos)):
                k = rec.outstanding.pop(p)[0]
                rec.acked_keys[k[0]].add(k[1])
            for p in [p for p in rec.owed if p <= pos]:
                del rec.owed[p]
            for marked in rec.marked.values():
                for p in [p for p in marked if p <= pos]:
                    del marked[p]
        else:
            rec.acked_keys[key[0]].add(key[1])
            rec.outstanding.pop(pos, None)
            rec.owed.pop(pos, None)
            for marked in rec.marked.values():
                marked.pop(pos, None)

    def delivered(self, topic: str, sub: str, consumer: str, key: Key, pos: Pos) -> float:
        with self.lock:
            return self.delivered_locked(topic, sub, consumer, key, pos)

    def acked(self, topic: str, sub: str, key: Key, pos: Pos, *, cumulative: bool = False) -> None:
        with self.lock:
            self.acked_locked(topic, sub, key, pos, cumulative=cumulative)

    # --- crashes ------------------------------------------------------------------------------

    def crash_locked(self, label: str, topics: Iterable[str] | None = None) -> float:
        """A broker serving ``topics`` (default: all) crashed or restarted now: what each of their
        subscriptions received and has not acknowledged is owed a redelivery. The caller holds
        `lock` while it kills the process, so no delivery is recorded in between. Bumps
        `crash_epoch` (consumers drop acks they were holding back)."""
        t = self.clock()
        wanted = None if topics is None else set(topics)
        for (topic, _), rec in self.subs.items():
            if wanted is not None and topic not in wanted:
                continue
            for pos, (key, _, _) in rec.outstanding.items():
                if not rec.is_acked(key, pos):
                    if pos not in rec.owed:
                        self.owed_total += 1
                    rec.owed[pos] = (key, label)
        self.crash_epoch += 1
        self.crashes.append((t, label))
        if self.trace is not None:
            self.trace.write(f"{t:.3f} X {label}\n")
        return t

    def mark_locked(self, label: str) -> None:
        """A tentative crash now (module header): remember what every consumer has received and
        not acknowledged, to be owed by `settle` if its connection closes after this."""
        for rec in self.subs.values():
            rec.marked[label] = {
                pos: (key, consumer)
                for pos, (key, _, consumer) in rec.outstanding.items()
                if not rec.is_acked(key, pos)
            }
        if self.trace is not None:
            self.trace.write(f"{self.clock():.3f} M {label}\n")

    def settle(self, label: str, closed: set[tuple[str, str, str]]) -> int:
        """Turn mark ``label`` into owed redeliveries for the consumers ``(topic, subscription,
        consumer)`` in ``closed`` (their connection closed after the mark) and forget the rest of
        it; returns how many positions became owed."""
        n = 0
        with self.lock:
            for (topic, sub), rec in self.subs.items():
                marked = rec.marked.pop(label, {})
                for pos, (key, consumer) in marked.items():
                    if (topic, sub, consumer) in closed and pos not in rec.owed:
                        rec.owed[pos] = (key, label)
                        self.owed_total += 1
                        n += 1
            if n:
                self.crash_epoch += 1
                self.crashes.append((self.clock(), label))
            if self.trace is not None:
                self.trace.write(f"{self.clock():.3f} S {label} {n} owed for {len(closed)} closed consumers\n")
        return n

    def take_receipts(self) -> tuple[list[tuple[str, str, int, Pos]], dict[str, list[float]]]:
        """The receipts (topic, producer, seq, position) and receipt times per producer recorded
        since the last call."""
        with self.lock:
            log, times = self.receipt_log, self.receipt_times
            self.receipt_log, self.receipt_times = [], defaultdict(list)
            return log, times

    # --- checks -------------------------------------------------------------------------------

    def pending(self) -> dict[str, int]:
        """How much is still expected: receipted keys not yet delivered, redeliveries owed."""
        with self.lock:
            return {
                "awaiting": sum(len(s.awaiting) for s in self.subs.values()),
                "owed": sum(len(s.owed) for s in self.subs.values()),
            }

    def check(self, *, consume: bool = True) -> list[Violation]:
        """Loss, skip and order violations found so far. With ``consume`` the reported keys and
        positions are forgotten (so that the next check reports only new ones)."""
        out: list[Violation] = []
        with self.lock:
            for (topic, name), rec in sorted(self.subs.items()):
                if rec.awaiting:
                    out.append(
                        Violation(
                            "loss",
                            topic,
                            name,
                            f"{len(rec.awaiting)} receipted messages never delivered",
                            tuple(sorted(rec.awaiting)),
                        )
                    )
                if rec.owed:
                    by_label: dict[str, list[tuple[Pos, Key]]] = defaultdict(list)
                    for pos, (key, label) in rec.owed.items():
                        by_label[label].append((pos, key))
                    for label, items in sorted(by_label.items()):
                        items.sort()
                        positions = ", ".join(
                            f"{p[0]}:{p[1]}" + (f":{p[2]}" if p[2] >= 0 else "") for p, _ in items[:10]
                        )
                        out.append(
                            Violation(
                                "skip",
                                topic,
                                name,
                                f"{len(items)} unacknowledged messages not redelivered after {label} "
                                f"(positions {positions}{', ...' if len(items) > 10 else ''})",
                                tuple(k for _, k in items),
                            )
                        )
                if consume:
                    rec.awaiting.clear()
                    rec.owed.clear()
            grouped: dict[tuple[str, str, str], list[OrderCandidate]] = defaultdict(list)
            for c in self.order_candidates:
                grouped[(c.topic, c.subscription, c.consumer)].append(c)
            for (topic, name, consumer), cands in sorted(grouped.items()):
                c = cands[0]
                out.append(
                    Violation(
                        "order",
                        topic,
                        name,
                        f"consumer {consumer}: {len(cands)} first deliveries after a higher sequence id "
                        f"of the same producer (first: {c.key[0]}:{c.key[1]} at {c.pos} after "
                        f"{c.after_seq} at {c.after_pos})",
                        tuple(x.key for x in cands),
                        tuple(x.pos for x in cands),
                    )
                )
            if consume:
                self.order_candidates.clear()
            out += self.writer_findings
            if consume:
                self.writer_findings = []
        return out

    def totals(self) -> dict[str, int]:
        with self.lock:
            return {
                "sent": self.sent,
                "receipted": self.receipts,
                "failed": self.failed,
                "delivered": sum(s.deliveries for s in self.subs.values()),
                "redelivered": sum(s.redeliveries for s in self.subs.values()),
                "acks": sum(s.acks for s in self.subs.values()),
                "outstanding": sum(len(s.outstanding) for s in self.subs.values()),
                "crashes": len(self.crashes),
            }


# --- a reader's scan of a retained topic ------------------------------------------------------


@dataclass
class ScanResult:
    """Every message of a topic in position order: ``(pos, key)``."""

    topic: str
    messages: list[tuple[Pos, Key]]


def check_scan(
    history: History, scan: ScanResult, *, dedup: bool, batch_sizes: dict[str, int]
) -> tuple[list[Violation], list[str]]:
    """Topic-level checks on a full scan: every receipted key stored (loss), first copies stored
    in increasing sequence id per producer (order), and with ``dedup`` no key stored twice
    (duplicate). Returns the violations and notes (duplicates explained by batch boundaries, see
    the module header)."""
    violations: list[Violation] = []
    notes: list[str] = []
    stored: dict[str, SeqSet] = defaultdict(SeqSet)
    last_first: dict[str, int] = {}
    disorder: list[Key] = []
    copies: dict[Key, list[Pos]] = defaultdict(list)
    batches: dict[tuple[int, int], list[Key]] = defaultdict(list)
    for pos, key in scan.messages:
        producer, seq = key
        batches[(pos[0], pos[1])].append(key)
        if stored[producer].add(seq):
            if seq < last_first.get(producer, -1):
                disorder.append(key)
            else:
                last_first[producer] = seq
        else:
            copies[key].append(pos)
    with history.lock:
        for (topic, producer), receipted in history.receipted.items():
            if topic != scan.topic:
                continue
            have = stored[producer]
            missing = tuple((producer, s) for s in receipted if s not in have)
            if missing:
                violations.append(
                    Violation(
                        "loss",
                        topic,
                        "",
                        f"{len(missing)} receipted messages not stored (reader from the earliest position)",
                        missing,
                    )
                )
    if disorder:
        violations.append(
            Violation("order", scan.topic, "", "first stored copies out of sequence-id order", tuple(disorder))
        )
    if dedup and copies:
        # a duplicate copy inside a batch that does not have the producer's own boundaries was
        # re-sent in a different batch shape: stored whole by design (module header)
        explained, unexplained = [], []
        for key, positions in copies.items():
            size = batch_sizes.get(key[0], 1)
            odd = False
            for pos in positions:
                members = batches[(pos[0], pos[1])]
                seqs = [s for p, s in members if p == key[0]]
                if size > 1 and (min(seqs) % size != 0 or len(seqs) != size):
                    odd = True
            (explained if odd else unexplained).append(key)
        if unexplained:
            violations.append(
                Violation(
                    "duplicate",
                    scan.topic,
                    "",
                    f"{len(unexplained)} keys stored more than once with deduplication on",
                    tuple(sorted(unexplained)),
                )
            )
        if explained:
            notes.append(f"{scan.topic}: {len(explained)} keys stored twice inside re-sent batches of another shape")
    return violations, notes


def resolve_order(violations: list[Violation], scans: dict[str, ScanResult]) -> tuple[list[Violation], int]:
    """Drop the order findings that a lower-positioned copy of the same key explains (the key was
    stored twice; a consumer saw the later copy first because the earlier one was acknowledged
    by another consumer's cumulative ack). Returns the rest and how many keys were explained."""
    first_pos: dict[tuple[str, Key], Pos] = {}
    for topic, scan in scans.items():
        for pos, key in scan.messages:
            first_pos.setdefault((topic, key), pos)
    kept, explained = [], 0
    for v in violations:
        if v.invariant != "order" or not v.subscription or len(v.positions) != len(v.keys):
            kept.append(v)
            continue
        left = [
            (k, p)
            for k, p in zip(v.keys, v.positions, strict=False)
            if (first := first_pos.get((v.topic, k))) is None or not first < p
        ]
        explained += len(v.keys) - len(left)
        if left:
            kept.append(
                Violation(
                    v.invariant, v.topic, v.subscription, v.detail, tuple(k for k, _ in left), tuple(p for _, p in left)
                )
            )
    return kept, explained
