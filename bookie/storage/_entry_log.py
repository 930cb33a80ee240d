"""Entry logs on disk: buffered appends, rolling, ledgers maps, reads by location, GC hooks.

`EntryLogger` is synchronous and thread-safe: every method may block on disk, so the storage calls
it through ``trio.to_thread.run_sync`` and never on the event loop. Format: `_entry_log_codec`.

Rules:

1. Each ledger directory has its own current log (or one per ledger, rule 9); a ledger's entries
   go to directory ``ledger_id % len(directories)``. Current logs are created lazily on the first write.
2. Log ids are global across directories and never repeat: the id in use is persisted in a
   ``lastId`` file of its directory, and at start the next id is one above every ``lastId`` and
   every ``*.log`` file found.
3. `append` packs a batch into a reused buffer per directory and writes it with one write call
   per ``write_chunk_bytes`` (8 MiB) and wherever the log rolls. A log rolls before a record would
   take it past
   ``log_size_limit``; a log always takes at least one record, so an oversized entry still fits.
4. On roll and on clean `close`, the log's ledgers map is appended, its offset written into the
   header, and the file synced. A rolled log is immutable from then on.
5. `sync` fdatasyncs the current logs written since the last sync. Only after it returns may the
   caller index the locations that `append` returned.
6. A failed write (ENOSPC, EIO ...) truncates the log back to where the batch began when it can,
   abandons that log (the next append opens a new one) and raises `StorageIOError`. The caller keeps
   the entries and may retry; records that landed in a log rolled earlier in the failed batch remain
   as unindexed garbage that compaction reclaims (they still count in that log's ledgers map).
   An abandoned log that holds no record (a log opened by the failed batch itself) is deleted,
   so a flush retried on a full disk leaves no file behind per attempt.
7. A current log may be rolled early (`roll_current`, for GC: a log whose data died, or an old
   one) through the same roll as rule 4. The caller must hold off appends whose locations are
   not yet indexed (the storage's write lock): every record in the log is then synced and
   indexed, so rolling changes no location and a crash at any point of it loses nothing (a log
   left without its map is measured by a scan, as after any crash).
8. Incremental flushing (BookKeeper's ``flushEntrylogBytes``, 0 = off): while `append` writes, a
   current log is fdatasynced each time ``flush_entrylog_bytes`` more bytes were written to it
   (and the write chunk is at most that size), so a checkpoint's data goes to the device in
   bounded pieces instead of one sync of the whole write-cache half at its end - the journal's
   fsyncs then never queue behind one huge write-back. The final `sync` is still what makes the
   records indexable (rule 5); the intermediate syncs only spread the same I/O.
9. Placement (``entryLogPerLedgerEnabled``, off by default): each ledger gets current logs of its
   own, so a log holds one ledger and dies whole when that ledger is deleted: compaction never
   copies live data out of it. At most ``max_active_logs`` (``maximumNumberOfActiveEntryLogs``)
   current logs are open; opening one more first rolls the least recently written one (rule 4).
   That roll happens inside `append`, under the storage's write lock like every append, so the
   log's records are synced and indexed before GC can list it as a rolled log.
   For few, large ledgers (a managed ledger's ledgers, of unlike retention): many small ledgers
   would mean many small logs.
10. Several ledger directories, interleaved placement: each directory has its own writer (its own
   write buffer and a worker thread of a pool sized to the directories), so one `append` writes
   the directories' shares in parallel and `sync` syncs them in parallel: a flush costs the
   slowest directory, not their sum. `append` and `sync` still hold the writer lock as a whole
   (no other append, roll or close interleaves); only the shared bookkeeping (log ids, the map of
   current logs, counters) takes a short lock of its own. A failure in one directory raises after
   every directory's writer finished (rule 6 applies to the failed one; the others' records are
   written and become unindexed garbage if the caller gives up, or duplicates of a retry, both
   reclaimed by GC). With per-ledger placement (rule 9) the directories are written one after
   another: the active-log bound rolls logs across directories.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import BookieException
from ._entry_log_codec import (
    HEADER_SIZE,
    INVALID_LEDGER_ID,
    MAX_LOG_ID,
    RECORD_PREFIX_SIZE,
    CorruptLogError,
    LogHeader,
    decode_header,
    decode_ledgers_map,
    decode_record_at,
    encode_header,
    encode_ledgers_map,
    log_file_name,
    pack_record_prefix_into,
    parse_log_file_name,
    record_prefix,
    split_location,
)

__all__ = ["EntryLogger", "FileOps", "LogRecord", "LogUsage", "CurrentLogInfo", "EntryLogStats", "StorageIOError"]

_logger = logging.getLogger(__name__)

LAST_ID_FILE = "lastId"
_READ_GUESS = 4096  # one pread usually fetches prefix and payload together
_SCAN_CHUNK = 4 << 20


class StorageIOError(BookieException):
    """A disk write or sync failed (ENOSPC, EIO ...). ``errno`` is the OS error number if known.

    Nothing acknowledged is lost when a flush raises this: the entries stay in the write cache.
    The server should turn the bookie read-only.
    """

    def __init__(self, message: str, err: int | None = None) -> None:
        super().__init__(message)
        self.errno = err


class FileOps:
    """The blocking file calls the entry logger makes for writes; a seam for failure injection.

    Tests subclass this and raise ``OSError(errno.ENOSPC, ...)`` on cue.
    """

    def write(self, fd: int, data: memoryview) -> int:
        """Write some of ``data`` at the file position; returns the bytes written."""
        return os.write(fd, data)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset``; returns the bytes written."""
        return os.pwrite(fd, data, offset)

    def sync(self, fd: int) -> None:
        """Make the file's data durable."""
        os.fdatasync(fd)


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One entry found by scanning a log (for compaction)."""

    ledger_id: int
    entry_id: int
    location: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class LogUsage:
    """Per-log usage for GC: bytes of records per ledger and their total."""

    log_id: int
    ledgers: dict[int, int]
    total_size: int


@dataclass(frozen=True, slots=True)
class CurrentLogInfo:
    """A log still being written: its size so far, age and per-ledger record bytes (for GC's
    decision to roll it early, rule 7)."""

    log_id: int
    directory: str
    size_bytes: int
    age_s: float
    ledgers: dict[int, int]

    @property
    def total(self) -> int:
        """Record bytes written to it."""
        return sum(self.ledgers.values())


@dataclass(frozen=True, slots=True)
class EntryLogStats:
    """Snapshot of `EntryLogger` counters."""

    log_count: int
    current_logs: int
    bytes_written: int
    write_calls: int
    syncs: int
    rolls: int
    removed_empty: int = 0  # logs deleted again because a failed write left them without a record
    early_rolls: int = 0  # rolls asked for by GC (rule 7), also counted in ``rolls``
    incremental_syncs: int = 0  # syncs made by flushEntrylogBytes during appends (rule 8), also in ``syncs``


@dataclass(slots=True)
class _CurrentLog:
    log_id: int
    fd: int
    position: int
    ledgers: dict[int, int] = field(default_factory=dict)
    dirty: bool = False
    unsynced: int = 0  # bytes written since this log's last sync (rule 8)
    created: float = 0.0  # the logger's clock when the log was opened


class EntryLogger:
    """Writes entries into rolling entry logs and reads them back by location.

    ``directories`` are the ledger directories (created if missing). ``log_size_limit`` is
    BookKeeper's ``logSizeLimit`` (default 1 GiB, at most 2 GiB so offsets fit in 32 bits).
    ``per_ledger`` and ``max_active_logs`` choose the placement of rule 9 (default: one current
    log per directory, ledgers interleaved). ``file_ops`` replaces the write/sync calls (tests).
    ``write_chunk_bytes`` bounds the buffer that
    records are packed into before each write. ``flush_entrylog_bytes`` (> 0) syncs a current log
    every that many bytes written (rule 8). ``clock`` (seconds, monotonic) dates current logs
    for `current_logs`. All methods block; see the module rules.
    """

    def __init__(
        self,
        directories: Sequence[str | os.PathLike[str]],
        *,
        log_size_limit: int = 1 << 30,
        file_ops: FileOps | None = None,
        max_open_read_files: int = 256,
        write_chunk_bytes: int = 8 << 20,
        flush_entrylog_bytes: int = 0,
        per_ledger: bool = False,
        max_active_logs: int = 500,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not directories:
            raise ValueError("at least one ledger directory is required")
        if max_active_logs < 1:
            raise ValueError(f"max_active_logs must be >= 1, got {max_active_logs}")
        if flush_entrylog_bytes < 0:
            raise ValueError(f"flush_entrylog_bytes must be >= 0, got {flush_entrylog_bytes}")
        if not HEADER_SIZE < log_size_limit <= 2**31:
            raise ValueError(f"log_size_limit must be in ({HEADER_SIZE}, 2**31], got {log_size_limit}")
        self._dirs = [Path(d) for d in directories]
        self._limit = log_size_limit
        self._ops = file_ops or FileOps()
        self._max_open = max_open_read_files
        self._lock = threading.Lock()  # writers: append, sync, roll, close, remove
        self._fd_lock = threading.Lock()  # read file descriptors
        self._logs: dict[int, Path] = {}
        # current logs by slot (directory index, ledger id or -1 for the shared log), least
        # recently written first (rule 9 rolls from the front)
        self._current: dict[tuple[int, int], _CurrentLog] = {}
        self._per_ledger = per_ledger
        self._max_active = max_active_logs
        self._usage_cache: dict[int, LogUsage] = {}
        self._read_fds: dict[int, int] = {}
        self._read_refs: dict[int, int] = {}
        self._closed = False
        self._flush_every = flush_entrylog_bytes
        # with incremental flushing a chunk is at most one flush interval, so syncs land on time
        self._chunk_size = min(write_chunk_bytes, flush_entrylog_bytes or write_chunk_bytes)
        # rule 10: one write buffer per directory (allocated on its first write), and a writer
        # thread per directory when several directories are written in parallel
        self._chunks: dict[int, memoryview] = {}
        self._meta = threading.Lock()  # ids, current-log map and counters, between directory writers
        self._pool: ThreadPoolExecutor | None = None
        if len(directories) > 1 and not per_ledger and max_active_logs >= len(directories):
            self._pool = ThreadPoolExecutor(max_workers=len(directories), thread_name_prefix="entrylog-writer")
        self._bytes_written = self._write_calls = self._syncs = self._rolls = 0
        self._incremental_syncs = 0
        self._removed_empty = self._early_rolls = 0
        self._clock = clock
        highest = -1
        for d in self._dirs:
            d.mkdir(parents=True, exist_ok=True)
            for name in os.listdir(d):
                log_id = parse_log_file_name(name)
                if log_id is not None:
                    self._logs[log_id] = d / name
                    highest = max(highest, log_id)
            last = d / LAST_ID_FILE
            if last.exists():
                text = last.read_text().strip()
                if text:
                    highest = max(highest, int(text, 16))
        self._next_id = highest + 1

    @property
    def per_ledger(self) -> bool:
        """True with per-ledger placement (rule 9): every log holds one ledger."""
        return self._per_ledger

    @property
    def directories(self) -> tuple[Path, ...]:
        """The ledger directories, in the order that ``ledger_id % len(directories)`` indexes."""
        return tuple(self._dirs)

    # ------------------------------------------------------------------ writes

    def append(self, entries: Sequence[tuple[int, int, bytes]]) -> list[int]:
        """Append ``(ledger_id, entry_id, payload)`` records in the given order; returns their locations.

        The records are written (to the page cache) but not synced: call `sync` before indexing.
        Raises `StorageIOError` on a write failure (see rule 6).
        """
        locations = [0] * len(entries)
        with self._lock:
            self._check_open()
            n = len(self._dirs)
            if n == 1 and not self._per_ledger:
                self._append_dir((0, -1), entries, range(len(entries)), locations)
            elif self._pool is not None:  # rule 10: the directories' shares in parallel
                by_dir: dict[int, list[int]] = {}
                for i, item in enumerate(entries):
                    by_dir.setdefault(item[0] % n, []).append(i)
                self._in_parallel(
                    [(self._append_dir, ((d, -1), entries, idxs, locations)) for d, idxs in by_dir.items()]
                )
            else:
                per_ledger = self._per_ledger
                groups: dict[tuple[int, int], list[int]] = {}
                for i, item in enumerate(entries):
                    lid = item[0]
                    groups.setdefault((lid % n, lid if per_ledger else -1), []).append(i)
                for slot, idxs in groups.items():
                    self._append_dir(slot, entries, idxs, locations)
        return locations

    def _in_parallel(self, calls: list[tuple[Callable[..., None], tuple[object, ...]]]) -> None:
        """Rule 10: run one call per directory on the writer pool (the last one on this thread),
        wait for all of them, then raise the first failure."""
        if len(calls) == 1 or self._pool is None:
            for fn, args in calls:
                fn(*args)
            return
        futures: list[Future[None]] = [self._pool.submit(fn, *args) for fn, args in calls[:-1]]
        error: BaseException | None = None
        try:
            fn, args = calls[-1]
            fn(*args)
        except BaseException as exc:
            error = exc
        for f in futures:  # every writer finishes before append returns or raises
            failure = f.exception()
            if failure is not None and error is None:
                error = failure
        if error is not None:
            raise error

    def _chunk_of(self, directory: int) -> memoryview:
        chunk = self._chunks.get(directory)
        if chunk is None:
            with self._meta:
                chunk = self._chunks.setdefault(directory, memoryview(bytearray(self._chunk_size)))
        return chunk

    def _append_dir(
        self,
        slot: tuple[int, int],
        entries: Sequence[tuple[int, int, bytes]],
        idxs: Iterable[int],
        locations: list[int],
    ) -> None:
        # Records are packed into one reused chunk buffer (no per-entry allocation) and written a
        # chunk at a time: one write call per batch unless it exceeds the chunk or rolls the log.
        log = self._ensure_current(slot)
        start = pos = log.position
        sizes: dict[int, int] = {}
        limit = self._limit
        chunk = self._chunk_of(slot[0])
        cap = len(chunk)
        fill = 0
        try:
            for i in idxs:
                ledger_id, entry_id, payload = entries[i]
                n = len(payload)
                rsize = RECORD_PREFIX_SIZE + n
                if pos + rsize > limit and pos > HEADER_SIZE:
                    self._write_all(log.fd, chunk, fill)
                    fill = 0  # no incremental sync: the roll syncs the whole log
                    self._commit(log, pos, sizes)
                    self._roll(slot, log)
                    log = self._ensure_current(slot)
                    start = pos = log.position
                    sizes = {}
                if fill + rsize > cap:
                    self._write_all(log.fd, chunk, fill)
                    self._written(log, fill, cap)
                    fill = 0
                if rsize > cap:
                    big = record_prefix(ledger_id, entry_id, n) + payload
                    self._write_all(log.fd, memoryview(big), len(big))
                    self._written(log, len(big), cap)
                else:
                    pack_record_prefix_into(chunk, fill, ledger_id, entry_id, n)
                    chunk[fill + RECORD_PREFIX_SIZE : fill + rsize] = payload
                    fill += rsize
                locations[i] = (log.log_id << 32) | pos
                pos += rsize
                sizes[ledger_id] = sizes.get(ledger_id, 0) + rsize
            self._write_all(log.fd, chunk, fill)
            self._written(log, fill, cap)
        except OSError as exc:
            self._abandon(slot, log, start)
            raise StorageIOError(f"write to entry log {log.log_id:x} failed: {exc}", exc.errno) from exc
        self._commit(log, pos, sizes)

    def _written(self, log: _CurrentLog, nbytes: int, chunk_size: int) -> None:
        """Rule 8: count ``nbytes`` written to ``log``; sync it before the unsynced bytes could
        exceed ``flush_entrylog_bytes`` (a single larger record excepted). Raises OSError from
        the sync (the caller abandons the log, rule 6)."""
        if not self._flush_every:
            return
        log.unsynced += nbytes
        # sync now if the next chunk could take the unsynced bytes past the bound
        if log.unsynced and log.unsynced + chunk_size > self._flush_every:
            self._ops.sync(log.fd)
            log.unsynced = 0
            with self._meta:
                self._syncs += 1
                self._incremental_syncs += 1

    def _write_all(self, fd: int, buf: memoryview, length: int) -> None:
        done = calls = 0
        while done < length:
            written = self._ops.write(fd, buf[done:length])
            if written <= 0:
                raise OSError(errno.EIO, "short write")
            done += written
            calls += 1
        with self._meta:
            self._write_calls += calls
            self._bytes_written += length

    @staticmethod
    def _commit(log: _CurrentLog, position: int, sizes: dict[int, int]) -> None:
        if position == log.position:
            return
        log.position = position
        log.dirty = True
        for ledger_id, size in sizes.items():
            log.ledgers[ledger_id] = log.ledgers.get(ledger_id, 0) + size

    def _abandon(self, slot: tuple[int, int], log: _CurrentLog, good_size: int) -> None:
        """Cut a failed log back to its last good size if possible and stop writing to it; delete
        it when it holds no record (rule 6)."""
        try:
            os.ftruncate(log.fd, good_size)
        except OSError:
            pass  # a torn tail is tolerated by every reader
        try:
            os.close(log.fd)
        except OSError:
            pass
        with self._meta:
            if self._current.get(slot) is log:
                del self._current[slot]
            path = None
            if good_size <= HEADER_SIZE and not log.ledgers:
                path = self._logs.pop(log.log_id, None)
                self._usage_cache.pop(log.log_id, None)
        if path is not None:  # set only for a log that holds no record
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
            with self._meta:
                self._removed_empty += 1

    def _ensure_current(self, slot: tuple[int, int]) -> _CurrentLog:
        log = self._current.get(slot)
        if log is not None:
            if self._per_ledger:  # least recently written first: move this slot to the back
                del self._current[slot]
                self._current[slot] = log
            return log
        while len(self._current) >= self._max_active:  # rule 9: roll the least recently written
            old_slot, old = next(iter(self._current.items()))
            self._roll(old_slot, old)
        d = slot[0]
        with self._meta:  # rule 10: directories may open logs at the same time; ids never repeat
            log_id = self._next_id
            if log_id > MAX_LOG_ID:
                raise StorageIOError("entry log ids exhausted")
            self._next_id = log_id + 1  # an id whose lastId write fails below is skipped, never reused
        directory = self._dirs[d]
        path = directory / log_file_name(log_id)
        try:
            self._persist_last_id(directory, log_id)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644)
            try:
                header = encode_header(LogHeader())
                if self._ops.write(fd, memoryview(header)) != len(header):
                    raise OSError(errno.EIO, "short header write")
                self._fsync_dir(directory)
            except BaseException:
                os.close(fd)
                path.unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise StorageIOError(f"cannot create entry log {path}: {exc}", exc.errno) from exc
        log = _CurrentLog(log_id, fd, HEADER_SIZE, created=self._clock())
        with self._meta:
            self._logs[log_id] = path
            self._current[slot] = log
        return log

    def _persist_last_id(self, directory: Path, log_id: int) -> None:
        tmp = directory / (LAST_ID_FILE + ".tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, f"{log_id:x}\n".encode())
            self._ops.sync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, directory / LAST_ID_FILE)

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _roll(self, slot: tuple[int, int], log: _CurrentLog) -> None:
        """Append the ledgers map, fill in the header, sync and close (rule 4)."""
        try:
            map_bytes = encode_ledgers_map(log.ledgers)
            view = memoryview(map_bytes)
            done = 0
            while done < len(view):
                done += self._ops.write(log.fd, view[done:])
            header = encode_header(LogHeader(ledgers_map_offset=log.position, ledgers_count=len(log.ledgers)))
            self._ops.pwrite(log.fd, header, 0)
            self._ops.sync(log.fd)
        except OSError as exc:
            self._abandon(slot, log, log.position)
            raise StorageIOError(f"rolling entry log {log.log_id:x} failed: {exc}", exc.errno) from exc
        os.close(log.fd)
        with self._meta:
            if self._current.get(slot) is log:
                del self._current[slot]
            self._rolls += 1
            self._syncs += 1
            self._usage_cache[log.log_id] = LogUsage(log.log_id, dict(log.ledgers), sum(log.ledgers.values()))

    def sync(self) -> None:
        """fdatasync every current log written since the last sync (the directories in parallel,
        rule 10); raises `StorageIOError`."""
        with self._lock:
            dirty = [(slot, log) for slot, log in self._current.items() if log.dirty]
            if self._pool is not None and len(dirty) > 1:
                self._in_parallel([(self._sync_log, (slot, log)) for slot, log in dirty])
            else:
                for slot, log in dirty:
                    self._sync_log(slot, log)

    def _sync_log(self, slot: tuple[int, int], log: _CurrentLog) -> None:
        try:
            self._ops.sync(log.fd)
        except OSError as exc:
            self._abandon(slot, log, log.position)
            raise StorageIOError(f"sync of entry log {log.log_id:x} failed: {exc}", exc.errno) from exc
        log.dirty = False
        log.unsynced = 0
        with self._meta:
            self._syncs += 1

    def roll_all(self) -> None:
        """Roll every current log that holds records (rule 4); the next append opens new logs."""
        with self._lock:
            for slot, log in list(self._current.items()):
                if log.position > HEADER_SIZE:
                    self._roll(slot, log)

    def current_logs(self) -> list[CurrentLogInfo]:
        """The logs still being written that hold records, with their age and ledgers."""
        now = self._clock()
        with self._lock:
            return [
                CurrentLogInfo(log.log_id, str(self._dirs[slot[0]]), log.position, now - log.created, dict(log.ledgers))
                for slot, log in self._current.items()
                if log.position > HEADER_SIZE
            ]

    def roll_current(self, log_ids: Iterable[int]) -> list[int]:
        """Roll the named logs if they are still current and hold records (rule 7: the caller holds
        off unindexed appends); returns the ids rolled. The next append opens a new log."""
        wanted = set(log_ids)
        rolled: list[int] = []
        with self._lock:
            self._check_open()
            for slot, log in list(self._current.items()):
                if log.log_id in wanted and log.position > HEADER_SIZE:
                    self._roll(slot, log)
                    self._early_rolls += 1
                    rolled.append(log.log_id)
        return rolled

    def close(self) -> None:
        """Roll the current logs (writing their ledgers maps) and close every file. Idempotent.

        A log that cannot be rolled (a full disk) is left without its ledgers map, as after a
        crash: readers and GC handle that (a scan rebuilds its usage). Never raises for it."""
        if self._closed:
            return
        try:
            with self._lock:
                for slot, log in list(self._current.items()):
                    if log.position > HEADER_SIZE:
                        try:
                            self._roll(slot, log)
                        except StorageIOError as exc:
                            _logger.warning("closing entry log %x without its ledgers map: %s", log.log_id, exc)
        finally:
            with self._lock:
                for log in self._current.values():
                    os.close(log.fd)
                self._current = {}
                self._closed = True
                if self._pool is not None:
                    self._pool.shutdown(wait=True)
            with self._fd_lock:
                for fd in self._read_fds.values():
                    os.close(fd)
                self._read_fds.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("entry logger is closed")

    # ------------------------------------------------------------------ reads

    def _acquire(self, log_id: int) -> int:
        with self._fd_lock:
            fd = self._read_fds.get(log_id)
            if fd is None:
                path = self._logs.get(log_id)
                if path is None:
                    raise FileNotFoundError(errno.ENOENT, f"no entry log {log_id:x}")
                if len(self._read_fds) >= self._max_open:
                    for other in [k for k in self._read_fds if not self._read_refs.get(k)][:16]:
                        os.close(self._read_fds.pop(other))
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                if hasattr(os, "posix_fadvise"):
                    # no kernel read-ahead: the storage reads ahead itself, in bounded batches into
                    # its read cache; the kernel's would add up to read_ahead_kb (8 MiB on some
                    # disks) per read in the device queue, ahead of the journal's writes
                    # (bench/catchup_bench.py)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                self._read_fds[log_id] = fd
            self._read_refs[log_id] = self._read_refs.get(log_id, 0) + 1
            return fd

    def _release(self, log_id: int) -> None:
        with self._fd_lock:
            refs = self._read_refs[log_id] - 1
            if refs:
                self._read_refs[log_id] = refs
                return
            del self._read_refs[log_id]
            if log_id not in self._logs:  # removed while in use
                fd = self._read_fds.pop(log_id, None)
                if fd is not None:
                    os.close(fd)

    def read(self, location: int, ledger_id: int | None = None, entry_id: int | None = None) -> bytes:
        """The payload of the record at ``location``.

        When ``ledger_id``/``entry_id`` are given the record must carry them. Raises
        `FileNotFoundError` for an unknown log and `CorruptLogError` for a bad or mismatching record.
        """
        log_id, offset = split_location(location)
        fd = self._acquire(log_id)
        try:
            data = os.pread(fd, RECORD_PREFIX_SIZE + _READ_GUESS, offset)
            rec = decode_record_at(data, 0)
            if rec is None:
                if len(data) < RECORD_PREFIX_SIZE:
                    raise CorruptLogError(f"no record at {log_id:x}@{offset}")
                total = 4 + int.from_bytes(data[:4], "big")
                if total < RECORD_PREFIX_SIZE:
                    raise CorruptLogError(f"bad record size at {log_id:x}@{offset}")
                data += os.pread(fd, total - len(data), offset + len(data))
                rec = decode_record_at(data, 0)
                if rec is None:
                    raise CorruptLogError(f"record at {log_id:x}@{offset} is truncated")
        finally:
            self._release(log_id)
        lid, eid, pstart, rend = rec
        if (ledger_id is not None and lid != ledger_id) or (entry_id is not None and eid != entry_id):
            raise CorruptLogError(f"record at {log_id:x}@{offset} is ({lid}, {eid}), not ({ledger_id}, {entry_id})")
        return data[pstart:rend] if (pstart or rend != len(data)) else data

    def read_following(
        self, location: int, ledger_id: int, max_entries: int, max_bytes: int
    ) -> list[tuple[int, bytes]]:
        """Read-ahead: up to ``max_entries`` whole records of ``ledger_id`` stored contiguously
        from ``location`` on, within ``max_bytes``; returns ``(entry_id, payload)`` pairs.

        Stops at the first record of another ledger, the end of the data or a torn tail.
        """
        log_id, offset = split_location(location)
        fd = self._acquire(log_id)
        try:
            data = os.pread(fd, max_bytes, offset)
        finally:
            self._release(log_id)
        out: list[tuple[int, bytes]] = []
        pos = 0
        while len(out) < max_entries:
            rec = decode_record_at(data, pos)
            if rec is None or rec[0] != ledger_id:
                break
            out.append((rec[1], data[rec[2] : rec[3]]))
            pos = rec[3]
        return out

    # ------------------------------------------------------------------ GC support

    def list_logs(self) -> list[int]:
        """Ids of every entry log on disk, ascending (current logs included)."""
        with self._lock:
            return sorted(self._logs)

    def current_log_ids(self) -> set[int]:
        """Ids of the logs still being written; GC must leave these alone."""
        with self._lock:
            return {log.log_id for log in self._current.values()}

    def log_path(self, log_id: int) -> Path:
        """The file of a log; raises `FileNotFoundError` for an unknown id."""
        path = self._logs.get(log_id)
        if path is None:
            raise FileNotFoundError(errno.ENOENT, f"no entry log {log_id:x}")
        return path

    def usage(self, log_id: int) -> LogUsage:
        """The log's ledgers map and total record bytes.

        Read from the map at the end of a rolled log; for a log that never rolled (crash) it is
        rebuilt by a scan that stops at the torn tail; for a current log it is the live map.
        """
        with self._lock:
            for log in self._current.values():
                if log.log_id == log_id:
                    return LogUsage(log_id, dict(log.ledgers), sum(log.ledgers.values()))
            cached = self._usage_cache.get(log_id)
        if cached is not None:
            return LogUsage(log_id, dict(cached.ledgers), cached.total_size)
        path = self.log_path(log_id)
        with open(path, "rb", buffering=0) as f:
            header = decode_header(f.read(HEADER_SIZE))
            if header.ledgers_map_offset:
                f.seek(header.ledgers_map_offset)
                ledgers = decode_ledgers_map(f.read(), header.ledgers_count)
            else:
                ledgers = {}
                for lid, _, _, _, size in self._scan(log_id, with_payload=False):
                    ledgers[lid] = ledgers.get(lid, 0) + size
        usage = LogUsage(log_id, ledgers, sum(ledgers.values()))
        self._usage_cache[log_id] = usage
        return LogUsage(log_id, dict(ledgers), usage.total_size)

    def scan(self, log_id: int, *, read_size: int = _SCAN_CHUNK) -> Iterator[LogRecord]:
        """Every entry record of a log in file order (ledgers map records skipped), for compaction.

        Blocking generator: consume it in a worker thread. Stops at a torn tail. The file is read
        ``read_size`` bytes at a time (a record larger than that takes one longer read) with the
        kernel's read-ahead turned off: each read the device sees is bounded, so compaction's reads
        queue ahead of a journal write by at most one ``read_size`` (a 4 MiB read plus the kernel's
        read-ahead held adds for 5-10 ms, bench/RESULTS.md).
        """
        for lid, eid, location, payload, _ in self._scan(log_id, with_payload=True, read_size=read_size):
            yield LogRecord(lid, eid, location, payload)

    def _scan(
        self, log_id: int, *, with_payload: bool, read_size: int = _SCAN_CHUNK
    ) -> Iterator[tuple[int, int, int, bytes, int]]:
        """Yield ``(ledger, entry, location, payload or b"", record size)`` for each entry record."""
        path = self.log_path(log_id)
        with open(path, "rb", buffering=0) as f:
            if read_size < _SCAN_CHUNK and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead beyond each read
            header = decode_header(f.read(HEADER_SIZE))
            end = header.ledgers_map_offset or None
            buf = bytearray()
            base = HEADER_SIZE
            while True:
                data = f.read(read_size)
                if not data:
                    return
                buf += data
                pos = 0
                while True:
                    if end is not None and base + pos >= end:
                        return
                    rec = decode_record_at(buf, pos)
                    if rec is None:
                        break
                    lid, eid, pstart, rend = rec
                    if lid != INVALID_LEDGER_ID:
                        payload = bytes(buf[pstart:rend]) if with_payload else b""
                        yield lid, eid, (log_id << 32) | (base + pos), payload, rend - pos
                    pos = rend
                del buf[:pos]
                base += pos

    def remove_log(self, log_id: int) -> None:
        """Delete a rolled log's file (GC). Raises ValueError for a current log.

        Reads already in progress on the log finish; later reads raise `FileNotFoundError`.
        """
        with self._lock:
            if any(log.log_id == log_id for log in self._current.values()):
                raise ValueError(f"entry log {log_id:x} is still being written")
            path = self._logs.pop(log_id, None)
            self._usage_cache.pop(log_id, None)
        if path is None:
            raise FileNotFoundError(errno.ENOENT, f"no entry log {log_id:x}")
        path.unlink(missing_ok=True)
        with self._fd_lock:
            if not self._read_refs.get(log_id):
                fd = self._read_fds.pop(log_id, None)
                if fd is not None:
                    os.close(fd)

    def statistics(self) -> EntryLogStats:
        """A snapshot of the logger's counters."""
        return EntryLogStats(
            log_count=len(self._logs),
            current_logs=len(self._current),
            bytes_written=self._bytes_written,
            write_calls=self._write_calls,
            syncs=self._syncs,
            rolls=self._rolls,
            removed_empty=self._removed_empty,
            early_rolls=self._early_rolls,
            incremental_syncs=self._incremental_syncs,
        )
