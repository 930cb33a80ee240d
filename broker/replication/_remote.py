"""A replicator's producer on a remote cluster, over the Pulsar binary protocol.

`open_remote_producer` connects to one of the remote cluster's ``brokerServiceUrl`` hosts, looks
the topic up (following Redirect answers, authoritative as the answer says, at most
`MAX_LOOKUP_HOPS`), connects to the owner and creates a Shared producer of the given name. It
yields a `RemoteProducer` whose connection is read by a task of its own nursery. The connection
itself (CONNECT, answers by request id, a lost connection failing every waiting request) is the
broker's one binary-protocol client, `broker.cluster._binary_client`; this module adds the
lookups, the producer and its receipts.

Rules:

* Rule 1 (in order): SENDs are written in the order `RemoteProducer.send` is called; the broker
  answers them in that order (its producer Rule 1), so each SEND_RECEIPT completes the oldest
  pending `PendingSend`, whose sequence id it must carry. Anything else (a receipt out of order,
  SEND_ERROR, CLOSE_PRODUCER, the connection closing) is `RemoteError`: the connection is
  unusable and every pending send fails with it; the caller reconnects and resends what it has
  not seen a receipt for.
* Rule 2 (bounded): at most ``queue_size`` sends are pending at once (Pulsar's
  ``replicationProducerQueueSize``); `send` waits for room.
* Rule 3 (schemas): `schema_version` registers a schema on the remote topic
  (GET_OR_CREATE_SCHEMA) and returns the remote's version of it, which replicated messages carry.
* Rule 4 (`Dialer`): CONNECT (`connect_broker`) carries the credentials given (an auth method name and its data:
  ``token`` and the JWT, ``basic`` and ``user:password``, ``tls`` and nothing), on every
  connection of a lookup; with a TLS context every connection is TLS and lookups follow the
  answers' ``brokerServiceUrlTls``.
* Nothing here knows about managed ledgers or cursors: the replicator decides what to send and
  what a receipt means.
"""

from __future__ import annotations

import logging
import ssl
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from magnetar.common.version import VERSION
from protocols.pulsar import BaseCommand, MessageMetadata, encode_payload_command, make_command, type_name
from protocols.pulsar import pulsar_api_pb2 as pb

from ..cluster._binary_client import (
    BrokerConnection,
    BrokerConnectionError,
    connect_broker,
    error_text,
    parse_broker_urls,
)

__all__ = [
    "Dialer",
    "RemoteError",
    "RemoteProducer",
    "PendingSend",
    "open_remote_producer",
    "parse_broker_urls",
    "MAX_LOOKUP_HOPS",
]

log = logging.getLogger(__name__)

MAX_LOOKUP_HOPS = 20
"""Redirects a lookup follows before giving up (the official clients' limit)."""

RemoteError = BrokerConnectionError
"""The remote cluster refused or dropped the producer; the caller reconnects after a backoff
(the shared broker connection's error, so a lost connection is one)."""


@dataclass(frozen=True)
class Dialer:
    """How to reach the remote brokers (Rule 4): CONNECT's credentials, and the TLS context of
    a ``pulsar+ssl://`` URL (None: plain TCP; lookups then follow ``brokerServiceUrl``, else
    ``brokerServiceUrlTls``)."""

    credentials: tuple[str, bytes] = ("", b"")
    ssl_context: ssl.SSLContext | None = None


@dataclass(eq=False)
class PendingSend:
    """One SEND written and not answered yet (Rule 1)."""

    sequence_id: int
    done: trio.Event = field(default_factory=trio.Event)
    error: RemoteError | None = None
    ledger_id: int = -1
    entry_id: int = -1

    async def wait(self) -> None:
        """Wait for the receipt; raises `RemoteError` when the send failed."""
        await self.done.wait()
        if self.error is not None:
            raise self.error


_PRODUCER_EVENTS = (BaseCommand.SEND_RECEIPT, BaseCommand.SEND_ERROR, BaseCommand.CLOSE_PRODUCER)
"""The producer's own commands: to `RemoteProducer`, never taken as an answer (CLOSE_PRODUCER
carries a request id)."""


async def _connect(host: str, port: int, nursery: trio.Nursery, dialer: Dialer) -> BrokerConnection:
    """A connection to ``host:port`` that finished CONNECT, read by a task of ``nursery``."""
    return await connect_broker(
        host,
        port,
        nursery,
        credentials=dialer.credentials,
        ssl_context=dialer.ssl_context,
        client_version=f"Magnetar-replicator-{VERSION}",
        events=_PRODUCER_EVENTS,
    )


class RemoteProducer:
    """A producer on the remote topic (module rules). Created by `open_remote_producer`."""

    def __init__(self, conn: BrokerConnection, topic: str, name: str, producer_id: int, queue_size: int) -> None:
        self.conn = conn
        self.topic = topic
        self.name = name
        self.producer_id = producer_id
        self._pending: deque[PendingSend] = deque()
        self._room = trio.Semaphore(max(1, queue_size))  # Rule 2
        self._schemas: dict[tuple[int, bytes], bytes] = {}
        self.failed: RemoteError | None = None
        conn.on_command = self._on_command

    @property
    def address(self) -> str:
        """``host:port`` of the broker the producer is on."""
        return self.conn.address

    @property
    def pending(self) -> int:
        """Sends written and not answered yet."""
        return len(self._pending)

    def fail_all(self, exc: RemoteError) -> None:
        """Fail every pending send with ``exc`` (the first failure is kept)."""
        self.failed = self.failed or exc
        while self._pending:
            p = self._pending.popleft()
            p.error = self.failed
            p.done.set()
            self._room.release()

    def _on_command(self, cmd: BaseCommand) -> None:
        t = cmd.type
        if t == BaseCommand.SEND_RECEIPT:
            receipt = cmd.send_receipt
            head = self._pending[0] if self._pending else None
            if head is None or receipt.sequence_id != head.sequence_id:
                self.fail_all(RemoteError(f"receipt for sequence id {receipt.sequence_id} out of order"))
                return
            self._pending.popleft()
            head.ledger_id, head.entry_id = receipt.message_id.ledgerId, receipt.message_id.entryId
            head.done.set()
            self._room.release()
        elif t in (BaseCommand.SEND_ERROR, BaseCommand.CLOSE_PRODUCER):
            self.fail_all(RemoteError(f"{self.address}: {error_text(cmd)}"))
        else:
            log.debug("replicator producer %s ignores %s", self.name, type_name(t))

    async def send(self, metadata: MessageMetadata, payload: bytes, num_messages: int) -> PendingSend:
        """Write one SEND (Rules 1, 2) and return its `PendingSend`; raises `RemoteError` once the
        producer failed. The SEND carries the message's own sequence ids (the original producer's),
        which the remote broker deduplicates on together with its producer name."""
        await self._room.acquire()
        failed = self.failed or self.conn.closed_with
        if failed is not None:
            self._room.release()
            raise failed
        seq = metadata.sequence_id
        highest = max(seq, metadata.highest_sequence_id) if metadata.HasField("highest_sequence_id") else seq
        pending = PendingSend(seq)
        cmd = make_command(
            "SEND",
            producer_id=self.producer_id,
            sequence_id=seq,
            highest_sequence_id=highest,
            num_messages=num_messages,
        )
        frame = encode_payload_command(cmd, metadata, payload)
        self._pending.append(pending)
        try:
            await self.conn.write(frame)
        except RemoteError as exc:
            self.fail_all(exc)
            raise
        return pending

    async def schema_version(self, schema: dict[str, Any], local_version: bytes) -> bytes:
        """Rule 3: the remote version of the schema the local ``local_version`` names (cached)."""
        key = (int(schema.get("type", 0)), local_version)
        found = self._schemas.get(key)
        if found is not None:
            return found
        rid = self.conn.next_id()
        answer = await self.conn.request(
            make_command("GET_OR_CREATE_SCHEMA", request_id=rid, topic=self.topic, schema=schema), rid
        )
        body = answer.getOrCreateSchemaResponse
        if answer.type != BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE or body.HasField("error_code"):
            raise RemoteError(f"registering the schema on {self.topic}: {error_text(answer)}")
        self._schemas[key] = body.schema_version
        return body.schema_version


async def _lookup(hosts: list[tuple[str, int]], topic: str, nursery: trio.Nursery, dialer: Dialer) -> BrokerConnection:
    """A connection to the owner of ``topic``: the first host that answers, then its lookups."""
    errors = []
    for host, port in hosts:
        try:
            conn = await _connect(host, port, nursery, dialer)
        except RemoteError as exc:
            errors.append(str(exc))
            continue
        try:
            return await _follow_lookups(conn, topic, nursery, dialer)
        except BaseException:
            await conn.close()
            raise
    raise RemoteError(f"no broker of the remote cluster answered: {'; '.join(errors)}")


async def _follow_lookups(
    conn: BrokerConnection, topic: str, nursery: trio.Nursery, dialer: Dialer
) -> BrokerConnection:
    authoritative = False
    for _ in range(MAX_LOOKUP_HOPS):
        rid = conn.next_id()
        answer = await conn.request(
            make_command("LOOKUP", topic=topic, request_id=rid, authoritative=authoritative), rid
        )
        body = answer.lookupTopicResponse
        if answer.type != BaseCommand.LOOKUP_RESPONSE or body.response == pb.CommandLookupTopicResponse.Failed:
            raise RemoteError(f"lookup of {topic} on {conn.address}: {error_text(answer)}")
        url = body.brokerServiceUrlTls if dialer.ssl_context is not None else body.brokerServiceUrl
        host, port = parse_broker_urls(url or body.brokerServiceUrl)[0]
        authoritative = body.authoritative
        if f"{host}:{port}" != conn.address:
            old, conn = conn, await _connect(host, port, nursery, dialer)
            await old.close()
        if body.response == pb.CommandLookupTopicResponse.Connect:
            return conn
    raise RemoteError(f"lookup of {topic}: more than {MAX_LOOKUP_HOPS} redirects")


@asynccontextmanager
async def open_remote_producer(
    broker_service_url: str, topic: str, name: str, *, queue_size: int, dialer: Dialer = Dialer()
) -> AsyncIterator[RemoteProducer]:
    """A producer named ``name`` on ``topic`` of the cluster at ``broker_service_url`` (module
    rules). Raises `RemoteError` when it cannot be created, and out of the block when its
    connection fails (the block is cancelled then); ``ValueError`` for a URL it cannot use. The
    connection is closed when the block exits."""
    hosts = parse_broker_urls(broker_service_url)
    error: RemoteError | None = None
    conn: BrokerConnection | None = None
    async with trio.open_nursery() as nursery:
        try:
            conn = await _lookup(hosts, topic, nursery, dialer)
            rid = conn.next_id()
            answer = await conn.request(
                make_command("PRODUCER", topic=topic, producer_id=0, request_id=rid, producer_name=name), rid
            )
            if answer.type != BaseCommand.PRODUCER_SUCCESS:
                raise RemoteError(f"creating producer {name} on {topic} at {conn.address}: {error_text(answer)}")
            producer = RemoteProducer(conn, topic, name, 0, queue_size)

            def lost(exc: RemoteError) -> None:
                producer.fail_all(exc)
                nursery.cancel_scope.cancel()  # the block sees Cancelled; the error is raised below

            conn.on_lost = lost
            yield producer
        except RemoteError as exc:  # raised after the nursery: inside it would come out as a group
            error = exc
        finally:
            nursery.cancel_scope.cancel()
            if conn is not None:
                await conn.close()
    if error is None and conn is not None and conn.closed_with is not None:
        error = conn.closed_with
    if error is not None:
        raise error
