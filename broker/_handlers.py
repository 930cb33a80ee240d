"""Routing of commands to their handler family, and the error answer each command type expects.

Every request is answered with its own response type (the client keeps separate request-id
counters for lookups and for producer/consumer commands, so a reply must never be matched by
request id alone):

* PARTITIONED_METADATA -> PARTITIONED_METADATA_RESPONSE (response Failed + error)
* LOOKUP -> LOOKUP_RESPONSE (response Failed + error)
* GET_SCHEMA / GET_OR_CREATE_SCHEMA / CONSUMER_STATS -> their response with error_code
* ACK with request_id -> ACK_RESPONSE with error
* everything else with a request_id -> ERROR

Commands the 4.x client never sends (transactions, topic-list watchers) are answered with ERROR
NotAllowed when they carry a request id, else ignored; the broker never sends a type the client
does not accept.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from broker.protocol import Frame, command_body, make_command, type_name
from broker.protocol import pulsar_api_pb2 as pb
from managed_ledger import ManagedLedgerError

from ._errors import BrokerServiceError
from ._topic_name import InvalidTopicNameError

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = ["dispatch_frame", "send_error_for"]

log = logging.getLogger(__name__)

Handler = Callable[["ServerConnection", Frame], Awaitable[None]]
T = pb.BaseCommand


def send_error_for(conn: ServerConnection, frame: Frame, code: int, message: str) -> None:
    """Answer a failed request with the error shape its type expects (see the module list)."""
    t = frame.type
    body = command_body(frame.command)
    request_id = getattr(body, "request_id", None)
    if t == T.PARTITIONED_METADATA:
        cmd = make_command("PARTITIONED_METADATA_RESPONSE", request_id=request_id,
                           response=pb.CommandPartitionedTopicMetadataResponse.Failed, error=code, message=message)
    elif t == T.LOOKUP:
        cmd = make_command("LOOKUP_RESPONSE", request_id=request_id,
                           response=pb.CommandLookupTopicResponse.Failed, error=code, message=message)
    elif t == T.GET_SCHEMA:
        cmd = make_command("GET_SCHEMA_RESPONSE", request_id=request_id, error_code=code, error_message=message)
    elif t == T.GET_OR_CREATE_SCHEMA:
        cmd = make_command("GET_OR_CREATE_SCHEMA_RESPONSE", request_id=request_id, error_code=code,
                           error_message=message)
    elif t == T.CONSUMER_STATS:
        cmd = make_command("CONSUMER_STATS_RESPONSE", request_id=request_id, error_code=code, error_message=message)
    elif t == T.ACK:
        if not body.HasField("request_id"):
            return
        cmd = make_command("ACK_RESPONSE", consumer_id=body.consumer_id, request_id=request_id, error=code,
                           message=message)
    elif request_id is not None:
        cmd = make_command("ERROR", request_id=request_id, error=code, message=message)
    else:
        log.warning("connection %s: %s failed: %s", conn.remote, type_name(t), message)
        return
    conn.send_command(cmd)


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


async def _pong(conn: ServerConnection, frame: Frame) -> None:
    return None


async def _unsupported(conn: ServerConnection, frame: Frame) -> None:
    raise BrokerServiceError(f"{type_name(frame.type)} is not supported by this broker", pb.NotAllowedError)


def _tables() -> tuple[dict[int, Handler], dict[int, Handler]]:
    from . import _handlers_consumer as hc
    from . import _handlers_lookup as hl
    from . import _handlers_producer as hp

    inline: dict[int, Handler] = {
        T.PING: _ping, T.PONG: _pong,
        T.SEND: hp.handle_send,
        T.FLOW: hc.handle_flow, T.ACK: hc.handle_ack,
        T.REDELIVER_UNACKNOWLEDGED_MESSAGES: hc.handle_redeliver,
    }
    spawned: dict[int, Handler] = {
        T.PARTITIONED_METADATA: hl.handle_partitioned_metadata, T.LOOKUP: hl.handle_lookup,
        T.GET_TOPICS_OF_NAMESPACE: hl.handle_topics_of_namespace,
        T.GET_SCHEMA: hl.handle_get_schema, T.GET_OR_CREATE_SCHEMA: hl.handle_get_or_create_schema,
        T.PRODUCER: hp.handle_producer, T.CLOSE_PRODUCER: hp.handle_close_producer,
        T.SUBSCRIBE: hc.handle_subscribe, T.CLOSE_CONSUMER: hc.handle_close_consumer,
        T.UNSUBSCRIBE: hc.handle_unsubscribe, T.SEEK: hc.handle_seek,
        T.GET_LAST_MESSAGE_ID: hc.handle_get_last_message_id, T.CONSUMER_STATS: hc.handle_consumer_stats,
        T.AUTH_RESPONSE: _pong,
    }
    return inline, spawned


_INLINE: dict[int, Handler] | None = None
_SPAWNED: dict[int, Handler] = {}


async def dispatch_frame(conn: ServerConnection, frame: Frame) -> None:
    """Run the handler of ``frame`` inline or as a bounded task (see `_connection`)."""
    global _INLINE, _SPAWNED
    if _INLINE is None:
        _INLINE, _SPAWNED = _tables()
    handler = _INLINE.get(frame.type)
    if handler is not None:
        await _guarded(handler, conn, frame)
        return
    handler = _SPAWNED.get(frame.type)
    if handler is not None:
        await conn.spawn_request(_guarded, handler, conn, frame)
        return
    await _guarded(_unsupported, conn, frame)
