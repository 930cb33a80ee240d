"""Magnetar bk_client: the BookKeeper-style client (quorum logic, placement, ledger metadata).

The public names are re-exported here from private modules; import them from ``bk_client``.
The contract the layers above use is in ``bk_client.api``.
"""

from ._errors import BKError as BKError
from ._errors import BookieUnavailable as BookieUnavailable
from ._errors import ClientClosed as ClientClosed
from ._errors import DigestMismatch as DigestMismatch
from ._errors import EntryTooLarge as EntryTooLarge
from ._errors import LedgerClosed as LedgerClosed
from ._errors import LedgerExists as LedgerExists
from ._errors import LedgerFenced as LedgerFenced
from ._errors import LedgerIdOverflow as LedgerIdOverflow
from ._errors import LedgerRecoveryError as LedgerRecoveryError
from ._errors import MetadataStoreError as MetadataStoreError
from ._errors import MetadataVersionConflict as MetadataVersionConflict
from ._errors import NoSuchEntry as NoSuchEntry
from ._errors import NoSuchLedger as NoSuchLedger
from ._errors import NotEnoughBookies as NotEnoughBookies
from ._errors import ReadError as ReadError
from ._errors import ReadOnlyBookie as ReadOnlyBookie
from ._errors import Timeout as Timeout
from ._errors import TooManyRequests as TooManyRequests
from ._errors import Unauthorized as Unauthorized
from ._errors import WriteError as WriteError
from ._errors import error_for_bookie_status as error_for_bookie_status
from ._ledger_manager import LedgerManager as LedgerManager
from ._ledger_manager import LedgerMetadataUpdate as LedgerMetadataUpdate
from ._placement import DEFAULT_RACK as DEFAULT_RACK
from ._placement import BookieInfo as BookieInfo
from ._placement import EnsemblePlacementPolicy as EnsemblePlacementPolicy
from ._quorum import AckSet as AckSet
from ._quorum import BookieResponse as BookieResponse
from ._quorum import CoverageRule as CoverageRule
from ._quorum import DistributionSchedule as DistributionSchedule
from ._quorum import QuorumCoverageSet as QuorumCoverageSet

__all__ = [
    "BKError",
    "BookieUnavailable",
    "ClientClosed",
    "DigestMismatch",
    "EntryTooLarge",
    "LedgerClosed",
    "LedgerExists",
    "LedgerFenced",
    "LedgerIdOverflow",
    "LedgerRecoveryError",
    "MetadataStoreError",
    "MetadataVersionConflict",
    "NoSuchEntry",
    "NoSuchLedger",
    "NotEnoughBookies",
    "ReadError",
    "ReadOnlyBookie",
    "Timeout",
    "TooManyRequests",
    "Unauthorized",
    "WriteError",
    "error_for_bookie_status",
    "LedgerManager",
    "LedgerMetadataUpdate",
    "DEFAULT_RACK",
    "BookieInfo",
    "EnsemblePlacementPolicy",
    "AckSet",
    "BookieResponse",
    "CoverageRule",
    "DistributionSchedule",
    "QuorumCoverageSet",
]

# The client over real bookies (data path: connections, adds, close, recovery, reads).
from ._add_op import AddState as AddState
from ._add_op import PendingAdd as PendingAdd
from ._bookie_client import BookieClient as BookieClient
from ._client import BookKeeper as BookKeeper
from ._config import ClientConfig as ClientConfig
from ._connection import ConnectionPool as ConnectionPool
from ._context import master_key as master_key
from ._read_handle import LedgerReadHandle as LedgerReadHandle
from ._transport import AddCallback as AddCallback
from ._transport import AddRequest as AddRequest
from ._transport import BookieChannel as BookieChannel
from ._transport import BookieTransport as BookieTransport
from ._transport import TransportFactory as TransportFactory
from ._transport import add_status_callback as add_status_callback
from ._transport import call_and_wait as call_and_wait
from ._write_handle import HandleState as HandleState
from ._write_handle import LedgerWriteHandle as LedgerWriteHandle
from .api import BookKeeperClient as BookKeeperClient
from .api import LedgerEntry as LedgerEntry
from .api import PendingAppend as PendingAppend
from .api import ReadHandle as ReadHandle
from .api import WriteHandle as WriteHandle
from .metrics import ClientMetrics as ClientMetrics

__all__ += [
    "AddState",
    "PendingAdd",
    "BookieClient",
    "BookKeeper",
    "ClientConfig",
    "ConnectionPool",
    "master_key",
    "LedgerReadHandle",
    "HandleState",
    "LedgerWriteHandle",
    "BookKeeperClient",
    "LedgerEntry",
    "PendingAppend",
    "ReadHandle",
    "WriteHandle",
    "ClientMetrics",
    "AddCallback",
    "AddRequest",
    "BookieChannel",
    "BookieTransport",
    "TransportFactory",
    "add_status_callback",
    "call_and_wait",
]

# AutoRecovery (auditor, under-replication, replication workers) is a service of its own: the
# ``autorecovery`` package, built on this package's public API (``BookKeeper.bookie_client``).
