"""The streaming sink of the ``magnetar`` data source: exactly-once writes of rows as messages.

Exactly-once rests on four things:

* Rule 1: each Spark task writes through a producer named ``{prefix}-{queryId}-{partitionId}``;
  the query id survives restarts from the same checkpoint, so a retried or re-run task reuses
  the producer name of the attempt it replaces.
* Rule 2: the sequence id of a row is ``batchId * 2**32 + position of the row in its task + 1``,
  so it is the same on every attempt of a micro-batch, and grows from batch to batch. (Never 0:
  the official Python client treats sequence id 0 as "not given" and numbers the message itself.)
* Rule 3: broker deduplication (enabled on the topic's namespace by the sink when ``admin.url``
  is given; the broker applies it to loaded topics at once) drops any SEND whose highest sequence
  id is not above the highest one stored for its producer name.
* Rule 4 (batching): rows are sent in client batches whose boundaries depend only on the rows:
  a batch is cut at `BATCH_MESSAGES` messages or the client's byte limit, never by a timer
  (the publish delay is effectively infinite), and the last one by the final flush. The broker
  keys a batch on its highest sequence id (the first id plus the message count minus one, ids
  growing within a partition), so a re-run re-sends the very same batches and each is either
  wholly new or wholly a duplicate. A task that fails never flushes a partial batch (closing the
  client fails it), so what reached the broker is always whole batches of the re-run.

Together: a retried task, or a batch re-run after a restart, only re-sends messages the broker
already has, and they are dropped. This needs each micro-batch to give the same rows, in the same
order, to the same task partitions on a re-run (true for replayable sources such as ``magnetar``
with deterministic transformations). Without a key, messages to a partitioned topic are routed
by a hash of the value, so a re-sent message goes to the partition that already has it.

Row columns: ``value`` (binary or string, required), optional ``__key`` (string),
``__eventTime`` (timestamp) and ``__messageProperties`` (map of strings); others are ignored.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage

from ._admin import AdminClient, persistent_topic
from ._options import SinkOptions
from ._security import ClientSecurity

__all__ = ["MagnetarStreamWriter", "SinkCommit", "enable_deduplication", "sequence_id", "BATCH_MESSAGES"]

log = logging.getLogger("sinks.spark")

_ROW_BITS = 32
BATCH_MESSAGES = 1000
"""Rule 4: messages per client batch (also cut by the client's default 128 KiB batch size)."""
_NO_TIMER_MS = 24 * 3600 * 1000  # Rule 4: batches are never cut by time
_SETTLE_S = 0.2


def sequence_id(batch_id: int, position: int) -> int:
    """Rule 2: the sequence id of the ``position``-th row (from 0) of a task of ``batch_id``.
    Raises ValueError past ``2**32 - 1`` rows per task and micro-batch."""
    if not 0 <= position < 2**_ROW_BITS - 1:
        raise ValueError(f"a task may write fewer than 2**{_ROW_BITS} rows per micro-batch")
    return (batch_id << _ROW_BITS) + position + 1


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task wrote: its partition, producer name and row count."""

    partition: int
    producer_name: str
    rows: int


def enable_deduplication(admin_url: str, topic: str, security: ClientSecurity | None = None) -> bool:
    """Rule 3: turn deduplication on for ``topic``'s namespace; True if it was off. The broker
    applies it to the topic even when loaded (no unload needed). Raises `AdminError` on failure."""
    namespace = str(persistent_topic(topic).namespace_name)
    admin = AdminClient(admin_url, security=security)
    try:
        if admin.deduplication(namespace) is True:
            return False
        admin.set_deduplication(namespace, True)
        return True
    finally:
        admin.close()


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


def _millis(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def _router(msg: Any, num_partitions: int) -> int:
    key = msg.partition_key()
    basis = key.encode() if key else msg.data()
    return zlib.crc32(basis) % num_partitions


class MagnetarStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("magnetar")``: see the module rules. ``write`` raises when any message
    was not acknowledged (Spark then retries the task; deduplication absorbs the re-sends)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        import pulsar
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("the magnetar sink's write must run in a Spark task")
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or 0)
        query_id = ctx.getLocalProperty("sql.streaming.queryId") or "batch"
        partition = ctx.partitionId()
        name = f"{self.options.producer_name_prefix}-{query_id}-{partition}"
        failures: list[str] = []
        acked = [0]
        lock = threading.Lock()

        def on_sent(result: Any, _msg_id: Any) -> None:
            with lock:
                acked[0] += 1
                if result != pulsar.Result.Ok:
                    failures.append(str(result))

        client = pulsar.Client(self.options.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
                               **self.options.security.pulsar_client_kwargs())
        rows = 0
        try:
            producer = client.create_producer(
                self.options.topic, producer_name=name, batching_enabled=True,
                batching_max_messages=BATCH_MESSAGES, batching_max_publish_delay_ms=_NO_TIMER_MS,
                max_pending_messages=5 * BATCH_MESSAGES, block_if_queue_full=True,
                message_router=_router, send_timeout_millis=60_000)
            for row in iterator:
                fields = row.asDict() if hasattr(row, "asDict") else dict(row)
                value = fields.get("value")
                if isinstance(value, str):
                    value = value.encode()
                kwargs: dict[str, Any] = {"sequence_id": sequence_id(batch_id, rows)}
                if fields.get("__key") is not None:
                    kwargs["partition_key"] = str(fields["__key"])
                event = _millis(fields.get("__eventTime"))
                if event:
                    kwargs["event_timestamp"] = event
                if fields.get("__messageProperties"):
                    kwargs["properties"] = {str(k): str(v) for k, v in fields["__messageProperties"].items()}
                producer.send_async(bytes(value or b""), on_sent, **kwargs)
                rows += 1
                if self.options.fail_once_after_rows and rows == self.options.fail_once_after_rows \
                        and ctx.attemptNumber() == 0:
                    # like a crash: the whole batches already sent get their receipts (so the
                    # re-run meets duplicates), the open batch is dropped unsent (Rule 4)
                    _settle(lambda: acked[0])
                    raise RuntimeError(f"injected failure after {rows} rows (failOnceAfterRows, attempt 0)")
            producer.flush()
            if failures:
                raise RuntimeError(f"{len(failures)} messages to {self.options.topic} failed: {failures[:3]}")
            producer.close()
        finally:
            client.close()
        return SinkCommit(partition, name, rows)

    def commit(self, messages: list[Any], batchId: int) -> None:
        written = sum(m.rows for m in messages if isinstance(m, SinkCommit))
        log.info("batch %d: %d rows written to %s", batchId, written, self.options.topic)

    def abort(self, messages: list[Any], batchId: int) -> None:
        # Nothing to undo: what was sent stays, and a re-run of the batch is deduplicated (Rule 3).
        log.warning("batch %d aborted; messages already sent to %s stay (a re-run is deduplicated)",
                    batchId, self.options.topic)
