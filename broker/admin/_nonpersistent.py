"""Non-persistent topics: ``/admin/v2/non-persistent/{tenant}/{namespace}[/{topic}...]`` and their lookup.

* ``GET {ns}``: the loaded non-persistent topics of the namespace (they exist only while loaded,
  `_service` Rule 7) and the partitions of its partitioned non-persistent topics.
* ``GET {ns}/partitioned``; ``PUT|GET|DELETE {topic}/partitions``: partitioned non-persistent topics
  (their metadata is stored like a persistent one's; the partitions themselves hold nothing).
* ``DELETE {topic}`` (``force=true`` also with clients attached) and ``PUT {topic}/unload``: drop
  the loaded topic, closing its producers and consumers (they reconnect and create it anew); a
  delete also drops the topic-level policies (of every partition, for a partitioned topic).
* ``GET {topic}/stats``: Pulsar's NonPersistentTopicStats of a loaded topic (404 when not loaded:
  nothing of it exists then); ``GET {topic}/partitioned-stats``: the loaded partitions' stats
  added up as Pulsar adds them, with each partition's (``perPartition``, true by default).
* ``GET /lookup/v2/topic/non-persistent/{tenant}/{namespace}/{topic}``: as for persistent topics.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from protocols.pulsar import TopicName

from ..topics._nonpersistent import NonPersistentTopic
from ..topics._stats_json import StatsOptions, np_topic_stats
from ..topics._stats_json import partitioned_stats as merge_partitions
from ._common import (
    RestError,
    endpoint,
    for_each_bounded,
    json_response,
    namespace_of,
    no_content,
    query_bool,
    require_namespace,
    service_of,
    topic_of,
)
from ._tenants import lookup_response
from ._topic_ops import create_partitioned_topic, loaded_partitions

__all__ = ["routes"]


def _topic_of(request: Request) -> TopicName:
    return topic_of(request, "non-persistent")


@endpoint
async def list_topics(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    return json_response(await s.non_persistent_topics_of_namespace(ns))


@endpoint
async def list_partitioned(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    return json_response(sorted(await s.namespaces.list_partitioned_topics(ns, domain="non-persistent")))


@endpoint
async def create_partitioned(request: Request) -> Response:
    s, topic = service_of(request), _topic_of(request)
    await require_namespace(s, topic.namespace_name)
    await create_partitioned_topic(request, s, topic, exists=str(topic) in s.np_topics)
    return no_content()


@endpoint
async def get_partitioned(request: Request) -> Response:
    s, topic = service_of(request), _topic_of(request)
    await require_namespace(s, topic.namespace_name)
    return json_response({"partitions": await s.namespaces.get_partitions(topic)})


@endpoint
async def remove_partitioned(request: Request) -> Response:
    s, topic = service_of(request), _topic_of(request)
    await require_namespace(s, topic.namespace_name)
    n = await s.namespaces.get_partitions(topic)
    if not n:
        raise RestError(404, f"Partitioned topic {topic} does not exist")
    loaded = loaded_partitions(s.np_topics, topic, n)
    if not query_bool(request, "force") and not all(t.idle for t in loaded.values()):
        raise RestError(412, "Topic has active producers/subscriptions")
    for t in loaded.values():
        await s.unload(t)
    # the partitions' overrides and the partitioned topic's own go with it, as on persistent topics
    await for_each_bounded([topic.partition_name(i) for i in range(n)], s.topic_policies.delete_all)
    await s.topic_policies.delete_all(topic)
    await s.namespaces.delete_partitioned_topic(topic)
    return no_content()


def _loaded(request: Request, topic: TopicName) -> NonPersistentTopic:
    t = service_of(request).np_topics.get(str(topic))
    if t is None or t.closed:
        raise RestError(404, f"Topic {topic} not found")
    return t


@endpoint
async def remove_topic(request: Request) -> Response:
    s, topic = service_of(request), _topic_of(request)
    await require_namespace(s, topic.namespace_name)
    t = _loaded(request, topic)
    if not t.idle and not query_bool(request, "force"):
        raise RestError(412, "Topic has active producers/subscriptions")
    await s.unload(t)
    await s.topic_policies.delete_all(topic)  # a topic created anew under this name starts clean
    return no_content()


@endpoint
async def unload(request: Request) -> Response:
    s, topic = service_of(request), _topic_of(request)
    await require_namespace(s, topic.namespace_name)
    await s.unload(_loaded(request, topic))
    return no_content()


@endpoint
async def stats(request: Request) -> Response:
    s, topic = service_of(request), _topic_of(request)
    await require_namespace(s, topic.namespace_name)
    return json_response(np_topic_stats(_loaded(request, topic), StatsOptions.from_query(request.query_params)))


@endpoint
async def partitioned_stats(request: Request) -> Response:
    s, topic = service_of(request), _topic_of(request)
    await require_namespace(s, topic.namespace_name)
    n = await s.namespaces.get_partitions(topic) if topic.partition < 0 else 0
    if not n:
        raise RestError(404, f"Partitioned topic {topic} does not exist")
    loaded = loaded_partitions(s.np_topics, topic, n)
    options = StatsOptions.from_query(request.query_params)
    parts = {str(loaded[i].name): np_topic_stats(loaded[i], options) for i in sorted(loaded)}
    per_partition = request.query_params.get("perPartition", "true").lower() != "false"
    return json_response(merge_partitions(n, parts, per_partition=per_partition, non_persistent=True))


@endpoint
async def lookup(request: Request) -> Response:
    return await lookup_response(request, _topic_of(request))


def routes() -> list[Route]:
    """The routes of this module."""
    ns = "/admin/v2/non-persistent/{tenant}/{namespace}"
    tp = ns + "/{topic}"
    return [
        Route(ns, list_topics, methods=["GET"]),
        Route(f"{ns}/partitioned", list_partitioned, methods=["GET"]),
        Route(f"{tp}/partitions", create_partitioned, methods=["PUT"]),
        Route(f"{tp}/partitions", get_partitioned, methods=["GET"]),
        Route(f"{tp}/partitions", remove_partitioned, methods=["DELETE"]),
        Route(tp, remove_topic, methods=["DELETE"]),
        Route(f"{tp}/unload", unload, methods=["PUT"]),
        Route(f"{tp}/stats", stats, methods=["GET"]),
        Route(f"{tp}/partitioned-stats", partitioned_stats, methods=["GET"]),
        Route("/lookup/v2/topic/non-persistent/{tenant}/{namespace}/{topic}", lookup, methods=["GET"]),
    ]
