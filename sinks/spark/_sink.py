"""The sink of the ``magnetar`` data source: exactly-once writes of rows as messages, for streaming
(``writeStream``) and batch (``df.write``) queries.

Exactly-once rests on four things:

* Rule 1: each Spark task writes through producers named ``{prefix}-{queryId}-{partitionId}``
  (one per topic it writes); the query id survives restarts from the same checkpoint, so a
  retried or re-run task reuses the producer names of the attempt it replaces. A batch write
  uses an id drawn once per ``save()`` instead, so its retried tasks are deduplicated too.
* Rule 2: the sequence id of a row is ``batchId * 2**32 + position of the row among the task's
  rows to its topic + 1``, so it is the same on every attempt of a micro-batch, and grows from
  batch to batch. (Never 0: the official Python client treats sequence id 0 as "not given".)
* Rule 3: broker deduplication, turned on for each topic written (a topic policy: other topics
  of the namespace are left as they are) when ``admin.url`` is given, drops any SEND whose
  highest sequence id is not above the highest one stored for its producer name.
* Rule 4 (batching): rows are sent in client batches whose boundaries depend only on the rows:
  a batch is cut at `BATCH_MESSAGES` messages or the client's byte limit, never by a timer, and
  the last one by the final flush. A task that fails never flushes a partial batch.

Together: a retried task, or a batch re-run after a restart, only re-sends messages the broker
already has, and they are dropped. This needs each micro-batch to give the same rows, in the same
order, to the same task partitions on a re-run (true for replayable sources such as ``magnetar``
with deterministic transformations).

Rows, as the Pulsar Spark connector writes them (`SinkPlan`):

* ``__key`` (string, or UTF-8 binary), ``__eventTime`` (timestamp or long ms), ``__messageProperties``
  (map of strings) become the message's key, event time and properties; ``__topic`` (string) picks
  the topic when the ``topic`` option is not given. ``__messageId`` and ``__publishTime`` are the
  broker's: they are ignored.
* Every other column is the value. One binary column is sent as it is (no schema); one string,
  boolean, byte, short, int, long, float, double, date or timestamp column in the encoding of
  Pulsar's primitive schema of that type, registered through the admin REST; a struct column, or
  several columns taken as one record, as Avro (default) or JSON (``valueSchema=json``) with the
  schema derived from the columns' Spark types, which the producer registers on the topic (a
  schema the topic refuses fails the write, naming it).
* Keyed messages go to the partition the Java client (the one pulsar-spark writes with) picks by
  default: ``JavaStringHash`` of the key modulo the partition count (``Murmur3_32Hash`` with
  ``pulsar.producer.hashingScheme``). Messages without a key go by a hash of their value, so a
  re-sent message goes to the partition that already has it.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import logging
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from ._admin import AdminClient, AdminError, persistent_topic
from ._options import SinkOptions

__all__ = [
    "MagnetarBatchWriter",
    "MagnetarStreamWriter",
    "SinkCommit",
    "SinkPlan",
    "enable_deduplication",
    "sequence_id",
    "BATCH_MESSAGES",
    "java_string_hash",
    "murmur3_hash",
    "plan_sink",
]

log = logging.getLogger("sinks.spark")

_ROW_BITS = 32
BATCH_MESSAGES = 1000
"""Rule 4: messages per client batch (also cut by the client's default 128 KiB batch size)."""
_NO_TIMER_MS = 24 * 3600 * 1000  # Rule 4: batches are never cut by time
_SETTLE_S = 0.2
_META = ("__key", "__topic", "__eventTime", "__messageProperties", "__messageId", "__publishTime")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DAY = dt.date(1970, 1, 1)


def sequence_id(batch_id: int, position: int) -> int:
    """Rule 2: the sequence id of the ``position``-th row (from 0) of a task of ``batch_id``.
    Raises ValueError past ``2**32 - 1`` rows per task and micro-batch."""
    if not 0 <= position < 2**_ROW_BITS - 1:
        raise ValueError(f"a task may write fewer than 2**{_ROW_BITS} rows per micro-batch")
    return (batch_id << _ROW_BITS) + position + 1


def java_string_hash(key: str) -> int:
    """The Java client's default key hash: ``String.hashCode() & Integer.MAX_VALUE``."""
    h = 0
    units = key.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


def murmur3_hash(key: str) -> int:
    """Pulsar's ``Murmur3_32Hash``: Murmur3 (32 bit, seed 0) of the key's UTF-8, ``& MAX_VALUE``."""
    import mmh3

    return mmh3.hash(key.encode(), 0, signed=True) & 0x7FFFFFFF


# --------------------------------------------------------------------------- the plan (driver)


@dataclass(frozen=True)
class SinkPlan:
    """How rows become messages, decided on the driver from the input schema (picklable).

    ``value_columns``: the value's columns; ``mode``: ``raw`` (bytes as they are), ``primitive``
    (``schema_type`` names Pulsar's type), ``avro`` or ``json`` (``definition`` is the Avro schema;
    ``record`` says whether the value is the one struct column itself or the columns as a record).
    """

    value_columns: tuple[str, ...]
    mode: str
    schema_type: str = ""
    definition: str = ""
    record: bool = False
    has_topic_column: bool = False
    hashing: str = "JavaStringHash"
    name_base: str = ""  # a batch write's producer name part (Rule 1); "" for streaming


_PRIMITIVE_OF = {
    "StringType": "STRING",
    "BooleanType": "BOOLEAN",
    "ByteType": "INT8",
    "ShortType": "INT16",
    "IntegerType": "INT32",
    "LongType": "INT64",
    "FloatType": "FLOAT",
    "DoubleType": "DOUBLE",
    "DateType": "DATE",
    "TimestampType": "TIMESTAMP",
    "TimestampNTZType": "TIMESTAMP",
}


def _avro_of(t: Any, name: str, namespace: str, nullable: bool) -> Any:
    kind = type(t).__name__
    simple = {
        "BooleanType": "boolean",
        "ByteType": "int",
        "ShortType": "int",
        "IntegerType": "int",
        "LongType": "long",
        "FloatType": "float",
        "DoubleType": "double",
        "StringType": "string",
        "BinaryType": "bytes",
    }
    out: Any
    if kind in simple:
        out = simple[kind]
    elif kind == "DateType":
        out = {"type": "int", "logicalType": "date"}
    elif kind in ("TimestampType", "TimestampNTZType"):
        out = {"type": "long", "logicalType": "timestamp-micros"}
    elif kind == "DecimalType":
        out = {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    elif kind == "ArrayType":
        out = {"type": "array", "items": _avro_of(t.elementType, name, namespace, t.containsNull)}
    elif kind == "MapType":
        if type(t.keyType).__name__ != "StringType":
            raise ValueError(f"column {name}: map keys must be strings to be written as Avro/JSON, not {t.keyType}")
        out = {"type": "map", "values": _avro_of(t.valueType, name, namespace, t.valueContainsNull)}
    elif kind == "StructType":
        child = f"{namespace}.{name}" if namespace else name
        out = {
            "type": "record",
            "name": name,
            "namespace": namespace,
            "fields": [{"name": f.name, "type": _avro_of(f.dataType, f.name, child, f.nullable)} for f in t.fields],
        }
    else:
        raise ValueError(f"column {name}: Spark type {t.simpleString()} cannot be written to a topic")
    return [out, "null"] if nullable else out


def plan_sink(schema: Any, options: SinkOptions, *, batch: bool = False) -> SinkPlan:
    """The `SinkPlan` of an input schema (a Spark ``StructType``); ValueError naming the column
    when the rows cannot be written (no topic, no value column, a column of the wrong type)."""
    fields = {f.name: f for f in schema.fields}
    topic_col = fields.get("__topic")
    if not options.topic and topic_col is None:
        raise ValueError("the magnetar sink needs the topic option or a __topic column")
    for name, allowed in (
        ("__topic", ("StringType",)),
        ("__key", ("StringType", "BinaryType")),
        ("__eventTime", ("TimestampType", "TimestampNTZType", "LongType")),
    ):
        f = fields.get(name)
        if f is not None and type(f.dataType).__name__ not in allowed:
            raise ValueError(f"column {name} must be {' or '.join(allowed)}, not {f.dataType.simpleString()}")
    props = fields.get("__messageProperties")
    if props is not None and props.dataType.simpleString() != "map<string,string>":
        raise ValueError(f"column __messageProperties must be map<string,string>, not {props.dataType.simpleString()}")
    for name in ("__messageId", "__publishTime"):
        if name in fields:
            log.warning("column %s is set by the broker for every message; the sink ignores it", name)
    values = [f for f in schema.fields if f.name not in _META]
    if not values:
        raise ValueError("the magnetar sink needs a value column besides the __ columns (__key, __topic, ...)")
    hashing = options.hashing_scheme
    name_base = f"{options.producer_name_prefix}-batch-{uuid.uuid4().hex[:12]}" if batch else ""
    common: dict[str, Any] = {
        "has_topic_column": topic_col is not None and not options.topic,
        "hashing": hashing,
        "name_base": name_base,
    }
    if len(values) == 1 and type(values[0].dataType).__name__ != "StructType":
        kind = type(values[0].dataType).__name__
        if kind == "BinaryType":
            return SinkPlan((values[0].name,), "raw", **common)
        if kind in _PRIMITIVE_OF:
            return SinkPlan((values[0].name,), "primitive", _PRIMITIVE_OF[kind], **common)
        raise ValueError(
            f"column {values[0].name}: a value of Spark type {values[0].dataType.simpleString()} "
            f"cannot be written alone; put it in a struct"
        )
    record = len(values) > 1
    if record:
        from pyspark.sql.types import StructType

        struct_type = StructType(values)
    else:
        struct_type = values[0].dataType
    definition = _avro_of(struct_type, "topLevelRecord", "", False)
    return SinkPlan(
        tuple(f.name for f in values),
        options.value_schema,
        options.value_schema.upper(),
        json.dumps(definition),
        record,
        **common,
    )


# --------------------------------------------------------------------------- encoding (executors)


def _timestamp_ms(value: Any) -> int:
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.astimezone()  # PySpark hands out local naive times
        return int((aware - _EPOCH) / dt.timedelta(milliseconds=1))
    return int(value)


def _date_ms(value: dt.date) -> int:
    return (value - _EPOCH_DAY).days * 86_400_000


_PACK: dict[str, Callable[[Any], bytes]] = {
    "STRING": lambda v: str(v).encode(),
    "BOOLEAN": lambda v: struct.pack(">?", bool(v)),
    "INT8": lambda v: struct.pack(">b", v),
    "INT16": lambda v: struct.pack(">h", v),
    "INT32": lambda v: struct.pack(">i", v),
    "INT64": lambda v: struct.pack(">q", v),
    "FLOAT": lambda v: struct.pack(">f", v),
    "DOUBLE": lambda v: struct.pack(">d", v),
    "DATE": lambda v: struct.pack(">q", _date_ms(v)),
    "TIMESTAMP": lambda v: struct.pack(">q", _timestamp_ms(v)),
}


def _plain(value: Any) -> Any:
    """A Row's value as plain Python (Rows to dicts, naive local datetimes to aware ones)."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.astimezone()
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):  # timestamp-micros
        return int((value - _EPOCH) / dt.timedelta(microseconds=1))
    if isinstance(value, dt.date):
        return (value - _EPOCH_DAY).days
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} cannot be written as JSON")


def value_encoder(plan: SinkPlan) -> Callable[[dict[str, Any]], bytes]:
    """A function from a row (as a dict) to the message value."""
    if plan.mode == "raw":
        col = plan.value_columns[0]
        return lambda row: bytes(row[col] or b"")
    if plan.mode == "primitive":
        col, pack = plan.value_columns[0], _PACK[plan.schema_type]
        return lambda row: b"" if row[col] is None else pack(row[col])

    def record_of(row: dict[str, Any]) -> Any:
        if plan.record:
            return {c: _plain(row[c]) for c in plan.value_columns}
        return _plain(row[plan.value_columns[0]])

    if plan.mode == "json":
        return lambda row: json.dumps(record_of(row), default=_json_default).encode()
    import fastavro

    parsed = fastavro.parse_schema(json.loads(plan.definition))

    def encode_avro(row: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record_of(row))
        return buf.getvalue()

    return encode_avro


def _producer_schema(plan: SinkPlan) -> Any:
    """The producer's schema (its registration on the topic) for AVRO and JSON values; None for raw
    values and for primitive ones, which the Python client does not register (its C++ core sends
    no schema for them): `register_schema` uploads those through the admin REST instead."""
    import _pulsar
    from pulsar.schema import Schema

    if plan.mode not in ("avro", "json"):
        return None
    name = plan.schema_type

    class Encoded(Schema):
        """Values arrive encoded already: the schema only names itself to the broker."""

        def __init__(self) -> None:
            super().__init__(bytes, getattr(_pulsar.SchemaType, name), json.loads(plan.definition), name)

        def encode(self, obj: bytes) -> bytes:
            return obj

        def decode(self, data: bytes) -> bytes:
            return data

    return Encoded()


def register_schema(admin: AdminClient, topic: str, plan: SinkPlan) -> None:
    """Register a primitive value's schema (STRING, INT64, ...) on ``topic`` through the admin REST.
    Raises `AdminError` (409: the topic refuses it)."""
    if plan.mode == "primitive":
        t = persistent_topic(topic)
        admin._call(
            "POST",
            f"/admin/v2/schemas/{t.tenant}/{t.namespace}/{t.encoded_local_name}/schema",
            json={"type": plan.schema_type, "schema": "", "properties": {}},
        )


def enable_deduplication(admin: AdminClient, topic: str) -> bool:
    """Rule 3: turn deduplication on for ``topic`` (a topic policy), creating the topic when it does
    not exist yet (so the first message is already deduplicated); True if it was off. The broker
    applies it to the topic even when loaded. Raises `AdminError`."""
    path = AdminClient._tp(topic) + "/deduplicationEnabled"
    if admin._call("GET", path + "?applied=true", ok404=True) is True:
        return False
    try:
        admin._call("POST", path, json=True)
    except AdminError as exc:
        if exc.status != 404:
            raise
        try:
            admin._call("PUT", AdminClient._tp(topic))
        except AdminError as create_exc:
            if create_exc.status != 409:
                raise
        admin._call("POST", path, json=True)
    return True


_prepared: set[tuple[str, str]] = set()  # (admin url, topic) this process turned dedup on for
_prepared_lock = threading.Lock()


def prepare_topic(options: SinkOptions, plan: SinkPlan, topic: str) -> None:
    """Rule 3 and the admin-side schema for one topic, once per process (executors call it for the
    topics of a ``__topic`` column). Without ``admin.url`` it only warns."""
    key = (options.admin_url, topic)
    with _prepared_lock:
        if key in _prepared:
            return
    if not options.admin_url:
        if options.enable_deduplication:
            log.warning("no admin.url: make sure deduplication is enabled on %s, or writes are at-least-once", topic)
        if plan.mode == "primitive":
            log.warning("no admin.url: the %s schema of the values is not registered on %s", plan.schema_type, topic)
    else:
        admin = AdminClient(options.admin_url, security=options.admin_security)
        try:
            if options.enable_deduplication and enable_deduplication(admin, topic):
                log.info("deduplication enabled on %s", topic)
            register_schema(admin, topic, plan)
        finally:
            admin.close()
    with _prepared_lock:
        _prepared.add(key)


# --------------------------------------------------------------------------- writing (executors)


def _settle(count: Any, timeout_s: float = 10.0) -> None:
    """Wait until ``count()`` stops changing (the receipts of batches already sent are in)."""
    deadline = time.monotonic() + timeout_s
    last = -1
    while time.monotonic() < deadline:
        now = count()
        if now == last:
            return
        last = now
        time.sleep(_SETTLE_S)


def _router(hashing: str) -> Callable[[Any, int], int]:
    key_hash = murmur3_hash if hashing == "Murmur3_32Hash" else java_string_hash

    def route(msg: Any, num_partitions: int) -> int:
        key = msg.partition_key()
        if key:
            return key_hash(key) % num_partitions
        return zlib.crc32(msg.data()) % num_partitions

    return route


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task wrote: its partition, producer name and row count per topic."""

    partition: int
    producer_name: str
    rows: int
    per_topic: dict[str, int] = field(default_factory=dict)


def write_rows(options: SinkOptions, plan: SinkPlan, rows: Iterator[Any]) -> SinkCommit:
    """Write one task's rows (Rules 1, 2 and 4); raises when any message was not acknowledged."""
    import pulsar
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the magnetar sink's write must run in a Spark task")
    batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or 0)
    query_id = plan.name_base or f"{options.producer_name_prefix}-{ctx.getLocalProperty('sql.streaming.queryId')}"
    partition = ctx.partitionId()
    name = f"{query_id}-{partition}"
    failures: list[str] = []
    acked = [0]
    lock = threading.Lock()
    encode = value_encoder(plan)

    def on_sent(result: Any, _msg_id: Any) -> None:
        with lock:
            acked[0] += 1
            if result != pulsar.Result.Ok:
                failures.append(str(result))

    client = pulsar.Client(
        options.service_url,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
        **options.security.pulsar_client_kwargs(),
        **dict(options.client_kwargs),
    )
    producers: dict[str, Any] = {}
    counts: dict[str, int] = {}
    total = 0

    def producer_for(topic: str) -> Any:
        if topic not in producers:
            if plan.has_topic_column:
                prepare_topic(options, plan, topic)
            kwargs: dict[str, Any] = {
                "batching_enabled": True,
                "batching_max_messages": BATCH_MESSAGES,
                "max_pending_messages": 5 * BATCH_MESSAGES,
                "send_timeout_millis": 60_000,
                **dict(options.producer_kwargs),
            }
            schema = _producer_schema(plan)
            if schema is not None:
                kwargs["schema"] = schema
            try:
                producers[topic] = client.create_producer(
                    topic,
                    producer_name=name,
                    batching_max_publish_delay_ms=_NO_TIMER_MS,
                    block_if_queue_full=True,
                    message_router=_router(plan.hashing),
                    **kwargs,
                )
            except pulsar.IncompatibleSchema as exc:
                raise RuntimeError(
                    f"topic {topic} refuses the schema of the rows written ({plan.schema_type}): {exc}"
                ) from exc
        return producers[topic]

    try:
        for row in rows:
            fields = row.asDict() if hasattr(row, "asDict") else dict(row)
            topic = options.topic or fields.get("__topic")
            if not topic:
                raise ValueError("a row has no __topic and the topic option is not set")
            producer = producer_for(topic)
            n = counts.get(topic, 0)
            kwargs: dict[str, Any] = {"sequence_id": sequence_id(batch_id, n)}
            key = fields.get("__key")
            if key is not None:
                kwargs["partition_key"] = key.decode() if isinstance(key, (bytes, bytearray)) else str(key)
            if fields.get("__eventTime") is not None:
                event = _timestamp_ms(fields["__eventTime"])
                if event > 0:
                    kwargs["event_timestamp"] = event
            if fields.get("__messageProperties"):
                kwargs["properties"] = {str(k): str(v) for k, v in fields["__messageProperties"].items()}
            producer.send_async(encode(fields), on_sent, **kwargs)
            counts[topic] = n + 1
            total += 1
            if options.fail_once_after_rows and total == options.fail_once_after_rows and ctx.attemptNumber() == 0:
                # like a crash: the whole batches already sent get their receipts (so the
                # re-run meets duplicates), the open batch is dropped unsent (Rule 4)
                _settle(lambda: acked[0])
                raise RuntimeError(f"injected failure after {total} rows (failOnceAfterRows, attempt 0)")
        for producer in producers.values():
            producer.flush()
        if failures:
            raise RuntimeError(f"{len(failures)} messages failed: {failures[:3]}")
        for producer in producers.values():
            producer.close()
    finally:
        client.close()
    return SinkCommit(partition, name, total, counts)


class MagnetarStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("magnetar")``: see the module rules. ``write`` raises when any message
    was not acknowledged (Spark then retries the task; deduplication absorbs the re-sends)."""

    def __init__(self, options: SinkOptions, plan: SinkPlan) -> None:
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_rows(self.options, self.plan, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        written = sum(m.rows for m in messages if isinstance(m, SinkCommit))
        log.info("batch %d: %d rows written", batchId, written)

    def abort(self, messages: list[Any], batchId: int) -> None:
        # Nothing to undo: what was sent stays, and a re-run of the batch is deduplicated (Rule 3).
        log.warning("batch %d aborted; messages already sent stay (a re-run is deduplicated)", batchId)


class MagnetarBatchWriter(DataSourceWriter):
    """``df.write.format("magnetar").save()``: every row once, retried tasks deduplicated (Rule 1)."""

    def __init__(self, options: SinkOptions, plan: SinkPlan) -> None:
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_rows(self.options, self.plan, iterator)

    def commit(self, messages: list[Any]) -> None:
        written = sum(m.rows for m in messages if isinstance(m, SinkCommit))
        log.info("%d rows written", written)

    def abort(self, messages: list[Any]) -> None:
        log.warning("write aborted; messages already sent stay")
