"""The bookie journal: group commit of add, fence, LAC and master-key records, and their replay.

`Journal` (``_journal``) batches records and syncs them with a pipelined force-write stage; its
records and file formats are ``_codec`` (sans-IO), its files on disk ``_files``, the persisted
LastLogMark ``_last_mark``, its errors, states and tickets ``_types``, its settings ``_config``.

Below the server (`bookie.server` composes it with the ledger storage); it uses only bookie's
shared leaves (`bookie._errors`, `bookie._space`, `bookie.metrics`). The names below are what the
rest of the bookie uses; tests may reach into the private modules for the finer parts.
"""

from ._codec import AddEntry as AddEntry
from ._codec import ExplicitLac as ExplicitLac
from ._codec import FenceLedger as FenceLedger
from ._codec import JournalFormatError as JournalFormatError
from ._codec import JournalRecord as JournalRecord
from ._codec import LogMark as LogMark
from ._codec import MasterKey as MasterKey
from ._codec import Padding as Padding
from ._config import JournalConfig as JournalConfig
from ._files import JournalDisk as JournalDisk
from ._files import ReplayReport as ReplayReport
from ._files import ReplayStop as ReplayStop
from ._group import GroupMark as GroupMark
from ._group import JournalGroup as JournalGroup
from ._journal import RESERVE_FILE as RESERVE_FILE
from ._journal import Journal as Journal
from ._last_mark import last_mark_file as last_mark_file
from ._last_mark import read_last_mark as read_last_mark
from ._types import FlushReason as FlushReason
from ._types import JournalClosedError as JournalClosedError
from ._types import JournalError as JournalError
from ._types import JournalIOError as JournalIOError
from ._types import JournalNoSpaceError as JournalNoSpaceError
from ._types import JournalState as JournalState
from ._types import JournalStatistics as JournalStatistics
from ._types import JournalTicket as JournalTicket

__all__ = [
    # the journal and its lifecycle
    "Journal",
    "JournalConfig",
    "JournalDisk",
    "JournalState",
    "JournalStatistics",
    "JournalTicket",
    "FlushReason",
    "RESERVE_FILE",
    "JournalGroup",
    "GroupMark",
    "last_mark_file",
    # errors
    "JournalError",
    "JournalIOError",
    "JournalNoSpaceError",
    "JournalClosedError",
    "JournalFormatError",
    # records, marks and replay
    "JournalRecord",
    "AddEntry",
    "FenceLedger",
    "ExplicitLac",
    "MasterKey",
    "Padding",
    "LogMark",
    "ReplayReport",
    "ReplayStop",
    "read_last_mark",
]
