"""Magnetar bookie: the storage node (journal, ledger storage, protocol server, REST, registration).

Run a whole bookie with `serve_bookie_process` (what ``magnetar bookie`` does), or compose the
parts: `open_bookie` (journal replay + storage + checkpoints) yields a `Bookie`, `serve_bookie`
serves the bookie protocol for it, `serve_bookie_http` its metrics and REST API,
`run_registration` keeps it registered in the metadata store, `run_disk_checker` watches disks
(and `SpaceGuard` checks free space where the journal and the storage allocate).
`open_bookie` also runs the bookie's `GarbageCollector` (ledger GC against the metadata store,
dead entry-log deletion, minor/major compaction; `Bookie.gc`), whose REST routes (`gc_routes`)
the HTTP app mounts. Metrics of every component live in `bookie.metrics`.
"""

from ._bookie import KILL_AT_ENV as KILL_AT_ENV
from ._bookie import AddTicket as AddTicket
from ._bookie import Bookie as Bookie
from ._bookie import BookieError as BookieError
from ._bookie import BookieState as BookieState
from ._bookie import BookieStatistics as BookieStatistics
from ._bookie import ReadOnlyReason as ReadOnlyReason
from ._bookie import open_bookie as open_bookie
from ._config import BookieConfig as BookieConfig
from ._cookies import COOKIE_FILE as COOKIE_FILE
from ._cookies import CookieMismatchError as CookieMismatchError
from ._cookies import check_cookies as check_cookies
from ._cookies import expected_cookie as expected_cookie
from ._cookies import format_bookie as format_bookie
from ._disks import DiskUsage as DiskUsage
from ._disks import DiskVerdict as DiskVerdict
from ._disks import classify as classify_disk_usage
from ._disks import measure_usage as measure_usage
from ._disks import run_disk_checker as run_disk_checker
from ._entry_log import EntryLogger as EntryLogger
from ._entry_log import FileOps as FileOps
from ._gc import GarbageCollector as GarbageCollector
from ._gc import GcStatus as GcStatus
from ._gc_config import GcConfig as GcConfig
from ._gc_explain import GcExplanation as GcExplanation
from ._gc_http import gc_routes as gc_routes
from ._http import bookie_http_app as bookie_http_app
from ._http import serve_bookie_http as serve_bookie_http
from ._journal import Journal as Journal
from ._journal import JournalClosedError as JournalClosedError
from ._journal import JournalError as JournalError
from ._journal import JournalIOError as JournalIOError
from ._journal import JournalNoSpaceError as JournalNoSpaceError
from ._journal import JournalState as JournalState
from ._journal import JournalTicket as JournalTicket
from ._journal_codec import LogMark as LogMark
from ._journal_config import JournalConfig as JournalConfig
from ._journal_files import JournalDisk as JournalDisk
from ._process import BookieEndpoints as BookieEndpoints
from ._process import BookieFatalError as BookieFatalError
from ._process import serve_bookie_process as serve_bookie_process
from ._registration import registration_path as registration_path
from ._registration import run_registration as run_registration
from ._server import serve_bookie as serve_bookie
from ._space import SpaceGuard as SpaceGuard
from ._storage import CheckpointSource as CheckpointSource
from ._storage import DbLedgerStorage as DbLedgerStorage
from ._storage import LedgerStorage as LedgerStorage
from ._storage import NoSuchEntry as NoSuchEntry
from ._storage import NoSuchLedger as NoSuchLedger
from ._storage import StorageIOError as StorageIOError
from ._storage import WriteCacheFull as WriteCacheFull
from .metrics import BookieServerMetrics as BookieServerMetrics

__all__ = [
    "AddTicket",
    "Bookie",
    "BookieConfig",
    "BookieEndpoints",
    "BookieError",
    "BookieFatalError",
    "BookieServerMetrics",
    "BookieState",
    "BookieStatistics",
    "COOKIE_FILE",
    "CheckpointSource",
    "CookieMismatchError",
    "DbLedgerStorage",
    "DiskUsage",
    "DiskVerdict",
    "EntryLogger",
    "FileOps",
    "GarbageCollector",
    "GcConfig",
    "GcExplanation",
    "GcStatus",
    "Journal",
    "JournalClosedError",
    "JournalConfig",
    "JournalDisk",
    "JournalError",
    "JournalIOError",
    "JournalNoSpaceError",
    "JournalState",
    "JournalTicket",
    "KILL_AT_ENV",
    "LedgerStorage",
    "LogMark",
    "NoSuchEntry",
    "NoSuchLedger",
    "ReadOnlyReason",
    "SpaceGuard",
    "StorageIOError",
    "WriteCacheFull",
    "bookie_http_app",
    "check_cookies",
    "classify_disk_usage",
    "expected_cookie",
    "format_bookie",
    "gc_routes",
    "measure_usage",
    "open_bookie",
    "registration_path",
    "run_disk_checker",
    "run_registration",
    "serve_bookie",
    "serve_bookie_http",
    "serve_bookie_process",
]
