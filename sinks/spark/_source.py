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

import json
import logging
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from protocols.pulsar import TopicName

from . import _compat
from ._admin import AdminClient, AdminError
from ._compat import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, SupportsTriggerAvailableNow
from ._decode import ValueSchema, schema_fingerprint, value_schema_from_info
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
    subscription_of,
)
from ._options import SourceOptions
from ._read import DataLossError, ReadConfig, read_plan
from ._rows import RowBatcher

__all__ = [
    "MagnetarBatchReader",
    "MagnetarStreamReader",
    "PlanPartition",
    "check_streaming_support",
    "resolve_value_schema",
]

log = logging.getLogger("sinks.spark")


class PlanPartition(InputPartition):
    """One Spark task: a JSON plan and how to read it (plain values, picklable)."""

    def __init__(self, plan: dict[str, Any], config: ReadConfig) -> None:
        super().__init__(plan)
        self.config = config


class _Planner:
    """Driver-side access to the broker (admin REST, and the client for times)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.admin = AdminClient(opts.admin_url, timeout=opts.admin_timeout_s, security=opts.admin_security)

    def partitions(self, *, wait: bool = False) -> list[str]:
        """Every partition read now. A topic of ``topic``/``topics`` that does not exist raises
        ValueError, unless ``waitingForNonExistedTopic``: then it is left out (``wait``: polled
        until it exists, as pulsar-spark's batch reads do)."""
        if not self.opts.topics:
            return self._pattern_partitions()
        out: list[str] = []
        for t in self.opts.topics:
            while True:
                parts = self.admin.expand(t)
                if parts != [str(TopicName.parse(t))] or self.admin.exists(t):
                    out += parts
                    break
                if not self.opts.wait_for_topics:
                    raise ValueError(
                        f"topic {t} does not exist; create it, or set waitingForNonExistedTopic=true "
                        f"to read it once it does"
                    )
                if not wait:
                    break
                log.info("waiting for topic %s to exist (waitingForNonExistedTopic)", t)
                time.sleep(_WAIT_S)
        return sorted(set(out))

    def base_topics(self) -> list[str]:
        """The topics (not partitions) the source reads now, existing ones only."""
        if self.opts.topics:
            return [str(TopicName.parse(t)) for t in self.opts.topics if self.admin.exists(t)]
        return sorted({_base(p) for p in self._pattern_partitions()})

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

    def positions(
        self, parts: Sequence[str], spec: str, time_ms: int | None, time_map: tuple[tuple[str, int], ...], default: str
    ) -> dict[str, Position]:
        """Each partition's position from an offsets spec (``earliest``, ``latest``, JSON) or, when
        given, a time (one for all, or a map of topic or partition -> ms; a partition not in the map
        takes ``default``)."""
        if time_ms is not None or time_map:
            by_time = dict(time_map)
            out = {}
            for p in parts:
                ts = time_ms if time_ms is not None else _lookup(by_time, p, None)
                out[p] = self._position_of(p, default) if ts is None else self._position_at_time(p, ts)
            return out
        parsed = parse_starting_offsets(spec)
        return {
            p: self._position_of(p, parsed if isinstance(parsed, str) else _lookup(parsed, p, default)) for p in parts
        }

    def _position_of(self, p: str, want: Position | str) -> Position:
        if want == "latest":
            return latest_position(self.ledgers(p))
        if want == "earliest" or want == EARLIEST:
            return first_position(self.ledgers(p)) or EARLIEST
        assert isinstance(want, Position)
        return want

    def _position_at_time(self, topic: str, ts_ms: int) -> Position:
        """The first message published at or after ``ts_ms`` (the end of the topic if none)."""
        if ts_ms < 0:  # pulsar-spark's -1 earliest, -2 latest
            return self._position_of(topic, "earliest" if ts_ms == -1 else "latest")
        client = self.opts.read_config().new_client()
        try:
            reader = client.create_reader(topic, pulsar_earliest())
            reader.seek(ts_ms)
            if reader.has_message_available():
                mid = reader.read_next(self.opts.read_timeout_ms).message_id()
                return Position(mid.ledger_id(), mid.entry_id(), max(mid.batch_index(), 0))
            return latest_position(self.ledgers(topic))
        finally:
            client.close()

    def plan(self, topic: str, start: Position, end: Position) -> list[PartitionPlan]:
        try:
            plan, loss = plan_partition(
                topic, start, end, self.ledgers(topic), fail_on_data_loss=self.opts.fail_on_data_loss
            )
        except DataLoss as exc:
            raise DataLossError(
                f"{exc}; retention policy: {self.admin.retention(topic)}. Set "
                f"failOnDataLoss=false to continue from the first stored message."
            ) from None
        if loss is not None:
            log.warning(
                "%s; retention policy: %s; continuing from %s (failOnDataLoss=false)",
                loss,
                self.admin.retention(topic),
                plan.start,
            )
        if not plan.segments:
            return []
        if self.opts.max_entries_per_task:
            return split_plan(plan, self.opts.max_entries_per_task)
        return [plan]

    def check_schemas(self, topics: Sequence[str], expected: str | None) -> str | None:
        """The one schema fingerprint of ``topics`` (None when there are none); ValueError when
        they differ from each other or from ``expected``, unless allowDifferentTopicSchemas."""
        if self.opts.allow_different_topic_schemas or not self.opts.decode_schema:
            return expected
        found: dict[str, list[str]] = {}
        for t in topics:
            found.setdefault(schema_fingerprint(self.admin.schema(t)), []).append(t)
        if expected is not None and found and set(found) != {expected}:
            others = [t for fp, ts in found.items() if fp != expected for t in ts]
            raise ValueError(
                f"topics {others} have a schema that differs from the one this query reads with; "
                f"set allowDifferentTopicSchemas=true to read raw values"
            )
        if len(found) > 1:
            described = "; ".join(f"{', '.join(ts)}: {_describe(fp)}" for fp, ts in sorted(found.items()))
            raise ValueError(
                f"the topics read have different schemas ({described}); set "
                f"allowDifferentTopicSchemas=true to read their raw values, or read them apart"
            )
        return next(iter(found), expected)


_WAIT_S = 5.0


def _describe(fingerprint: str) -> str:
    if fingerprint == "BYTES":
        return "no schema"
    kind, data, _props = json.loads(fingerprint)
    return f"{kind} {data[:80]}" if data else kind


def _base(partition: str) -> str:
    return str(TopicName.parse(partition).partitioned_topic)


def pulsar_earliest() -> Any:
    """``pulsar.MessageId.earliest`` (imports the client lazily)."""
    import pulsar

    return pulsar.MessageId.earliest


def resolve_value_schema(opts: SourceOptions) -> ValueSchema | None:
    """The decoded-column schema of the source (see `_decode`): that of every topic the source
    reads now, which must be one and the same (Rule of `_Planner.check_schemas`); None with
    ``decodeSchema=false``, with ``allowDifferentTopicSchemas``, or when the topics have no schema
    (or BYTES). Raises ValueError for a missing topic, differing schemas and schema types that do
    not decode, and `AdminError`."""
    planner = _Planner(opts)
    try:
        if opts.topics:
            planner.partitions()  # a topic that does not exist fails here, when the query is defined
        if not opts.decode_schema or opts.allow_different_topic_schemas:
            return None
        topics = planner.base_topics()
        if not topics:
            return None
        planner.check_schemas(topics, None)
        return value_schema_from_info(planner.admin.schema(topics[0]), topics[0])
    finally:
        planner.admin.close()


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


def check_streaming_support(opts: SourceOptions) -> None:
    """Refuse, with a ValueError naming the option, what the PySpark in use cannot do for a
    streaming read. Before PySpark 4.2 (`_compat.ADMISSION_CONTROL` false) Spark never tells the
    reader where a micro-batch starts, so ``maxEntriesPerTrigger`` / ``maxBytesPerTrigger`` cannot
    be honoured, and a query restarted from its checkpoint cannot find a subscription whose name
    only its offsets carry: the query must name it (``subscriptionName``) or opt out
    (``durableSubscription=false``)."""
    if _compat.ADMISSION_CONTROL:
        return
    for name, value in (("maxEntriesPerTrigger", opts.max_entries_per_trigger),
                        ("maxBytesPerTrigger", opts.max_bytes_per_trigger)):  # fmt: skip
        if value is not None:
            raise ValueError(f"{name} needs PySpark 4.2 or newer ({_compat.old_pyspark_reason()})")
    if opts.subscription_mode == "auto":
        raise ValueError(
            "a streaming read needs subscriptionName (one name per query) or durableSubscription=false "
            f"on PySpark before 4.2 ({_compat.old_pyspark_reason()}, so a restarted query could not find "
            "an automatically named subscription)"
        )


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("magnetar")``: exact ``[start, end)`` micro-batches per partition,
    admission control by ``maxEntriesPerTrigger`` / ``maxBytesPerTrigger``, AvailableNow, and the
    query's durable subscription.

    The durable subscription (unless ``durableSubscription=false``): its name is decided when the
    query first starts (``subscriptionName``, else ``{subscriptionPrefix}-{random}``) and travels in
    every offset (`SUBSCRIPTION_KEY`), so Spark keeps it in the query's checkpoint and a restart
    from that checkpoint uses the same subscription. Rules:

    * Rule S1: before a batch's end offset is handed to Spark, every partition of the batch has
      the subscription, created at the batch's start where missing: what the query has not read
      yet is never trimmed by retention, and a restart finds it.
    * Rule S2: ``commit(end)`` (Spark calls it once the batch is done) moves each partition's
      subscription to ``end``, so retention frees what the query has processed.
    * Rule S3: the subscription's properties name the pipeline (``pipeline``, shown by
      explain-storage) and carry a heartbeat (``spark.heartbeatMs``, refreshed at most every
      `HEARTBEAT_S` while the query runs), so subscriptions of queries that stopped for good can
      be listed and removed (``python -m sinks.spark pipelines``).
    """

    def __init__(self, options: SourceOptions, value_schema: ValueSchema | None = None) -> None:
        check_streaming_support(options)
        self.options = options
        self.value_schema = value_schema
        self._planner: _Planner | None = None
        self._target: dict[str, Position] | None = None
        self._subscribed: set[tuple[str, str]] = set()
        self._schema_checked: set[str] = set()
        self._heartbeat: dict[str, float] = {}
        self._fallback: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> _Planner:
        if self._planner is None:
            self._planner = _Planner(self.options)
        return self._planner

    # --- the subscription's name (Rule S1) --------------------------------------------------

    def _new_subscription(self) -> str | None:
        opts = self.options
        if opts.subscription_mode == "off":
            return None
        if opts.subscription_mode == "named":
            return opts.subscription_name
        return f"{opts.subscription_prefix}-{uuid.uuid4().hex[:12]}"

    def _subscription(self, offset: dict | None) -> str | None:
        if self.options.subscription_mode == "off":
            return None
        if self.options.subscription_mode == "named":
            return self.options.subscription_name
        # an offset of an older release names none: start one now (once), later offsets carry it
        named = subscription_of(offset)
        if named:
            return named
        if self._fallback is None:
            self._fallback = self._new_subscription()
        return self._fallback

    # --- Spark's calls ----------------------------------------------------------------------

    def initialOffset(self) -> dict:
        opts = self.options
        parts = self.planner.partitions()
        self._check_schemas(parts)
        start = self.planner.positions(parts, opts.starting_offsets, opts.starting_time, opts.starting_times, "latest")
        name = self._new_subscription()
        if not _compat.ADMISSION_CONTROL:
            # Rule S1 before PySpark 4.2: latestOffset() will not know this start
            self._protect(name, start)
        return offsets_to_json(start, name)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_entries_per_trigger is not None:
            return ReadMaxRows(self.options.max_entries_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {p: latest_position(self.planner.ledgers(p)) for p in self.planner.partitions()}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The end of the next micro-batch. PySpark 4.2 onwards passes ``start`` and ``limit``
        (admission control); before it neither comes (see `check_streaming_support`)."""
        if start is None:
            return self._latest_without_start()
        starts = offsets_from_json(start)
        name = self._subscription(start)
        parts = self.planner.partitions()
        if self._target is not None:
            parts = [p for p in parts if p in self._target]
        self._check_schemas(parts)
        for p in parts:
            starts.setdefault(p, EARLIEST)
        self._protect(name, {p: starts[p] for p in parts})
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
        self._beat(name, parts)
        return offsets_to_json(end, name)

    def _latest_without_start(self) -> dict:
        """PySpark 4.0 and 4.1: every partition's latest position. The query's subscription was
        created at the query's start by `initialOffset`, or earlier by the run this one restarts
        (its name is the query's ``subscriptionName``), and has not moved past the batch's start
        since; a partition that appeared since is protected from its earliest message."""
        name = self._subscription(None)
        parts = self.planner.partitions()
        self._check_schemas(parts)
        self._protect(name, dict.fromkeys(parts, EARLIEST))
        end = {p: latest_position(self.planner.ledgers(p)) for p in parts}
        self._beat(name, parts)
        return offsets_to_json(end, name)

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
        name = self._subscription(end)
        if name is None:
            return
        positions = offsets_from_json(end)
        for p, pos in positions.items():
            if pos == EARLIEST:
                continue
            if (name, p) not in self._subscribed:
                self._create(name, p, pos)
            try:
                self.planner.admin.reset_cursor(p, name, pos)
            except AdminError as exc:
                if exc.status != 404:
                    raise
                # removed meanwhile (by hand, or the topic was deleted): protect again from here
                self._subscribed.discard((name, p))
                self._create(name, p, pos)
        self._beat(name, list(positions))

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.admin.close()
            self._planner = None

    # --- helpers ----------------------------------------------------------------------------

    def _check_schemas(self, parts: Sequence[str]) -> None:
        """Topics seen after the query was defined (topicsPattern, topics created later) must have
        the schema the query reads with (raw ``value``: no schema), unless allowDifferentTopicSchemas."""
        bases = sorted({_base(p) for p in parts} - self._schema_checked)
        if not bases:
            return
        if self.options.decode_schema and not self.options.allow_different_topic_schemas:
            expected = self.value_schema.fingerprint if self.value_schema is not None else "BYTES"
            self.planner.check_schemas(bases, expected)
        self._schema_checked.update(bases)

    def _properties(self, name: str) -> dict[str, str]:
        opts = self.options
        label = opts.pipeline_name or f"spark {opts.source_description()}"
        return {
            "pipeline": label,
            "spark.source": opts.source_description(),
            "spark.subscription": opts.subscription_mode,
            "spark.heartbeatMs": str(int(time.time() * 1000)),
        }

    def _create(self, name: str, partition: str, pos: Position) -> None:
        self.planner.admin.create_subscription(
            partition, name, None if pos == EARLIEST else pos, self._properties(name)
        )
        self._subscribed.add((name, partition))
        self._heartbeat[partition] = time.monotonic()

    def _protect(self, name: str | None, starts: dict[str, Position]) -> None:
        """Rule S1: the subscription exists on every partition (created at its start if missing)."""
        if name is None:
            return
        for p, pos in starts.items():
            if (name, p) not in self._subscribed:
                self._create(name, p, pos)

    def _beat(self, name: str | None, parts: Sequence[str]) -> None:
        """Rule S3: refresh the heartbeat property, at most every `HEARTBEAT_S` per partition."""
        if name is None:
            return
        now = time.monotonic()
        props = None
        for p in parts:
            if (name, p) in self._subscribed and now - self._heartbeat.get(p, 0.0) >= HEARTBEAT_S:
                props = props or self._properties(name)
                try:
                    self.planner.admin.set_subscription_properties(p, name, props)
                except AdminError as exc:
                    if exc.status != 404:
                        raise
                    self._subscribed.discard((name, p))  # created again at the next trigger
                self._heartbeat[p] = now


HEARTBEAT_S = 60.0
"""How often a running query refreshes its subscriptions' ``spark.heartbeatMs`` property."""


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
    """``spark.read.format("magnetar")``: the messages between ``startingOffsets`` /
    ``startingTime`` (default earliest) and ``endingOffsets`` / ``endingTime`` (default latest) of
    every partition, as of planning."""

    def __init__(self, options: SourceOptions, value_schema: ValueSchema | None = None) -> None:
        self.options = options
        self.value_schema = value_schema

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        planner = _Planner(opts)
        try:
            parts = planner.partitions(wait=True)
            starts = planner.positions(
                parts, opts.starting_offsets, opts.starting_time, opts.starting_times, "earliest"
            )
            ends = planner.positions(parts, opts.ending_offsets, opts.ending_time, opts.ending_times, "latest")
            config = replace(opts.read_config(), value_schema=self.value_schema)
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
