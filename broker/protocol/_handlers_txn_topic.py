"""Handlers of END_TXN_ON_PARTITION and END_TXN_ON_SUBSCRIPTION: a coordinator (on this broker or
another) ends a transaction on a topic or subscription this broker serves.

Each is answered with its own response type, an error inside it when the end failed (the
coordinator retries: ServiceNotReady when another broker serves the topic, PersistenceError when
storage failed), as Pulsar's broker answers them. With authorization on only a super user (a
broker's own role) may send them: they commit and abort other clients' transactions.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from managed_ledger import ManagedLedgerError
from protocols.pulsar import Frame, InvalidTopicNameError, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from .._errors import BrokerServiceError
from ..transactions import TxnAction, TxnID

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = ["handle_end_txn_on_partition", "handle_end_txn_on_subscription"]

log = logging.getLogger(__name__)


def _check_allowed(conn: ServerConnection) -> None:
    if not conn.service.config.transaction_coordinator_enabled:
        raise BrokerServiceError("Transactions are not enabled.", pb.NotAllowedError)
    authz = conn.service.authz
    if authz.enabled and not authz.is_super_user(conn.auth_session.role):
        raise BrokerServiceError("only a super user may end transactions on topics", pb.AuthorizationError)


def _action(value: int) -> TxnAction:
    try:
        return TxnAction(value)
    except ValueError:
        raise BrokerServiceError(f"unknown transaction action {value}", pb.NotAllowedError) from None


async def _answer(conn: ServerConnection, response: str, req: Any, run: Callable[[], Awaitable[None]]) -> None:
    fields: dict[str, Any] = {
        "request_id": req.request_id,
        "txnid_least_bits": req.txnid_least_bits,
        "txnid_most_bits": req.txnid_most_bits,
    }
    try:
        _check_allowed(conn)
        await run()
    except BrokerServiceError as exc:
        fields.update(error=exc.code, message=exc.message)
    except InvalidTopicNameError as exc:
        fields.update(error=pb.InvalidTopicName, message=str(exc))
    except ManagedLedgerError as exc:
        fields.update(error=pb.PersistenceError, message=f"storage failed: {exc}")
    if "error" in fields:
        log.info("%s from %s failed: %s", response, conn.remote, fields["message"])
    conn.send_command(make_command(response, **fields))


async def handle_end_txn_on_partition(conn: ServerConnection, frame: Frame) -> None:
    """END_TXN_ON_PARTITION -> END_TXN_ON_PARTITION_RESPONSE once the marker is stored."""
    req = frame.command.endTxnOnPartition
    txn = TxnID(req.txnid_most_bits, req.txnid_least_bits)

    async def run() -> None:
        await conn.service.txn_participant.end_txn_on_partition(req.topic, txn, _action(req.txn_action))

    await _answer(conn, "END_TXN_ON_PARTITION_RESPONSE", req, run)


async def handle_end_txn_on_subscription(conn: ServerConnection, frame: Frame) -> None:
    """END_TXN_ON_SUBSCRIPTION -> END_TXN_ON_SUBSCRIPTION_RESPONSE once the acks are settled."""
    req = frame.command.endTxnOnSubscription
    txn = TxnID(req.txnid_most_bits, req.txnid_least_bits)

    async def run() -> None:
        sub = req.subscription
        await conn.service.txn_participant.end_txn_on_subscription(
            sub.topic, sub.subscription, txn, _action(req.txn_action)
        )

    await _answer(conn, "END_TXN_ON_SUBSCRIPTION_RESPONSE", req, run)
