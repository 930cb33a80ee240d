"""The transaction coordinators' admin endpoints, with Pulsar's v3 paths and JSON shapes.

* ``GET /admin/v3/transactions/coordinatorStats[?coordinatorId=N]``: Pulsar's
  TransactionCoordinatorStats (``state``, ``leastSigBits``, ``lowWaterMark``, ``ongoingTxnSize``,
  ``recoverStartTime``, ``recoverEndTime``) of coordinator N, or ``{id: stats}`` of every coordinator
  this broker serves.
* ``GET /admin/v3/transactions/transactionMetadata/{mostSigBits}/{leastSigBits}``: Pulsar's
  TransactionMetadata (``txnId`` "(most,least)", ``status``, ``openTimestamp``, ``timeoutAt``,
  ``owner``, ``producedPartitions`` {topic: {startPosition, aborted}}, ``ackedPartitions``
  {topic: {subscription: {cumulativeAckPosition}}}); 404 for a transaction the coordinator does
  not hold (never opened, or ended).
* ``GET /admin/v3/transactions/slowTransactions/{timeout ms}[?coordinatorId=N]``: ``{txnId:
  TransactionMetadata}`` of the transactions open longer than that.
* ``GET /admin/v3/transactions/coordinatorInternalStats/{coordinatorId}``: the log's managed-ledger
  name and internal stats (Pulsar's TransactionCoordinatorInternalStats).
* ``GET /admin/v3/transactions/coordinators``: each coordinator id with the broker URL serving it.

Every path answers 503 while ``transactionCoordinatorEnabled`` is off, as in Pulsar. In a
cluster a request naming a coordinator goes (307) to the broker serving it; without one, the
answer covers the coordinators of the broker asked.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..transactions import TxnID
from ..transactions.coordinator import (
    ASSIGN_TOPIC,
    CoordinatorNotFoundError,
    TransactionNotFoundError,
    TxnMeta,
    TxnStatus,
)
from ._common import RestError, endpoint, json_response, service_of

__all__ = ["routes", "transaction_metadata_json"]

_BASE = "/admin/v3/transactions"


def transaction_metadata_json(meta: TxnMeta) -> dict[str, Any]:
    """Pulsar's TransactionMetadata of ``meta``. The per-topic figures are the coordinator's view:
    no buffer start position or cumulative ack position (the topics hold those)."""
    acked: dict[str, dict[str, Any]] = {}
    for topic, sub in meta.subscriptions:
        acked.setdefault(topic, {})[sub] = {"cumulativeAckPosition": None}
    aborted = meta.status in (TxnStatus.ABORTING, TxnStatus.ABORTED)
    return {
        "txnId": str(meta.txn_id),
        "status": meta.status.name,
        "openTimestamp": meta.open_ms,
        "timeoutAt": meta.timeout_ms,
        "owner": meta.owner or None,
        "producedPartitions": {t: {"startPosition": None, "aborted": aborted} for t in meta.partitions},
        "ackedPartitions": acked,
    }


def _check_enabled(request: Request) -> None:
    if not service_of(request).config.transaction_coordinator_enabled:
        raise RestError(503, "This Broker is not configured with transactionCoordinatorEnabled=true.")


def _int(request: Request, text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RestError(412, f"{what} must be a number, got {text!r}") from None


def _coordinator_param(request: Request) -> int | None:
    raw = request.query_params.get("coordinatorId")
    return None if raw in (None, "") else _int(request, raw, "coordinatorId")


async def _redirect_to_coordinator(request: Request, tc_id: int) -> Response | None:
    """307 to the broker serving coordinator ``tc_id`` when it is another one (a cluster)."""
    s = service_of(request)
    if s.ownership is None or tc_id in s.transactions.stores:
        return None
    authoritative = request.query_params.get("authoritative", "").lower() == "true"
    target = await s.ownership.admin_target(
        ASSIGN_TOPIC.partition_name(tc_id), request.url.scheme == "https", authoritative
    )
    if target is None:
        return None
    query = "&".join(p for p in (request.url.query, "authoritative=true") if p and p != "authoritative=true")
    return RedirectResponse(f"{target.rstrip('/')}{request.url.path}?{query}", status_code=307)


async def _served(request: Request, tc_id: int) -> None:
    """Load coordinator ``tc_id`` here if this broker owns it (404 when it does not exist)."""
    try:
        await service_of(request).transactions.connect(tc_id)
    except CoordinatorNotFoundError as exc:
        raise RestError(404, exc.message) from None


@endpoint
async def coordinator_stats(request: Request) -> Response:
    _check_enabled(request)
    s = service_of(request)
    tc_id = _coordinator_param(request)
    if tc_id is None:
        if not await s.namespaces.get_partitions(ASSIGN_TOPIC):
            raise RestError(404, "Transaction coordinator not found")
        return json_response({str(k): v for k, v in s.transactions.stats().items()})
    redirect = await _redirect_to_coordinator(request, tc_id)
    if redirect is not None:
        return redirect
    await _served(request, tc_id)
    return json_response(s.transactions.stores[tc_id].stats())


@endpoint
async def transaction_metadata(request: Request) -> Response:
    _check_enabled(request)
    txn = TxnID(
        _int(request, request.path_params["most"], "mostSigBits"),
        _int(request, request.path_params["least"], "leastSigBits"),
    )
    redirect = await _redirect_to_coordinator(request, txn.most_bits)
    if redirect is not None:
        return redirect
    await _served(request, txn.most_bits)
    try:
        meta = service_of(request).transactions.get(txn)
    except (TransactionNotFoundError, CoordinatorNotFoundError) as exc:
        raise RestError(404, exc.message) from None
    return json_response(transaction_metadata_json(meta))


@endpoint
async def slow_transactions(request: Request) -> Response:
    _check_enabled(request)
    timeout_ms = _int(request, request.path_params["timeout"], "timeout")
    tc_id = _coordinator_param(request)
    if tc_id is not None:
        redirect = await _redirect_to_coordinator(request, tc_id)
        if redirect is not None:
            return redirect
        await _served(request, tc_id)
    slow = service_of(request).transactions.slow(timeout_ms, tc_id)
    return json_response({str(m.txn_id): transaction_metadata_json(m) for m in slow})


@endpoint
async def coordinator_internal_stats(request: Request) -> Response:
    _check_enabled(request)
    tc_id = _int(request, request.path_params["tc"], "coordinatorId")
    redirect = await _redirect_to_coordinator(request, tc_id)
    if redirect is not None:
        return redirect
    await _served(request, tc_id)
    ml = service_of(request).transactions.stores[tc_id].ml
    return json_response(
        {"transactionLogStats": {"managedLedgerName": ml.name, "managedLedgerInternalStats": ml.internal_stats()}}
    )


@endpoint
async def coordinators(request: Request) -> Response:
    _check_enabled(request)
    s = service_of(request)
    n = await s.namespaces.get_partitions(ASSIGN_TOPIC)
    out = []
    for tc_id in range(n):
        url = s.service_url or s.service_url_tls
        if s.ownership is not None:
            answer = await s.ownership.lookup(ASSIGN_TOPIC.partition_name(tc_id), "", False)
            url = answer.urls.get("brokerServiceUrl", "")
        out.append({"id": tc_id, "brokerServiceUrl": url})
    return json_response(out)


def routes() -> list[Route]:
    """The routes of this module."""
    return [
        Route(f"{_BASE}/coordinators", coordinators, methods=["GET"]),
        Route(f"{_BASE}/coordinatorStats", coordinator_stats, methods=["GET"]),
        Route(f"{_BASE}/transactionMetadata/{{most}}/{{least}}", transaction_metadata, methods=["GET"]),
        Route(f"{_BASE}/slowTransactions/{{timeout}}", slow_transactions, methods=["GET"]),
        Route(f"{_BASE}/coordinatorInternalStats/{{tc}}", coordinator_internal_stats, methods=["GET"]),
    ]
