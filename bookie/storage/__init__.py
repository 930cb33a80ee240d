"""The bookie's ledger storage: write cache, entry logs, location index, read cache, checkpoints.

`DbLedgerStorage` (``_storage``) implements the `LedgerStorage` contract over a double-buffered
write cache (``_write_cache``), interleaved entry logs (``_entry_log``, their sans-IO format in
``_entry_log_codec``), a durable location index (``_index``) and a read cache with read-ahead
(``_read_cache``). A missing ledger or entry raises ``protocols.bookkeeper.NoSuchLedger`` /
``NoSuchEntry``, the wire-level errors the bookie answers with ENOLEDGER / ENOENTRY.

Below the server and the garbage collector (`bookie.gc` compacts and deletes entry logs through
`DbLedgerStorage` and `EntryLogger`); it uses only bookie's shared leaves (`bookie._errors`,
`bookie._space`, `bookie.metrics`).
"""

from ._entry_log import CurrentLogInfo as CurrentLogInfo
from ._entry_log import EntryLogger as EntryLogger
from ._entry_log import EntryLogStats as EntryLogStats
from ._entry_log import FileOps as FileOps
from ._entry_log import LogRecord as LogRecord
from ._entry_log import LogUsage as LogUsage
from ._entry_log import StorageIOError as StorageIOError
from ._entry_log_codec import HEADER_SIZE as HEADER_SIZE
from ._entry_log_codec import INVALID_LEDGER_ID as INVALID_LEDGER_ID
from ._entry_log_codec import RECORD_PREFIX_SIZE as RECORD_PREFIX_SIZE
from ._entry_log_codec import CorruptLogError as CorruptLogError
from ._entry_log_codec import decode_header as decode_header
from ._entry_log_codec import iter_records as iter_records
from ._entry_log_codec import log_file_name as log_file_name
from ._entry_log_codec import parse_log_file_name as parse_log_file_name
from ._storage import CheckpointSource as CheckpointSource
from ._storage import DbLedgerStorage as DbLedgerStorage
from ._storage import FlushReason as FlushReason
from ._storage import LedgerStorage as LedgerStorage
from ._storage import StorageStats as StorageStats
from ._write_cache import WriteCacheFull as WriteCacheFull

__all__ = [
    # the contract and its implementation
    "LedgerStorage",
    "DbLedgerStorage",
    "CheckpointSource",
    "FlushReason",
    "StorageStats",
    # entry logs (what GC compacts and deletes)
    "EntryLogger",
    "EntryLogStats",
    "CurrentLogInfo",
    "FileOps",
    "LogRecord",
    "LogUsage",
    "RECORD_PREFIX_SIZE",
    # errors
    "StorageIOError",
    "WriteCacheFull",
    "CorruptLogError",
    # the entry-log format, for tools that read a log file (``magnetar bookie shell readlog``)
    "HEADER_SIZE",
    "INVALID_LEDGER_ID",
    "decode_header",
    "iter_records",
    "log_file_name",
    "parse_log_file_name",
]
