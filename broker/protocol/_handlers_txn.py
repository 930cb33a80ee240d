"""Handlers of the transaction coordinator's commands (TC_CLIENT_CONNECT, NEW_TXN,
ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN), as Pulsar's broker answers them.

Rules:

* Rule 1: with ``transactionCoordinatorEnabled`` off every one is refused with ERROR NotAllowed
  ("Transactions are not enabled."), as in Pulsar.
* Rule 2: otherwise each is answered with its own response type; a failure goes inside it
  (``error`` and ``message``: TransactionCoordinatorNotFound, TransactionNotFound, InvalidTxnStatus,
  ...), with the transaction id when the request named one.
* Rule 3: ``txn_ttl_seconds`` of NEW_TXN carries milliseconds, as Pulsar's clients send it and its
  broker reads it; the role of the connection becomes the transaction's owner.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from managed_ledger import ManagedLedgerError
from protocols.pulsar import Frame, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from .._errors import BrokerServiceError, NotAllowedError
from ..transactions import TxnAction, TxnID

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = [
    "handle_tc_client_connect",
    "handle_new_txn",
    "handle_add_partition_to_txn",
    "handle_add_subscription_to_txn",
    "handle_end_txn",
]


def _check_enabled(conn: ServerConnection) -> None:
    if not conn.service.config.transaction_coordinator_enabled:
        raise NotAllowedError("Transactions are not enabled.")  # Rule 1


async def _answer(
    conn: ServerConnection,
    response: str,
    request_id: int,
    work: Awaitable[Any],
    txn: TxnID | None = None,
    **fields: Any,
) -> None:
    """Run ``work``, then answer ``response`` with ``fields``, or with the failure inside (Rule 2)."""
    ids: dict[str, int] = {} if txn is None else {"txnid_most_bits": txn.most_bits, "txnid_least_bits": txn.least_bits}
    try:
        result = await work
    except BrokerServiceError as exc:
        conn.send_command(make_command(response, request_id=request_id, error=exc.code, message=exc.message, **ids))
        return
    except ManagedLedgerError as exc:
        conn.send_command(
            make_command(
                response, request_id=request_id, error=pb.PersistenceError, message=f"transaction log: {exc}", **ids
            )
        )
        return
    if isinstance(result, TxnID):
        ids = {"txnid_most_bits": result.most_bits, "txnid_least_bits": result.least_bits}
    conn.send_command(make_command(response, request_id=request_id, **ids, **fields))


def _owner_check(conn: ServerConnection) -> dict[str, Any]:
    authz = conn.service.authz
    if not authz.enabled:
        return {}
    return {"role": conn.auth_session.role or "", "is_super": authz.is_super_user}


async def handle_tc_client_connect(conn: ServerConnection, frame: Frame) -> None:
    """TC_CLIENT_CONNECT: load the coordinator here when this broker owns its partition."""
    _check_enabled(conn)
    req = frame.command.tcClientConnectRequest
    await _answer(conn, "TC_CLIENT_CONNECT_RESPONSE", req.request_id, conn.service.transactions.connect(req.tc_id))


async def handle_new_txn(conn: ServerConnection, frame: Frame) -> None:
    """NEW_TXN: a transaction on coordinator ``tc_id`` (Rule 3)."""
    _check_enabled(conn)
    req = frame.command.newTxn
    tcs = conn.service.transactions
    timeout_ms = tcs.timeout_ms_of(req.txn_ttl_seconds)
    await _answer(
        conn, "NEW_TXN_RESPONSE", req.request_id, tcs.new_txn(req.tc_id, timeout_ms, conn.auth_session.role or "")
    )


async def handle_add_partition_to_txn(conn: ServerConnection, frame: Frame) -> None:
    """ADD_PARTITION_TO_TXN: the topics the transaction produces to."""
    _check_enabled(conn)
    req = frame.command.addPartitionToTxn
    txn = TxnID(req.txnid_most_bits, req.txnid_least_bits)
    work = conn.service.transactions.add_partitions(txn, list(req.partitions), **_owner_check(conn))
    await _answer(conn, "ADD_PARTITION_TO_TXN_RESPONSE", req.request_id, work, txn)


async def handle_add_subscription_to_txn(conn: ServerConnection, frame: Frame) -> None:
    """ADD_SUBSCRIPTION_TO_TXN: the subscriptions the transaction acknowledges on."""
    _check_enabled(conn)
    req = frame.command.addSubscriptionToTxn
    txn = TxnID(req.txnid_most_bits, req.txnid_least_bits)
    subs = [(s.topic, s.subscription) for s in req.subscription]
    work = conn.service.transactions.add_subscriptions(txn, subs, **_owner_check(conn))
    await _answer(conn, "ADD_SUBSCRIPTION_TO_TXN_RESPONSE", req.request_id, work, txn)


async def handle_end_txn(conn: ServerConnection, frame: Frame) -> None:
    """END_TXN: commit or abort, answered once the transaction is COMMITTED / ABORTED."""
    _check_enabled(conn)
    req = frame.command.endTxn
    txn = TxnID(req.txnid_most_bits, req.txnid_least_bits)
    if req.txn_action not in (TxnAction.COMMIT, TxnAction.ABORT):
        raise BrokerServiceError(f"unsupported transaction action {req.txn_action}", pb.UnknownError)
    work = conn.service.transactions.end_txn(txn, TxnAction(req.txn_action), **_owner_check(conn))
    await _answer(conn, "END_TXN_RESPONSE", req.request_id, work, txn)
