"""Policy endpoints shared by namespaces and topics: retention, message TTL, backlog quota,
deduplication, schema compatibility strategy and (namespaces only) subscription expiration time,
with Pulsar's v2 paths and JSON shapes.

Namespace policies are keys of the namespace's ``Policies`` JSON; topic policies are the same keys
in the topic's override node (`TopicPolicyStore`). Removing a policy stores nothing for it, so the
level below (namespace, then broker defaults) applies again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retention import (
    BacklogQuota,
    BacklogQuotaType,
    PolicyOverrides,
    RetentionPolicies,
    TopicPolicies,
    parse_message_ttl,
)

from .._config import _STRATEGIES
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

__all__ = ["routes", "POLICY_KEYS"]


def _retention(body: Any) -> Any:
    return RetentionPolicies.from_json(body).to_json()


def _ttl(body: Any) -> Any:
    value = parse_message_ttl(body)
    if value is None:
        raise ValueError("messageTTLInSeconds is required")
    return value


def _bool(body: Any) -> Any:
    if not isinstance(body, bool):
        raise ValueError(f"expected true or false, not {body!r}")
    return body


def _minutes(body: Any) -> Any:
    if isinstance(body, bool) or not isinstance(body, int) or not 0 <= body < 2**31:
        raise ValueError(f"expected a number of minutes (0 or more), not {body!r}")
    return body


def _strategy(body: Any) -> Any:
    if not isinstance(body, str) or body.upper() not in _STRATEGIES | {"UNDEFINED"}:
        raise ValueError(f"unknown schema compatibility strategy {body!r}; one of {', '.join(sorted(_STRATEGIES))}")
    return body.upper()


POLICY_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "retention": ("retention_policies", _retention),
    "messageTTL": ("message_ttl_in_seconds", _ttl),
    "deduplication": ("deduplicationEnabled", _bool),
    "schemaCompatibilityStrategy": ("schema_compatibility_strategy", _strategy),
    # enforced by broker.housekeeping._subscription_expiry (0 = never; unset: the broker's key)
    "subscriptionExpirationTime": ("subscription_expiration_time_minutes", _minutes),
}
"""REST policy name -> (key in the Policies JSON, validator returning the stored value)."""

_TOPIC_POLICIES = ("retention", "messageTTL")


def _quota_type(request: Request) -> BacklogQuotaType:
    name = request.query_params.get("backlogQuotaType", BacklogQuotaType.DESTINATION_STORAGE.value)
    try:
        return BacklogQuotaType(name)
    except ValueError:
        raise RestError(400, f"backlogQuotaType must be destination_storage or message_age, not {name!r}") from None


def _parse(policy: str, body: Any) -> Any:
    try:
        return POLICY_KEYS[policy][1](body)
    except ValueError as exc:
        raise RestError(400, f"invalid {policy}: {exc}") from None


async def _value_from_request(request: Request, policy: str) -> Any:
    if policy == "messageTTL" and "messageTTL" in request.query_params:
        raw = request.query_params["messageTTL"]  # the topic-level form: ?messageTTL=N
        try:
            return _parse(policy, int(raw))
        except ValueError:
            raise RestError(400, f"invalid messageTTL {raw!r}") from None
    return _parse(policy, await json_body(request, what=policy))


# ------------------------------------------------------------------ namespace level


def _ns_get(policy: str):
    key = POLICY_KEYS[policy][0]

    @endpoint
    async def handler(request: Request) -> Response:
        policies = await require_namespace(service_of(request), namespace_of(request))
        return json_response(policies.get(key))

    return handler


def _ns_set(policy: str):
    key = POLICY_KEYS[policy][0]

    @endpoint
    async def handler(request: Request) -> Response:
        s, ns = service_of(request), namespace_of(request)
        await require_namespace(s, ns)
        await s.namespaces.update_policies(ns, {key: await _value_from_request(request, policy)})
        await s.apply_namespace_policies(ns)  # loaded topics follow at once, as in Pulsar
        return no_content()

    return handler


def _ns_delete(policy: str):
    key = POLICY_KEYS[policy][0]

    @endpoint
    async def handler(request: Request) -> Response:
        s, ns = service_of(request), namespace_of(request)
        await require_namespace(s, ns)
        await s.namespaces.update_policies(ns, {key: None})
        await s.apply_namespace_policies(ns)
        return no_content()

    return handler


@endpoint
async def ns_get_quota_map(request: Request) -> Response:
    policies = await require_namespace(service_of(request), namespace_of(request))
    return json_response(policies.get("backlog_quota_map") or {})


@endpoint
async def ns_set_quota(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    policies = await require_namespace(s, ns)
    qtype = _quota_type(request)
    try:
        quota = BacklogQuota.from_json(await json_body(request, what="backlog quota"))
    except ValueError as exc:
        raise RestError(400, f"invalid backlog quota: {exc}") from None
    quotas = dict(policies.get("backlog_quota_map") or {})
    quotas[qtype.value] = quota.to_json()
    await s.namespaces.update_policies(ns, {"backlog_quota_map": quotas})
    return no_content()


@endpoint
async def ns_delete_quota(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    policies = await require_namespace(s, ns)
    quotas = dict(policies.get("backlog_quota_map") or {})
    quotas.pop(_quota_type(request).value, None)
    await s.namespaces.update_policies(ns, {"backlog_quota_map": quotas})
    return no_content()


# ------------------------------------------------------------------ topic level


async def _existing_topic(request: Request):
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    if not (await s.namespaces.get_partitions(topic) or await s.topic_exists(topic)):
        raise RestError(404, f"Topic {topic} not found")
    return s, topic


async def _applied(request: Request, s, topic) -> TopicPolicies:
    ns, own = await s.policies.overrides(topic)
    return TopicPolicies.resolve(s.policies.config, ns, own)


def _topic_get(policy: str):
    key = POLICY_KEYS[policy][0]

    @endpoint
    async def handler(request: Request) -> Response:
        s, topic = await _existing_topic(request)
        if query_bool(request, "applied"):
            applied = await _applied(request, s, topic)
            return json_response(applied.retention.to_json() if policy == "retention" else applied.message_ttl_s)
        return json_response((await s.topic_policies.get(topic)).get(key))

    return handler


def _topic_set(policy: str):
    key = POLICY_KEYS[policy][0]

    @endpoint
    async def handler(request: Request) -> Response:
        s, topic = await _existing_topic(request)
        await s.topic_policies.update(topic, key, await _value_from_request(request, policy))
        return no_content()

    return handler


def _topic_delete(policy: str):
    key = POLICY_KEYS[policy][0]

    @endpoint
    async def handler(request: Request) -> Response:
        s, topic = await _existing_topic(request)
        await s.topic_policies.update(topic, key, None)
        return no_content()

    return handler


@endpoint
async def topic_get_quota_map(request: Request) -> Response:
    s, topic = await _existing_topic(request)
    if query_bool(request, "applied"):
        applied = await _applied(request, s, topic)
        return json_response({t.value: q.to_json() for t, q in applied.backlog_quotas.items()})
    return json_response((await s.topic_policies.get(topic)).get("backlog_quota_map") or {})


@endpoint
async def topic_set_quota(request: Request) -> Response:
    s, topic = await _existing_topic(request)
    qtype = _quota_type(request)
    try:
        quota = BacklogQuota.from_json(await json_body(request, what="backlog quota"))
    except ValueError as exc:
        raise RestError(400, f"invalid backlog quota: {exc}") from None
    quotas = dict((await s.topic_policies.get(topic)).get("backlog_quota_map") or {})
    quotas[qtype.value] = quota.to_json()
    PolicyOverrides.from_json({"backlog_quota_map": quotas})  # the stored form must parse back
    await s.topic_policies.update(topic, "backlog_quota_map", quotas)
    return no_content()


@endpoint
async def topic_delete_quota(request: Request) -> Response:
    s, topic = await _existing_topic(request)
    quotas = dict((await s.topic_policies.get(topic)).get("backlog_quota_map") or {})
    quotas.pop(_quota_type(request).value, None)
    await s.topic_policies.update(topic, "backlog_quota_map", quotas or None)
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    out = []
    for policy in POLICY_KEYS:
        set_methods = ["POST", "PUT"] if policy == "schemaCompatibilityStrategy" else ["POST"]
        out += [
            Route(f"{ns}/{policy}", _ns_get(policy), methods=["GET"]),
            Route(f"{ns}/{policy}", _ns_set(policy), methods=set_methods),
            Route(f"{ns}/{policy}", _ns_delete(policy), methods=["DELETE"]),
        ]
    out += [
        Route(f"{ns}/backlogQuotaMap", ns_get_quota_map, methods=["GET"]),
        Route(f"{ns}/backlogQuota", ns_get_quota_map, methods=["GET"]),
        Route(f"{ns}/backlogQuota", ns_set_quota, methods=["POST"]),
        Route(f"{ns}/backlogQuota", ns_delete_quota, methods=["DELETE"]),
    ]
    for policy in _TOPIC_POLICIES:
        out += [
            Route(f"{tp}/{policy}", _topic_get(policy), methods=["GET"]),
            Route(f"{tp}/{policy}", _topic_set(policy), methods=["POST"]),
            Route(f"{tp}/{policy}", _topic_delete(policy), methods=["DELETE"]),
        ]
    out += [
        Route(f"{tp}/backlogQuotaMap", topic_get_quota_map, methods=["GET"]),
        Route(f"{tp}/backlogQuota", topic_get_quota_map, methods=["GET"]),
        Route(f"{tp}/backlogQuota", topic_set_quota, methods=["POST"]),
        Route(f"{tp}/backlogQuota", topic_delete_quota, methods=["DELETE"]),
    ]
    return out
