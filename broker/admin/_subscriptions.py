"""Subscriptions of a persistent topic: list, create, delete, skip, clear backlog, reset cursor.

A partitioned topic's name works for list, create and delete: the operation applies to every
partition, as in Pulsar.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from managed_ledger import InitialPosition, Position

from .._dedup import DEDUP_CURSOR
from .._topic_name import TopicName
from ._common import (
    RestError,
    endpoint,
    json_body,
    json_response,
    no_content,
    query_bool,
    require_namespace,
    service_of,
    topic_of,
)
from ._topic_ops import existing_subscription, existing_topic

__all__ = ["routes", "parse_message_id"]

_LONG_MAX = 2**63 - 1


def parse_message_id(body: Any) -> Position | InitialPosition:
    """Pulsar's MessageId JSON -> a position; ``(-1, -1)`` is earliest, ``(MAX, MAX)`` latest.
    Raises `RestError` 400 for anything else."""
    if not isinstance(body, dict):
        raise RestError(400, "message id must be a JSON object with ledgerId and entryId")
    try:
        ledger, entry = int(body["ledgerId"]), int(body["entryId"])
    except (KeyError, TypeError, ValueError):
        raise RestError(400, "message id must have integer ledgerId and entryId") from None
    if ledger < 0 and entry < 0:
        return InitialPosition.EARLIEST
    if ledger >= _LONG_MAX and entry >= _LONG_MAX:
        return InitialPosition.LATEST
    if ledger < 0 or entry < 0:
        raise RestError(400, f"invalid message id {ledger}:{entry}")
    return Position(ledger, entry)


async def _targets(request: Request) -> list[TopicName]:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    n = await s.namespaces.get_partitions(topic) if topic.partition < 0 else 0
    return [topic.partition_name(i) for i in range(n)] if n else [topic]


@endpoint
async def list_subscriptions(request: Request) -> Response:
    s = service_of(request)
    names: set[str] = set()
    for name in await _targets(request):
        t = await s.get_topic(name, create=False) if name.partition >= 0 else await existing_topic(s, name)
        names.update(n for n, sub in t.subscriptions.items() if not sub.closed)
    return json_response(sorted(names))


@endpoint
async def create_subscription(request: Request) -> Response:
    s = service_of(request)
    sub_name = request.path_params["subscription"]
    if sub_name == DEDUP_CURSOR:
        raise RestError(412, f"subscription name {sub_name!r} is reserved for the broker's deduplication cursor")
    body = await json_body(request, default=None, what="message id")
    start = InitialPosition.LATEST if body is None else parse_message_id(body)
    targets = await _targets(request)
    topics = [await s.get_topic(n, create=True) if n.partition >= 0 else await existing_topic(s, n)
              for n in targets]
    if any(sub_name in t.subscriptions and not t.subscriptions[sub_name].closed for t in topics):
        raise RestError(409, f"Subscription {sub_name} already exists for topic {topic_of(request)}")
    for t in topics:
        initial = start if isinstance(start, InitialPosition) else InitialPosition.LATEST
        sub = await t.subscribe(sub_name, durable=True, initial_position=initial, start=None)
        if isinstance(start, Position):
            await sub.seek(start)
    return no_content()


@endpoint
async def delete_subscription(request: Request) -> Response:
    s = service_of(request)
    sub_name = request.path_params["subscription"]
    force = query_bool(request, "force")
    found = []
    for name in await _targets(request):
        t = await s.get_topic(name, create=True) if name.partition >= 0 else await existing_topic(s, name)
        sub = t.subscriptions.get(sub_name)
        if sub is not None and not sub.closed:
            found.append((t, sub))
    if not found:
        raise RestError(404, f"Subscription {sub_name} not found on topic {topic_of(request)}")
    if not force and any(sub.consumers for _, sub in found):
        raise RestError(412, "Subscription has active connected consumers")
    for t, sub in found:
        await t.unsubscribe(sub)
    return no_content()


@endpoint
async def skip(request: Request) -> Response:
    raw = request.path_params["n"]
    try:
        n = int(raw)
    except ValueError:
        raise RestError(400, f"number of messages to skip must be an integer, not {raw!r}") from None
    if n < 0:
        raise RestError(400, "number of messages to skip must not be negative")
    _, sub = await existing_subscription(service_of(request), topic_of(request), request.path_params["subscription"])
    await sub.cursor.skip_entries(n)
    return no_content()


@endpoint
async def skip_all(request: Request) -> Response:
    _, sub = await existing_subscription(service_of(request), topic_of(request), request.path_params["subscription"])
    await sub.cursor.clear_backlog()
    return no_content()


@endpoint
async def reset_by_time(request: Request) -> Response:
    raw = request.path_params["timestamp"]
    try:
        ts = int(raw)
    except ValueError:
        raise RestError(400, f"timestamp must be milliseconds since the epoch, not {raw!r}") from None
    _, sub = await existing_subscription(service_of(request), topic_of(request), request.path_params["subscription"])
    await sub.seek(await sub.position_for_publish_time(ts))
    return no_content()


@endpoint
async def reset_by_id(request: Request) -> Response:
    body = await json_body(request, what="message id")
    target = parse_message_id(body)
    t, sub = await existing_subscription(service_of(request), topic_of(request), request.path_params["subscription"])
    if target is InitialPosition.EARLIEST:
        pos = t.first_position()
    elif target is InitialPosition.LATEST:
        pos = t.next_position(t.ml.last_confirmed_entry)
    else:
        assert isinstance(target, Position)
        pos = t.next_position(target) if body.get("isExcluded") else target
    await sub.seek(pos)
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
    ]
