"""Topic compaction endpoints, with Pulsar's v2 paths and JSON shapes.

* ``PUT /admin/v2/persistent/{t}/{ns}/{topic}/compaction``: start compacting (204); 409 while a
  run is going on. On a partitioned topic: every partition that exists.
* ``GET .../compaction``: ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": "..."}``
  (Pulsar's ``LongRunningProcessStatus``).
* ``GET|POST|DELETE /admin/v2/namespaces/{t}/{ns}/compactionThreshold``: the namespace policy
  ``compaction_threshold`` in bytes (0: automatic compaction off); GET answers null when unset.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..topics._compaction import THRESHOLD_POLICY, CompactionInProgress, Compactor
from ._common import (
    RestError,
    endpoint,
    json_body,
    json_response,
    namespace_of,
    no_content,
    require_namespace,
    service_of,
    topic_of,
)
from ._topic_ops import existing_topic, present_partitions

__all__ = ["routes", "compaction_json"]


def compaction_json(compactor: Compactor) -> dict[str, Any]:
    """What explain-storage shows of a topic's compaction: status, horizon, compacted ledger."""
    view = compactor.view
    out: dict[str, Any] = dict(compactor.status())
    out["horizon"] = str(view.horizon) if view is not None else None
    out["compactedLedger"] = (
        {"ledgerId": view.ledger_id, "entries": view.entries, "size": view.reader.size} if view is not None else None
    )
    return out


def _start(compactor: Compactor) -> None:
    try:
        compactor.start()
    except CompactionInProgress as exc:
        raise RestError(409, str(exc)) from None


@endpoint
async def trigger(request: Request) -> Response:
    s, name = service_of(request), topic_of(request)
    if name.partition < 0:
        n = await s.namespaces.get_partitions(name)
        if n:
            await require_namespace(s, name.namespace_name)
            for part in await present_partitions(s, name, n):
                _start((await existing_topic(s, part)).compactor)
            return no_content()
    _start((await existing_topic(s, name)).compactor)
    return no_content()


@endpoint
async def status(request: Request) -> Response:
    topic = await existing_topic(service_of(request), topic_of(request))
    return json_response(topic.compactor.status())


def _threshold(body: Any) -> int:
    if isinstance(body, bool) or not isinstance(body, int) or body < 0:
        raise RestError(400, f"invalid compactionThreshold {body!r}: expected a number of bytes >= 0")
    return body


@endpoint
async def get_threshold(request: Request) -> Response:
    policies = await require_namespace(service_of(request), namespace_of(request))
    return json_response(policies.get(THRESHOLD_POLICY))


@endpoint
async def set_threshold(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    value = _threshold(await json_body(request, what="compactionThreshold"))
    await s.namespaces.update_policies(ns, {THRESHOLD_POLICY: value})
    return no_content()


@endpoint
async def delete_threshold(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    await s.namespaces.update_policies(ns, {THRESHOLD_POLICY: None})
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction"
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold"
    return [
        Route(tp, trigger, methods=["PUT"]),
        Route(tp, status, methods=["GET"]),
        Route(ns, get_threshold, methods=["GET"]),
        Route(ns, set_threshold, methods=["POST", "PUT"]),
        Route(ns, delete_threshold, methods=["DELETE"]),
    ]
