"""Limit policies of namespaces and topics (enforced: see `broker.topics._topic_limits`), with Pulsar's
v2 paths, JSON bodies and status codes.

Namespace (``/admin/v2/namespaces/{tenant}/{namespace}/...``), each GET / POST / DELETE:
``maxProducersPerTopic``, ``maxConsumersPerTopic``, ``maxConsumersPerSubscription``,
``maxUnackedMessagesPerConsumer``, ``maxUnackedMessagesPerSubscription`` (body: an integer;
0 = no limit), ``publishRate`` (PublishRate JSON), ``dispatchRate`` and
``subscriptionDispatchRate`` (DispatchRate JSON), ``subscribeRate`` (SubscribeRate JSON). Rates
are stored per cluster, as Pulsar stores them (``publishMaxMessageRate``: ``{cluster:
PublishRate}``), and served for this broker's cluster. ``isAllowAutoUpdateSchema``
GET / POST (a boolean). A GET of a policy that is not set answers 204 with no body, as Pulsar.

Topic (``/admin/v2/persistent/{tenant}/{namespace}/{topic}/...``), GET / POST / DELETE:
``maxProducers``, ``maxConsumers``, ``maxConsumersPerSubscription``,
``maxUnackedMessagesOnConsumer``, ``maxUnackedMessagesOnSubscription``, ``publishRate``,
``dispatchRate``, ``subscriptionDispatchRate``, ``subscribeRate`` and ``deduplicationEnabled``; ``?applied=true`` on
a GET answers the value in force (topic > namespace > broker config). The same limit and rate
policies (not ``deduplicationEnabled``: nothing is stored) under
``/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/...`` for a non-persistent topic that is
loaded or partitioned (it exists only then); they are kept and apply whenever it loads again.

Offload policies have their own module (``_offload``).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from protocols.pulsar import NamespaceName, TopicName

from ..topics._topic_limits import (
    NS_KEYS,
    NS_RATE_KEYS,
    TOPIC_KEYS,
    TOPIC_RATE_KEYS,
    TopicLimits,
    parse_limit,
    resolve_for,
)
from ._common import (
    RestError,
    endpoint,
    json_body,
    json_response,
    namespace_of,
    no_content,
    query_bool,
    require_namespace,
    service_of,
    topic_of,
)

__all__ = ["routes"]


def _parse(kind: Any, body: Any, what: str) -> Any:
    try:
        return parse_limit(body) if kind is int else kind.from_json(body).to_json()
    except ValueError as exc:
        raise RestError(400, f"invalid {what}: {exc}") from None


async def _refresh(request: Request, ns: NamespaceName) -> None:
    # loaded topics follow at once, as in Pulsar (and every broker's recheck catches up later)
    await service_of(request).apply_namespace_policies(ns)


# ------------------------------------------------------------------ namespace level


def _ns_count(policy: str, key: str) -> list[Route]:
    @endpoint
    async def get(request: Request) -> Response:
        policies = await require_namespace(service_of(request), namespace_of(request))
        return json_response(policies.get(key))

    @endpoint
    async def set_(request: Request) -> Response:
        s, ns = service_of(request), namespace_of(request)
        await require_namespace(s, ns)
        value = _parse(int, await json_body(request, what=policy), policy)
        await s.namespaces.update_policies(ns, {key: value})
        await _refresh(request, ns)
        return no_content()

    @endpoint
    async def delete(request: Request) -> Response:
        s, ns = service_of(request), namespace_of(request)
        await require_namespace(s, ns)
        await s.namespaces.update_policies(ns, {key: None})
        await _refresh(request, ns)
        return no_content()

    path = f"/admin/v2/namespaces/{{tenant}}/{{namespace}}/{policy}"
    return [
        Route(path, get, methods=["GET"]),
        Route(path, set_, methods=["POST"]),
        Route(path, delete, methods=["DELETE"]),
    ]


def _ns_rate(policy: str, key: str, kind: type) -> list[Route]:
    @endpoint
    async def get(request: Request) -> Response:
        s = service_of(request)
        policies = await require_namespace(s, namespace_of(request))
        by_cluster = policies.get(key) or {}
        return json_response(by_cluster.get(s.config.cluster_name) if isinstance(by_cluster, dict) else None)

    async def _store(request: Request, value: Any) -> Response:
        s, ns = service_of(request), namespace_of(request)
        policies = await require_namespace(s, ns)
        by_cluster = dict(policies.get(key) or {})
        if value is None:
            by_cluster.pop(s.config.cluster_name, None)
        else:
            by_cluster[s.config.cluster_name] = value
        await s.namespaces.update_policies(ns, {key: by_cluster or None})
        await _refresh(request, ns)
        return no_content()

    @endpoint
    async def set_(request: Request) -> Response:
        return await _store(request, _parse(kind, await json_body(request, what=policy), policy))

    @endpoint
    async def delete(request: Request) -> Response:
        return await _store(request, None)

    path = f"/admin/v2/namespaces/{{tenant}}/{{namespace}}/{policy}"
    return [
        Route(path, get, methods=["GET"]),
        Route(path, set_, methods=["POST"]),
        Route(path, delete, methods=["DELETE"]),
    ]


@endpoint
async def ns_get_auto_update_schema(request: Request) -> Response:
    s = service_of(request)
    policies = await require_namespace(s, namespace_of(request))
    value = policies.get("is_allow_auto_update_schema")
    return json_response(s.config.is_allow_auto_update_schema if value is None else bool(value))


@endpoint
async def ns_set_auto_update_schema(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    body = await json_body(request, what="isAllowAutoUpdateSchema")
    if not isinstance(body, bool):
        raise RestError(400, f"isAllowAutoUpdateSchema must be true or false, not {body!r}")
    await s.namespaces.update_policies(ns, {"is_allow_auto_update_schema": body})
    return no_content()


# ------------------------------------------------------------------ topic level


async def _existing_topic(request: Request, domain: str = "persistent") -> tuple[Any, TopicName]:
    s, topic = service_of(request), topic_of(request, domain)
    await require_namespace(s, topic.namespace_name)
    exists = await s.topic_exists(topic) if topic.persistent else str(topic) in s.np_topics
    if not (exists or await s.namespaces.get_partitions(topic)):
        raise RestError(404, f"Topic {topic} not found")
    return s, topic


def _applied_value(limits: TopicLimits, policy: str) -> Any:
    return {
        "maxProducers": limits.max_producers,
        "maxConsumers": limits.max_consumers,
        "maxConsumersPerSubscription": limits.max_consumers_per_subscription,
        "maxUnackedMessagesOnConsumer": limits.max_unacked_per_consumer,
        "maxUnackedMessagesOnSubscription": limits.max_unacked_per_subscription,
        "publishRate": limits.publish_rate.to_json(),
        "dispatchRate": limits.dispatch_rate.to_json(),
        "subscriptionDispatchRate": limits.subscription_dispatch_rate.to_json(),
        "subscribeRate": limits.subscribe_rate.to_json(),
    }[policy]


def _topic_policy(policy: str, key: str, kind: Any, domain: str = "persistent") -> list[Route]:
    @endpoint
    async def get(request: Request) -> Response:
        s, topic = await _existing_topic(request, domain)
        if query_bool(request, "applied"):
            if policy == "deduplicationEnabled":
                return json_response(await s.topic_dedup_enabled(topic))
            return json_response(_applied_value(await resolve_for(s, topic), policy))
        return json_response((await s.topic_policies.get(topic)).get(key))

    @endpoint
    async def set_(request: Request) -> Response:
        s, topic = await _existing_topic(request, domain)
        body = await json_body(request, what=policy)
        if kind is bool:
            if not isinstance(body, bool):
                raise RestError(400, f"{policy} must be true or false, not {body!r}")
            value: Any = body
        else:
            value = _parse(kind, body, policy)
        await s.topic_policies.update(topic, key, value)
        await _refresh(request, topic.namespace_name)
        return no_content()

    @endpoint
    async def delete(request: Request) -> Response:
        s, topic = await _existing_topic(request, domain)
        await s.topic_policies.update(topic, key, None)
        await _refresh(request, topic.namespace_name)
        return no_content()

    path = f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/{policy}"
    return [
        Route(path, get, methods=["GET"]),
        Route(path, set_, methods=["POST"]),
        Route(path, delete, methods=["DELETE"]),
    ]


def routes() -> list[Route]:
    """The routes of this module."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    out: list[Route] = []
    for policy, key in NS_KEYS.items():
        out += _ns_count(policy, key)
    for policy, (key, kind) in NS_RATE_KEYS.items():
        out += _ns_rate(policy, key, kind)
    out += [
        Route(f"{ns}/isAllowAutoUpdateSchema", ns_get_auto_update_schema, methods=["GET"]),
        Route(f"{ns}/isAllowAutoUpdateSchema", ns_set_auto_update_schema, methods=["POST"]),
    ]
    for policy, key in TOPIC_KEYS.items():
        out += _topic_policy(policy, key, int)
    for policy, (key, kind) in TOPIC_RATE_KEYS.items():
        out += _topic_policy(policy, key, kind)
    for policy, key in TOPIC_KEYS.items():  # `_topic_limits` Rule 5: the same policies
        out += _topic_policy(policy, key, int, "non-persistent")
    for policy, (key, kind) in TOPIC_RATE_KEYS.items():
        out += _topic_policy(policy, key, kind, "non-persistent")
    out += _topic_policy("deduplicationEnabled", "deduplicationEnabled", bool)
    return out
