"""Errors of the transaction coordinator, each with the ``ServerError`` code Pulsar's clients expect."""

from __future__ import annotations

from protocols.pulsar import pulsar_api_pb2 as pb

from ..._errors import BrokerServiceError

__all__ = ["CoordinatorNotFoundError", "TransactionNotFoundError", "InvalidTxnStatusError", "TooManyTransactionsError"]


class CoordinatorNotFoundError(BrokerServiceError):
    """No coordinator of that id is served by this broker (not owned here, or not recovered yet)."""

    code = pb.TransactionCoordinatorNotFound


class TransactionNotFoundError(BrokerServiceError):
    """The coordinator holds no such transaction (never opened, or ended: Rule 3 of `_meta`)."""

    code = pb.TransactionNotFound


class InvalidTxnStatusError(BrokerServiceError):
    """The transaction's status does not allow the request (Rules 1 and 2 of `_meta`)."""

    code = pb.InvalidTxnStatus


class TooManyTransactionsError(BrokerServiceError):
    """The coordinator holds ``maxActiveTransactionsPerCoordinator`` open transactions already."""

    code = pb.NotAllowedError
