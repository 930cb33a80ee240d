"""Replication clusters of namespaces and topics, with Pulsar's paths, JSON and checks.

* ``GET|POST /admin/v2/namespaces/{tenant}/{namespace}/replication``: the namespace's
  ``replication_clusters`` (a JSON list of cluster names).
* ``GET|POST|DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}/replication``: the topic's
  own ``replicationClusters`` (topic policies); GET with ``applied=true`` answers the clusters in
  force (the topic's, else its namespace's).

Rules (Pulsar's ``internalSetNamespaceReplicationClusters`` checks, for both levels):

* Rule 1: the body must be a list of strings (400); an empty list is 412 "ClusterIds should not
  be null or empty"; ``global`` may not be named (412).
* Rule 2: every cluster must exist (this broker's or a stored cluster record), else 403
  "Invalid cluster id: X"; and be allowed: in the namespace's ``allowed_clusters`` when that is
  set, else in the tenant's ``allowedClusters``, else 403 "Cluster [X] is not in the list of
  allowed clusters list for tenant [T]" (or "for namespace [N]").
* Rule 3: the loaded topics follow at once (`broker.replication` starts and stops their
  replicators), as with every policy changed through this broker.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from metadata import NoNodeError
from protocols.pulsar import TopicName

from ..replication import NAMESPACE_REPLICATION_KEY, TOPIC_REPLICATION_KEY
from ..resources._namespaces import POLICIES_ROOT
from ._clusters import known_clusters
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


async def _checked_clusters(request: Request, ns_policies: dict[str, Any], tenant: str, scope: str) -> list[str]:
    """Rules 1 and 2 for the request's body; the clusters to store (sorted, each once)."""
    body = await json_body(request, what="replication clusters")
    if not isinstance(body, list) or not all(isinstance(c, str) for c in body):
        raise RestError(400, "replication clusters must be a JSON list of cluster names")
    if not body:
        raise RestError(412, "ClusterIds should not be null or empty")
    clusters = sorted(set(body))
    if "global" in clusters:
        raise RestError(412, "Cannot specify global in the list of replication clusters")
    known = set(await known_clusters(request))
    allowed_ns = ns_policies.get("allowed_clusters") or []
    allowed_tenant = await _tenant_clusters(request, tenant)
    for cluster in clusters:
        if cluster not in known:
            raise RestError(403, f"Invalid cluster id: {cluster}")
        if allowed_ns and cluster not in allowed_ns:
            raise RestError(
                403, f"Cluster [{cluster}] is not in the list of allowed clusters list for namespace [{scope}]"
            )
        if not allowed_ns and cluster not in allowed_tenant:
            raise RestError(
                403, f"Cluster [{cluster}] is not in the list of allowed clusters list for tenant [{tenant}]"
            )
    return clusters


async def _tenant_clusters(request: Request, tenant: str) -> list[str]:
    try:
        data, _ = await service_of(request).store.get(f"{POLICIES_ROOT}/{tenant}")
    except NoNodeError:
        raise RestError(404, "Tenant does not exist") from None
    info = json.loads(data) if data else {}
    return list(info.get("allowedClusters") or [])


@endpoint
async def ns_get(request: Request) -> Response:
    policies = await require_namespace(service_of(request), namespace_of(request))
    return json_response(sorted(policies.get(NAMESPACE_REPLICATION_KEY) or []))


@endpoint
async def ns_set(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    policies = await require_namespace(s, ns)
    clusters = await _checked_clusters(request, policies, ns.tenant, str(ns))
    await s.namespaces.update_policies(ns, {NAMESPACE_REPLICATION_KEY: clusters})
    await s.apply_namespace_policies(ns)  # Rule 3
    return no_content()


async def _existing_topic(request: Request) -> tuple[Any, TopicName, dict[str, Any]]:
    s, topic = service_of(request), topic_of(request)
    policies = await require_namespace(s, topic.namespace_name)
    if not (await s.namespaces.get_partitions(topic) or await s.topic_exists(topic)):
        raise RestError(404, f"Topic {topic} not found")
    return s, topic, policies


async def _apply(s: Any, topic: TopicName) -> None:
    """Rule 3 for the topic and, for a partitioned topic, its loaded partitions."""
    for t in list(s.topics.values()):
        if not t.closed and (t.name == topic or (topic.partition < 0 and t.name.partitioned_topic == topic)):
            await s.replication.refresh_quietly(t)


@endpoint
async def topic_get(request: Request) -> Response:
    s, topic, _ = await _existing_topic(request)
    if query_bool(request, "applied"):
        return json_response(await s.replication.clusters_of(topic))
    own = (await s.topic_policies.get(topic)).get(TOPIC_REPLICATION_KEY)
    return json_response(None if own is None else sorted(own))


@endpoint
async def topic_set(request: Request) -> Response:
    s, topic, policies = await _existing_topic(request)
    clusters = await _checked_clusters(request, policies, topic.namespace_name.tenant, str(topic.namespace_name))
    await s.topic_policies.update(topic, TOPIC_REPLICATION_KEY, clusters)
    await _apply(s, topic)
    return no_content()


@endpoint
async def topic_delete(request: Request) -> Response:
    s, topic, _ = await _existing_topic(request)
    await s.topic_policies.update(topic, TOPIC_REPLICATION_KEY, None)
    await _apply(s, topic)
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/replication"
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/replication"
    return [
        Route(ns, ns_get, methods=["GET"]),
        Route(ns, ns_set, methods=["POST"]),
        Route(tp, topic_get, methods=["GET"]),
        Route(tp, topic_set, methods=["POST"]),
        Route(tp, topic_delete, methods=["DELETE"]),
    ]
