"""The transaction coordinator side: the coordinators a broker serves (placed by the partitions
of the coordinator-assign system topic), each with its transactions logged on a managed ledger,
their timeouts, recovery, and how a transaction's end reaches its topics (`TxnParticipant`)."""

from ._coordinators import ASSIGN_TOPIC, DEFAULT_MAX_ACTIVE, CoordinatorHost, TransactionCoordinators
from ._errors import CoordinatorNotFoundError, InvalidTxnStatusError, TooManyTransactionsError, TransactionNotFoundError
from ._meta import TxnMeta, TxnStatus
from ._remote import RemoteParticipants
from ._store import LOG_CURSOR, StoreState, TransactionMetadataStore, log_topic

__all__ = [
    "ASSIGN_TOPIC",
    "DEFAULT_MAX_ACTIVE",
    "LOG_CURSOR",
    "CoordinatorHost",
    "CoordinatorNotFoundError",
    "InvalidTxnStatusError",
    "RemoteParticipants",
    "StoreState",
    "TooManyTransactionsError",
    "TransactionCoordinators",
    "TransactionMetadataStore",
    "TransactionNotFoundError",
    "TxnMeta",
    "TxnStatus",
    "log_topic",
]
