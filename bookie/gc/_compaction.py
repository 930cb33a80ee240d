"""Entry-log compaction: copy a log's live entries into the current log, then drop the old file.

Per log, in chunks of at most ``chunk_bytes`` scanned::

    1. scan the old log (worker thread) and keep the records of ledgers still stored: one read of
       about ``chunk_bytes``, without kernel read-ahead, started once no journal sync is in flight
       (`SyncPriority.background_turn`; large reads of the old log held adds longest);
    2. throttle (`RateLimiter`): by bytes, every byte scanned (dead entries too) and every byte
       written counts; by entries, every entry copied counts (BookKeeper's compactionRateByEntries);
    3. holding the storage's write lock: append the live records, fdatasync the logs, then update
       the location index in one synced transaction, moving only rows that still point at the old
       log (an entry re-written or deleted meanwhile is left alone). Before the fdatasync and
       before the index commit it yields to the journal (`SyncPriority.background_turn`): a sync
       of compaction output queued ahead of a journal sync on the same device would make the
       adds waiting for that journal sync wait for the compaction's bytes too;
    4. after the last chunk, and only then, remove the old log.

Crash safety: until step 4 the old log is intact and the index points either at it or at synced
copies, so a crash at any point loses nothing; copies made before a crash that were never
indexed are duplicates, reclaimed when their ledger is deleted. Reads during compaction succeed:
an index lookup sees the old or the new location, and a read that finds the old file gone looks
the entry up again (`DbLedgerStorage.get_entry`).

Crash-test hook: with ``MAGNETAR_GC_KILL_AT=<point>`` in the environment (points: ``after_sync``,
``after_index``, ``before_remove``) the process SIGKILLs itself there on the first chunk/log;
``after_roll`` is the garbage collector's point right after it rolled a current log early.
"""

from __future__ import annotations

import enum
import math
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import trio

from .._errors import BookieException
from ..storage import RECORD_PREFIX_SIZE, DbLedgerStorage, EntryLogger, LogRecord

__all__ = [
    "CompactionKind",
    "RateLimiter",
    "CompactionResult",
    "CompactionTimeout",
    "compact_log",
    "KILL_AT_GC_ENV",
    "kill_point",
]

KILL_AT_GC_ENV = "MAGNETAR_GC_KILL_AT"
_MAX_CHUNK_ENTRIES = 5000


class CompactionKind(enum.Enum):
    """Which compaction a run is (each has its own threshold, interval, time bound and counter)."""

    MINOR = "minor"
    MAJOR = "major"


class CompactionTimeout(BookieException):
    """The run's time bound passed in the middle of a log (its finished chunks stay valid)."""


class RateLimiter:
    """A token bucket refilled at ``rate`` units per second, holding at most one second's worth.

    `acquire` takes ``n`` units, going into debt if needed, and sleeps until the debt is paid, so
    a large request is allowed but paid for. ``rate`` of ``math.inf`` never waits.
    """

    def __init__(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self._tokens = rate  # start with a full bucket
        self._stamp: float | None = None
        self.waited_s = 0.0

    async def acquire(self, n: float) -> None:
        """Take ``n`` units; sleeps (cancellably) while the bucket is in debt."""
        if math.isinf(self.rate) or n <= 0:
            await trio.lowlevel.checkpoint()
            return
        now = trio.current_time()
        if self._stamp is not None:
            self._tokens = min(self.rate, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= n
        if self._tokens < 0:
            delay = -self._tokens / self.rate
            self.waited_s += delay
            await trio.sleep(delay)
        else:
            await trio.lowlevel.checkpoint()


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What compacting one log did."""

    log_id: int
    old_file_size: int
    bytes_read: int
    bytes_written: int
    entries_copied: int
    entries_moved: int
    removed: bool

    @property
    def reclaimed(self) -> int:
        """Disk bytes given back: the old file minus what was copied (0 if not removed)."""
        return max(0, self.old_file_size - self.bytes_written) if self.removed else 0


def kill_point(name: str) -> None:
    """SIGKILL this process if ``MAGNETAR_GC_KILL_AT`` names ``name`` (crash tests)."""
    if os.environ.get(KILL_AT_GC_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _next_chunk(
    scan: Iterator[LogRecord], live: Callable[[int], bool], chunk_bytes: int
) -> tuple[list[LogRecord], int, int, bool]:
    """Worker thread: pull records until ``chunk_bytes`` were scanned; returns (live records,
    bytes scanned, records scanned, finished)."""
    out: list[LogRecord] = []
    scanned = count = 0
    for rec in scan:
        size = RECORD_PREFIX_SIZE + len(rec.payload)
        scanned += size
        count += 1
        if live(rec.ledger_id):
            out.append(rec)
        if scanned >= chunk_bytes or count >= _MAX_CHUNK_ENTRIES:
            return out, scanned, count, False
    return out, scanned, count, True


def _append_synced(logger: EntryLogger, entries: list[tuple[int, int, bytes]]) -> list[int]:
    """Worker thread: append the live records to the current log and sync it; their locations."""
    locations = logger.append(entries)
    logger.sync()
    return locations


async def compact_log(
    storage: DbLedgerStorage,
    log_id: int,
    *,
    limiter: RateLimiter,
    by_bytes: bool,
    deadline: float = math.inf,
    chunk_bytes: int = 1 << 20,
) -> CompactionResult:
    """Compact one rolled log (module docstring). ``deadline`` is in `trio.current_time` units.

    Raises `CompactionTimeout` when the deadline passes before the log is done (the old log is then
    kept), and whatever the disk or index raise (``OSError``, `StorageIOError`, ``sqlite3.Error``,
    ``CorruptLogError``); in every case nothing live is lost and the old log is kept.
    """
    logger = storage.entry_logger
    index = storage.index
    old_size = await trio.to_thread.run_sync(lambda: os.stat(logger.log_path(log_id)).st_size)
    scan = logger.scan(log_id, read_size=chunk_bytes)  # about one bounded disk read per chunk
    priority = storage.sync_priority
    read = written = copied = moved = 0
    first = True
    try:
        while True:
            if trio.current_time() > deadline:
                raise CompactionTimeout(f"time bound reached while compacting entry log {log_id:x}")
            await priority.background_turn()  # a read queued ahead of a journal write delays it too
            records, scanned, _count, done = await trio.to_thread.run_sync(
                _next_chunk, scan, storage.ledger_exists, chunk_bytes
            )
            read += scanned
            out_bytes = sum(RECORD_PREFIX_SIZE + len(r.payload) for r in records)
            await limiter.acquire(scanned + out_bytes if by_bytes else len(records))
            if records:
                entries = [(r.ledger_id, r.entry_id, r.payload) for r in records]
                async with storage.write_lock:
                    if priority.foreground_busy:
                        # write now, sync once the journal's sync is through
                        locations = await trio.to_thread.run_sync(logger.append, entries)
                        await priority.background_turn()
                        await trio.to_thread.run_sync(logger.sync)
                    else:  # the common case costs one thread handoff, not two
                        locations = await trio.to_thread.run_sync(_append_synced, logger, entries)
                    if first:
                        kill_point("after_sync")
                    updates = [(r.ledger_id, r.entry_id, loc) for r, loc in zip(records, locations, strict=True)]
                    await priority.background_turn()  # the index commit is a sync too (WAL, synchronous=FULL)
                    moved += await trio.to_thread.run_sync(index.update_locations, updates, log_id)
                    if first:
                        kill_point("after_index")
                    first = False
                written += out_bytes
                copied += len(records)
            if done:
                break
    finally:
        scan.close()  # type: ignore[attr-defined]
    kill_point("before_remove")
    try:
        await trio.to_thread.run_sync(logger.remove_log, log_id)
    except FileNotFoundError:
        pass
    return CompactionResult(log_id, old_size, read, written, copied, moved, True)
