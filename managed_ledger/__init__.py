"""Magnetar managed ledger: a topic partition as a chain of BookKeeper ledgers, with cursors.

The contract the broker codes against is listed in ``__all__``; see `ManagedLedgerFactory`,
`ManagedLedger` and `ManagedCursor` for the guarantees of each operation.
"""

from protocols.managed_ledger import LedgerInfo as LedgerInfo
from protocols.managed_ledger import OffloadContext as OffloadContext
from protocols.managed_ledger import Position as Position

from ._add_op import PendingAdd as PendingAdd
from ._config import ManagedLedgerConfig as ManagedLedgerConfig
from ._cursor import INTERNAL_PROPERTY_PREFIX as INTERNAL_PROPERTY_PREFIX
from ._cursor import CursorState as CursorState
from ._cursor import ManagedCursor as ManagedCursor
from ._errors import CursorNotFound as CursorNotFound
from ._errors import EntryTooLarge as EntryTooLarge
from ._errors import ManagedLedgerClosed as ManagedLedgerClosed
from ._errors import ManagedLedgerError as ManagedLedgerError
from ._errors import ManagedLedgerFenced as ManagedLedgerFenced
from ._errors import ManagedLedgerTerminated as ManagedLedgerTerminated
from ._errors import NoMoreEntries as NoMoreEntries
from ._errors import SideLedgerMissing as SideLedgerMissing
from ._errors import StorageUnavailable as StorageUnavailable
from ._factory import ManagedLedgerFactory as ManagedLedgerFactory
from ._ledger import ManagedLedger as ManagedLedger
from ._ledger import ManagedLedgerState as ManagedLedgerState
from ._offload import OffloadInProgress as OffloadInProgress
from ._offload import OffloadPoliciesResolver as OffloadPoliciesResolver
from ._offload import OffloadRunStatus as OffloadRunStatus
from ._offload import OffloadStatus as OffloadStatus
from ._offload import select_for_threshold as select_for_threshold
from ._side_ledger import SideLedgerReader as SideLedgerReader
from ._side_ledger import SideLedgers as SideLedgers
from ._side_ledger import SideLedgerWriter as SideLedgerWriter
from ._storage_view import LedgerPlacement as LedgerPlacement
from ._storage_view import bookie_http_url as bookie_http_url
from ._storage_view import ledger_placements as ledger_placements
from ._types import Entry as Entry
from ._types import InitialPosition as InitialPosition
from .metrics import ManagedLedgerMetrics as ManagedLedgerMetrics

__all__ = [
    "CursorNotFound",
    "CursorState",
    "INTERNAL_PROPERTY_PREFIX",
    "Entry",
    "EntryTooLarge",
    "InitialPosition",
    "LedgerInfo",
    "LedgerPlacement",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerClosed",
    "ManagedLedgerConfig",
    "ManagedLedgerError",
    "ManagedLedgerFactory",
    "ManagedLedgerFenced",
    "ManagedLedgerMetrics",
    "ManagedLedgerState",
    "ManagedLedgerTerminated",
    "NoMoreEntries",
    "OffloadContext",
    "OffloadInProgress",
    "OffloadPoliciesResolver",
    "OffloadRunStatus",
    "OffloadStatus",
    "PendingAdd",
    "SideLedgerMissing",
    "SideLedgerReader",
    "SideLedgerWriter",
    "SideLedgers",
    "Position",
    "StorageUnavailable",
    "bookie_http_url",
    "ledger_placements",
    "select_for_threshold",
]
