"""The topic side's transaction endpoints, with Pulsar's v3 paths and JSON shapes.

* ``GET /admin/v3/transactions/transactionBufferStats/{t}/{ns}/{topic}``: Pulsar's
  TransactionBufferStats of the topic's transaction buffer (``state``, ``maxReadPosition``,
  ``lastSnapshotTimestamps``, ``lowWaterMarks`` (only with ``?lowWaterMarks=true``; this buffer
  keeps none: empty), ``ongoingTxnSize``, ``recoverStartTime``, ``recoverEndTime``,
  ``snapshotStats``: null, single snapshots only).
* ``GET /admin/v3/transactions/pendingAckStats/{t}/{ns}/{topic}/{subscription}``: Pulsar's
  TransactionPendingAckStats (``state``, ``lowWaterMarks``, ``ongoingTxnSize``).
* ``GET /admin/v3/transactions/transactionInBufferStats/{t}/{ns}/{topic}/{most}/{least}``:
  ``{"startPosition": "L:E" or null, "aborted": bool}`` of one transaction on the topic.
* ``GET /admin/v3/transactions/transactionInPendingAckStats/{t}/{ns}/{topic}/{subscription}/{most}/{least}``:
  ``{"cumulativeAckPosition": "L:E" or null}`` of one transaction on the subscription.

404 for a topic or subscription that does not exist, as the other topic endpoints.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..topics._subscription import Subscription
from ..transactions import TxnID
from ._common import RestError, endpoint, json_response, service_of, subscription_of, topic_of
from ._topic_ops import existing_topic

__all__ = ["routes"]

_BASE = "/admin/v3/transactions"
_TOPIC = "{tenant}/{namespace}/{topic}"


def _txn(request: Request) -> TxnID:
    p = request.path_params
    try:
        return TxnID(int(p["most"]), int(p["least"]))
    except ValueError:
        raise RestError(412, f"invalid transaction id ({p['most']},{p['least']})") from None


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


@endpoint
async def buffer_stats(request: Request) -> Response:
    topic = await existing_topic(service_of(request), topic_of(request))
    stats = topic.txn_buffer.stats()
    if not _flag(request, "lowWaterMarks"):
        stats["lowWaterMarks"] = None
    return json_response(stats)


async def _subscription(request: Request) -> Subscription:
    topic = await existing_topic(service_of(request), topic_of(request))
    name = subscription_of(request)
    sub = topic.subscriptions.get(name)
    if sub is None:
        raise RestError(404, f"Subscription {name} not found")
    return sub


@endpoint
async def pending_ack_stats(request: Request) -> Response:
    sub = await _subscription(request)
    stats = sub.pending_acks.stats()
    if not _flag(request, "lowWaterMarks"):
        stats["lowWaterMarks"] = None
    return json_response(stats)


@endpoint
async def txn_in_buffer(request: Request) -> Response:
    topic = await existing_topic(service_of(request), topic_of(request))
    txn = _txn(request)
    buffer = topic.txn_buffer
    start = buffer.ongoing.get(txn)
    return json_response({"startPosition": None if start is None else str(start), "aborted": txn in buffer.aborted})


@endpoint
async def txn_in_pending_ack(request: Request) -> Response:
    sub = await _subscription(request)
    position = sub.pending_acks.cumulative_position(_txn(request))
    return json_response({"cumulativeAckPosition": None if position is None else str(position)})


def routes() -> list[Route]:
    """The endpoints of this module."""
    return [
        Route(f"{_BASE}/transactionBufferStats/{_TOPIC}", buffer_stats, methods=["GET"]),
        Route(f"{_BASE}/pendingAckStats/{_TOPIC}/{{subscription}}", pending_ack_stats, methods=["GET"]),
        Route(f"{_BASE}/transactionInBufferStats/{_TOPIC}/{{most}}/{{least}}", txn_in_buffer, methods=["GET"]),
        Route(
            f"{_BASE}/transactionInPendingAckStats/{_TOPIC}/{{subscription}}/{{most}}/{{least}}",
            txn_in_pending_ack,
            methods=["GET"],
        ),
    ]
