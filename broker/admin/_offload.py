"""Offload (tiered storage) endpoints, with Pulsar's v2 paths, JSON and status codes.

Namespace (``/admin/v2/namespaces/{tenant}/{namespace}/...``):

* ``offloadThreshold`` GET / PUT: bytes a topic keeps on bookies before older ledgers are offloaded
  (Policies ``offload_threshold``; -1 = off, the GET's answer when unset; 0 = offload every closed
  ledger).
* ``offloadThresholdInSeconds`` GET / PUT: offload ledgers closed longer ago (-1 = off).
* ``offloadDeletionLagMs`` GET / PUT / DELETE: how long an offloaded ledger keeps its bookie copy
  (GET answers 204 when unset).
* ``offloadPolicies`` GET / POST (an ``OffloadPolicies`` object, validated: a driver Magnetar
  implements and its bucket or directory) and ``removeOffloadPolicies`` DELETE. A PUT of
  ``offloadThreshold`` or ``offloadDeletionLagMs`` also updates the stored ``offloadPolicies``, as
  in Pulsar, so the two never disagree.

Topic (``/admin/v2/persistent/{tenant}/{namespace}/{topic}/...``):

* ``offloadPolicies`` GET (``?applied=true``: topic > namespace > broker) / POST / DELETE.
* ``offload`` PUT with a ``MessageId`` JSON (``{"ledgerId": L, "entryId": E, "partitionIndex": P}``):
  offload every closed ledger before ledger ``L`` in the background (204; 409 while one runs; 400
  when no offload driver is configured for the topic).
* ``offload`` GET: ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": "...",
  "firstUnoffloadedMessage": {"ledgerId", "entryId", "partitionIndex"}}`` (Pulsar's
  ``OffloadProcessStatus``), the first unoffloaded message also with ERROR.

Secrets (``s3ManagedLedgerOffloadCredentialSecret``) are stored as given but never answered back.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from managed_ledger import OffloadInProgress, Position
from tiered_storage import OffloadPolicies

from ..housekeeping._offload import TOPIC_OFFLOAD_KEY, resolve_offload_policies
from ._common import (
    INT64_MAX,
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
from ._topic_ops import existing_topic

__all__ = ["offload_status_json", "routes"]


def _long(body: Any, what: str, minimum: int = -1) -> int:
    if isinstance(body, bool) or not isinstance(body, int) or not minimum <= body <= INT64_MAX:
        raise RestError(400, f"Invalid value for {what}: {body!r}")
    return body


def _policies(body: Any) -> OffloadPolicies:
    try:
        policies = OffloadPolicies.from_json(body)
        policies.validate()
    except ValueError as exc:
        raise RestError(400, str(exc)) from None
    return policies


# ------------------------------------------------------------------ namespace level


def _ns_long(
    path_name: str, key: str, policy_field: str, *, unset: Any, minimum: int = -1, deletable: bool = False
) -> list[Route]:
    @endpoint
    async def get(request: Request) -> Response:
        policies = await require_namespace(service_of(request), namespace_of(request))
        value = policies.get(key)
        return json_response(unset if value is None else value)

    async def store(request: Request, value: int | None) -> Response:
        s, ns = service_of(request), namespace_of(request)
        policies = await require_namespace(s, ns)
        changes: dict[str, Any] = {key: value}
        stored = policies.get("offload_policies")
        if isinstance(stored, dict):  # keep offloadPolicies in step, as Pulsar does
            changes["offload_policies"] = {**stored, policy_field: value}
        await s.namespaces.update_policies(ns, changes)
        return no_content()

    @endpoint
    async def put(request: Request) -> Response:
        return await store(request, _long(await json_body(request, what=path_name), path_name, minimum))

    @endpoint
    async def delete(request: Request) -> Response:
        return await store(request, None)

    path = f"/admin/v2/namespaces/{{tenant}}/{{namespace}}/{path_name}"
    out = [Route(path, get, methods=["GET"]), Route(path, put, methods=["PUT", "POST"])]
    if deletable:
        out.append(Route(path, delete, methods=["DELETE"]))
    return out


@endpoint
async def ns_get_policies(request: Request) -> Response:
    policies = await require_namespace(service_of(request), namespace_of(request))
    level = policies.get("offload_policies")
    if not isinstance(level, dict):
        return json_response(None)
    return json_response(OffloadPolicies.from_json(level).to_json(hide_secrets=True))


@endpoint
async def ns_set_policies(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    policies = _policies(await json_body(request, what="offloadPolicies"))
    changes: dict[str, Any] = {"offload_policies": policies.values}
    # the older fields follow the new policies, as Pulsar keeps them in step
    if policies.values.get("managedLedgerOffloadThresholdInBytes") is not None:
        changes["offload_threshold"] = policies.values["managedLedgerOffloadThresholdInBytes"]
    if policies.values.get("managedLedgerOffloadDeletionLagInMillis") is not None:
        changes["offload_deletion_lag_ms"] = policies.values["managedLedgerOffloadDeletionLagInMillis"]
    if policies.values.get("managedLedgerOffloadThresholdInSeconds") is not None:
        changes["offload_threshold_in_seconds"] = policies.values["managedLedgerOffloadThresholdInSeconds"]
    await s.namespaces.update_policies(ns, changes)
    return no_content()


@endpoint
async def ns_remove_policies(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    await s.namespaces.update_policies(ns, {"offload_policies": None})
    return no_content()


# ------------------------------------------------------------------ topic level


@endpoint
async def topic_get_policies(request: Request) -> Response:
    s, name = service_of(request), topic_of(request)
    await existing_topic(s, name)
    if query_bool(request, "applied"):
        return json_response((await resolve_offload_policies(s, name)).to_json(hide_secrets=True))
    raw = (await s.topic_policies.get(name)).get(TOPIC_OFFLOAD_KEY)
    return json_response(OffloadPolicies.from_json(raw).to_json(hide_secrets=True) if isinstance(raw, dict) else None)


@endpoint
async def topic_set_policies(request: Request) -> Response:
    s, name = service_of(request), topic_of(request)
    await existing_topic(s, name)
    policies = _policies(await json_body(request, what="offloadPolicies"))
    await s.topic_policies.update(name, TOPIC_OFFLOAD_KEY, dict(policies.values))
    return no_content()


@endpoint
async def topic_remove_policies(request: Request) -> Response:
    s, name = service_of(request), topic_of(request)
    await existing_topic(s, name)
    await s.topic_policies.update(name, TOPIC_OFFLOAD_KEY, None)
    return no_content()


def _message_id(pos: Position | None, partition: int) -> dict[str, int]:
    if pos is None:
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": partition}
    return {"ledgerId": pos.ledger_id, "entryId": pos.entry_id, "partitionIndex": partition}


def offload_status_json(ml: Any, partition: int = -1) -> dict[str, Any]:
    """Pulsar's ``OffloadProcessStatus`` of a managed ledger's last offload run."""
    st = ml.offload_status
    return {
        "status": st.status.value,
        "lastError": st.error,
        "firstUnoffloadedMessage": _message_id(st.first_unoffloaded, partition),
    }


@endpoint
async def trigger(request: Request) -> Response:
    s, name = service_of(request), topic_of(request)
    body = await json_body(request, what="MessageId")
    if not isinstance(body, dict) or "ledgerId" not in body or "entryId" not in body:
        raise RestError(400, 'the body must be a MessageId: {"ledgerId": ..., "entryId": ...}')
    ledger = _long(body["ledgerId"], "ledgerId")
    entry = _long(body["entryId"], "entryId")
    if name.partition < 0 and await s.namespaces.get_partitions(name):
        raise RestError(405, f"{name} is a partitioned topic: offload each partition")
    topic = await existing_topic(s, name)
    ml = topic.ml
    if not ml.tiered_storage:
        raise RestError(400, "tiered storage is not configured on this broker ([offload] driver)")
    policies = await resolve_offload_policies(s, name)
    if not policies.configured:
        raise RestError(
            400,
            f"no offload driver is configured for {name} "
            "(managedLedgerOffloadDriver in the broker's [offload] or offloadPolicies)",
        )
    try:
        ml.start_offload(Position(ledger, entry))
    except OffloadInProgress as exc:
        raise RestError(409, str(exc)) from None
    return no_content()


@endpoint
async def status(request: Request) -> Response:
    s, name = service_of(request), topic_of(request)
    topic = await existing_topic(s, name)
    return json_response(offload_status_json(topic.ml, name.partition))


def routes() -> list[Route]:
    """The routes of this module."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    out = _ns_long("offloadThreshold", "offload_threshold", "managedLedgerOffloadThresholdInBytes", unset=-1)
    out += _ns_long(
        "offloadThresholdInSeconds", "offload_threshold_in_seconds", "managedLedgerOffloadThresholdInSeconds", unset=-1
    )
    out += _ns_long(
        "offloadDeletionLagMs",
        "offload_deletion_lag_ms",
        "managedLedgerOffloadDeletionLagInMillis",
        unset=None,
        minimum=0,
        deletable=True,
    )
    out += [
        Route(f"{ns}/offloadPolicies", ns_get_policies, methods=["GET"]),
        Route(f"{ns}/offloadPolicies", ns_set_policies, methods=["POST"]),
        Route(f"{ns}/removeOffloadPolicies", ns_remove_policies, methods=["DELETE"]),
        Route(f"{tp}/offloadPolicies", topic_get_policies, methods=["GET"]),
        Route(f"{tp}/offloadPolicies", topic_set_policies, methods=["POST"]),
        Route(f"{tp}/offloadPolicies", topic_remove_policies, methods=["DELETE"]),
        Route(f"{tp}/removeOffloadPolicies", topic_remove_policies, methods=["DELETE"]),
        Route(f"{tp}/offload", trigger, methods=["PUT"]),
        Route(f"{tp}/offload", status, methods=["GET"]),
    ]
    return out
