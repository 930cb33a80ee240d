"""Offsets and read plans of the Magnetar source: pure functions, no Spark, no I/O.

An offset is, per topic partition, the position of the *next* message to read:
``(ledger id, entry id, batch index)``. A micro-batch reads exactly ``[start, end)`` of each
partition, so planning the same pair of offsets twice yields the same rows (as long as retention
has not deleted them in between).

Positions order lexicographically. A message that is not part of a batch has batch index -1 on the
wire; it orders as batch index 0 (the whole entry). ``EARLIEST`` is the sentinel "first message
still stored", used only when a partition had no ledger yet when its offset was taken.

The JSON form crossing to Spark's JVM is ``{topic: {"ledger": L, "entry": E, "batch": B}}``
(dicts only: Spark journals offsets as JSON and compares them as strings).

Rules of planning (`plan_partition`):

* Rule 1: entries come from the partition's ledger list (id, entries, size), as internalStats
  reports it; a ledger's entries are ``0 .. entries-1``; empty ledgers hold nothing.
* Rule 2: a start before the first stored position is *data loss* unless it is ``EARLIEST``.
  Offsets produced by `advance` never point past the end of a closed ledger when a later ledger
  exists (they move to ``(next ledger, 0, 0)``), so "start < first stored" means messages were
  deleted, not that an empty gap was crossed.
* Rule 1b: nothing after the partition's *max read position* is planned (`cap_at_max_read`): the
  broker holds the entries after it back until the open transaction before them ends, so a plan
  reaching past it would wait for messages that may never come (or come aborted).
* Rule 3: admission (`allocate`) never gives more entries than the entry budget nor more estimated
  bytes than the byte budget (a ledger's entries are estimated at its average size), except that
  when the budgets are below one entry, one entry of the first partition with a backlog is
  admitted so the query always progresses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EARLIEST",
    "DataLoss",
    "LedgerSpan",
    "PartitionPlan",
    "Position",
    "Segment",
    "advance",
    "allocate",
    "backlog",
    "cap_at_max_read",
    "first_position",
    "latest_position",
    "message_id_position",
    "offsets_from_json",
    "offsets_to_json",
    "subscription_of",
    "SUBSCRIPTION_KEY",
    "parse_starting_offsets",
    "plan_partition",
    "split_plan",
]


@dataclass(frozen=True, order=True)
class Position:
    """A message position ``(ledger, entry, batch)``; batch -1 (not batched) orders as 0."""

    ledger: int
    entry: int
    batch: int = 0

    def __post_init__(self) -> None:
        if self.batch < 0:
            object.__setattr__(self, "batch", 0)

    def to_json(self) -> dict[str, int]:
        """The JSON form of one partition's offset."""
        return {"ledger": self.ledger, "entry": self.entry, "batch": self.batch}

    @classmethod
    def from_json(cls, value: Any) -> Position:
        """Parse ``{"ledger", "entry", "batch"}`` (or a ``[l, e, b]`` list); ValueError if malformed."""
        try:
            if isinstance(value, Mapping):
                return cls(int(value["ledger"]), int(value["entry"]), int(value.get("batch", 0)))
            if isinstance(value, (list, tuple)) and len(value) in (2, 3):
                return cls(*(int(v) for v in value))
        except (KeyError, TypeError, ValueError):
            pass
        raise ValueError(f'not a message position: {value!r} (want {{"ledger": L, "entry": E, "batch": B}})')

    def __str__(self) -> str:
        return f"{self.ledger}:{self.entry}:{self.batch}"


EARLIEST = Position(-1, -1, 0)
"""Sentinel: the first message still stored (never data loss)."""


@dataclass(frozen=True)
class LedgerSpan:
    """One ledger of a partition as the broker reports it."""

    ledger_id: int
    entries: int
    size: int


@dataclass(frozen=True)
class Segment:
    """Entries ``first..last`` (inclusive) of one ledger, part of a read plan."""

    ledger_id: int
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class PartitionPlan:
    """What one Spark task reads of one topic partition: ``segments`` of entries, keeping only the
    messages in ``[start, end)`` (``start`` resolved to a stored position)."""

    topic: str
    start: Position
    end: Position
    segments: tuple[Segment, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "start": self.start.to_json(),
            "end": self.end.to_json(),
            "segments": [[s.ledger_id, s.first, s.last] for s in self.segments],
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PartitionPlan:
        return cls(
            value["topic"],
            Position.from_json(value["start"]),
            Position.from_json(value["end"]),
            tuple(Segment(*s) for s in value["segments"]),
        )

    @property
    def entries(self) -> int:
        return sum(s.count for s in self.segments)


class DataLoss(Exception):
    """The start of a range is no longer stored (retention deleted it)."""

    def __init__(self, topic: str, start: Position, first_available: Position | None) -> None:
        self.topic, self.start, self.first_available = topic, start, first_available
        upto = f"up to {first_available} (exclusive)" if first_available else "up to the end of the topic"
        super().__init__(f"topic {topic}: messages from {start} {upto} are no longer stored")


def _stored(ledgers: Sequence[LedgerSpan]) -> list[LedgerSpan]:
    return [lg for lg in ledgers if lg.entries > 0]


def cap_at_max_read(ledgers: Sequence[LedgerSpan], max_read: tuple[int, int]) -> tuple[LedgerSpan, ...]:
    """Rule 1b: ``ledgers`` without any entry after ``max_read`` (``(ledger, entry)``, the last
    readable position; entry -1: before that ledger's first). Ledgers after its ledger go; its
    own keeps its entries up to it (its size scaled to them)."""
    ledger, entry = max_read
    out: list[LedgerSpan] = []
    for lg in ledgers:
        if lg.ledger_id < ledger:
            out.append(lg)
        elif lg.ledger_id == ledger:
            keep = max(0, min(lg.entries, entry + 1))
            size = lg.size * keep // lg.entries if lg.entries else 0
            out.append(LedgerSpan(lg.ledger_id, keep, size))
    return tuple(out)


def first_position(ledgers: Sequence[LedgerSpan]) -> Position | None:
    """The first stored position, or None when no ledger holds an entry."""
    stored = _stored(ledgers)
    return Position(stored[0].ledger_id, 0, 0) if stored else None


def latest_position(ledgers: Sequence[LedgerSpan]) -> Position:
    """The position after the last stored entry (the "latest" starting offset)."""
    if not ledgers:
        return EARLIEST
    stored = _stored(ledgers)
    last = ledgers[-1]
    if stored and stored[-1] is last:
        return Position(last.ledger_id, last.entries, 0)
    return Position(last.ledger_id, 0, 0)


def _resolve_start(topic: str, start: Position, ledgers: Sequence[LedgerSpan]) -> Position:
    """Where reading really starts; raises `DataLoss` per Rule 2."""
    first = first_position(ledgers)
    if start == EARLIEST:
        return first if first is not None else EARLIEST
    start = _normalize(start, ledgers)
    if any(lg.ledger_id == start.ledger for lg in ledgers):
        return start  # its ledger is still listed: nothing before it in the range was deleted
    if first is not None and start < first:
        raise DataLoss(topic, start, first)
    if first is None and ledgers and start.ledger < ledgers[-1].ledger_id:
        raise DataLoss(topic, start, None)
    return start


def _entries_from(start: Position, end: Position, ledgers: Sequence[LedgerSpan]) -> list[Segment]:
    """Segments covering every stored entry at or after ``start``'s entry and before ``end``."""
    out = []
    for lg in _stored(ledgers):
        if lg.ledger_id < start.ledger or lg.ledger_id > end.ledger:
            continue
        first = start.entry if lg.ledger_id == start.ledger else 0
        last = lg.entries - 1
        if lg.ledger_id == end.ledger:
            # (L, E, 0) excludes entry E; (L, E, B>0) includes E's first B messages
            last = min(last, end.entry - 1 if end.batch == 0 else end.entry)
        if first <= last:
            out.append(Segment(lg.ledger_id, max(first, 0), last))
    return out


def plan_partition(
    topic: str, start: Position, end: Position, ledgers: Sequence[LedgerSpan], *, fail_on_data_loss: bool = True
) -> tuple[PartitionPlan, DataLoss | None]:
    """Plan reading ``[start, end)`` of one partition. Returns the plan and, when the start was
    deleted and ``fail_on_data_loss`` is false, the `DataLoss` that was skipped (the plan then
    starts at the first stored message). Raises `DataLoss` when ``fail_on_data_loss``."""
    loss = None
    try:
        resolved = _resolve_start(topic, start, ledgers)
    except DataLoss as exc:
        if fail_on_data_loss:
            raise
        loss = exc
        resolved = exc.first_available or end
    if resolved >= end and resolved != EARLIEST:
        return PartitionPlan(topic, resolved, end, ()), loss
    segments = tuple(_entries_from(resolved, end, ledgers))
    return PartitionPlan(topic, resolved, end, segments), loss


def backlog(start: Position, ledgers: Sequence[LedgerSpan]) -> list[tuple[Segment, float]]:
    """Every stored entry at or after ``start`` as segments, each with its ledger's average entry
    size (the byte estimate of Rule 3). A deleted start counts from the first stored entry."""
    first = first_position(ledgers)
    if first is not None and (start == EARLIEST or start < first):
        start = first
    end = Position(2**62, 0, 0)
    sizes = {lg.ledger_id: (lg.size / lg.entries if lg.entries else 0.0) for lg in ledgers}
    return [(seg, sizes[seg.ledger_id]) for seg in _entries_from(start, end, ledgers)]


def advance(start: Position, taken: int, ledgers: Sequence[LedgerSpan]) -> Position:
    """The offset after taking ``taken`` entries of the backlog at ``start`` (Rule 2 form: never
    the end of a closed ledger when a later ledger exists)."""
    segs = [seg for seg, _ in backlog(start, ledgers)]
    if taken <= 0:
        return start if start != EARLIEST or not segs else Position(segs[0].ledger_id, segs[0].first, 0)
    pos = start
    for seg in segs:  # a partially read first entry (start batch > 0) counts as one entry
        n = min(taken, seg.count)
        taken -= n
        pos = Position(seg.ledger_id, seg.first + n, 0)
        if taken == 0:
            break
    return _normalize(pos, ledgers)


def _normalize(pos: Position, ledgers: Sequence[LedgerSpan]) -> Position:
    """Move a position at or past the end of a listed ledger to the start of the next one."""
    for i, lg in enumerate(ledgers):
        if lg.ledger_id == pos.ledger and pos.entry >= lg.entries and pos.batch == 0 and i + 1 < len(ledgers):
            pos = Position(ledgers[i + 1].ledger_id, 0, 0)
    return pos


def allocate(
    backlogs: Mapping[str, list[tuple[Segment, float]]], max_entries: int | None, max_bytes: int | None
) -> dict[str, int]:
    """How many backlog entries each partition may take this trigger (Rule 3)."""
    counts = {t: sum(s.count for s, _ in segs) for t, segs in backlogs.items()}
    total = sum(counts.values())
    if total == 0:
        return dict.fromkeys(backlogs, 0)
    take = dict(counts)
    if max_entries is not None and max_entries < total:
        take = _proportional(counts, max_entries)
    if max_bytes is not None:
        sizes = {t: sum(s.count * avg for s, avg in segs) for t, segs in backlogs.items()}
        total_bytes = sum(sizes.values())
        if max_bytes < total_bytes:
            budget = _proportional({t: int(b) for t, b in sizes.items()}, max_bytes)
            for t, segs in backlogs.items():
                take[t] = min(take[t], _entries_within(segs, budget[t]))
    if sum(take.values()) == 0:
        first = next(t for t in sorted(backlogs) if counts[t] > 0)
        take[first] = 1
    return take


def _proportional(weights: Mapping[str, int], budget: int) -> dict[str, int]:
    total = sum(weights.values())
    if total <= budget:
        return dict(weights)
    share = {t: budget * w // total for t, w in weights.items()}
    left = budget - sum(share.values())
    # hand out the remainder one by one to the partitions with the largest unmet backlog
    for t in sorted(weights, key=lambda k: (share[k] - weights[k], k)):
        if left <= 0:
            break
        if share[t] < weights[t]:
            share[t] += 1
            left -= 1
    return share


def _entries_within(segs: list[tuple[Segment, float]], budget: int) -> int:
    n, left = 0, float(budget)
    for seg, avg in segs:
        if avg <= 0:
            n += seg.count
            continue
        k = min(seg.count, int(left // avg))
        n += k
        left -= k * avg
        if k < seg.count:
            break
    return n


SUBSCRIPTION_KEY = "__subscription"
"""The key of a streaming offset that names the query's durable subscription (no topic name, always
fully qualified in offsets, can be it). Spark keeps offsets in the query's checkpoint, so a query
restarted from its checkpoint finds its subscription there."""


def offsets_to_json(offsets: Mapping[str, Position], subscription: str | None = None) -> dict[str, Any]:
    """``{topic: position}`` (and the subscription's name) -> the dict handed to Spark (sorted)."""
    out: dict[str, Any] = {t: offsets[t].to_json() for t in sorted(offsets)}
    if subscription:
        out[SUBSCRIPTION_KEY] = subscription
    return out


def offsets_from_json(value: Mapping[str, Any] | str) -> dict[str, Position]:
    """Inverse of `offsets_to_json` (the subscription left out: see `subscription_of`); accepts
    the JSON text too. Raises ValueError when malformed."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"offsets must be a JSON object of topic -> position, not {value!r}")
    return {str(t): Position.from_json(p) for t, p in value.items() if t != SUBSCRIPTION_KEY}


def subscription_of(value: Mapping[str, Any] | None) -> str | None:
    """The durable subscription an offset names (None: none, e.g. an offset of an older release)."""
    name = value.get(SUBSCRIPTION_KEY) if isinstance(value, Mapping) else None
    return str(name) if name else None


_LATEST_LEDGER = 2**63 - 1


def message_id_position(raw: Sequence[int]) -> Position | str:
    """A serialized Pulsar ``MessageIdData`` (the JSON array of signed bytes pulsar-spark writes
    for an offset) as a position: the message it names; ``EARLIEST`` or ``"latest"`` for
    ``MessageId.earliest`` / ``MessageId.latest``. ValueError when the bytes do not parse."""
    from google.protobuf.message import DecodeError

    from protocols.pulsar import MessageIdData

    try:
        data = bytes(int(b) & 0xFF for b in raw)
        mid = MessageIdData()
        mid.ParseFromString(data)
    except (TypeError, ValueError, DecodeError) as exc:
        raise ValueError(f"not a serialized MessageId: {list(raw)!r}: {exc}") from None
    if not mid.IsInitialized():
        raise ValueError(f"not a serialized MessageId: {list(raw)!r}")
    if mid.ledgerId >= 2**64 - 1 or (mid.ledgerId >= 2**63 and mid.entryId >= 2**63):
        return EARLIEST
    if mid.ledgerId >= _LATEST_LEDGER:
        return "latest"
    return Position(mid.ledgerId, mid.entryId, max(mid.batch_index, 0))


def parse_starting_offsets(text: str) -> str | dict[str, Position | str]:
    """``earliest`` / ``latest`` (returned as such) or JSON ``{topic: position}`` where a position
    is Magnetar's ``{"ledger", "entry", "batch"}``, pulsar-spark's serialized ``MessageId`` (a
    JSON array of signed bytes, see `message_id_position`), ``-2`` (earliest) or ``-1`` (latest),
    as in the Kafka connector. The position is the first message read (an ending offset: the first
    message not read)."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"startingOffsets must be earliest, latest or JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError("startingOffsets JSON must be an object of topic -> position")
    out: dict[str, Position | str] = {}
    for topic, pos in raw.items():
        if pos == -2 or pos == "earliest":
            out[topic] = EARLIEST
        elif pos == -1 or pos == "latest":
            out[topic] = "latest"
        elif isinstance(pos, list) and len(pos) > 3:
            out[topic] = message_id_position(pos)
        else:
            out[topic] = Position.from_json(pos)
    return out


def split_plan(plan: PartitionPlan, max_entries: int) -> list[PartitionPlan]:
    """Cut a plan into consecutive plans of at most ``max_entries`` entries each (so several
    Spark tasks can read one partition); together they keep exactly the same messages."""
    if plan.entries <= max_entries or max_entries <= 0:
        return [plan]
    pieces: list[list[Segment]] = [[]]
    room = max_entries
    for seg in plan.segments:
        first = seg.first
        while first <= seg.last:
            if room == 0:
                pieces.append([])
                room = max_entries
            n = min(room, seg.last - first + 1)
            pieces[-1].append(Segment(seg.ledger_id, first, first + n - 1))
            first += n
            room -= n
    out = []
    for i, segs in enumerate(pieces):
        start = plan.start if i == 0 else Position(segs[0].ledger_id, segs[0].first, 0)
        nxt = pieces[i + 1][0] if i + 1 < len(pieces) else None
        end = plan.end if nxt is None else Position(nxt.ledger_id, nxt.first, 0)
        out.append(PartitionPlan(plan.topic, start, end, tuple(segs)))
    return out
