"""Reading and expiring a topic's messages from the admin API, with Pulsar's paths and answers.

Endpoints (under ``/admin/v2/persistent/{tenant}/{namespace}/{topic}``):

* ``GET .../lastMessageId`` - ``{"ledgerId": L, "entryId": E, "partitionIndex": P}`` of the last
  stored entry (``entryId`` -1 in a ledger with no entry yet, as Pulsar answers an empty topic).
* ``GET .../ledger/{ledgerId}/entry/{entryId}`` - get-message-by-id.
* ``GET .../subscription/{sub}/position/{n}`` - peek: the n-th (1-based) unacknowledged entry of
  the subscription (entries acknowledged individually are skipped).
* ``GET .../examinemessage?initialPosition=latest|earliest&messagePosition=n`` - the n-th entry
  (1-based) counted from the newest (latest, the default) or the oldest stored entry.
* ``POST .../terminate`` - terminate the topic (no more messages; producers are closed and
  refused with TopicTerminatedError; consumers still read what is stored and are told
  REACHED_END_OF_TOPIC once they acknowledged it all, see `broker.topics._dispatcher`); answers the last message's id as
  lastMessageId does. A partitioned topic's own name is 405, as in Pulsar.
* ``POST .../subscription/{sub}/expireMessages/{seconds}`` - acknowledge the subscription's
  messages published more than ``seconds`` ago (204).

Rules:

* Rule 1: a message-returning endpoint answers the entry's payload as the body
  (``application/octet-stream``, compressed payloads as stored) and its metadata in Pulsar's
  ``X-Pulsar-*`` headers: ``X-Pulsar-Message-ID`` (``ledger:entry``), ``X-Pulsar-publish-time``
  (ISO 8601, UTC), ``X-Pulsar-producer-name``, ``X-Pulsar-sequence-id``, ``X-Pulsar-event-time``,
  ``X-Pulsar-partition-key``, ``X-Pulsar-compression``, ``X-Pulsar-uncompressed-size``,
  ``X-Pulsar-num-batch-message`` and ``X-Pulsar-batch-size`` for a batch (whose whole payload is
  the body), and ``X-Pulsar-PROPERTY-{key}`` per property.
* Rule 2: a position past the stored entries, or an entry trimmed or never written, is 404; a
  non-positive position is 412 (Pulsar's answers); the walk to the n-th entry reads no entry
  but the one answered.
* Authorization (`_auth`): the reads need ``consume`` on the topic (or tenant admin); expiring
  changes a subscription and needs tenant admin.
"""

from __future__ import annotations

import base64
import datetime
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from managed_ledger import ManagedLedgerError, Position
from protocols.pulsar import pulsar_api_pb2 as pb

from ..topics._entries import entry_metadata
from ._common import (
    INT32_MAX,
    INT64_MAX,
    RestError,
    endpoint,
    int_param,
    json_response,
    no_content,
    service_of,
    subscription_of,
    topic_of,
)
from ._topic_ops import existing_subscription, existing_topic

if TYPE_CHECKING:
    from ..topics._topic import Topic

__all__ = ["entry_response", "routes"]


def _iso(ms: int) -> str:
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def entry_response(position: Position, data: bytes) -> Response:
    """Rule 1: the stored entry ``data`` at ``position`` as Pulsar answers a message."""
    headers = {"X-Pulsar-Message-ID": f"{position.ledger_id}:{position.entry_id}"}
    try:
        md = entry_metadata(data)
    except ValueError:
        return _octets(data, headers)
    size = int.from_bytes(data[:4], "big")
    payload = data[4 + size :]
    headers["X-Pulsar-publish-time"] = _iso(md.publish_time)
    headers["X-Pulsar-producer-name"] = md.producer_name
    headers["X-Pulsar-sequence-id"] = str(md.sequence_id)
    if md.HasField("event_time") and md.event_time:
        headers["X-Pulsar-event-time"] = _iso(md.event_time)
    if md.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = md.partition_key
    if md.HasField("ordering_key"):
        headers["X-Pulsar-ordering-key"] = base64.b64encode(md.ordering_key).decode()
    if md.HasField("compression") and md.compression:
        headers["X-Pulsar-compression"] = pb.CompressionType.Name(md.compression)
        headers["X-Pulsar-uncompressed-size"] = str(md.uncompressed_size)
    if md.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if md.HasField("deliver_at_time"):
        headers["X-Pulsar-deliver-at-time"] = _iso(md.deliver_at_time)
    for prop in md.properties:
        headers[f"X-Pulsar-PROPERTY-{prop.key}"] = prop.value
    return _octets(payload, headers)


def _octets(body: bytes, headers: dict[str, str]) -> Response:
    """An ``application/octet-stream`` response with ``headers`` sent with their names' case
    (Starlette would lower-case them; a property key's case matters to clients)."""
    response = Response(body, media_type="application/octet-stream")
    for name, value in headers.items():
        # a header cannot carry line breaks (nor a name other characters): a stored key or value
        # with them must not turn the answer into a server error
        name = "".join(c if c.isascii() and c.isprintable() and c not in " :" else "_" for c in name)
        value = value.replace("\r", " ").replace("\n", " ").replace("\0", " ")
        response.raw_headers.append((name.encode("latin-1"), value.encode("utf-8")))
    return response


def _segments(t: Topic) -> list[tuple[int, int]]:
    """(ledger id, entries) of the topic's ledgers in order; the current one up to its last add."""
    lce = t.ml.last_confirmed_entry
    out = []
    for info in t.ml.ledgers:
        if info.ledger_id == lce.ledger_id:
            out.append((info.ledger_id, lce.entry_id + 1))
        elif info.ledger_id < lce.ledger_id:
            out.append((info.ledger_id, info.entries))
    return out


def _nth(t: Topic, n: int, *, from_end: bool) -> Position | None:
    """The n-th (1-based) stored entry from the oldest or from the newest; None past the ends."""
    segments = _segments(t)
    for ledger_id, entries in reversed(segments) if from_end else segments:
        if n <= entries:
            return Position(ledger_id, entries - n if from_end else n - 1)
        n -= entries
    return None


async def _answer(t: Topic, position: Position | None, what: str) -> Response:
    if position is None:
        raise RestError(404, f"Message not found: {what}")
    try:
        entry = await t.ml.read_entry(position)
    except ManagedLedgerError as exc:
        raise RestError(404, f"Message not found: {position.ledger_id}:{position.entry_id} ({exc})") from None
    return entry_response(position, entry.data)


@endpoint
async def last_message_id(request: Request) -> Response:
    t = await existing_topic(service_of(request), topic_of(request))
    lce = t.ml.last_confirmed_entry
    return json_response({"ledgerId": lce.ledger_id, "entryId": lce.entry_id, "partitionIndex": t.name.partition})


@endpoint
async def terminate(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    if topic.partition < 0 and await s.namespaces.get_partitions(topic):
        raise RestError(405, "Termination of a partitioned topic is not allowed")
    t = await existing_topic(s, topic)
    last = await t.terminate()
    return json_response({"ledgerId": last.ledger_id, "entryId": last.entry_id, "partitionIndex": t.name.partition})


@endpoint
async def get_message_by_id(request: Request) -> Response:
    ledger_id = int_param(request, "ledger", "ledger id", minimum=0, maximum=INT64_MAX)
    entry_id = int_param(request, "entry", "entry id", minimum=0, maximum=INT64_MAX)
    t = await existing_topic(service_of(request), topic_of(request))
    position = Position(ledger_id, entry_id)
    lce = t.ml.last_confirmed_entry
    known = any(ledger == ledger_id and entry_id < entries for ledger, entries in _segments(t))
    if not known or position > lce:
        raise RestError(404, f"Message not found: {ledger_id}:{entry_id} is not stored on {t.name}")
    return await _answer(t, position, f"{ledger_id}:{entry_id}")


def _position_param(request: Request, name: str, value: str | None = None) -> int:
    text = request.path_params.get(name) if value is None else value
    try:
        n = int(str(text))
    except ValueError:
        raise RestError(412, f"Invalid message position {text!r}") from None
    if not 0 < n <= INT32_MAX:
        raise RestError(412, f"Invalid message position {n}: it must be 1 or more")
    return n


@endpoint
async def peek(request: Request) -> Response:
    n = _position_param(request, "n")
    t, sub = await existing_subscription(service_of(request), topic_of(request), subscription_of(request))
    cursor, lce = sub.cursor, t.ml.last_confirmed_entry
    pos = cursor.mark_delete_position
    left = n
    while True:
        pos = t.next_position(pos)
        if pos > lce:
            raise RestError(404, f"Message not found: no message at position {n} of subscription {sub.name}")
        if not cursor.is_acked(pos):
            left -= 1
            if left == 0:
                return await _answer(t, pos, f"position {n} of subscription {sub.name}")


@endpoint
async def examine(request: Request) -> Response:
    initial = request.query_params.get("initialPosition", "latest").lower()
    if initial not in ("latest", "earliest"):
        raise RestError(412, f"initialPosition must be latest or earliest, not {initial!r}")
    n = _position_param(request, "", request.query_params.get("messagePosition", "1"))
    t = await existing_topic(service_of(request), topic_of(request))
    return await _answer(t, _nth(t, n, from_end=initial == "latest"), f"position {n} from the {initial} message")


@endpoint
async def expire_messages(request: Request) -> Response:
    seconds = int_param(request, "seconds", "expire time in seconds", minimum=0, maximum=INT32_MAX)
    s = service_of(request)
    _, sub = await existing_subscription(s, topic_of(request), subscription_of(request))
    await sub.expire_published_before(int(s.clock() * 1000) - seconds * 1000)
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    sp = tp + "/subscription/{subscription}"
    return [
        Route(f"{tp}/lastMessageId", last_message_id, methods=["GET"]),
        Route(f"{tp}/terminate", terminate, methods=["POST"]),
        Route(tp + "/ledger/{ledger}/entry/{entry}", get_message_by_id, methods=["GET"]),
        Route(f"{tp}/examinemessage", examine, methods=["GET"]),
        Route(sp + "/position/{n}", peek, methods=["GET"]),
        Route(sp + "/expireMessages/{seconds}", expire_messages, methods=["POST"]),
    ]
