"""Handlers of SUBSCRIBE, FLOW, ACK, REDELIVER, SEEK, UNSUBSCRIBE, CLOSE_CONSUMER, stats and last id."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from managed_ledger import InitialPosition, Position
from protocols.pulsar import Frame, TopicName, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from .._errors import BrokerServiceError, IncompatibleSchemaError, NotAllowedError
from ..topics._consumer import Consumer
from ..topics._dispatcher import SubType
from ..topics._entries import UINT64_MAX, entry_info
from ..topics._nonpersistent import NonPersistentSubscription, NonPersistentTopic
from ..topics._subscription import Subscription
from ..topics._topic import Topic
from ..transactions import TxnID
from ._handlers_lookup import schema_from_proto

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = [
    "handle_subscribe",
    "handle_flow",
    "handle_ack",
    "handle_redeliver",
    "handle_seek",
    "handle_unsubscribe",
    "handle_close_consumer",
    "handle_get_last_message_id",
    "handle_consumer_stats",
    "start_of",
]

log = logging.getLogger(__name__)
_INT64_MAX = (1 << 63) - 1


def start_of(mid: pb.MessageIdData) -> Position | InitialPosition:
    """A reader's start: ledger/entry 2^64-1 (-1 unsigned) is earliest, the int64 maximum latest."""
    if mid.ledgerId == UINT64_MAX or mid.entryId == UINT64_MAX:
        return InitialPosition.EARLIEST
    if mid.ledgerId >= _INT64_MAX:
        return InitialPosition.LATEST
    return Position(mid.ledgerId, mid.entryId)


def position_of(mid: pb.MessageIdData) -> Position:
    """The position a message id names; an entry id of 2^64-1 is -1, "before the ledger's first
    entry" (the client acks ``L:-1`` cumulatively when a partly acked batch is entry 0 of L)."""
    return Position(mid.ledgerId, -1 if mid.entryId == UINT64_MAX else mid.entryId)


def _consumer(conn: ServerConnection, consumer_id: int) -> Consumer:
    consumer = conn.consumers.get(consumer_id)
    if consumer is None or consumer.closed:
        raise BrokerServiceError(f"consumer {consumer_id} not found on this connection", pb.ConsumerNotFound)
    return consumer


async def _check_schema(conn: ServerConnection, topic: Topic | NonPersistentTopic, schema: pb.Schema) -> None:
    # Runs before the subscription is touched: a refused schema leaves no cursor and no consumer
    # behind (an Exclusive subscription stays free for the next, correct consumer).
    if schema.type == 0 and not schema.schema_data:
        return
    info = schema_from_proto(schema)
    name = topic.name
    strategy, _allow = await conn.service.schema_strategy(name.namespace_name)
    if await conn.service.schemas.versions(name):
        await conn.service.schemas.check(name, info, strategy, consumer=True)
    elif topic.idle and (not isinstance(topic, Topic) or topic.ml.total_size == 0):
        # as Pulsar: the first user of an idle, empty topic without a schema registers its own
        await conn.service.schemas.get_or_create(name, info, strategy)
    elif strategy != "ALWAYS_COMPATIBLE":
        # as Pulsar: data or clients without a schema are there, nothing says the consumer can read them
        raise IncompatibleSchemaError(
            f"topic {name} has no schema to check the consumer's against (it has "
            f"producers, consumers or data without one)"
        )


async def handle_subscribe(conn: ServerConnection, frame: Frame) -> None:
    """SUBSCRIBE -> SUCCESS; the client then sends FLOW."""
    req = frame.command.subscribe
    existing = conn.consumers.get(req.consumer_id)
    if existing is not None and not existing.closed:
        conn.send_command(make_command("SUCCESS", request_id=req.request_id))
        return
    if req.subType == SubType.KEY_SHARED and not conn.config.subscription_key_shared_enable:
        raise NotAllowedError("Key_Shared subscriptions are disabled on this broker")
    if req.read_compacted and req.subType not in (SubType.EXCLUSIVE, SubType.FAILOVER):
        # as Pulsar: the compacted view has one reader position, so only single-active types
        raise NotAllowedError("read compacted is only allowed on Exclusive and Failover subscriptions (and readers)")
    name = TopicName.parse(req.topic)
    topic = await conn.service.get_any_topic(name, create=req.force_topic_creation)
    if isinstance(topic, Topic):
        topic.check_subscribe_rate(conn.remote, req.consumer_name, req.consumer_id)
    elif req.read_compacted:
        raise NotAllowedError("read compacted is not allowed on non-persistent topics (nothing is stored)")
    if req.HasField("schema"):
        await _check_schema(conn, topic, req.schema)
    initial = (
        InitialPosition.EARLIEST if req.initialPosition == pb.CommandSubscribe.Earliest else InitialPosition.LATEST
    )
    start = start_of(req.start_message_id) if (not req.durable and req.HasField("start_message_id")) else None
    is_new = req.subscription not in topic.subscriptions or not req.durable
    sub = await topic.subscribe(req.subscription, durable=req.durable, initial_position=initial, start=start)
    # the first consumer decides (the others must be alike: one reader position)
    if isinstance(sub, Subscription) and not sub.consumers:
        sub.read_compacted = req.read_compacted
        from_start = start is InitialPosition.EARLIEST if start is not None else initial is InitialPosition.EARLIEST
        if req.read_compacted and is_new and from_start:
            sub.compacted_next = Position(-1, -1)  # `Subscription` Rule 5: the whole view
    ranges = None
    if (
        req.subType == SubType.KEY_SHARED
        and req.HasField("keySharedMeta")
        and req.keySharedMeta.keySharedMode == pb.STICKY
    ):
        ranges = [(r.start, r.end) for r in req.keySharedMeta.hashRanges]
    consumer = await sub.add_consumer(
        consumer_id=req.consumer_id,
        name=req.consumer_name or f"consumer-{req.consumer_id}",
        connection=conn,
        sub_type=req.subType,
        priority=req.priority_level,
        hash_ranges=ranges,
        metadata={kv.key: kv.value for kv in req.metadata},
    )
    if conn.closed:
        await sub.remove_consumer(consumer)
        return
    conn.consumers[req.consumer_id] = consumer
    conn.send_command(make_command("SUCCESS", request_id=req.request_id))
    consumer.ready = True
    if sub.dispatcher is not None:
        sub.dispatcher.notify_new_failover_consumer(consumer)
        sub.dispatcher.wake()  # messages it may be told now (REACHED_END_OF_TOPIC) waited for SUCCESS
    log.info(
        "consumer %s subscribed to %s/%s (%s)", consumer.name, name, req.subscription, SubType.NAMES.get(req.subType)
    )


def _gone(conn: ServerConnection, what: str, consumer_id: int) -> None:
    # The broker may have closed the consumer while the client was writing this (CLOSE_CONSUMER
    # crosses it on the wire), so this is routine: dropped quietly, as Pulsar does.
    log.debug("connection %s: %s for consumer %d, which is not open here: dropped", conn.remote, what, consumer_id)


async def handle_flow(conn: ServerConnection, frame: Frame) -> None:
    """FLOW: more permits (messages) for a consumer; dropped for a consumer that is not open."""
    req = frame.command.flow
    consumer = conn.consumers.get(req.consumer_id)
    if consumer is None or consumer.closed or consumer.subscription.dispatcher is None:
        _gone(conn, "FLOW", req.consumer_id)
        return
    consumer.subscription.note_flow(consumer)
    consumer.subscription.dispatcher.flow(consumer, req.messagePermits)


async def handle_ack(conn: ServerConnection, frame: Frame) -> None:
    """ACK individual / cumulative / batch-index; ACK_RESPONSE when a request id is set.

    For a consumer that is not open: ACK_RESPONSE ConsumerNotFound when a request id is set (the
    client fails that ack at once instead of at its operation timeout), else dropped quietly.
    """
    req = frame.command.ack
    found = conn.consumers.get(req.consumer_id)
    if (found is None or found.closed) and not req.HasField("request_id"):
        _gone(conn, "ACK", req.consumer_id)
        return
    consumer = _consumer(conn, req.consumer_id)
    if req.HasField("validation_error"):
        log.warning(
            "consumer %s reports a corrupt message (%s)",
            consumer.name,
            pb.CommandAck.ValidationError.Name(req.validation_error),
        )
    sub = consumer.subscription
    items = [(position_of(m), list(m.ack_set), m.batch_size if m.HasField("batch_size") else 0) for m in req.message_id]
    txn = None
    if req.HasField("txnid_most_bits") and req.HasField("txnid_least_bits"):
        if not conn.service.config.transaction_coordinator_enabled:
            raise NotAllowedError("Transactions are not enabled.")  # no coordinator would release the hold
        if not isinstance(sub, Subscription):
            raise NotAllowedError("transactions need a persistent topic")
        txn = TxnID(req.txnid_most_bits, req.txnid_least_bits)
    if req.ack_type == pb.CommandAck.Cumulative:
        if sub.dispatcher is not None and sub.dispatcher.sub_type in (SubType.SHARED, SubType.KEY_SHARED):
            raise NotAllowedError("cumulative ack is not allowed on Shared and Key_Shared subscriptions")
        for pos, ack_set, size in items[-1:]:
            if txn is not None and isinstance(sub, Subscription):
                await sub.ack_cumulative_in_txn(consumer, txn, pos, ack_set, size)
            else:
                await sub.ack_cumulative(consumer, pos, ack_set, size)
    elif txn is not None and isinstance(sub, Subscription):
        await sub.ack_individual_in_txn(consumer, txn, items)  # held until it ends (`_subscription` Rule 7)
    else:
        await sub.ack_individual(consumer, items)
    if req.HasField("request_id"):
        fields = {} if txn is None else {"txnid_most_bits": txn.most_bits, "txnid_least_bits": txn.least_bits}
        conn.send_command(
            make_command("ACK_RESPONSE", consumer_id=req.consumer_id, request_id=req.request_id, **fields)
        )


async def handle_redeliver(conn: ServerConnection, frame: Frame) -> None:
    """REDELIVER_UNACKNOWLEDGED_MESSAGES: all the consumer's unacked messages, or the listed ones.

    Dropped for a consumer that is not open (as FLOW)."""
    req = frame.command.redeliverUnacknowledgedMessages
    consumer = conn.consumers.get(req.consumer_id)
    if consumer is None or consumer.closed or consumer.subscription.dispatcher is None:
        _gone(conn, "REDELIVER_UNACKNOWLEDGED_MESSAGES", req.consumer_id)
        return
    d = consumer.subscription.dispatcher
    if req.message_ids and d.sub_type in (SubType.SHARED, SubType.KEY_SHARED):
        d.redeliver(consumer, [position_of(m) for m in req.message_ids])
    else:
        d.redeliver(consumer, None)


async def handle_seek(conn: ServerConnection, frame: Frame) -> None:
    """SEEK by message id or publish time: CLOSE_CONSUMER to the consumers, then SUCCESS."""
    req = frame.command.seek
    consumer = _consumer(conn, req.consumer_id)
    sub = consumer.subscription
    if isinstance(sub, NonPersistentSubscription):
        raise NotAllowedError("seek is not supported on non-persistent topics (nothing is stored)")
    topic = sub.topic
    if req.HasField("message_publish_time"):
        pos = await sub.position_for_publish_time(req.message_publish_time)
    elif req.HasField("message_id"):
        start = start_of(req.message_id)
        if start is InitialPosition.EARLIEST:
            pos = topic.first_position()
        elif start is InitialPosition.LATEST:
            pos = topic.next_position(topic.ml.last_confirmed_entry)
        else:
            pos = start
    else:
        raise BrokerServiceError("SEEK needs a message id or a publish time", pb.NotAllowedError)
    await sub.seek(pos)
    conn.send_command(make_command("SUCCESS", request_id=req.request_id))


async def handle_unsubscribe(conn: ServerConnection, frame: Frame) -> None:
    """UNSUBSCRIBE: delete the subscription unless other consumers are attached (or ``force``)."""
    req = frame.command.unsubscribe
    consumer = _consumer(conn, req.consumer_id)
    sub = consumer.subscription
    others = [c for c in sub.consumers if c is not consumer]
    if others and not req.force:
        raise BrokerServiceError(f"subscription {sub.name!r} has other connected consumers", pb.UnknownError)
    conn.consumers.pop(req.consumer_id, None)
    await sub.remove_consumer(consumer)
    if isinstance(sub, Subscription):
        await sub.topic.unsubscribe(sub)
    else:
        await sub.topic.unsubscribe(sub)
    conn.send_command(make_command("SUCCESS", request_id=req.request_id))


async def handle_close_consumer(conn: ServerConnection, frame: Frame) -> None:
    """CLOSE_CONSUMER -> SUCCESS; its unacked messages go to the other consumers."""
    req = frame.command.close_consumer
    consumer = conn.consumers.pop(req.consumer_id, None)
    if consumer is not None:
        await consumer.subscription.remove_consumer(consumer)
    conn.send_command(make_command("SUCCESS", request_id=req.request_id))


def _mid(pos: Position, batch_index: int = -1, partition: int = -1) -> dict:
    out = {"ledgerId": pos.ledger_id & UINT64_MAX, "entryId": pos.entry_id & UINT64_MAX}
    if batch_index >= 0:
        out["batch_index"] = batch_index
    if partition >= 0:
        out["partition"] = partition
    return out


async def handle_get_last_message_id(conn: ServerConnection, frame: Frame) -> None:
    """GET_LAST_MESSAGE_ID: the last stored id (with the last batch index) and the mark-delete position;
    for a read-compacted consumer of a topic that ends within the compacted view, the view's last."""
    req = frame.command.getLastMessageId
    consumer = _consumer(conn, req.consumer_id)
    sub = consumer.subscription
    if isinstance(sub, NonPersistentSubscription):
        raise NotAllowedError("GetLastMessageId is not supported on non-persistent topics (nothing is stored)")
    last = await sub.topic.last_dispatchable_position()  # not past open transactions, markers, aborts
    batch_index = -1
    view = sub.topic.compactor.view if sub.read_compacted else None
    if view is not None and last <= view.horizon:
        # as Pulsar: a read-compacted consumer is told the view's last message when the topic
        # ends within the view (the topic's own last message may be compacted out: a tombstone)
        entry = await view.last_entry()
        last = entry.position if entry is not None else Position(-1, -1)
    else:
        entry = await sub.topic.ml.read_entry(last) if last.entry_id >= 0 else None
    if entry is not None:
        info = entry_info(entry.data)
        if info.is_batch:
            batch_index = info.num_messages - 1
    conn.send_command(
        make_command(
            "GET_LAST_MESSAGE_ID_RESPONSE",
            request_id=req.request_id,
            last_message_id=_mid(last, batch_index, sub.topic.name.partition),
            consumer_mark_delete_position=_mid(sub.cursor.mark_delete_position, partition=sub.topic.name.partition),
        )
    )


async def handle_consumer_stats(conn: ServerConnection, frame: Frame) -> None:
    """CONSUMER_STATS: the consumer's figures as Pulsar answers them (its rates over the last
    stats period, `_stats` Rule 3; blocked as the dispatcher enforces the topic's limits, Rule 4)
    and its subscription's type, backlog and expiry rate."""
    req = frame.command.consumerStats
    consumer = _consumer(conn, req.consumer_id)
    sub = consumer.subscription
    msg_rate, byte_rate, redeliver_rate, ack_rate, _chunks = consumer.rates.per_s
    if isinstance(sub, Subscription):
        backlog, expired_rate = sub.backlog, sub.rates.per_s[0]
    else:
        backlog, expired_rate = 0, 0.0
    conn.send_command(
        make_command(
            "CONSUMER_STATS_RESPONSE",
            request_id=req.request_id,
            msgRateOut=msg_rate,
            msgThroughputOut=byte_rate,
            msgRateRedeliver=redeliver_rate,
            consumerName=consumer.name,
            availablePermits=max(0, consumer.permits),
            unackedMessages=consumer.unacked_messages,
            blockedConsumerOnUnackedMsgs=sub.consumer_blocked(consumer),
            address=_address(consumer),
            connectedSince=consumer.connected_since,
            msgBacklog=backlog,
            msgRateExpired=expired_rate,
            messageAckRate=ack_rate,
            type=sub.type_name,
        )
    )


def _address(consumer: Consumer) -> str:
    remote = consumer.address
    return remote if not remote or remote.startswith("/") else "/" + remote
