"""Backlog operations over many subscriptions, with Pulsar's v2 paths and status codes.

* ``POST /admin/v2/persistent/{t}/{ns}/{topic}/all_subscription/expireMessages/{seconds}`` -
  expire (acknowledge) the messages published more than ``seconds`` ago on every subscription
  of the topic (of every partition for a partitioned topic's name); 204.
* ``POST .../{topic}/subscription/{sub}/expireMessages`` with a ``ResetCursorData`` body
  (``{"ledgerId": l, "entryId": e, "isExcluded": false}``) - expire every message up to and
  including that id (up to the one before it with ``isExcluded``); 204, 404 for an unknown
  subscription, 400 for a bad id.
* ``POST /admin/v2/namespaces/{t}/{ns}/clearBacklog`` - skip the whole backlog of every
  subscription of every topic of the namespace; ``.../clearBacklog/{sub}`` only of the
  subscriptions named ``sub``; 204.
* ``POST /admin/v2/namespaces/{t}/{ns}/unsubscribe/{sub}`` - delete the subscription ``sub``
  from every topic of the namespace that has it; 412 (nothing deleted) while any of them has a
  connected consumer, as Pulsar refuses to delete a subscription in use; 204.

The namespace operations reach every topic with stored data (loading it, `FANOUT_CONCURRENCY`
at a time), not only the loaded ones: an operator clearing a namespace means all of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from managed_ledger import InitialPosition, Position
from protocols.pulsar import NamespaceName, TopicName

from ..topics._dedup import DEDUP_CURSOR
from ._common import (
    INT32_MAX,
    RestError,
    endpoint,
    for_each_bounded,
    int_param,
    json_body,
    namespace_of,
    no_content,
    require_namespace,
    service_of,
    subscription_of,
    topic_of,
)
from ._subscriptions import parse_message_id
from ._topic_ops import existing_subscription, existing_topic, present_partitions

if TYPE_CHECKING:
    from .._service import BrokerService
    from ..topics._topic import Topic

__all__ = ["routes"]


async def _topic_targets(s: BrokerService, topic: TopicName) -> list[Topic]:
    """The topic itself, or the stored partitions of a partitioned topic (loaded)."""
    await require_namespace(s, topic.namespace_name)
    n = await s.namespaces.get_partitions(topic) if topic.partition < 0 else 0
    if not n:
        return [await existing_topic(s, topic)]
    names = await present_partitions(s, topic, n)
    return await for_each_bounded(names, lambda name: s.get_topic(name, create=False))


async def _namespace_topics(s: BrokerService, ns: NamespaceName) -> list[Topic]:
    """Every topic of ``ns`` with a managed ledger, loaded."""
    await require_namespace(s, ns)
    prefix = f"{ns}/persistent/"
    names = {TopicName.from_managed_ledger_name(n) for n in await s.factory.list(prefix) if n.startswith(prefix)}
    names.update(t.name for t in list(s.topics.values()) if t.name.namespace_name == ns and not t.closed)
    return await for_each_bounded(sorted(names, key=str), lambda name: s.get_topic(name, create=False))


@endpoint
async def expire_all_subscriptions(request: Request) -> Response:
    seconds = int_param(request, "seconds", "expire time in seconds", minimum=0, maximum=INT32_MAX)
    s = service_of(request)
    cutoff = int(s.clock() * 1000) - seconds * 1000
    subs = [
        sub
        for t in await _topic_targets(s, topic_of(request))
        for sub in list(t.subscriptions.values())
        if not sub.closed
    ]
    await for_each_bounded(subs, lambda sub: sub.expire_published_before(cutoff))
    return no_content()


def _previous(t: Topic, pos: Position) -> Position | None:
    """The stored position just before ``pos`` (None when there is none)."""
    if pos.entry_id > 0:
        return Position(pos.ledger_id, pos.entry_id - 1)
    before = None
    for info in list(t.ml.ledgers):
        if info.ledger_id >= pos.ledger_id:
            break
        if info.entries > 0:
            before = Position(info.ledger_id, info.entries - 1)
    return before


@endpoint
async def expire_up_to_id(request: Request) -> Response:
    body = await json_body(request, what="message id")
    target = parse_message_id(body)
    t, sub = await existing_subscription(service_of(request), topic_of(request), subscription_of(request))
    if target is InitialPosition.EARLIEST:
        return no_content()  # nothing is before the earliest message
    if target is InitialPosition.LATEST:
        position = t.ml.last_confirmed_entry
    else:
        assert isinstance(target, Position)
        position = target
        if body.get("isExcluded"):
            before = _previous(t, position)
            if before is None:
                return no_content()  # nothing is stored before it
            position = before
    await sub.expire_up_to(position)
    return no_content()


async def _clear(request: Request, only: str | None) -> Response:
    s = service_of(request)
    subs = [
        sub
        for t in await _namespace_topics(s, namespace_of(request))
        for name, sub in list(t.subscriptions.items())
        if not sub.closed and (only is None or name == only)
    ]
    await for_each_bounded(subs, lambda sub: sub.cursor.clear_backlog())
    return no_content()


@endpoint
async def clear_namespace_backlog(request: Request) -> Response:
    return await _clear(request, None)


@endpoint
async def clear_namespace_subscription_backlog(request: Request) -> Response:
    return await _clear(request, subscription_of(request))


@endpoint
async def unsubscribe_namespace(request: Request) -> Response:
    s, name = service_of(request), subscription_of(request)
    if name == DEDUP_CURSOR:
        raise RestError(412, f"subscription name {name!r} is reserved for the broker's deduplication cursor")
    found = [
        (t, t.subscriptions[name])
        for t in await _namespace_topics(s, namespace_of(request))
        if name in t.subscriptions and not t.subscriptions[name].closed
    ]
    busy = [str(t.name) for t, sub in found if sub.consumers]
    if busy:
        raise RestError(412, f"Subscription {name} has active connected consumers on {', '.join(busy[:5])}")
    await for_each_bounded(found, lambda pair: pair[0].unsubscribe(pair[1]))
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    return [
        Route(tp + "/all_subscription/expireMessages/{seconds}", expire_all_subscriptions, methods=["POST"]),
        Route(tp + "/subscription/{subscription}/expireMessages", expire_up_to_id, methods=["POST"]),
        Route(f"{ns}/clearBacklog", clear_namespace_backlog, methods=["POST"]),
        Route(ns + "/clearBacklog/{subscription}", clear_namespace_subscription_backlog, methods=["POST"]),
        Route(ns + "/unsubscribe/{subscription}", unsubscribe_namespace, methods=["POST"]),
    ]
