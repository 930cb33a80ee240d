"""The streaming and batch readers of the ``magnetar`` data source.

Driver side (planning): topic discovery (``topic``/``topics`` expand partitioned topics to their
partitions on every trigger, so new partitions are picked up; ``topicsPattern`` also picks up new
topics), offsets from the admin REST's internal stats, admission control, AvailableNow targets,
data-loss checks and the optional durable subscription. Executor side: `read` of one plan (see
`_read`). The admin client is created lazily and never pickled: Spark pickles readers to executors.

Offsets and plans are described in `_offsets`. A partition that appears after the query started
(new partition, new topic matching the pattern) is read from its earliest stored message.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from protocols.pulsar import TopicName

from ._admin import AdminClient
from ._decode import ValueSchema, value_schema_from_info
from ._offsets import (
    EARLIEST,
    DataLoss,
    LedgerSpan,
    PartitionPlan,
    Position,
    advance,
    allocate,
    backlog,
    first_position,
    latest_position,
    offsets_from_json,
    offsets_to_json,
    parse_starting_offsets,
    plan_partition,
    split_plan,
)
from ._options import SourceOptions
from ._read import DataLossError, ReadConfig, read_plan
from ._rows import RowBatcher

__all__ = ["MagnetarBatchReader", "MagnetarStreamReader", "PlanPartition", "resolve_value_schema"]

log = logging.getLogger("sinks.spark")


class PlanPartition(InputPartition):
    """One Spark task: a JSON plan and how to read it (plain values, picklable)."""

    def __init__(self, plan: dict[str, Any], config: ReadConfig) -> None:
        super().__init__(plan)
        self.config = config


class _Planner:
    """Driver-side access to the broker (admin REST, and the client for ``startingTime``)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.admin = AdminClient(opts.admin_url, security=opts.security)

    def partitions(self) -> list[str]:
        if self.opts.topics:
            out: list[str] = []
            for t in self.opts.topics:
                out += self.admin.expand(t)
            return sorted(set(out))
        return self._pattern_partitions()

    def _pattern_partitions(self) -> list[str]:
        pattern = self.opts.topics_pattern
        body = pattern.split("://", 1)[1] if "://" in pattern else pattern
        parts = body.split("/")
        if len(parts) >= 3:
            tenant, ns = parts[0], parts[1]
            regex = "persistent://" + body
        else:
            tenant, ns = "public", "default"
            regex = "persistent://public/default/" + body
        compiled = re.compile(regex)
        names = self.admin.list_topics(tenant, ns)
        partitioned = {n for n in names if self.admin.partitions(n) > 0 and "-partition-" not in n}
        out: set[str] = set()
        for name in names:
            base = name.rsplit("-partition-", 1)[0] if "-partition-" in name else name
            if base in partitioned and name != base:
                continue  # expanded from the partitioned name below, with the current count
            if compiled.fullmatch(base):
                out.update(self.admin.expand(base) if base in partitioned else [name])
        return sorted(out)

    def ledgers(self, topic: str) -> tuple[LedgerSpan, ...]:
        return self.admin.topic_stats(topic).ledgers

    def starting_positions(self, parts: Sequence[str], spec: str, *,
                           use_time: bool = True) -> dict[str, Position]:
        if use_time and self.opts.starting_time is not None and spec in ("latest", "earliest"):
            return {p: self._position_at_time(p, self.opts.starting_time) for p in parts}
        parsed = parse_starting_offsets(spec)
        out = {}
        for p in parts:
            want: Position | str = parsed if isinstance(parsed, str) else _lookup(parsed, p, "earliest")
            ledgers = self.ledgers(p)
            if want == "latest":
                out[p] = latest_position(ledgers)
            elif want == "earliest" or want == EARLIEST:
                out[p] = first_position(ledgers) or EARLIEST
            else:
                assert isinstance(want, Position)
                out[p] = want
        return out

    def _position_at_time(self, topic: str, ts_ms: int) -> Position:
        import pulsar
        client = pulsar.Client(self.opts.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
                               **self.opts.security.pulsar_client_kwargs())
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            reader.seek(ts_ms)
            if reader.has_message_available():
                mid = reader.read_next(self.opts.read_timeout_ms).message_id()
                return Position(mid.ledger_id(), mid.entry_id(), max(mid.batch_index(), 0))
            return latest_position(self.ledgers(topic))
        finally:
            client.close()

    def plan(self, topic: str, start: Position, end: Position) -> list[PartitionPlan]:
        try:
            plan, loss = plan_partition(topic, start, end, self.ledgers(topic),
                                        fail_on_data_loss=self.opts.fail_on_data_loss)
        except DataLoss as exc:
            raise DataLossError(f"{exc}; retention policy: {self.admin.retention(topic)}. Set "
                                f"failOnDataLoss=false to continue from the first stored message.") from None
        if loss is not None:
            log.warning("%s; retention policy: %s; continuing from %s (failOnDataLoss=false)",
                        loss, self.admin.retention(topic), plan.start)
        if not plan.segments:
            return []
        if self.opts.max_entries_per_task:
            return split_plan(plan, self.opts.max_entries_per_task)
        return [plan]


def resolve_value_schema(opts: SourceOptions) -> ValueSchema | None:
    """The decoded-column schema of the source (see `_decode`): that of the first topic of
    ``topic``/``topics`` when it has a JSON or Avro record schema; None with ``decodeSchema=false``,
    with ``topicsPattern``, or when that topic has no such schema. Raises `AdminError`."""
    if not opts.decode_schema or not opts.topics:
        return None
    admin = AdminClient(opts.admin_url, security=opts.security)
    try:
        return value_schema_from_info(admin.schema(opts.topics[0]))
    finally:
        admin.close()


def _lookup(parsed: dict[str, Any], partition: str, default: Any) -> Any:
    if partition in parsed:
        return parsed[partition]
    for name, value in parsed.items():
        if str(TopicName.parse(name)) == partition:
            return value
    base = str(TopicName.parse(partition).partitioned_topic)
    for name, value in parsed.items():
        if str(TopicName.parse(name)) == base:
            return value
    return default


def _plan_partition(partition: InputPartition) -> PlanPartition | None:
    """The `PlanPartition` this source planned; None for Spark's stand-in partition (value None)
    when planning returned none."""
    if isinstance(partition, PlanPartition) and partition.value is not None:
        return partition
    if getattr(partition, "value", None) is None:
        return None
    raise TypeError(f"not a partition planned by the magnetar source: {partition!r}")


def _read(partition: PlanPartition | None) -> Iterator[Any]:
    if partition is None:  # Spark's stand-in partition when planning returned none
        return
    plan = PartitionPlan.from_json(partition.value)
    batcher = RowBatcher(value_schema=partition.config.value_schema)
    for row in read_plan(plan, partition.config):
        yield from batcher.add(row)
    final = batcher.flush()
    if final.num_rows:
        yield final


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("magnetar")``: exact ``[start, end)`` micro-batches per partition,
    admission control by ``maxEntriesPerTrigger`` / ``maxBytesPerTrigger``, AvailableNow, and an
    optional durable subscription moved forward on commit."""

    def __init__(self, options: SourceOptions, value_schema: ValueSchema | None = None) -> None:
        self.options = options
        self.value_schema = value_schema
        self._planner: _Planner | None = None
        self._target: dict[str, Position] | None = None
        self._subscribed: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> _Planner:
        if self._planner is None:
            self._planner = _Planner(self.options)
        return self._planner

    def initialOffset(self) -> dict:
        parts = self.planner.partitions()
        start = self.planner.starting_positions(parts, self.options.starting_offsets)
        self._subscribe(start)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_entries_per_trigger is not None:
            return ReadMaxRows(self.options.max_entries_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {p: latest_position(self.planner.ledgers(p)) for p in self.planner.partitions()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        starts = offsets_from_json(start)
        parts = self.planner.partitions()
        if self._target is not None:
            parts = [p for p in parts if p in self._target]
        for p in parts:
            starts.setdefault(p, EARLIEST)
        self._subscribe({p: starts[p] for p in parts})
        ledgers = {p: self.planner.ledgers(p) for p in parts}
        backlogs = {}
        for p in parts:
            segs = backlog(starts[p], ledgers[p])
            if self._target is not None:
                segs = _cap(segs, self._target[p])
            backlogs[p] = segs
        if isinstance(limit, ReadAllAvailable):
            max_entries = max_bytes = None
        else:
            opts = self.options
            max_entries = limit.max_rows if isinstance(limit, ReadMaxRows) else opts.max_entries_per_trigger
            max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else opts.max_bytes_per_trigger
        take = allocate(backlogs, max_entries, max_bytes)
        end = dict(starts)
        for p in parts:
            end[p] = advance(starts[p], take[p], ledgers[p])
        return offsets_to_json(end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        starts, ends = offsets_from_json(start), offsets_from_json(end)
        config = replace(self.options.read_config(), value_schema=self.value_schema)
        out: list[InputPartition] = []
        for p in sorted(ends):
            s = starts.get(p, EARLIEST)
            if s == ends[p]:
                continue
            out += [PlanPartition(plan.to_json(), config) for plan in self.planner.plan(p, s, ends[p])]
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(_plan_partition(partition))

    def commit(self, end: dict) -> None:
        if not self.options.subscription_name:
            return
        for p, pos in offsets_from_json(end).items():
            if pos != EARLIEST:
                self.planner.admin.reset_cursor(p, self.options.subscription_name, pos)

    def _subscribe(self, starts: dict[str, Position]) -> None:
        """Create the durable subscription where missing, at the partition's start, so that retention
        cannot trim what this query has not processed yet."""
        name = self.options.subscription_name
        if not name:
            return
        for p, pos in starts.items():
            if p not in self._subscribed:
                self.planner.admin.create_subscription(p, name, None if pos == EARLIEST else pos)
                self._subscribed.add(p)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.admin.close()
            self._planner = None


def _cap(segs: list, target: Position) -> list:
    out = []
    for seg, avg in segs:
        if (seg.ledger_id, seg.first) >= (target.ledger, target.entry):
            break
        if seg.ledger_id == target.ledger and seg.last >= target.entry:
            seg = type(seg)(seg.ledger_id, seg.first, target.entry - 1)
        out.append((seg, avg))
    return out


class MagnetarBatchReader(DataSourceReader):
    """``spark.read.format("magnetar")``: the messages between ``startingOffsets`` (default
    earliest) and ``endingOffsets`` (default latest) of every partition, as of planning."""

    def __init__(self, options: SourceOptions, value_schema: ValueSchema | None = None) -> None:
        self.options = options
        self.value_schema = value_schema

    def partitions(self) -> Sequence[InputPartition]:
        planner = _Planner(self.options)
        try:
            parts = planner.partitions()
            starts = planner.starting_positions(parts, self.options.starting_offsets)
            ends = planner.starting_positions(parts, self.options.ending_offsets, use_time=False)
            config = replace(self.options.read_config(), value_schema=self.value_schema)
            out: list[InputPartition] = []
            for p in parts:
                if ends[p] != EARLIEST and starts[p] < ends[p]:
                    plans = planner.plan(p, starts[p], ends[p])
                    out += [PlanPartition(plan.to_json(), config) for plan in plans]
            return out
        finally:
            planner.admin.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(_plan_partition(partition))

