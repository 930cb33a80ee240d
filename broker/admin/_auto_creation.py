"""Namespace auto-topic-creation policy: ``/admin/v2/namespaces/{tenant}/{namespace}/autoTopicCreation``.

POST stores an ``AutoTopicCreationOverride`` (Pulsar's JSON: ``allowAutoTopicCreation``,
``topicType`` "partitioned" | "non-partitioned", ``defaultNumPartitions`` required for
partitioned) as the namespace policy ``autoTopicCreationOverride``; GET answers it (204 when the
namespace has none, so the broker's ``allowAutoTopicCreation`` / ``allowAutoTopicCreationType`` /
``defaultNumPartitions`` apply); DELETE removes it. The broker reads the policy on every topic
creation, so a change applies to the next producer, consumer or partitioned-metadata request.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._common import endpoint, json_body, json_response, namespace_of, no_content, require_namespace, service_of
from ._namespaces import _auto_topic_creation

__all__ = ["routes"]

_KEY = "autoTopicCreationOverride"


@endpoint
async def get_auto_creation(request: Request) -> Response:
    """The namespace's override, or 204 when there is none."""
    policies = await require_namespace(service_of(request), namespace_of(request))
    return json_response(policies.get(_KEY) or None)


@endpoint
async def set_auto_creation(request: Request) -> Response:
    """Store the override: 412 for an invalid one, 406 for partitions out of bounds (as Pulsar)."""
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    override = _auto_topic_creation(request, await json_body(request, what="autoTopicCreation"))
    await s.namespaces.update_policies(ns, {_KEY: override})
    return no_content()


@endpoint
async def remove_auto_creation(request: Request) -> Response:
    """Drop the override: the broker's settings apply again."""
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    await s.namespaces.update_policies(ns, {_KEY: None})
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    path = "/admin/v2/namespaces/{tenant}/{namespace}/autoTopicCreation"
    return [
        Route(path, get_auto_creation, methods=["GET"]),
        Route(path, set_auto_creation, methods=["POST"]),
        Route(path, remove_auto_creation, methods=["DELETE"]),
    ]
