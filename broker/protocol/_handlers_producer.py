"""Handlers of PRODUCER, SEND and CLOSE_PRODUCER."""

from __future__ import annotations

import itertools
import logging
import secrets
import struct
from typing import TYPE_CHECKING

from managed_ledger import InitialPosition, ManagedLedgerError, ManagedLedgerState, StorageUnavailable
from protocols.pulsar import Frame, TopicName, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from .._config import MESSAGE_SIZE_FRAME_PADDING
from .._errors import BrokerServiceError
from ..schema._registry import version_bytes
from ..topics._dedup import highest_sequence_id, is_partial_chunk
from ..topics._producer import Producer
from ..topics._replication_view import is_replicator_name
from ..topics._topic import Topic
from ..transactions import TxnID
from ._handlers_lookup import schema_from_proto

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = ["handle_producer", "handle_send", "handle_close_producer"]

log = logging.getLogger(__name__)
_NAME_PREFIX = secrets.token_hex(3)
_names = itertools.count()


async def _schema_version(conn: ServerConnection, topic: TopicName, schema: pb.Schema | None) -> bytes | None:
    if schema is None or (schema.type == 0 and not schema.schema_data):
        return None
    strategy, allow_new = await conn.service.schema_strategy(topic.namespace_name)
    v = await conn.service.schemas.get_or_create(topic, schema_from_proto(schema), strategy, allow_new=allow_new)
    return version_bytes(v)


async def _refuse_if_quota_rejects(conn: ServerConnection, name: TopicName) -> None:
    # producer_exception: refuse new producers while the backlog quota is exceeded (the client
    # fails its pending sends with this error); hold lets them in and delays their SENDs instead.
    await conn.service.recheck_quota(name)
    decision = conn.service.quota_rejects(name)
    if decision is not None:
        raise BrokerServiceError(
            f"cannot create producer on topic {name}: backlog quota exceeded ({decision.explanation})",
            pb.ProducerBlockedQuotaExceededException,
        )


async def _check_storage(topic: Topic) -> None:
    """Refuse a producer of a terminated topic (`_topic` Rule 7); never one because storage is
    unavailable (`_topic` Rule 6).

    No writable bookies (full disks, read-only, down, every one in quarantine) does not refuse the
    producer: the official clients back off longer after every refused reconnect (doubling up to a
    minute), so refusals through an outage left writes stopped for up to that long after storage
    came back. Creating the producer is a chance to create a ledger again (`ensure_writable`, at
    most once per the managed ledger's retry interval); the topic then holds its SENDs until a
    ledger can be created or the client's send timeout ends them."""
    if topic.ml.state is ManagedLedgerState.TERMINATED:
        raise BrokerServiceError(f"topic {topic.name} is terminated", pb.TopicTerminatedError)
    try:
        await topic.ml.ensure_writable()
    except StorageUnavailable:
        pass  # Rule 6: the producer is admitted all the same


async def handle_producer(conn: ServerConnection, frame: Frame) -> None:
    """PRODUCER -> PRODUCER_SUCCESS (``producer_ready=false`` parks a WaitForExclusive producer).

    ``initial_subscription_name`` on a persistent topic creates that durable subscription at the
    earliest position when it does not exist yet (an invalid name is refused with NotAllowed)."""
    req = frame.command.producer
    existing = conn.producers.get(req.producer_id)
    if existing is not None and not existing.closed:
        # the client retried after a timeout: the producer exists, confirm it again
        conn.send_command(
            make_command(
                "PRODUCER_SUCCESS",
                request_id=req.request_id,
                producer_name=existing.name,
                last_sequence_id=existing.topic.last_sequence_id(existing.name),
                schema_version=existing.schema_version,
            )
        )
        return
    name = TopicName.parse(req.topic)
    topic = await conn.service.get_any_topic(name, create=True)
    if isinstance(topic, Topic):  # a non-persistent topic has no storage and no backlog
        await _refuse_if_quota_rejects(conn, name)
        await _check_storage(topic)
    # Pulsar always sends schema_version (empty without a schema): the Java client reads it
    # unconditionally and fails the producer when it is missing
    schema_version = await _schema_version(conn, name, req.schema if req.HasField("schema") else None) or b""
    if isinstance(topic, Topic) and req.initial_subscription_name:
        # the initial subscription (the Go and Java clients' dead-letter producers name one): made
        # at the earliest position unless it exists, before the producer can store anything, as
        # Pulsar does; a non-persistent topic keeps nothing for an absent subscription
        existing_sub = topic.subscriptions.get(req.initial_subscription_name)
        if existing_sub is None or existing_sub.closed:
            await topic.subscribe(
                req.initial_subscription_name, durable=True, initial_position=InitialPosition.EARLIEST, start=None
            )
    if req.HasField("producer_name") and req.producer_name:
        producer_name, user_provided = req.producer_name, req.user_provided_producer_name
    else:
        producer_name, user_provided = f"{conn.config.cluster_name}-{_NAME_PREFIX}-{next(_names)}", False
    if conn.closed:
        return
    producer = Producer(
        topic=topic,
        producer_id=req.producer_id,
        name=producer_name,
        connection=conn,
        access_mode=req.producer_access_mode,
        user_provided_name=user_provided,
        requested_epoch=req.topic_epoch if req.HasField("topic_epoch") else None,
        schema_version=schema_version,
    )
    producer.metadata = {kv.key: kv.value for kv in req.metadata}

    def success(ready: bool) -> None:
        fields = {
            "request_id": req.request_id,
            "producer_name": producer_name,
            "last_sequence_id": topic.last_sequence_id(producer_name),
            "producer_ready": ready,
            "schema_version": schema_version,
        }
        if producer.exclusive:
            fields["topic_epoch"] = producer.epoch
        conn.send_command(make_command("PRODUCER_SUCCESS", **fields))

    def promoted(error: BrokerServiceError | None) -> None:
        # a parked WaitForExclusive producer: it holds the topic now, or was fenced out meanwhile
        if error is None:
            success(True)
            return
        if conn.producers.get(req.producer_id) is producer:
            del conn.producers[req.producer_id]
        conn.send_command(make_command("ERROR", request_id=req.request_id, error=error.code, message=error.message))

    ready = await topic.add_producer(producer, promoted)
    if conn.closed:  # the connection went away while the topic stored the epoch
        topic.remove_producer(producer)
        return
    conn.producers[req.producer_id] = producer
    success(ready)
    log.info("producer %s on %s (%s)", producer_name, name, conn.remote)


def _with_txnid(raw: bytes, metadata: pb.MessageMetadata | None, txn: TxnID) -> bytes:
    """The stored entry of a transaction's SEND: its metadata names the transaction, as the
    transaction buffer's recovery and the dispatchers read it. The Java client puts the id there
    itself; the Go client sets it on the command only, so it is added here."""
    if metadata is None or (
        metadata.HasField("txnid_most_bits")
        and metadata.txnid_most_bits == txn.most_bits
        and metadata.txnid_least_bits == txn.least_bits
    ):
        return raw
    (size,) = struct.unpack_from(">I", raw, 0)
    md = pb.MessageMetadata()
    md.CopyFrom(metadata)
    md.txnid_most_bits, md.txnid_least_bits = txn.most_bits, txn.least_bits
    encoded = md.SerializeToString()
    return struct.pack(">I", len(encoded)) + encoded + raw[4 + size :]


async def handle_send(conn: ServerConnection, frame: Frame) -> None:
    """SEND: store the entry; the receipt follows in order once stored (see `_producer`).

    As in Pulsar's broker, a SEND for a producer the broker closed within the last keep-alive
    interval is dropped (the client resends after re-creating it), and a SEND for any other
    producer id this connection has no ready producer for (never created, closed by the client,
    or still waiting for exclusive access) closes the connection: the client and the broker no
    longer agree on its producers, and no SEND_RECEIPT/SEND_ERROR could be matched to a send.
    """
    req = frame.command.send
    raw = frame.raw_metadata_and_payload
    if raw is None:
        conn.close("SEND without a payload")
        return
    producer = conn.producers.get(req.producer_id)
    if (producer is None and conn.producer_recently_closed(req.producer_id)) or (
        producer is not None and producer.closed
    ):
        # CLOSE_PRODUCER crossed this SEND on the wire: the client resends after reconnecting
        log.debug("SEND for producer %d that the broker closed, on %s: dropped", req.producer_id, conn.remote)
        return
    if producer is None:
        conn.close(f"SEND for producer {req.producer_id}, which does not exist on this connection")
        return
    if producer.topic.producers.get(producer.name) is not producer:
        # parked WaitForExclusive (PRODUCER_SUCCESS said producer_ready=false): storing this would
        # break the exclusive holder's guarantee
        conn.close(
            f"SEND for producer {req.producer_id} ({producer.name}), which is not ready "
            f"(waiting for exclusive access to {producer.topic.name})"
        )
        return
    # maxMessageSize bounds the payload (a chunk's payload is exactly that big); the metadata gets
    # the frame padding on top, and the entry must fit in one bookie frame. The client checks
    # CONNECTED.max_message_size first; one that does not is told here, before anything is queued,
    # so the topic never retries an entry storage can never take.
    limit = conn.config.max_message_size + MESSAGE_SIZE_FRAME_PADDING
    storage_limit = producer.topic.ml.max_entry_size if isinstance(producer.topic, Topic) else limit
    if len(raw) > min(limit, storage_limit):
        why = (
            f"maxMessageSize {conn.config.max_message_size}"
            if len(raw) > limit
            else f"the largest entry storage accepts ({storage_limit} bytes)"
        )
        conn.send_command(
            make_command(
                "SEND_ERROR",
                producer_id=req.producer_id,
                sequence_id=req.sequence_id,
                error=pb.NotAllowedError,
                message=f"message of {len(raw)} bytes exceeds {why}",
            )
        )
        return
    if isinstance(producer.topic, Topic) and conn.service.quota_rejects(producer.topic) is not None:
        # the quota turned to reject while this producer was attached: close it; its reconnect is
        # refused at PRODUCER time and the client fails the pending sends with that reason
        producer.close_from_broker()
        producer.topic.remove_producer(producer)
        return
    txn = None
    if req.HasField("txnid_most_bits") and req.HasField("txnid_least_bits"):
        # a transaction's message: stored now, dispatched once it commits (`_topic` Rule 9)
        txn = TxnID(req.txnid_most_bits, req.txnid_least_bits)
        raw = _with_txnid(raw, frame.metadata, txn)
        try:
            if not conn.service.config.transaction_coordinator_enabled:
                # as Pulsar: with no coordinator to end it, such a message would hold the topic's
                # max read position (and every plain message after it) for good
                raise BrokerServiceError("Transactions are not enabled.", pb.NotAllowedError)
            if not isinstance(producer.topic, Topic):
                raise BrokerServiceError("transactions need a persistent topic", pb.NotAllowedError)
            await producer.topic.txn_buffer.prepare(txn)
        except (BrokerServiceError, ManagedLedgerError) as exc:
            code, message = (
                (exc.code, exc.message) if isinstance(exc, BrokerServiceError) else (pb.PersistenceError, str(exc))
            )
            conn.send_command(
                make_command(
                    "SEND_ERROR",
                    producer_id=req.producer_id,
                    sequence_id=req.sequence_id,
                    error=code,
                    message=message,
                )
            )
            return
    # a batch is keyed on its highest sequence id (see `_dedup` Rule 1); the receipt carries it
    highest = highest_sequence_id(req.sequence_id, req.highest_sequence_id, req.num_messages)
    conn.publish_started(len(raw))
    if req.is_chunk or (frame.metadata is not None and frame.metadata.num_chunks_from_msg > 1):
        producer.chunk_in_counter += 1
        producer.topic.stats_state.chunks_seen = True
    md = frame.metadata
    partial = md is not None and is_partial_chunk(md)
    if isinstance(producer.topic, Topic) and md is not None and md.producer_name and is_replicator_name(producer.name):
        # a replicator's SEND: deduplicated on the original producer's name (the topic's Rule 10)
        producer.topic.publish(
            producer,
            req.sequence_id,
            highest,
            raw,
            req.num_messages,
            partial_chunk=partial,
            dedup_name=md.producer_name,
            txn=txn,
        )
    elif txn is not None and isinstance(producer.topic, Topic):
        producer.topic.publish(
            producer, req.sequence_id, highest, raw, req.num_messages, partial_chunk=partial, txn=txn
        )
    else:
        producer.topic.publish(producer, req.sequence_id, highest, raw, req.num_messages, partial_chunk=partial)
    # publish rate (`_rate_limit` Rule 3): over the topic's rate, stop reading this connection
    # until the window ends, as Pulsar disables auto-read; nothing is dropped or refused
    # on both kinds of topic (`_nonpersistent` Rule 7)
    limiter = producer.topic.publish_limiter
    if limiter.enabled:
        limiter.record(max(1, req.num_messages), len(raw))
        await limiter.wait_if_exhausted()


async def handle_close_producer(conn: ServerConnection, frame: Frame) -> None:
    """CLOSE_PRODUCER -> SUCCESS (also for an unknown producer: closing is idempotent)."""
    req = frame.command.close_producer
    producer = conn.producers.pop(req.producer_id, None)
    if producer is not None:
        producer.topic.remove_producer(producer)
    conn.send_command(make_command("SUCCESS", request_id=req.request_id))
