"""Persistent topics: ``/admin/v2/persistent/{tenant}/{namespace}[/{topic}...]``: list, create,
delete, partitions, stats, internal stats, unload, truncate (`_topic_ops` Rule 5).

``partitioned-stats`` and ``partitioned-internalStats`` report the partitions this broker has
loaded and never load one to report it (Pulsar reports a topic's stats from the broker that has it
loaded); the totals are over those partitions, added up as Pulsar adds them, and
``metadata.partitions`` says how many there are. The stats are Pulsar 4.0's JSON
(`broker.topics._stats_json`), with its query parameters.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..resources._namespaces import PARTITIONED_ROOT
from ..topics._stats import backlog_age_for_request
from ..topics._stats_json import StatsOptions, internal_stats, partitioned_stats, topic_stats
from ..topics._topic import Topic
from ._common import (
    RestError,
    check_partitions,
    endpoint,
    for_each_bounded,
    json_body,
    json_response,
    namespace_of,
    no_content,
    query_bool,
    require_namespace,
    service_of,
    topic_of,
)
from ._topic_ops import (
    create_partitioned_topic,
    delete_partitioned_topic,
    delete_topic,
    existing_topic,
    loaded_partitions,
    present_partitions,
    topic_exists_any,
    truncate_topic,
)

__all__ = ["routes"]


@endpoint
async def list_topics(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    return json_response(await s.topics_of_namespace(ns))


@endpoint
async def list_partitioned(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    return json_response(sorted(await s.namespaces.list_partitioned_topics(ns)))


@endpoint
async def create_topic(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    if await topic_exists_any(s, topic):
        raise RestError(409, f"This topic already exists: {topic}")
    await s.get_topic(topic, create=True, admin=True)
    return no_content()


@endpoint
async def remove_topic(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    if topic.partition < 0 and await s.namespaces.get_partitions(topic):
        raise RestError(409, f"{topic} is a partitioned topic: delete it with DELETE .../partitions")
    await delete_topic(s, topic, force=query_bool(request, "force"))
    return no_content()


async def _partitions_body(request: Request) -> int:
    return check_partitions(request, await json_body(request, what="number of partitions"))


@endpoint
async def create_partitioned(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    await create_partitioned_topic(request, s, topic, exists=await topic_exists_any(s, topic))
    return no_content()


@endpoint
async def update_partitioned(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    n = await _partitions_body(request)
    current = await s.namespaces.get_partitions(topic)
    if not current:
        raise RestError(404, f"Partitioned topic {topic} does not exist")
    if n <= current:
        raise RestError(422, f"The number of partitions ({n}) must be more than the current {current}")
    path = f"{PARTITIONED_ROOT}/{topic.rest_path}"
    data, stat = await s.store.get(path)
    await s.store.set(path, json.dumps({**json.loads(data), "partitions": n}).encode(), version=stat.version)
    return no_content()


@endpoint
async def get_partitioned(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    answer: dict[str, Any] = {"partitions": await s.namespaces.get_partitions(topic)}
    properties = await s.namespaces.partitioned_topic_properties(topic) if answer["partitions"] else {}
    if properties:
        answer["properties"] = properties
    return json_response(answer)


@endpoint
async def remove_partitioned(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await delete_partitioned_topic(s, topic, force=query_bool(request, "force"))
    return no_content()


async def _stats_of(topic: Topic, options: StatsOptions) -> dict[str, Any]:
    # the backlog age needs a read per subscription: refreshed at most every few seconds, and
    # never waited for long (`broker.topics._stats` Rule 6)
    await backlog_age_for_request([topic], int(time.time() * 1000))
    return await topic_stats(topic, options)


@endpoint
async def stats(request: Request) -> Response:
    t = await existing_topic(service_of(request), topic_of(request))
    return json_response(await _stats_of(t, StatsOptions.from_query(request.query_params)))


@endpoint
async def partitioned_stats_route(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    n = await s.namespaces.get_partitions(topic) if topic.partition < 0 else 0
    if not n:
        raise RestError(404, f"Partitioned topic {topic} does not exist")
    options = StatsOptions.from_query(request.query_params)
    loaded = loaded_partitions(s.topics, topic, n)
    parts = {str(loaded[i].name): await _stats_of(loaded[i], options) for i in sorted(loaded)}
    per_partition = request.query_params.get("perPartition", "true").lower() != "false"
    return json_response(partitioned_stats(n, parts, per_partition=per_partition))


@endpoint
async def internal_stats_route(request: Request) -> Response:
    t = await existing_topic(service_of(request), topic_of(request))
    return json_response(await internal_stats(t))


@endpoint
async def partitioned_internal_stats_route(request: Request) -> Response:
    """Pulsar's ``PartitionedTopicInternalStats``: ``metadata`` and each loaded partition's internal stats."""
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    n = await s.namespaces.get_partitions(topic) if topic.partition < 0 else 0
    if not n:
        raise RestError(404, f"Partitioned topic {topic} does not exist")
    loaded = loaded_partitions(s.topics, topic, n)
    parts = {str(loaded[i].name): await internal_stats(loaded[i]) for i in sorted(loaded)}
    return json_response({"metadata": {"partitions": n, "deleted": False}, "partitions": parts})


@endpoint
async def truncate(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    n = await s.namespaces.get_partitions(topic) if topic.partition < 0 else 0
    if n:
        targets = await for_each_bounded(
            await present_partitions(s, topic, n), lambda name: s.get_topic(name, create=False)
        )
    else:
        targets = [await existing_topic(s, topic)]
    await for_each_bounded(targets, truncate_topic)
    return no_content()


@endpoint
async def unload(request: Request) -> Response:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    if not await topic_exists_any(s, topic):
        raise RestError(404, f"Topic {topic} not found")
    n = await s.namespaces.get_partitions(topic) if topic.partition < 0 else 0
    if n:
        loaded = list(loaded_partitions(s.topics, topic, n).values())
    else:
        single = s.topics.get(str(topic))
        loaded = [single] if single is not None else []
    for t in loaded:
        await s.unload(t)
    return no_content()


def routes() -> list[Route]:
    """The routes of this module (the namespace-level lists come before ``{topic}`` routes)."""
    ns = "/admin/v2/persistent/{tenant}/{namespace}"
    tp = ns + "/{topic}"
    return [
        Route(ns, list_topics, methods=["GET"]),
        Route(f"{ns}/partitioned", list_partitioned, methods=["GET"]),
        Route(tp, create_topic, methods=["PUT"]),
        Route(tp, remove_topic, methods=["DELETE"]),
        Route(f"{tp}/partitions", create_partitioned, methods=["PUT"]),
        Route(f"{tp}/partitions", update_partitioned, methods=["POST"]),
        Route(f"{tp}/partitions", get_partitioned, methods=["GET"]),
        Route(f"{tp}/partitions", remove_partitioned, methods=["DELETE"]),
        Route(f"{tp}/stats", stats, methods=["GET"]),
        Route(f"{tp}/partitioned-stats", partitioned_stats_route, methods=["GET"]),
        Route(f"{tp}/internalStats", internal_stats_route, methods=["GET"]),
        Route(f"{tp}/partitioned-internalStats", partitioned_internal_stats_route, methods=["GET"]),
        Route(f"{tp}/unload", unload, methods=["PUT"]),
        Route(f"{tp}/truncate", truncate, methods=["DELETE"]),
    ]
