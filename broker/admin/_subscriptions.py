"""Subscriptions of a persistent topic: list, create, delete, skip, clear backlog, reset cursor,
and the subscription's string properties (given at creation or replaced with PUT ``.../properties``,
kept in the cursor's record, as Pulsar's subscription properties).

A partitioned topic's name works for list, create and delete: the operation applies to every
partition, as in Pulsar. Create loads (and so creates) every partition; list and delete only look
at partitions that are loaded or stored, as the others have no subscription (`_topic_ops` Rule 4).
Create on a missing topic creates it as a client's lookup would (auto-creation, partitioned when
that is the configured type), and is refused with 412 where auto-creation is off, as in Pulsar.
Partitions are loaded `FANOUT_CONCURRENCY` at a time; a list stops when its client disconnects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from managed_ledger import INTERNAL_PROPERTY_PREFIX, InitialPosition, Position
from protocols.pulsar import TopicName

from .._errors import TopicNotFoundError
from ..topics._dedup import DEDUP_CURSOR
from ._common import (
    INT32_MAX,
    INT64_MAX,
    RestError,
    endpoint,
    for_each_bounded,
    int_param,
    json_body,
    json_response,
    no_content,
    query_bool,
    require_namespace,
    service_of,
    subscription_of,
    topic_of,
)
from ._topic_ops import existing_subscription, existing_topic, present_partitions

if TYPE_CHECKING:
    from ..topics._subscription import Subscription
    from ..topics._topic import Topic

__all__ = ["routes", "parse_message_id"]


def _long(value: Any) -> int:
    """A JSON integer in Java's ``long`` range (ValueError otherwise: floats and booleans too)."""
    if isinstance(value, bool) or not isinstance(value, int) or not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(value)
    return value


def _properties(body: Any) -> dict[str, str]:
    """Subscription properties: a JSON object of strings (400 otherwise)."""
    if not isinstance(body, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in body.items()):
        raise RestError(400, "subscription properties must be a JSON object of strings")
    internal = [k for k in body if k.startswith(INTERNAL_PROPERTY_PREFIX)]
    if internal:  # the broker's own (delayed-delivery buckets), as Pulsar refuses them
        raise RestError(400, f"The property key can't start with {INTERNAL_PROPERTY_PREFIX}")
    return dict(body)


def parse_message_id(body: Any) -> Position | InitialPosition:
    """Pulsar's MessageId JSON -> a position; ``(-1, -1)`` is earliest, ``(MAX, MAX)`` latest.
    Raises `RestError` 400 for anything else (ids that are not integers in Java's ``long`` range
    included)."""
    if not isinstance(body, dict):
        raise RestError(400, "message id must be a JSON object with ledgerId and entryId")
    try:
        ledger, entry = _long(body["ledgerId"]), _long(body["entryId"])
    except (KeyError, ValueError):
        raise RestError(400, "message id must have integer ledgerId and entryId (Java longs)") from None
    if ledger < 0 and entry < 0:
        return InitialPosition.EARLIEST
    if ledger >= INT64_MAX and entry >= INT64_MAX:
        return InitialPosition.LATEST
    if ledger < 0 or entry < 0:
        raise RestError(400, f"invalid message id {ledger}:{entry}")
    return Position(ledger, entry)


async def _partitions(request: Request) -> tuple[TopicName, int]:
    """The topic of the path and its number of partitions (0: not a partitioned topic's name)."""
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    return topic, await s.namespaces.get_partitions(topic) if topic.partition < 0 else 0


async def _present_targets(request: Request) -> list[Topic]:
    """The loaded topics an operation on existing subscriptions looks at: the topic itself (404
    when missing), or the partitions that are loaded or stored, loaded `FANOUT_CONCURRENCY` at a time."""
    s = service_of(request)
    topic, n = await _partitions(request)
    if not n:
        return [await existing_topic(s, topic)]
    return await for_each_bounded(await present_partitions(s, topic, n), lambda name: s.get_topic(name, create=False))


@endpoint
async def list_subscriptions(request: Request) -> Response:
    names: set[str] = set()
    for t in await _present_targets(request):
        names.update(n for n, sub in t.subscriptions.items() if not sub.closed)
    return json_response(sorted(names))


@endpoint
async def create_subscription(request: Request) -> Response:
    s = service_of(request)
    sub_name = subscription_of(request)
    if sub_name == DEDUP_CURSOR:
        raise RestError(412, f"subscription name {sub_name!r} is reserved for the broker's deduplication cursor")
    body = await json_body(request, default=None, what="message id")
    # Pulsar's ResetCursorData: a message id, optionally with the subscription's properties
    props = _properties(body["properties"]) if isinstance(body, dict) and body.get("properties") else {}
    start = (
        InitialPosition.LATEST
        if body is None or (isinstance(body, dict) and "ledgerId" not in body)
        else parse_message_id(body)
    )
    topic = topic_of(request)
    await require_namespace(s, topic.namespace_name)
    # the partitioned metadata a lookup would get: a missing topic is auto-created here as there
    n = await s.partitioned_metadata(topic) if topic.partition < 0 else 0
    if n:
        topics = await for_each_bounded(
            [topic.partition_name(i) for i in range(n)], lambda name: s.get_topic(name, create=True)
        )
    else:
        try:
            topics = [await s.get_topic(topic, create=True)]
        except TopicNotFoundError:
            raise RestError(412, "Topic does not exist and cannot be auto-created") from None
    if any(sub_name in t.subscriptions and not t.subscriptions[sub_name].closed for t in topics):
        raise RestError(409, f"Subscription {sub_name} already exists for topic {topic_of(request)}")

    async def subscribe(t: Topic) -> None:
        initial = start if isinstance(start, InitialPosition) else InitialPosition.LATEST
        sub = await t.subscribe(sub_name, durable=True, initial_position=initial, start=None)
        if isinstance(start, Position):
            await sub.seek(start)
        if props:
            await sub.cursor.set_cursor_properties(props)

    await for_each_bounded(topics, subscribe)
    return no_content()


@endpoint
async def delete_subscription(request: Request) -> Response:
    sub_name = subscription_of(request)
    force = query_bool(request, "force")
    found = []
    for t in await _present_targets(request):
        sub = t.subscriptions.get(sub_name)
        if sub is not None and not sub.closed:
            found.append((t, sub))
    if not found:
        raise RestError(404, f"Subscription {sub_name} not found on topic {topic_of(request)}")
    if not force and any(sub.consumers for _, sub in found):
        raise RestError(412, "Subscription has active connected consumers")
    await for_each_bounded(found, lambda pair: pair[0].unsubscribe(pair[1]))
    return no_content()


async def _subscription(request: Request) -> Subscription:
    _, sub = await existing_subscription(service_of(request), topic_of(request), subscription_of(request))
    return sub


@endpoint
async def skip(request: Request) -> Response:
    # Pulsar takes an int; a negative count would move the cursor back
    n = int_param(request, "n", "number of messages to skip", minimum=0, maximum=INT32_MAX)
    sub = await _subscription(request)
    await sub.cursor.skip_entries(n)
    return no_content()


@endpoint
async def skip_all(request: Request) -> Response:
    sub = await _subscription(request)
    await sub.cursor.clear_backlog()
    return no_content()


@endpoint
async def reset_by_time(request: Request) -> Response:
    ts = int_param(
        request, "timestamp", "timestamp (milliseconds since the epoch)", minimum=-INT64_MAX - 1, maximum=INT64_MAX
    )
    sub = await _subscription(request)
    await sub.seek(await sub.position_for_publish_time(ts))
    return no_content()


@endpoint
async def reset_by_id(request: Request) -> Response:
    body = await json_body(request, what="message id")
    target = parse_message_id(body)
    t, sub = await existing_subscription(service_of(request), topic_of(request), subscription_of(request))
    if target is InitialPosition.EARLIEST:
        pos = t.first_position()
    elif target is InitialPosition.LATEST:
        pos = t.next_position(t.ml.last_confirmed_entry)
    else:
        assert isinstance(target, Position)
        pos = t.next_position(target) if body.get("isExcluded") else target
    await sub.seek(pos)
    return no_content()


@endpoint
async def get_properties(request: Request) -> Response:
    # a partitioned topic's name answers with the first partition's, as Pulsar does
    topic, n = await _partitions(request)
    name = topic.partition_name(0) if n else topic
    _, sub = await existing_subscription(service_of(request), name, subscription_of(request))
    return json_response(sub.cursor.cursor_properties)


@endpoint
async def update_properties(request: Request) -> Response:
    props = _properties(await json_body(request, default={}, what="subscription properties"))
    sub_name = subscription_of(request)
    found = [
        t.subscriptions[sub_name]
        for t in await _present_targets(request)
        if sub_name in t.subscriptions and not t.subscriptions[sub_name].closed
    ]
    if not found:
        raise RestError(404, f"Subscription {sub_name} not found on topic {topic_of(request)}")
    await for_each_bounded(found, lambda sub: sub.cursor.set_cursor_properties(props))
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    sp = tp + "/subscription/{subscription}"
    return [
        Route(f"{tp}/subscriptions", list_subscriptions, methods=["GET"]),
        Route(sp, create_subscription, methods=["PUT"]),
        Route(sp, delete_subscription, methods=["DELETE"]),
        Route(sp + "/skip/{n}", skip, methods=["POST"]),
        Route(sp + "/skip_all", skip_all, methods=["POST"]),
        Route(sp + "/resetcursor/{timestamp}", reset_by_time, methods=["POST"]),
        Route(sp + "/resetcursor", reset_by_id, methods=["POST"]),
        Route(sp + "/properties", get_properties, methods=["GET"]),
        Route(sp + "/properties", update_properties, methods=["PUT"]),
    ]
