"""Namespaces: ``/admin/v2/namespaces/{tenant}`` and ``/admin/v2/namespaces/{tenant}/{namespace}``,
and the topics of a namespace (``.../topics?mode=PERSISTENT|NON_PERSISTENT|ALL``, the listing the
clients' HTTP lookup asks for)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from metadata import NodeExistsError, NoNodeError
from protocols.pulsar import TopicName
from retention import PolicyOverrides

from ..housekeeping._retention_hooks import TOPIC_POLICIES_ROOT
from ..resources._namespaces import PARTITIONED_ROOT, POLICIES_ROOT, default_policies
from ._common import (
    RestError,
    check_partitions,
    check_stored_size,
    endpoint,
    for_each_bounded,
    json_body,
    json_response,
    namespace_of,
    no_content,
    query_bool,
    require_namespace,
    service_of,
    tenant_of,
)
from ._policies import POLICY_KEYS
from ._topic_ops import delete_partitioned_topic, delete_topic

__all__ = ["routes"]


@endpoint
async def list_namespaces(request: Request) -> Response:
    s = service_of(request)
    tenant = tenant_of(request)
    if not await s.namespaces.tenant_exists(tenant):
        raise RestError(404, f"Tenant {tenant} does not exist")
    return json_response(await s.namespaces.list_namespaces(tenant))


@endpoint
async def get_namespace(request: Request) -> Response:
    return json_response(await require_namespace(service_of(request), namespace_of(request)))


_LIST_MODES = ("PERSISTENT", "NON_PERSISTENT", "ALL")


@endpoint
async def list_topics(request: Request) -> Response:
    """The namespace's topics of the ``mode`` (PERSISTENT by default), partitions by their
    ``-partition-N`` names, as Pulsar's namespace ``topics`` endpoint: 404 for a namespace that
    does not exist, 400 for an unknown mode."""
    s, ns = service_of(request), namespace_of(request)
    mode = request.query_params.get("mode", "PERSISTENT")
    if mode not in _LIST_MODES:
        raise RestError(400, f"mode must be one of {', '.join(_LIST_MODES)}, not {mode!r}")
    await require_namespace(s, ns)
    topics: list[str] = []
    if mode != "NON_PERSISTENT":
        topics += await s.topics_of_namespace(ns)
    if mode != "PERSISTENT":
        topics += await s.non_persistent_topics_of_namespace(ns)
    return json_response(topics)


_TOPIC_TYPES = ("non-partitioned", "partitioned")


def _auto_topic_creation(request: Request, value: Any) -> dict[str, Any]:
    """A checked autoTopicCreationOverride: 412 for a wrong shape (Pulsar's answer to an invalid
    override), 406 for a number of partitions out of bounds."""
    invalid = RestError(412, "Invalid configuration for autoTopicCreationOverride")
    if not isinstance(value, dict) or not isinstance(value.get("allowAutoTopicCreation", False), bool):
        raise invalid
    kind = value.get("topicType", "non-partitioned")
    if kind not in _TOPIC_TYPES:
        raise invalid
    out = {"allowAutoTopicCreation": value.get("allowAutoTopicCreation", False), "topicType": kind}
    n = value.get("defaultNumPartitions")
    if n is not None:
        out["defaultNumPartitions"] = check_partitions(request, n, "defaultNumPartitions")
    elif kind == "partitioned":
        raise invalid
    return out


def _namespace_policies(request: Request, body: Any) -> dict[str, Any]:
    """The Policies to store for a create body: the defaults, updated with the body's keys. The
    keys the broker reads are checked (400 for a wrong type, see `_auto_topic_creation`); others
    are kept as given; 413 when the whole is too large to store."""
    config = service_of(request).config
    policies = default_policies(config.cluster_name, config.default_number_of_namespace_bundles)
    if body is None:
        return policies
    if not isinstance(body, dict):
        raise RestError(400, "namespace policies must be a JSON object")
    try:
        PolicyOverrides.from_json(body)
    except ValueError as exc:
        raise RestError(400, f"invalid policies: {exc}") from None
    checked = dict(body)
    for rest_name in ("deduplication", "schemaCompatibilityStrategy"):
        key, parse = POLICY_KEYS[rest_name]
        if checked.get(key) is not None:
            try:
                checked[key] = parse(checked[key])
            except ValueError as exc:
                raise RestError(400, f"invalid {key}: {exc}") from None
    allow_update = checked.get("is_allow_auto_update_schema")
    if allow_update is not None and not isinstance(allow_update, bool):
        raise RestError(400, f"is_allow_auto_update_schema must be true or false, not {allow_update!r}")
    override = checked.get("autoTopicCreationOverride")
    if override is not None:
        checked["autoTopicCreationOverride"] = _auto_topic_creation(request, override)
    clusters = checked.get("replication_clusters")
    if clusters is not None and not (isinstance(clusters, list) and all(isinstance(c, str) for c in clusters)):
        raise RestError(400, "replication_clusters must be a list of strings")
    policies.update(checked)
    check_stored_size(request, policies, "namespace policies")
    return policies


@endpoint
async def create_namespace(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    policies = _namespace_policies(request, await json_body(request, default=None, what="namespace policies"))
    if not await s.namespaces.tenant_exists(ns.tenant):
        raise RestError(404, f"Tenant {ns.tenant} does not exist")
    try:
        await s.namespaces.create_namespace(ns, policies)
    except NodeExistsError:
        raise RestError(409, f"Namespace {ns} already exists") from None
    except NoNodeError:
        raise RestError(404, f"Tenant {ns.tenant} does not exist") from None
    return no_content()


@endpoint
async def delete_namespace(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    force = query_bool(request, "force")
    partitioned = await s.namespaces.list_partitioned_topics(ns)
    topics = await s.topics_of_namespace(ns)
    if (topics or partitioned) and not force:
        raise RestError(409, f"Cannot delete non empty namespace {ns}: it has {len(topics)} topic(s)")
    for name in partitioned:
        await delete_partitioned_topic(s, TopicName.parse(name), force=True)
    # just listed: each is loaded or stored, so none needs another listing to be found
    await for_each_bounded(
        [TopicName.parse(name) for name in await s.topics_of_namespace(ns)],
        lambda topic: delete_topic(s, topic, force=True, known_present=True),
    )
    for root in (PARTITIONED_ROOT, TOPIC_POLICIES_ROOT):
        try:
            await s.store.delete(f"{root}/{ns}", recursive=True)
        except NoNodeError:
            pass
    try:
        await s.store.delete(f"{POLICIES_ROOT}/{ns}")
    except NoNodeError:
        raise RestError(404, f"Namespace {ns} does not exist") from None
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    return [
        Route("/admin/v2/namespaces/{tenant}", list_namespaces, methods=["GET"]),
        Route(ns, get_namespace, methods=["GET"]),
        Route(ns, create_namespace, methods=["PUT"]),
        Route(ns, delete_namespace, methods=["DELETE"]),
        Route(f"{ns}/topics", list_topics, methods=["GET"]),
    ]
