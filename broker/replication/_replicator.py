"""One replicator: a local persistent topic (or partition) copied to one remote cluster.

States (`ReplicatorState`), as Pulsar's replicator has them:

* Rule 1: DISCONNECTED -> STARTING when it (re)connects: the remote cluster's
  ``brokerServiceUrl`` is read from its cluster record each time, so an updated record applies at
  the next connection. STARTING -> STARTED once the remote producer exists
  (`_remote.open_remote_producer`); STARTING or STARTED -> DISCONNECTED on any failure, then a
  capped doubling backoff (0.1 s to 60 s, as Pulsar's) before the next attempt. Any state ->
  TERMINATED by `stop` (the topic unloads or the remote leaves the replication clusters).
* Rule 2 (what is sent): entries are read from the replicator's durable cursor
  (``pulsar.repl.<remote>``) in order. An entry whose metadata has ``replicated_from`` came from
  another cluster and is never sent back (no echo); one whose ``replicate_to`` leaves out the
  remote is not for it; both are acknowledged on the cursor at once. Any other entry is sent
  whole (a batch stays one message) with its metadata as the producer wrote it (key,
  properties, event time, sequence ids, producer name) plus ``replicated_from`` = the local
  cluster, and its schema version replaced by the remote topic's version of the same schema.
* Rule 3 (acknowledged only once stored remotely): an entry is deleted from the cursor only
  after the remote broker's receipt for it; at most ``replicationProducerQueueSize`` are in
  flight. On a failure the cursor is rewound to its first unacknowledged entry and everything
  not acknowledged is sent again after reconnecting; the remote broker's deduplication (keyed on
  the original producer name and sequence id, when deduplication is enabled there, as in Pulsar)
  stores each message once. A local restart resumes from the cursor the same way.
* Rule 4: failures never escape `run` (it logs and retries), except that the managed ledger
  closing ends it: the topic is unloading.
* Rule 5: on a terminated topic the replicator sends what is left, waits for every receipt and
  then idles until stopped.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from magnetar.common.backoff import Backoff
from managed_ledger import (
    ManagedCursor,
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
    NoMoreEntries,
    Position,
)
from protocols.pulsar import MessageMetadata

from ..topics._entries import entry_metadata
from ..topics._stats import Rates, java_date
from ._remote import Dialer, PendingSend, RemoteError, RemoteProducer, open_remote_producer

__all__ = ["Replicator", "ReplicatorState"]

log = logging.getLogger(__name__)

_READ_BATCH = 100  # entries per cursor read


class ReplicatorState(enum.Enum):
    """Lifecycle of a replicator (module rules)."""

    DISCONNECTED = "Disconnected"
    STARTING = "Starting"
    STARTED = "Started"
    TERMINATED = "Terminated"


RemoteUrl = Callable[[], Awaitable[str]]
"""Reads the remote cluster's ``brokerServiceUrl`` ('' when it has none)."""
LocalSchema = Callable[[bytes], Awaitable[dict[str, Any] | None]]
"""The local schema of a schema version, as wire Schema fields (None when unknown)."""
Dial = Callable[[], Dialer]
"""How to reach the remote (credentials, TLS), read at each connection."""
Prepare = Callable[[], Awaitable[None]]
"""Makes the remote topic ready before each connection; raises `RemoteError` when it cannot."""


class Replicator:
    """Replicates ``cursor``'s topic to ``remote_cluster`` (module rules); run with `run`."""

    def __init__(
        self,
        *,
        topic_name: str,
        local_cluster: str,
        remote_cluster: str,
        producer_name: str,
        cursor: ManagedCursor,
        remote_url: RemoteUrl,
        local_schema: LocalSchema,
        queue_size: int,
        prepare: Prepare | None = None,
        dialer: Dial | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.local_cluster = local_cluster
        self.remote_cluster = remote_cluster
        self.producer_name = producer_name
        self.cursor = cursor
        self._remote_url = remote_url
        self._local_schema = local_schema
        self._prepare = prepare
        self._dialer = dialer
        self.queue_size = queue_size
        self.state = ReplicatorState.DISCONNECTED
        self.msg_out = 0
        self.bytes_out = 0
        self.msg_skipped = 0  # replicated from elsewhere, or not for this remote (Rule 2)
        self.rates = Rates(2)
        self.last_error = ""
        self.connected_to = ""
        self.connected_since = ""
        self.delay_s = 0.0  # publish time to remote receipt of the last confirmed message
        self._scope = trio.CancelScope()

    # ------------------------------------------------------------------ the view a topic reads

    @property
    def backlog(self) -> int:
        """Entries not confirmed by the remote yet (the cursor's backlog)."""
        return self.cursor.backlog

    @property
    def connected(self) -> bool:
        """Whether the remote producer exists now."""
        return self.state is ReplicatorState.STARTED

    def stop(self) -> None:
        """Rule 1: TERMINATED; `run` returns soon after."""
        self.state = ReplicatorState.TERMINATED
        self._scope.cancel()

    def stats(self) -> dict[str, Any]:
        """Pulsar's ReplicatorStats JSON (rates over the last stats period; null fields left out,
        as Pulsar's REST mapper leaves them out)."""
        stats = {
            "msgRateIn": 0.0,
            "msgThroughputIn": 0.0,
            "msgRateOut": self.rates.per_s[0],
            "msgThroughputOut": self.rates.per_s[1],
            "msgRateExpired": 0.0,
            "replicationBacklog": self.backlog,
            "connected": self.connected,
            "replicationDelayInSeconds": int(self.delay_s),
            "inboundConnection": None,
            "inboundConnectedSince": None,
            "outboundConnection": self.connected_to or None,
            "outboundConnectedSince": self.connected_since or None,
        }
        return {k: v for k, v in stats.items() if v is not None}

    # ------------------------------------------------------------------ running

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replicate until `stop` or the managed ledger closes (Rules 1 and 4)."""
        task_status.started()
        backoff = Backoff(0.1, 60.0, jitter=0.1)
        with self._scope:
            while self.state is not ReplicatorState.TERMINATED:
                self.state = ReplicatorState.STARTING
                try:
                    url = await self._remote_url()
                    if not url:
                        raise RemoteError(f"cluster {self.remote_cluster} has no brokerServiceUrl")
                    if self._prepare is not None:
                        await self._prepare()
                    dialer = self._dialer() if self._dialer is not None else Dialer()
                    async with open_remote_producer(
                        url, self.topic_name, self.producer_name, queue_size=self.queue_size, dialer=dialer
                    ) as producer:
                        self._started(producer)
                        backoff = Backoff(0.1, 60.0, jitter=0.1)
                        await self._replicate(producer)
                except (ManagedLedgerClosed, ManagedLedgerFenced):
                    return  # Rule 4: the topic is unloading
                except Exception as exc:  # Rule 4: a failure of any kind is retried, never the topic's end
                    self.last_error = str(exc)
                    log.warning("replicator %s to %s: %s", self.topic_name, self.remote_cluster, exc)
                if self.state is ReplicatorState.TERMINATED:
                    return
                self.state = ReplicatorState.DISCONNECTED
                self.connected_to = self.connected_since = ""
                self.cursor.rewind()  # Rule 3: resend whatever was not confirmed
                await trio.sleep(backoff.next())

    def _started(self, producer: RemoteProducer) -> None:
        self.state = ReplicatorState.STARTED
        self.connected_to = producer.address
        self.connected_since = java_date(int(time.time() * 1000))
        self.last_error = ""
        log.info("replicator %s to %s started on %s", self.topic_name, self.remote_cluster, producer.address)

    async def _replicate(self, producer: RemoteProducer) -> None:
        """Rules 2 and 3 until the producer or the cursor fails (raised after the nursery)."""
        failure: list[BaseException] = []
        send_in, acks_out = trio.open_memory_channel[tuple[Position, PendingSend, int, int]](self.queue_size)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ack_loop, acks_out, failure, nursery.cancel_scope)
            try:
                async with send_in:
                    while True:
                        try:
                            entries = await self.cursor.read_entries_or_wait(_READ_BATCH)
                        except NoMoreEntries:
                            break  # Rule 5: terminated and all read; the ack loop finishes the rest
                        for entry in entries:
                            await self._send_one(producer, entry.position, entry.data, send_in)
            except (RemoteError, ManagedLedgerError) as exc:
                failure.append(exc)
                nursery.cancel_scope.cancel()
        if failure:
            raise failure[0]
        await trio.sleep_forever()  # Rule 5: everything confirmed; stay connected until stopped

    async def _send_one(self, producer: RemoteProducer, pos: Position, data: bytes, acks: Any) -> None:
        try:
            md = entry_metadata(data)
            if not md.IsInitialized():
                raise ValueError("metadata lacks a required field")
        except ValueError as exc:
            log.warning("replicator %s: skipping the unreadable entry at %s: %s", self.topic_name, pos, exc)
            await self.cursor.delete([pos])
            return
        if md.HasField("replicated_from") or (md.replicate_to and self.remote_cluster not in md.replicate_to):
            self.msg_skipped += 1
            await self.cursor.delete([pos])  # Rule 2: no echo; not for this remote
            return
        size = int.from_bytes(data[:4], "big")
        payload = data[4 + size :]
        out = MessageMetadata()
        out.CopyFrom(md)
        out.replicated_from = self.local_cluster
        if md.HasField("schema_version") and md.schema_version:
            schema = await self._local_schema(md.schema_version)
            if schema is not None:
                out.schema_version = await producer.schema_version(schema, md.schema_version)
        count = max(1, md.num_messages_in_batch) if md.HasField("num_messages_in_batch") else 1
        pending = await producer.send(out, payload, count)
        await acks.send((pos, pending, count, len(data), md.publish_time))

    async def _ack_loop(self, acks: Any, failure: list[BaseException], scope: trio.CancelScope) -> None:
        """Rule 3: delete each entry from the cursor once its receipt came, in order."""
        async with acks:
            async for pos, pending, count, size, published_ms in acks:
                await pending.done.wait()
                if pending.error is not None:
                    failure.append(pending.error)
                    scope.cancel()
                    return
                try:
                    await self.cursor.delete([pos])
                except ManagedLedgerError as exc:
                    failure.append(exc)
                    scope.cancel()
                    return
                self.msg_out += count
                self.bytes_out += size
                self.delay_s = max(0.0, time.time() - published_ms / 1000)
