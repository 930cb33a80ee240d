"""Routing of commands to their handler family, and the error answer each command type expects.

Rules (for every command after CONNECTED; the handshake itself is `_connection`'s):

* Rule 1 (routes): every BaseCommand type has exactly one route. Client requests run their
  handler inline or as a bounded task (see `_connection`); commands of features this broker
  lacks (transactions, topic-list watchers: the 4.x client never sends them) are refused with
  ERROR NotAllowed when they carry a request id, else logged and ignored; the types only a broker
  sends (CONNECTED, MESSAGE, the responses, ...) close the connection, as Pulsar's decoder does
  (it has no server-side handler for them).
* Rule 2 (body): a command must carry the sub-message its type names (PRODUCER -> ``producer``);
  without it no handler runs. If the command holds exactly one other sub-message and that one
  carries a request id (a client that filled in the wrong body), that request is answered with
  the error its own type expects (Rule 3, NotAllowedError) and the connection stays open;
  otherwise there is nothing to answer and the connection is closed. (Pulsar closes the
  connection in both cases.) The reason is logged either way.
* Rule 3 (answers): every request is answered with its own response type (the client keeps
  separate request-id counters for lookups and for producer/consumer commands, so a reply must
  never be matched by request id alone):

  - PARTITIONED_METADATA -> PARTITIONED_METADATA_RESPONSE (response Failed + error)
  - LOOKUP -> LOOKUP_RESPONSE (response Failed + error)
  - GET_SCHEMA / GET_OR_CREATE_SCHEMA / CONSUMER_STATS -> their response with error_code
  - ACK with request_id -> ACK_RESPONSE with error
  - everything else with a request_id -> ERROR

  A failed command without a request id is logged (at debug level for the FLOW / ACK /
  REDELIVER of a consumer that is gone, which races with every close; Pulsar drops them too).

The broker never sends a type the client does not accept.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from managed_ledger import ManagedLedgerError
from protocols.pulsar import Frame, InvalidTopicNameError, command_body, command_field, make_command, type_name
from protocols.pulsar import pulsar_api_pb2 as pb

from .._errors import BrokerServiceError
from . import _handlers_consumer as hc
from . import _handlers_lookup as hl
from . import _handlers_producer as hp
from . import _handlers_txn_topic as htt
from ._auth_commands import AUTHORIZED_COMMANDS, authorize_command

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = ["dispatch_frame", "send_error_for", "BROKER_ONLY_TYPES", "REFUSED_TYPES"]

log = logging.getLogger(__name__)

Handler = Callable[["ServerConnection", Frame], Awaitable[None]]
T = pb.BaseCommand


def _request_id(body: Message) -> int | None:
    """The body's request id when it has that field and the sender set it."""
    if "request_id" not in body.DESCRIPTOR.fields_by_name or not body.HasField("request_id"):
        return None
    return int(body.request_id)  # type: ignore[attr-defined]


def _answer_error(conn: ServerConnection, t: int, body: Message, code: int, message: str) -> bool:
    """Answer request ``body`` of type ``t`` with the error shape of Rule 3.

    Returns False (and sends nothing) when the body carries no request id."""
    request_id = _request_id(body)
    if request_id is None:
        return False
    if t == T.PARTITIONED_METADATA:
        cmd = make_command(
            "PARTITIONED_METADATA_RESPONSE",
            request_id=request_id,
            response=pb.CommandPartitionedTopicMetadataResponse.Failed,
            error=code,
            message=message,
        )
    elif t == T.LOOKUP:
        cmd = make_command(
            "LOOKUP_RESPONSE",
            request_id=request_id,
            response=pb.CommandLookupTopicResponse.Failed,
            error=code,
            message=message,
        )
    elif t == T.GET_SCHEMA:
        cmd = make_command("GET_SCHEMA_RESPONSE", request_id=request_id, error_code=code, error_message=message)
    elif t == T.GET_OR_CREATE_SCHEMA:
        cmd = make_command(
            "GET_OR_CREATE_SCHEMA_RESPONSE", request_id=request_id, error_code=code, error_message=message
        )
    elif t == T.CONSUMER_STATS:
        cmd = make_command("CONSUMER_STATS_RESPONSE", request_id=request_id, error_code=code, error_message=message)
    elif t == T.ACK:
        cmd = make_command(
            "ACK_RESPONSE",
            consumer_id=body.consumer_id,  # type: ignore[attr-defined]
            request_id=request_id,
            error=code,
            message=message,
        )
    else:
        cmd = make_command("ERROR", request_id=request_id, error=code, message=message)
    conn.send_command(cmd)
    return True


def send_error_for(conn: ServerConnection, frame: Frame, code: int, message: str) -> None:
    """Answer a failed request with the error shape its type expects (Rule 3), or log it (no request id)."""
    body = command_body(frame.command)
    if body is None or not _answer_error(conn, frame.type, body, code, message):
        log.warning("connection %s: %s failed: %s", conn.remote, type_name(frame.type), message)


async def _guarded(handler: Handler, conn: ServerConnection, frame: Frame) -> None:
    try:
        await handler(conn, frame)
    except BrokerServiceError as exc:
        send_error_for(conn, frame, exc.code, exc.message)
    except InvalidTopicNameError as exc:
        send_error_for(conn, frame, pb.InvalidTopicName, str(exc))
    except ManagedLedgerError as exc:
        log.warning("connection %s: %s: storage error: %s", conn.remote, type_name(frame.type), exc)
        send_error_for(conn, frame, pb.PersistenceError, str(exc))
    except Exception as exc:  # a bug must fail the request, not the broker
        log.exception("connection %s: %s failed", conn.remote, type_name(frame.type))
        send_error_for(conn, frame, pb.UnknownError, f"{type(exc).__name__}: {exc}")


async def _ping(conn: ServerConnection, frame: Frame) -> None:
    conn.send_command(make_command("PONG"))


async def _ignore(conn: ServerConnection, frame: Frame) -> None:
    return None


async def _auth_response(conn: ServerConnection, frame: Frame) -> None:
    conn.auth_session.on_auth_response(frame.command.authResponse)


def _with_authorization(handler: Handler) -> Handler:
    """``handler`` after the role's permission check (`broker.auth`; a refusal is answered per Rule 3)."""

    async def run(conn: ServerConnection, frame: Frame) -> None:
        await authorize_command(conn, frame)
        await handler(conn, frame)

    return run


async def _refuse(conn: ServerConnection, frame: Frame) -> None:
    raise BrokerServiceError(f"{type_name(frame.type)} is not supported by this broker", pb.NotAllowedError)


# ---------------------------------------------------------------------------------- routes (Rule 1)

_INLINE: dict[int, Handler] = {
    T.PING: _ping,
    T.PONG: _ignore,
    T.SEND: hp.handle_send,
    T.FLOW: hc.handle_flow,
    T.ACK: hc.handle_ack,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: hc.handle_redeliver,
}
_SPAWNED: dict[int, Handler] = {
    T.END_TXN_ON_PARTITION: htt.handle_end_txn_on_partition,
    T.END_TXN_ON_SUBSCRIPTION: htt.handle_end_txn_on_subscription,
    T.PARTITIONED_METADATA: hl.handle_partitioned_metadata,
    T.LOOKUP: hl.handle_lookup,
    T.GET_TOPICS_OF_NAMESPACE: hl.handle_topics_of_namespace,
    T.GET_SCHEMA: hl.handle_get_schema,
    T.GET_OR_CREATE_SCHEMA: hl.handle_get_or_create_schema,
    T.PRODUCER: hp.handle_producer,
    T.CLOSE_PRODUCER: hp.handle_close_producer,
    T.SUBSCRIBE: hc.handle_subscribe,
    T.CLOSE_CONSUMER: hc.handle_close_consumer,
    T.UNSUBSCRIBE: hc.handle_unsubscribe,
    T.SEEK: hc.handle_seek,
    T.GET_LAST_MESSAGE_ID: hc.handle_get_last_message_id,
    T.CONSUMER_STATS: hc.handle_consumer_stats,
    T.AUTH_RESPONSE: _auth_response,
}

REFUSED_TYPES: frozenset[int] = frozenset(
    {
        T.NEW_TXN,
        T.ADD_PARTITION_TO_TXN,
        T.ADD_SUBSCRIPTION_TO_TXN,
        T.END_TXN,
        T.TC_CLIENT_CONNECT_REQUEST,
        T.WATCH_TOPIC_LIST,
        T.WATCH_TOPIC_LIST_CLOSE,
    }
)
"""Client commands of features this broker lacks (Rule 1: ERROR NotAllowed)."""

BROKER_ONLY_TYPES: frozenset[int] = frozenset(
    {
        T.CONNECTED,
        T.SEND_RECEIPT,
        T.SEND_ERROR,
        T.MESSAGE,
        T.SUCCESS,
        T.ERROR,
        T.PRODUCER_SUCCESS,
        T.PARTITIONED_METADATA_RESPONSE,
        T.LOOKUP_RESPONSE,
        T.CONSUMER_STATS_RESPONSE,
        T.REACHED_END_OF_TOPIC,
        T.GET_LAST_MESSAGE_ID_RESPONSE,
        T.ACTIVE_CONSUMER_CHANGE,
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        T.GET_SCHEMA_RESPONSE,
        T.AUTH_CHALLENGE,
        T.ACK_RESPONSE,
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
        T.NEW_TXN_RESPONSE,
        T.ADD_PARTITION_TO_TXN_RESPONSE,
        T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        T.END_TXN_RESPONSE,
        T.END_TXN_ON_PARTITION_RESPONSE,
        T.END_TXN_ON_SUBSCRIPTION_RESPONSE,
        T.TC_CLIENT_CONNECT_RESPONSE,
        T.WATCH_TOPIC_LIST_SUCCESS,
        T.WATCH_TOPIC_UPDATE,
        T.TOPIC_MIGRATED,
    }
)
"""Types only a broker sends (Rule 1: a client sending one is closed)."""


def _check_routes() -> None:
    # CONNECT is the handshake (`_connection`); every other type has exactly one route (Rule 1),
    # checked at import so that a type added to the .proto cannot go unrouted.
    routes: list[set[int]] = [set(_INLINE), set(_SPAWNED), set(REFUSED_TYPES), set(BROKER_ONLY_TYPES), {T.CONNECT}]
    every = [t for r in routes for t in r]
    if len(every) != len(set(every)) or set(every) != set(T.Type.values()):
        raise AssertionError("BaseCommand types and dispatch routes disagree")


_check_routes()


def _answer_missing_body(conn: ServerConnection, frame: Frame) -> None:
    """Rule 2: answer the request the client meant when it can be found, else close."""
    problem = f"{type_name(frame.type)} command without its {command_field(frame.type)} body"
    present = [(fd.number, value) for fd, value in frame.command.ListFields() if fd.name != "type"]
    if len(present) == 1:
        t, body = present[0]  # a sub-message's field number is its type
        message = f"malformed command: {problem} (it holds {type_name(t)}'s)"
        answerable = t not in BROKER_ONLY_TYPES and t != T.CONNECT
        if answerable and _answer_error(conn, t, body, pb.NotAllowedError, message):
            log.warning("connection %s: %s: request answered with an error", conn.remote, message)
            return
    conn.close(f"malformed command: {problem}")


async def dispatch_frame(conn: ServerConnection, frame: Frame) -> None:
    """Route ``frame`` per the module rules: inline, as a bounded task, refused, or a close.

    Never raises for anything the client sent: failures become the answers of Rule 3.
    """
    t = frame.type
    if t in BROKER_ONLY_TYPES:
        conn.close(f"protocol violation: the client sent {type_name(t)}, which only a broker sends")
        return
    if command_body(frame.command) is None:
        _answer_missing_body(conn, frame)
        return
    handler = _INLINE.get(t)
    if handler is not None:
        await _guarded(handler, conn, frame)
        return
    handler = _SPAWNED.get(t)
    if handler is not None:
        if conn.service.authz.enabled and t in AUTHORIZED_COMMANDS:
            handler = _with_authorization(handler)
        await conn.spawn_request(_guarded, handler, conn, frame)
        return
    await _guarded(_refuse, conn, frame)
