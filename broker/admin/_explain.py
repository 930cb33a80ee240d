"""``GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/explain-storage`` (Magnetar's own).

For each ledger of the topic: size, entries, age (since it closed; the open ledger's since it
became current, with ``createdAtMs``), the retention verdict and its reason (computed now with
`retention.decide_retention` over the effective policies), and which cursors pin it (each cursor
with its subscription properties and the pipeline they name, if any); the retention service's
last check of the topic (trims, TTL moves, backlog-quota state, offload checks, errors); per
ledger where it lives with tiered storage (``tieredStorage``: bookies, tier or both, its offload
state, and why its bookie copy is or is not deleted yet) and the last offload run (``offload``);
what open transactions hold (``transactions``: the max read position, the oldest open ones with
their first entries; the buffer's snapshot cursor, a system cursor, is what pins their ledgers);
and, when a `GcExplainHook` is installed, what the bookies say about reclaiming each ledger.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from managed_ledger import Position
from retention import Reason, TopicPolicies, decide_retention

from ..topics._replication_view import REPLICATOR_PREFIX, is_replicator_name
from ..topics._topic import SYSTEM_CURSORS, Topic
from ._common import endpoint, json_response, service_of, topic_of
from ._compaction import compaction_json
from ._offload import offload_status_json
from ._topic_ops import existing_topic

__all__ = ["routes", "GcExplainHook", "explain_storage", "PIPELINE_PROPERTY"]

PIPELINE_PROPERTY = "pipeline"
"""The subscription property naming the pipeline that owns a subscription (set by connectors such
as the Spark source); explain-storage shows it beside the ledgers the cursor pins."""

GcExplainHook = Callable[[str, list[int]], "Awaitable[dict[str, Any]] | dict[str, Any]"]
"""``hook(topic, ledger_ids)`` -> JSON about the bookies' reclamation of those ledgers (for example
``{"ledgers": {id: {"reclaimed": bool, "entryLogs": [...]}}}``). The ids include ledgers retention
trimmed in its last check. Installed as ``app.state.gc_explain`` (see `create_admin_app`); the
standard one is `BookieGcView.explain` (shape: `join_gc_explain`), installed by
``magnetar.stack.serve_broker_stack``."""


def transactions_json(topic: Topic, limit: int = 100) -> dict[str, Any]:
    """What explain-storage shows of a topic's transaction buffer: the max read position, the
    oldest ``limit`` open transactions with their first entries, the count of aborted ones kept."""
    buffer = topic.txn_buffer
    return {
        "maxReadPosition": str(buffer.max_read_position),
        "openCount": len(buffer.ongoing),
        "open": [{"txnId": str(t), "firstPosition": str(p)} for t, p in list(buffer.ongoing.items())[:limit]],
        "abortedRemembered": len(buffer.aborted),
        "heldEntries": buffer.held_entries(),
    }


async def explain_storage(
    topic: Topic,
    policies: TopicPolicies,
    last_check: dict[str, Any] | None,
    now_ms: int,
    gc_hook: GcExplainHook | None = None,
) -> dict[str, Any]:
    """The explain-storage JSON of a loaded topic (see the module docstring)."""
    ml = topic.ml
    ledgers = ml.ledgers
    cursors = {name: c.mark_delete_position for name, c in ml.cursors.items()}
    decision = decide_retention(ledgers, cursors, policies.retention, now_ms, system_cursors=SYSTEM_CURSORS)
    pins: dict[str, list[int]] = {name: [] for name in cursors}
    infos = {i.ledger_id: i for i in ledgers}
    rows = []
    for d in decision.ledgers:
        row = d.to_json(now_ms)
        if d.reason is Reason.OPEN_LEDGER:
            # no close time yet: its age is how long it has been the ledger written to
            row["createdAtMs"] = ml.current_ledger_created_ms
            row["ageSeconds"] = max(0, now_ms - row["createdAtMs"]) / 1000
        # where the ledger lives (bookies, tier, both) and why its bookie copy is (not yet) deleted
        row["tieredStorage"] = ml.explain_offload(infos[d.ledger_id])
        end = Position(d.ledger_id, d.entries - 1)
        pinned_by = sorted(name for name, pos in cursors.items() if pos < end and d.entries > 0)
        row["pinnedBy"] = pinned_by
        for name in pinned_by:
            pins[name].append(d.ledger_id)
        rows.append(row)
    cursor_rows = {}
    for name, c in sorted(ml.cursors.items()):
        cursor_rows[name] = {
            "markDeletePosition": str(c.mark_delete_position),
            "backlog": c.backlog,
            "backlogSize": c.backlog_size,
            "pinsLedgers": pins.get(name, []),
            "system": name in SYSTEM_CURSORS,
            # who owns the cursor, as its subscription properties say: a data
            # pipeline (the Spark connector's) names itself in "pipeline"
            "properties": c.cursor_properties,
            "pipeline": c.cursor_properties.get(PIPELINE_PROPERTY),
            # a geo-replicator's cursor (pulsar.repl.<remote>): the cluster it owes these entries
            "replicatesTo": name[len(REPLICATOR_PREFIX) + 1 :] if is_replicator_name(name) else None,
        }
    out: dict[str, Any] = {
        "topic": str(topic.name),
        "nowMs": now_ms,
        "policies": policies.to_json(),
        "totalSize": decision.total_size,
        "slowestCursor": decision.slowest_cursor,
        "deletableNow": decision.deletable,
        "deletableBytes": decision.deletable_bytes,
        "ledgers": rows,
        "cursors": cursor_rows,
        "lastRetentionCheck": last_check,
        "bookieGc": None,
        # the compacted view lives in its own ledger, outside the list above: retention never
        # trims it; each compaction run deletes the one it replaces
        "compaction": compaction_json(topic.compactor),
        "offload": offload_status_json(ml, topic.name.partition),
        "offloadedSize": ml.offloaded_size,
        # open transactions pin everything from their first entry on (through the buffer's
        # snapshot cursor, a system cursor above): the oldest ones, and where readers stop
        "transactions": transactions_json(topic),
    }
    if gc_hook is not None:
        ids = [d.ledger_id for d in decision.ledgers]
        if last_check:
            ids += [i for i in last_check.get("trimmed", []) if i not in ids]
        try:
            result = gc_hook(str(topic.name), ids)
            out["bookieGc"] = await result if inspect.isawaitable(result) else result
        except Exception as exc:
            out["bookieGc"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


@endpoint
async def explain(request: Request) -> Response:
    s, name = service_of(request), topic_of(request)
    topic = await existing_topic(s, name)
    await topic.ml.refresh_offload_policies()
    policies = await s.policies.topic_policies(str(name))
    hook = getattr(request.app.state, "gc_explain", None)
    body = await explain_storage(topic, policies, s.retention.explain(str(name)), int(s.clock() * 1000), hook)
    return json_response(body)


def routes() -> list[Route]:
    """The routes of this module."""
    return [Route("/admin/v2/persistent/{tenant}/{namespace}/{topic}/explain-storage", explain, methods=["GET"])]
