"""Managed-ledger protocol: the ledger-list and cursor records as frozen values with their
binary codec. A leaf package (protobuf and the standard library only).

The generated ``managed_ledger_pb2`` module (package ``magnetar.ml``) holds the messages.
"""

from __future__ import annotations

from . import managed_ledger_pb2 as managed_ledger_pb2
from ._records import EARLIEST as EARLIEST
from ._records import LATEST as LATEST
from ._records import CursorInfo as CursorInfo
from ._records import LedgerInfo as LedgerInfo
from ._records import ManagedLedgerInfo as ManagedLedgerInfo
from ._records import MLFormatError as MLFormatError
from ._records import OffloadContext as OffloadContext
from ._records import Position as Position
from ._records import PositionRange as PositionRange
from ._records import indexes_to_words as indexes_to_words
from ._records import words_to_indexes as words_to_indexes

__all__ = [
    "EARLIEST",
    "LATEST",
    "CursorInfo",
    "LedgerInfo",
    "MLFormatError",
    "OffloadContext",
    "ManagedLedgerInfo",
    "Position",
    "PositionRange",
    "indexes_to_words",
    "managed_ledger_pb2",
    "words_to_indexes",
]
