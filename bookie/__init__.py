"""Magnetar bookie: the storage node (journal, ledger storage, protocol server, REST, registration).

Run a whole bookie with `serve_bookie_process` (what ``magnetar bookie`` does), or compose the
parts: `open_bookie` (journal replay + storage + checkpoints) yields a `Bookie`, `serve_bookie`
serves the bookie protocol for it, `serve_bookie_http` its metrics and REST API,
`run_registration` keeps it registered in the metadata store, `run_disk_checker` watches disks
(and `SpaceGuard` checks free space where the journal and the storage allocate).
`open_bookie` also runs the bookie's `GarbageCollector` (ledger GC against the metadata store,
dead entry-log deletion, minor/major compaction; `Bookie.gc`), whose REST routes (`gc_routes`)
the HTTP app mounts. Metrics of every component live in `bookie.metrics`.

Layers, each a subpackage whose ``__init__`` names what the others may use (imports only go down):

    bookie.server    the core (`Bookie`), protocol server, HTTP, registration, cookies, disk
                     checker, config, process
    bookie.gc        garbage collection and compaction of entry logs
    bookie.storage   write cache, entry logs, location index, read cache (`DbLedgerStorage`)
    bookie.journal   group-committed journal, its file format and replay (`Journal`)
    shared leaves    `bookie._errors` (the root `BookieException` and the status-carrying
                     `BookieError`), `bookie._space` (`SpaceGuard`), `bookie.metrics`

The storage raises the wire-level `NoSuchLedger` / `NoSuchEntry` of ``protocols.bookkeeper``
(re-exported here); every other error of the package derives from `BookieException`.
"""

from protocols.bookkeeper import NoSuchEntry as NoSuchEntry
from protocols.bookkeeper import NoSuchLedger as NoSuchLedger

from ._errors import BookieError as BookieError
from ._errors import BookieException as BookieException
from ._space import DiskUsage as DiskUsage
from ._space import SpaceGuard as SpaceGuard
from .gc import GarbageCollector as GarbageCollector
from .gc import GcConfig as GcConfig
from .gc import GcExplanation as GcExplanation
from .gc import GcStatus as GcStatus
from .gc import gc_routes as gc_routes
from .journal import Journal as Journal
from .journal import JournalClosedError as JournalClosedError
from .journal import JournalConfig as JournalConfig
from .journal import JournalDisk as JournalDisk
from .journal import JournalError as JournalError
from .journal import JournalIOError as JournalIOError
from .journal import JournalNoSpaceError as JournalNoSpaceError
from .journal import JournalState as JournalState
from .journal import JournalTicket as JournalTicket
from .journal import LogMark as LogMark
from .metrics import BookieServerMetrics as BookieServerMetrics
from .server import COOKIE_FILE as COOKIE_FILE
from .server import KILL_AT_ENV as KILL_AT_ENV
from .server import AddTicket as AddTicket
from .server import Bookie as Bookie
from .server import BookieConfig as BookieConfig
from .server import BookieEndpoints as BookieEndpoints
from .server import BookieFatalError as BookieFatalError
from .server import BookieState as BookieState
from .server import BookieStatistics as BookieStatistics
from .server import CookieMismatchError as CookieMismatchError
from .server import DiskVerdict as DiskVerdict
from .server import LocalConnection as LocalConnection
from .server import ReadOnlyReason as ReadOnlyReason
from .server import bookie_http_app as bookie_http_app
from .server import check_cookies as check_cookies
from .server import classify as classify_disk_usage
from .server import expected_cookie as expected_cookie
from .server import format_bookie as format_bookie
from .server import measure_usage as measure_usage
from .server import open_bookie as open_bookie
from .server import registration_path as registration_path
from .server import run_disk_checker as run_disk_checker
from .server import run_registration as run_registration
from .server import serve_bookie as serve_bookie
from .server import serve_bookie_http as serve_bookie_http
from .server import serve_bookie_process as serve_bookie_process
from .storage import CheckpointSource as CheckpointSource
from .storage import DbLedgerStorage as DbLedgerStorage
from .storage import EntryLogger as EntryLogger
from .storage import FileOps as FileOps
from .storage import LedgerStorage as LedgerStorage
from .storage import StorageIOError as StorageIOError
from .storage import WriteCacheFull as WriteCacheFull

__all__ = [
    "AddTicket",
    "Bookie",
    "BookieConfig",
    "BookieEndpoints",
    "BookieError",
    "BookieException",
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
    "LocalConnection",
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
