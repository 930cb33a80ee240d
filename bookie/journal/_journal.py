"""The bookie journal: group commit with a pipelined force-write stage.

Data path. An add encodes its record and appends it to the open batch (no syscall, no task, one
shared `trio.Event` per batch), then waits for that batch. The journal task takes the open batch
when it is due and, with ``sync_data``, hands it to the force-write task:

* force writer idle: the batch goes over UNWRITTEN and the force writer writes it (``pwritev``
  of the record list, no join) and runs ``fdatasync`` in ONE worker-thread call, then
  acknowledges it. A sequential add thus costs one thread handoff.
* force writer busy (a sync in flight): a due batch below the byte / entry thresholds waits in
  the queue and keeps growing until the force writer is idle again, then goes over whole: one
  handoff and one sync per group, however many adds arrived meanwhile. A batch that reaches a
  threshold meanwhile is written by the journal task at once (its own worker-thread call, while
  the sync runs: pipelining) and handed over written; the next sync covers it.
* a batch that needs the file grown (preallocation) is always written by the journal task, so
  only one thread ever writes past the preallocated end.

Preallocation. A file grows in ``prealloc_size`` chunks (journalPreAllocSizeMB), reserved with
fallocate, and is zeroed ahead of the records in steps of `ZERO_STEP` (1 MiB): a batch that
passes the zeroed end first zeroes up to the next step boundary. Writing into zeros keeps a sync
from committing extent conversions (`JournalDisk.zero`); zeroing a step at a time, instead of the
whole chunk at once, keeps any one sync from carrying a whole chunk of zeros to the device (with
16 MiB chunks that sync took about 80 ms on this machine's disk, and every add in its group
waited for it).

The force writer syncs once for everything it received so far (one sync covers many batches) and
acknowledges in order. Without ``sync_data`` the journal task writes and acknowledges itself.

A batch is due when (counted per reason): its bytes reach ``buffered_writes_threshold``; its
records reach ``buffered_entries_threshold`` (if set); its oldest record waited
``max_group_wait_ms``; or, with ``flush_when_queue_empty``, as soon as the journal task runs and
finds it non-empty.

Memory. Queued-but-unwritten records are bounded by ``queue_max_entries`` and ``queue_max_bytes``;
an add that would pass them waits (backpressure). A batch handed to the force writer unwritten
counts against those bounds until it is written; written batches waiting for sync hold no data;
their number is bounded by ``force_write_queue_max``.

The add-latency histogram counts each record from its batch's first record (an upper bound for
later records): one clock read per batch instead of one per add.

Full disk. The journal never meets ENOSPC just because its chunk was big: before it preallocates
it asks the `SpaceGuard` (`bookie._space`), grows by a small reserve instead of a whole chunk
when the chunk would pass diskUsageThreshold, and has the bookie turn read-only when even that
passes it. If a write, sync or file creation still fails with ENOSPC or EDQUOT, the journal is
NO_SPACE rather than FAILED: every record not yet acknowledged fails (JournalNoSpaceError), and
`resume` (the bookie calls it once the disk checker sees space again) cuts the journal back to
its last acknowledged record and continues on a fresh file whose header declares that point as
its predecessor, so replay keeps every acknowledged record of both files whatever the old file
holds after it (see `bookie.journal._files`).

States (`JournalState`):

    CREATED --serve()--> SERVING --aclose()--> CLOSING --all written and synced--> CLOSED
    CREATED --serve(), no space for a file--> NO_SPACE
    SERVING --ENOSPC / EDQUOT--> NO_SPACE --resume(), fresh file created--> SERVING
    NO_SPACE --aclose()--> CLOSING
    CREATED | SERVING | CLOSING | NO_SPACE --any other write, sync or file-creation error--> FAILED (terminal)

Rule 1: adds are accepted only in SERVING (JournalClosedError otherwise, JournalIOError in FAILED,
        JournalNoSpaceError in NO_SPACE).
Rule 2: an add returns only once its record and every earlier one are written and, with
        ``sync_data``, synced. A record is never acknowledged after an I/O error: the error fails
        every pending add and all later ones (until `resume`, for a full disk).
Rule 3: ``replay()`` only in CREATED; ``serve()`` always starts a NEW file, after making the last
        old file end cleanly, so new records never follow a torn tail. When the disk has no room
        for it, the journal starts in NO_SPACE; on entering NO_SPACE (then or later) it makes one
        attempt to resume at once, after deleting its reserve file (`RESERVE_FILE`, recreated by
        `ensure_reserve` when there is room) and cutting the unused preallocated tail of its
        last file: so fences and the like can still be journaled on a full disk.
Rule 4: `resume` only acts in NO_SPACE, once the loops of the broken file have stopped; it never
        deletes a file of an earlier run, only files this run created after its last
        acknowledged record, and cuts the file of that record only if it is the last file.

Layout. One class over one set of state, in sections (as BookKeeper's ``Journal.java`` keeps its
force-write thread inside): adds, marks, replay, lifecycle, then the internals: files, the
journal task (batching and writing), the force-write task (the I/O stage) and completion and
failure. Blocking work runs in worker threads through the `JournalDisk` seam.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from .._io_priority import SyncPriority
from .._space import SpaceGuard
from ..metrics import JournalMetrics
from ._codec import (
    FILE_HEADER_SIZE,
    AddEntry,
    ExplicitLac,
    FenceLedger,
    JournalRecord,
    LogMark,
    MasterKey,
    encode_add_header,
    encode_record,
)
from ._config import JournalConfig
from ._files import (
    JournalDisk,
    ReplayReport,
    create_journal_file,
    cut_journal,
    is_space_error,
    iter_journal,
    list_journal_files,
    next_file_id,
    remove_old_files,
    repair_tail,
)
from ._last_mark import LAST_MARK_FILE, read_last_mark, write_last_mark
from ._types import (
    FlushReason,
    JournalClosedError,
    JournalError,
    JournalIOError,
    JournalNoSpaceError,
    JournalState,
    JournalStatistics,
    JournalTicket,
    _Batch,
    _reraise,
)

__all__ = ["Journal", "RESERVE_FILE", "RESERVE_FILE_SIZE"]

log = logging.getLogger(__name__)

_SERVING = JournalState.SERVING
_NO_SPACE = JournalState.NO_SPACE
_RESERVE = 64 * 1024  # what the journal grows by past a write when a whole chunk would pass the threshold
_PAGE = 4096
ZERO_STEP = 1 << 20
"""How far ahead of the records a journal file is zeroed at a time (module docstring, "Preallocation")."""
RESERVE_FILE = "reserve.space"
RESERVE_FILE_SIZE = 256 * 1024
"""The journal directory's reserve: zeros the journal deletes to start a file on a full disk."""


@dataclass(frozen=True, slots=True)
class _Grow:
    """Growing the current file before a batch: reserve ``reserve`` ((offset, length)) if set,
    then zero ``zero_bytes`` from ``zero_from``."""

    reserve: tuple[int, int] | None
    zero_from: int
    zero_bytes: int


@dataclass(slots=True)
class _Sync:
    """A force-write request: (write `parts` at `start`, then) sync file `file_id`, then ack
    `batch` and/or close the fd. `parts` is None when the journal task wrote the batch already."""

    fd: int
    file_id: int
    batch: _Batch | None
    close: bool
    parts: list[bytes] | None = None
    start: int = 0


class Journal:
    """A bookie journal in one directory. Create with `Journal.open`, run with `serve`.

    Adds may come from any number of tasks in the same trio run. See the module docstring for
    the guarantees; `JournalConfig` for the settings.
    """

    def __init__(
        self,
        journal_dir: Path,
        ledger_dirs: Sequence[Path],
        config: JournalConfig,
        disk: JournalDisk,
        metrics: JournalMetrics,
        persisted: LogMark,
        space_guard: SpaceGuard | None = None,
        mark_file: str = LAST_MARK_FILE,
    ) -> None:
        """Use `Journal.open` instead; it reads the persisted mark without blocking the loop."""
        config.validate()
        self.on_state_change: Callable[[JournalState], None] | None = None
        """Called (on the trio thread) after every change to NO_SPACE, SERVING (from NO_SPACE) or
        FAILED; the bookie maps them to read-only reasons."""
        self.sync_priority: SyncPriority | None = None
        """When set (by the bookie, shared with its storage), each sync is marked in flight on it,
        so that compaction holds its own syncs back meanwhile (`bookie._io_priority`)."""
        self._guard = space_guard
        self._mark_file = mark_file
        self._dir = journal_dir
        self._ledger_dirs = tuple(ledger_dirs)
        self._config = config
        self._disk = disk
        self.metrics = metrics
        self._state = JournalState.CREATED
        self._error: JournalError | None = None
        self._persisted = persisted
        self._durable = persisted
        self._open = _Batch()
        self._unfinished: deque[_Batch] = deque()
        self._q_bytes = 0
        self._q_entries = 0
        self._wake = trio.Event()
        self._space = trio.Event()
        self._stopped = trio.Event()
        self._serving_started = False
        self._replayed = False
        self._replay_end: LogMark | None = None
        self._own_from = 0  # files with ids from here on were created by this run
        self._resume_wanted = trio.Event()
        self._resume_done = trio.Event()
        self._suspensions = self._resumes = 0
        self._fd: int | None = None
        self._file_id: int | None = None
        self._last_file_id = 0
        self._pos = 0
        self._alloc_end = 0  # reserved (fallocated) end of the current file
        self._zeroed_end = 0  # zeros written up to here (<= _alloc_end)
        self._fds_open: dict[int, int] = {}  # file id -> fd, until the force writer closes it
        self._fw_send, self._fw_recv = trio.open_memory_channel[_Sync](config.force_write_queue_max)
        self._fw_pending = 0
        self._fw_busy = False
        self._max_entries = config.queue_max_entries
        self._max_bytes = config.queue_max_bytes
        self._threshold = config.buffered_writes_threshold
        self._entries_threshold = config.buffered_entries_threshold or (1 << 62)
        self._flushes = {r.value: 0 for r in FlushReason}
        self._records_written = self._bytes_written = self._force_writes = 0
        self._rolls = self._backpressure_waits = 0

    @classmethod
    async def open(
        cls,
        journal_dir: str | os.PathLike[str],
        ledger_dirs: Sequence[str | os.PathLike[str]],
        config: JournalConfig | None = None,
        *,
        disk: JournalDisk | None = None,
        metrics: JournalMetrics | None = None,
        space_guard: SpaceGuard | None = None,
        mark_file: str = LAST_MARK_FILE,
    ) -> Journal:
        """Prepare a journal over `journal_dir` (created if missing); nothing is written yet.

        `ledger_dirs` hold the ``lastMark`` copies (file ``mark_file``: one per journal of a
        bookie). ``space_guard`` is asked before every
        preallocation (see "Full disk"); without one the journal preallocates whole chunks.
        Raises `ConfigError` for a bad config and OSError if the directories cannot be read or
        created.
        """
        jdir = Path(journal_dir)
        ldirs = [Path(d) for d in ledger_dirs]

        def prepare() -> LogMark:
            jdir.mkdir(parents=True, exist_ok=True)
            for d in ldirs:
                d.mkdir(parents=True, exist_ok=True)
            return read_last_mark(ldirs, mark_file)

        persisted = await trio.to_thread.run_sync(prepare)
        return cls(
            jdir,
            ldirs,
            config or JournalConfig(),
            disk or JournalDisk(),
            metrics or JournalMetrics(),
            persisted,
            space_guard,
            mark_file,
        )

    # -----------------------------------------------------------------------------------------
    # Adds

    async def log_add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> LogMark:
        """Journal an entry; return its mark once durable. `data` must not be mutated meanwhile.

        Raises JournalIOError (journal failed), JournalClosedError (not serving) or ValueError
        (entry too large). If cancelled while waiting, the record may still be written.
        """
        head = encode_add_header(ledger_id, entry_id, data)
        return await self._append(head, data, len(head) + len(data))

    async def log_fence(self, ledger_id: int) -> LogMark:
        """Journal that a ledger was fenced; same guarantees as `log_add_entry`."""
        return await self.add(FenceLedger(ledger_id))

    async def log_explicit_lac(self, ledger_id: int, lac: int, data: bytes = b"") -> LogMark:
        """Journal an explicit LAC (and its opaque buffer); same guarantees as `log_add_entry`."""
        return await self.add(ExplicitLac(ledger_id, lac, data))

    async def log_master_key(self, ledger_id: int, master_key: bytes) -> LogMark:
        """Journal a ledger's master key; same guarantees as `log_add_entry`."""
        return await self.add(MasterKey(ledger_id, master_key))

    async def add(self, record: JournalRecord) -> LogMark:
        """Journal any record; same guarantees as `log_add_entry`."""
        if isinstance(record, AddEntry):
            return await self.log_add_entry(record.ledger_id, record.entry_id, record.data)
        raw = encode_record(record)
        return await self._append(raw, b"", len(raw))

    # Non-waiting submission (added for the bookie server, which must keep the arrival order of
    # a ledger's adds without a task per add: trio does not run tasks in the order they started).

    def submit_add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> JournalTicket:
        """Enqueue an entry NOW (records keep the order of these calls) and return its ticket.

        Raises trio.WouldBlock when the queue is full (await `wait_for_space`, then call again),
        JournalIOError / JournalClosedError as `log_add_entry` does, ValueError if too large.
        """
        head = encode_add_header(ledger_id, entry_id, data)
        return self._enqueue(head, data, len(head) + len(data))

    def submit(self, record: JournalRecord) -> JournalTicket:
        """Enqueue any record now; same rules as `submit_add_entry`."""
        if isinstance(record, AddEntry):
            return self.submit_add_entry(record.ledger_id, record.entry_id, record.data)
        raw = encode_record(record)
        return self._enqueue(raw, b"", len(raw))

    async def wait_for_space(self) -> None:
        """Return once the queue has had room freed (or the journal stopped serving).

        Call it after `submit` raised trio.WouldBlock. While anything is queued it waits for the
        next batch to leave the queue (a record may not fit even below the byte bound), so
        a submit / wait_for_space loop never spins.
        """
        self._check_open()
        if self._q_entries:
            self._backpressure_waits += 1
            await self._space.wait()
        else:
            await trio.lowlevel.checkpoint()

    def _enqueue(self, head: bytes, data: bytes, size: int) -> JournalTicket:
        # the hot path of every add: plain attribute arithmetic, no clock read after the first
        if self._state is not _SERVING:
            self._check_open()
        q_entries = self._q_entries
        if q_entries >= self._max_entries or (self._q_bytes and self._q_bytes + size > self._max_bytes):
            raise trio.WouldBlock
        batch = self._open
        parts = batch.parts
        parts.append(head)
        if data:
            parts.append(data)
        nbytes = batch.nbytes = batch.nbytes + size
        count = batch.count = batch.count + 1
        self._q_bytes += size
        self._q_entries = q_entries + 1
        if count == 1:
            batch.t0 = time.perf_counter()
            batch.first = trio.current_time()
            self._wake.set()
        elif nbytes >= self._threshold or count >= self._entries_threshold:
            self._wake.set()
        return JournalTicket(batch, nbytes)

    def _check_open(self) -> None:
        if self._state is not JournalState.SERVING:
            if self._error is not None:
                _reraise(self._error)
            raise JournalClosedError(f"journal is {self._state.value}")

    async def _append(self, head: bytes, data: bytes, size: int) -> LogMark:
        while True:
            try:
                ticket = self._enqueue(head, data, size)
                break
            except trio.WouldBlock:
                self._backpressure_waits += 1
                await self._space.wait()
        return await ticket.wait()

    # -----------------------------------------------------------------------------------------
    # Marks

    @staticmethod
    def earliest(a: LogMark, b: LogMark) -> LogMark:
        """The earlier of two marks of this journal (`JournalGroup.earliest` has the same shape)."""
        return min(a, b)

    def current_mark(self) -> LogMark:
        """The mark just past the last acknowledged record (what a checkpoint may persist).

        Take it BEFORE flushing ledger storage, then pass it to `persist_last_mark` after.
        """
        return self._durable

    @property
    def persisted_mark(self) -> LogMark:
        """The highest mark persisted in the ledger directories."""
        return self._persisted

    async def persist_last_mark(self, mark: LogMark) -> list[int]:
        """Durably record that everything before `mark` is in ledger storage; prune old files.

        Writes ``lastMark`` in every ledger directory, then deletes journal files wholly below
        `mark` beyond ``max_backups`` (all of them while the space guard finds the disk past
        diskUsageThreshold); returns the deleted file ids. A mark not above the
        persisted one is ignored. Raises ValueError for a mark past `current_mark`, and
        JournalIOError if a ledger directory could not be written.
        """
        if mark > self._durable:
            raise ValueError(f"mark {mark} is past the last durable record {self._durable}")
        if mark <= self._persisted:
            return []
        try:
            await trio.to_thread.run_sync(write_last_mark, self._ledger_dirs, mark, self._mark_file)
        except OSError as exc:
            raise JournalIOError(f"could not persist lastMark {mark}: {exc}") from exc
        self._persisted = mark
        keep = self._config.max_backups
        room = self._guard.headroom(self._dir) if keep and self._guard is not None else None
        full = room is not None and room < 0  # past diskUsageThreshold: backups are a luxury
        removed = await trio.to_thread.run_sync(remove_old_files, self._dir, mark, 0 if full else keep)
        if removed:
            log.info(
                "journal: removed files %s below %s%s",
                [f"{i:x}" for i in removed],
                mark,
                " (the disk is past diskUsageThreshold: no backups kept)" if full else "",
            )
        return removed

    # -----------------------------------------------------------------------------------------
    # Replay

    async def replay(
        self,
        apply: Callable[[LogMark, JournalRecord], Awaitable[None] | None] | None = None,
        from_mark: LogMark | None = None,
    ) -> ReplayReport:
        """Feed every record from `from_mark` (default: the persisted mark) to `apply`, in order.

        Stops at a damaged record (see `bookie.journal._files`); a torn tail of the last file is
        cut off so that the journal ends cleanly. Only before `serve`. Returns what was done;
        raises RuntimeError if called after serve, OSError if files cannot be read.
        """
        if self._state is not JournalState.CREATED:
            raise RuntimeError("replay() must run before serve()")
        report = ReplayReport()
        gen = iter_journal(self._dir, from_mark if from_mark is not None else self._persisted, report)

        def take() -> list[tuple[LogMark, JournalRecord]]:
            out, nbytes = [], 0
            for item in gen:
                out.append(item)
                nbytes += len(getattr(item[1], "data", b"")) + 32
                if nbytes >= 4 * 1024 * 1024 or len(out) >= 4096:
                    break
            return out

        while chunk := await trio.to_thread.run_sync(take):
            if apply is not None:
                for mark, record in chunk:
                    res = apply(mark, record)
                    if inspect.isawaitable(res):
                        await res
        if report.stop is not None and report.stop.last_file:
            await trio.to_thread.run_sync(repair_tail, self._disk, report.stop)
        self._durable = max(self._durable, report.end)
        self._replay_end = report.end if report.files else None
        self._replayed = True
        log.info("journal replay: %d records from %d files, end %s", report.records, len(report.files), report.end)
        return report

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    @property
    def state(self) -> JournalState:
        """The current `JournalState`."""
        return self._state

    @property
    def error(self) -> JournalError | None:
        """The error that failed the journal (FAILED) or suspended it (NO_SPACE), else None."""
        return self._error

    async def serve(self, *, task_status: trio.TaskStatus[Journal] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the journal and force-write tasks until `aclose` (or cancellation, or failure).

        Starts a new journal file first (after checking the tail of the last one if `replay` was
        not run; rule 3 for a full disk). ``task_status.started`` is called once the journal is
        SERVING, or NO_SPACE when the disk has no room for a file. A full disk later stops the
        loops until `resume`; any other failure stops them and leaves the journal FAILED; this
        returns normally then so the owner decides what to do. On cancellation, pending adds get
        JournalClosedError. Raises JournalIOError if the first file cannot be created for another
        reason than a full disk.
        """
        if self._serving_started:
            raise RuntimeError("serve() may only run once")
        self._serving_started = True
        started = False
        try:
            prev = self._replay_end if self._replayed else await self._check_tail()
            self._last_file_id = await trio.to_thread.run_sync(next_file_id, self._dir)
            self._own_from = self._last_file_id
            await self._first_file(prev)
            task_status.started(self)
            started = True
            while await self._run_loops():
                pass
        except JournalIOError:
            if not started:
                raise
        finally:
            self._shutdown()

    async def _run_loops(self) -> bool:
        """One stretch of writing (waiting for `resume` first in NO_SPACE); True to run another."""
        if self._state is _NO_SPACE and not await self._wait_resume():
            return False
        if self._state is not _SERVING:
            return False
        self._fw_send, self._fw_recv = trio.open_memory_channel[_Sync](self._config.force_write_queue_max)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._force_write_loop)
            nursery.start_soon(self._journal_loop)
        if self._state is not _NO_SPACE:
            return False
        self._after_suspend()
        await self._emergency_resume()
        return True

    async def resume(self) -> bool:
        """Leave NO_SPACE: cut the journal back to its last acknowledged record (deleting the
        files this run created after it), then continue on a fresh file that declares it.

        Returns True once the journal is SERVING (at once if it already was), False if there is
        still no space (it stays NO_SPACE; call again later) or it is closing or FAILED (another
        error while resuming fails it). Waits for the loops of the broken file to stop first.
        """
        if self._state is _SERVING:
            return True
        if self._state is not _NO_SPACE:
            return False
        done = self._resume_done
        self._resume_wanted.set()
        await done.wait()
        return self._state is _SERVING

    async def aclose(self) -> None:
        """Stop accepting adds, write and sync everything accepted, close files; wait for it."""
        if self._state in (_SERVING, _NO_SPACE):
            self._state = JournalState.CLOSING
            self._wake.set()
            self._space.set()
            self._resume_wanted.set()
        if self._serving_started:
            await self._stopped.wait()
        elif self._state is JournalState.CREATED:
            self._state = JournalState.CLOSED

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Journal]:
        """``async with journal.running():`` serve in a private nursery, `aclose` on exit."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.serve)
            try:
                yield self
            finally:
                with trio.CancelScope(shield=True):
                    await self.aclose()

    def statistics(self) -> JournalStatistics:
        """A snapshot of counters and queue sizes."""
        return JournalStatistics(
            state=self._state,
            flushes=dict(self._flushes),
            records_written=self._records_written,
            bytes_written=self._bytes_written,
            force_writes=self._force_writes,
            rolls=self._rolls,
            backpressure_waits=self._backpressure_waits,
            queued_entries=self._q_entries,
            queued_bytes=self._q_bytes,
            force_write_queue=self._fw_pending,
            current_file_id=self._file_id,
            durable_mark=self._durable,
            persisted_mark=self._persisted,
            no_space_suspensions=self._suspensions,
            resumes=self._resumes,
        )

    # -----------------------------------------------------------------------------------------
    # Internals: files

    async def _check_tail(self) -> LogMark | None:
        """Without `replay`: make the last file end cleanly; return where its records end."""
        files = await trio.to_thread.run_sync(list_journal_files, self._dir)
        if not files:
            return None
        report = ReplayReport()
        start = LogMark(files[-1][0], 0)
        await trio.to_thread.run_sync(lambda: sum(1 for _ in iter_journal(self._dir, start, report)))
        if report.stop is not None and report.stop.last_file:
            await trio.to_thread.run_sync(repair_tail, self._disk, report.stop)
        return report.end

    def _allowance(self, chunk: int, needed: int) -> int:
        """Bytes to allocate when ``needed`` more must fit and ``chunk`` is the usual step.

        A whole chunk while the disk has headroom for it (`bookie._space` rule 1); else as much
        of the headroom as the chunk would take, but at least ``needed`` plus a small reserve (for
        fences and recovery adds once read-only); when even that passes the threshold the guard
        reports the disk full (rule 2) and the small amount is allocated anyway.
        """
        guard = self._guard
        if guard is None:
            return chunk
        usage = guard.usage(self._dir)
        if usage is None:
            return chunk
        room = usage.headroom(guard.threshold)
        if room >= chunk:
            return chunk
        small = min(chunk, -(-(needed + _RESERVE) // _PAGE) * _PAGE)
        if room >= small:
            return max(small, room // _PAGE * _PAGE)
        guard.report_full(self._dir, small, usage, "journal preallocation")
        return small

    async def _new_file(self, prev: LogMark | None) -> None:
        """Create, preallocate and switch to a new file declaring ``prev``; raises OSError."""
        cfg = self._config
        file_id = max(self._last_file_id + 1, time.time_ns() // 1_000_000)
        prealloc = self._allowance(max(cfg.prealloc_size, FILE_HEADER_SIZE), FILE_HEADER_SIZE)
        t0 = trio.current_time()
        fd = await trio.to_thread.run_sync(
            create_journal_file, self._disk, self._dir, file_id, prealloc, prev, ZERO_STEP
        )
        self.metrics.creation_latency.observe((trio.current_time() - t0) * 1000.0)
        self._fd, self._file_id, self._last_file_id = fd, file_id, file_id
        self._fds_open[file_id] = fd
        self._pos = FILE_HEADER_SIZE
        self._alloc_end = max(prealloc, FILE_HEADER_SIZE)
        self._zeroed_end = max(FILE_HEADER_SIZE, min(ZERO_STEP, self._alloc_end))

    async def _first_file(self, prev: LogMark | None) -> None:
        """The file ``serve`` starts in: a new one, or none on a full disk (NO_SPACE; rule 3).
        Raises JournalIOError for any other error."""
        try:
            await self._new_file(prev)
        except OSError as exc:
            if not is_space_error(exc):
                self._fail(exc, "creating the first journal file")
                raise self._error from exc  # type: ignore[misc]
            self._fail(exc, "creating the first journal file")
            self._after_suspend()
            await self._emergency_resume()
            if self._state is not _SERVING:
                return
        self._state = _SERVING
        self._durable = max(self._durable, LogMark(self._file_id or 0, FILE_HEADER_SIZE))
        await self.ensure_reserve()

    async def ensure_reserve(self) -> bool:
        """Create the reserve file (`RESERVE_FILE_SIZE` zeros in the journal directory) if it is
        missing and the disk has the headroom for it; True when it exists afterwards.

        The journal spends it (rule 3) to start a fresh file on a full disk, so that fences and
        recovery adds can still be journaled; the bookie calls this again once space is back.
        """
        path = self._dir / RESERVE_FILE
        guard = self._guard

        def make() -> bool:
            if path.exists():
                return True
            room = guard.headroom(self._dir) if guard is not None else None
            if room is not None and room < RESERVE_FILE_SIZE:
                return False
            tmp = path.with_name(RESERVE_FILE + ".tmp")
            tmp.unlink(missing_ok=True)
            fd = self._disk.create(tmp)
            try:
                self._disk.allocate(fd, 0, RESERVE_FILE_SIZE)
                self._disk.fdatasync(fd)
            finally:
                self._disk.close(fd)
            os.replace(tmp, path)
            return True

        try:
            return await trio.to_thread.run_sync(make)
        except OSError as exc:
            log.warning("journal: cannot create its reserve file %s: %s", path, exc)
            try:
                (self._dir / (RESERVE_FILE + ".tmp")).unlink(missing_ok=True)
            except OSError:
                pass
            return False

    async def _release_reserve(self) -> bool:
        """Delete the reserve file to make room; True if there was one."""
        path = self._dir / RESERVE_FILE

        def release() -> bool:
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            self._disk.fsync_dir(self._dir)
            return True

        try:
            released = await trio.to_thread.run_sync(release)
        except OSError as exc:
            log.warning("journal: cannot release its reserve file %s: %s", path, exc)
            return False
        if released:
            log.warning("journal: released its %d-byte reserve file to continue on a full disk", RESERVE_FILE_SIZE)
        return released

    async def _emergency_resume(self) -> None:
        """Rule 3: on entering NO_SPACE, spend the reserve file and try to resume once, at once."""
        await self._release_reserve()
        if self._state is _NO_SPACE:
            await self._try_resume()

    async def _wait_resume(self) -> bool:
        """NO_SPACE: serve `resume` requests until one succeeds (True) or the journal closes (False)."""
        while self._state is _NO_SPACE:
            await self._resume_wanted.wait()
            self._resume_wanted = trio.Event()
            if self._state is _NO_SPACE:
                await self._try_resume()
        return self._state is _SERVING

    async def _try_resume(self) -> None:
        """One attempt to leave NO_SPACE; wakes every `resume` caller waiting, whatever the result."""
        try:
            await self._resume_once()
        finally:
            done, self._resume_done = self._resume_done, trio.Event()
            done.set()

    async def _resume_once(self) -> None:
        mark = self._durable
        try:
            prev = await trio.to_thread.run_sync(cut_journal, self._disk, self._dir, mark, self._own_from)
            if self._state is not _NO_SPACE:
                return  # closing meanwhile
            await self._new_file(prev)
            if self._state is not _NO_SPACE:
                return  # closing meanwhile; _shutdown closes the new file
        except OSError as exc:
            if is_space_error(exc):
                log.warning("journal: still no space to resume: %s", exc)
                return
            self._error = None
            self._fail(exc, "resuming after a full disk", for_good=True)
            return
        self._error = None
        self._state = _SERVING
        self._durable = max(self._durable, LogMark(self._file_id or 0, FILE_HEADER_SIZE))
        self._resumes += 1
        self.metrics.resumes.inc()
        log.warning(
            "journal resumed in file %x after a full disk; the history before it ends at %s", self._file_id or 0, prev
        )
        self._notify()
        await self.ensure_reserve()

    def _close_files(self) -> None:
        """Close every journal file this journal holds open (errors ignored: nothing more is written)."""
        for fd in self._fds_open.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds_open.clear()
        self._fd = None

    def _after_suspend(self) -> None:
        """The loops of the broken file stopped: close its files and empty the queue."""
        self._close_files()
        self._open = _Batch()
        self._unfinished.clear()
        self._q_bytes = self._q_entries = 0
        self._fw_pending = 0
        self._fw_busy = False
        self._space = trio.Event()
        m = self.metrics
        m.queue_size.set(0)
        m.queue_bytes.set(0)
        m.force_write_queue_size.set(0)

    # -----------------------------------------------------------------------------------------
    # Internals: the journal task (batching and writing)

    def _due(self, batch: _Batch) -> FlushReason | None:
        cfg = self._config
        if batch.nbytes >= cfg.buffered_writes_threshold:
            return FlushReason.MAX_OUTSTANDING_BYTES
        if cfg.buffered_entries_threshold and batch.count >= cfg.buffered_entries_threshold:
            return FlushReason.MAX_OUTSTANDING_ENTRIES
        if self._state is not JournalState.SERVING:
            return FlushReason.CLOSE
        if cfg.flush_when_queue_empty:
            return FlushReason.EMPTY_QUEUE
        return None

    def _fw_idle(self) -> bool:
        return not self._fw_busy and self._fw_pending == 0

    async def _sleep(self) -> None:
        self._wake = trio.Event()
        await self._wake.wait()

    async def _journal_loop(self) -> None:
        max_wait = self._config.max_group_wait_ms / 1000.0
        sync = self._config.sync_data
        thresholds = (FlushReason.MAX_OUTSTANDING_BYTES, FlushReason.MAX_OUTSTANDING_ENTRIES)
        try:
            while self._error is None:
                batch = self._open
                if batch.count == 0:
                    if self._state is not JournalState.SERVING:
                        break
                    await self._sleep()
                    continue
                reason = self._due(batch)
                if reason is None:
                    with trio.move_on_at(batch.first + max_wait):
                        while (reason := self._due(batch)) is None:
                            await self._sleep()
                    if reason is None:
                        reason = FlushReason.MAX_WAIT
                if sync and reason not in thresholds:
                    # a sync is in flight: nothing queued now could be acknowledged before the
                    # next sync anyway, so let the batch grow and go over whole once the force
                    # writer is idle (or write it now once it reaches a threshold)
                    while not self._fw_idle() and self._error is None:
                        due = self._due(batch)
                        if due in thresholds:
                            reason = due
                            break
                        await self._sleep()
                    if self._error is not None:
                        break
                self._open = _Batch()
                self._unfinished.append(batch)
                await self._write(batch, reason)
            if self._fd is not None and self._file_id is not None:
                # a clean close syncs the last file even without sync_data
                await self._send_sync(_Sync(self._fd, self._file_id, None, close=True))
                self._fd = None
        finally:
            self._fw_send.close()

    def _count_flush(self, reason: FlushReason) -> None:
        self._flushes[reason.value] += 1
        counter = {
            FlushReason.MAX_WAIT: self.metrics.num_flush_max_wait,
            FlushReason.MAX_OUTSTANDING_BYTES: self.metrics.num_flush_max_outstanding_bytes,
            FlushReason.MAX_OUTSTANDING_ENTRIES: self.metrics.num_flush_max_outstanding_entries,
            FlushReason.EMPTY_QUEUE: self.metrics.num_flush_empty_queue,
        }.get(reason)
        if counter is not None:
            counter.inc()

    def _written(self, batches: Sequence[_Batch], nbytes: int, seconds: float) -> None:
        """Bookkeeping once batches left the queue (written, or failed to write)."""
        for b in batches:
            self._q_bytes -= b.nbytes
            self._q_entries -= b.count
        self._space.set()
        self._space = trio.Event()
        if nbytes:
            self._records_written += sum(b.count for b in batches)
            self._bytes_written += nbytes
            m = self.metrics
            m.flush_latency.observe(seconds * 1000.0)
            m.write_bytes.inc(nbytes)
        self.metrics.queue_size.set(self._q_entries)
        self.metrics.queue_bytes.set(self._q_bytes)

    async def _write(self, batch: _Batch, reason: FlushReason) -> None:
        self._count_flush(reason)
        parts = batch.parts
        batch.parts = []
        fd, file_id, start = self._fd, self._file_id, self._pos
        assert fd is not None and file_id is not None
        size = batch.nbytes
        end = start + size
        grow = None
        if end > self._zeroed_end:
            reserve = None
            if end > self._alloc_end:
                chunk = self._config.prealloc_size
                by = self._allowance(-(-end // chunk) * chunk - self._alloc_end, end - self._alloc_end)
                reserve = (self._alloc_end, by)
                self._alloc_end += by
            zero_to = min(self._alloc_end, -(-end // ZERO_STEP) * ZERO_STEP)
            grow = _Grow(reserve, self._zeroed_end, zero_to - self._zeroed_end)
            self._zeroed_end = zero_to
        self._pos = end
        batch.file_id, batch.start = file_id, start
        roll = end >= self._config.max_file_size
        sync = self._config.sync_data
        if sync and grow is None and self._fw_idle():
            # one handoff: the force writer writes and syncs in one worker-thread call
            await self._send_sync(_Sync(fd, file_id, batch, roll, parts, start))
        else:
            try:
                seconds = await trio.to_thread.run_sync(self._write_blocking, fd, parts, start, grow)
            except OSError as exc:
                self._written([batch], 0, 0.0)
                self._fail(exc, f"writing journal file {file_id:x}")
                return
            self._written([batch], size, seconds)
            if sync:
                await self._send_sync(_Sync(fd, file_id, batch, close=roll))
            else:
                self._ack(batch)
                if roll:
                    await self._send_sync(_Sync(fd, file_id, None, close=True))
        if roll:
            self._rolls += 1
            self.metrics.num_rolls.inc()
            self._fd = None
            try:
                await self._new_file(LogMark(file_id, end))
            except OSError as exc:
                self._fail(exc, f"creating the journal file after {file_id:x}")

    # -----------------------------------------------------------------------------------------
    # Internals: the force-write task (the I/O stage)
    #
    # The force writer receives `_Sync` items in file order. An item whose ``parts`` is set was
    # handed over unwritten (the force writer was idle): it is written and synced in ONE
    # worker-thread call. Other items were written by the journal task already. One ``fdatasync``
    # covers every item received so far, then their batches are acknowledged in order.

    def _write_blocking(self, fd: int, parts: list[bytes], start: int, grow: _Grow | None) -> float:
        """Worker thread: grow the file if asked (reserve, then zero), write the records; returns
        the seconds taken."""
        t0 = time.perf_counter()
        if grow is not None:
            if grow.reserve is not None:
                self._disk.reserve(fd, *grow.reserve)
            self._disk.zero(fd, grow.zero_from, grow.zero_bytes)
            self.metrics.preallocation.observe((time.perf_counter() - t0) * 1000.0)
        self._disk.pwritev(fd, parts, start)
        return time.perf_counter() - t0

    def _write_and_sync(self, fd: int, writes: list[tuple[list[bytes], int]]) -> tuple[float, float]:
        """Worker thread: write the unwritten batches (``(parts, start)``), then fdatasync;
        returns (write s, sync s)."""
        t0 = time.perf_counter()
        for parts, start in writes:
            self._disk.pwritev(fd, parts, start)
        t1 = time.perf_counter()
        self._disk.fdatasync(fd)
        return t1 - t0, time.perf_counter() - t1

    async def _send_sync(self, item: _Sync) -> None:
        self._fw_pending += 1
        self.metrics.force_write_queue_size.set(self._fw_pending)
        await self._fw_send.send(item)

    async def _force_write_loop(self) -> None:
        recv = self._fw_recv
        while True:
            try:
                items = [await recv.receive()]
            except trio.EndOfChannel:
                return
            self._fw_busy = True
            while True:
                try:
                    items.append(recv.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            self._fw_pending -= len(items)
            self.metrics.force_write_queue_size.set(self._fw_pending)
            i = 0
            while i < len(items):
                j = i
                while j < len(items) and items[j].file_id == items[i].file_id:
                    j += 1
                await self._sync_group(items[i:j])
                i = j
            self._fw_busy = False
            if self._open.count:
                self._wake.set()  # the journal task may hand over what queued during the sync

    async def _sync_group(self, group: list[_Sync]) -> None:
        fd, file_id = group[0].fd, group[0].file_id
        batches = [it.batch for it in group if it.batch is not None]
        unwritten = [it for it in group if it.parts is not None]
        writes = [(it.parts, it.start) for it in group if it.parts is not None]
        handed = [it.batch for it in unwritten if it.batch is not None]
        if self._error is None:
            try:
                if self.sync_priority is None:
                    write_s, sync_s = await trio.to_thread.run_sync(self._write_and_sync, fd, writes)
                else:
                    with self.sync_priority.foreground():
                        write_s, sync_s = await trio.to_thread.run_sync(self._write_and_sync, fd, writes)
            except OSError as exc:
                if unwritten:
                    self._written(handed, 0, 0.0)
                self._fail(exc, f"writing or syncing journal file {file_id:x}")
            else:
                if unwritten:
                    self._written(handed, sum(b.nbytes for b in handed), write_s)
                self._force_writes += 1
                m = self.metrics
                m.num_force_writes.inc()
                m.sync.observe(sync_s * 1000.0)
                m.force_write_batch_entries.observe(sum(b.count for b in batches))
                m.force_write_batch_bytes.observe(sum(b.nbytes for b in batches))
                for b in batches:
                    self._ack(b)
            finally:
                for it in unwritten:
                    it.parts = None
        elif unwritten:
            self._written(handed, 0, 0.0)
        if any(it.close for it in group):
            self._fds_open.pop(file_id, None)
            try:
                await trio.to_thread.run_sync(self._disk.close, fd)
            except OSError as exc:
                log.warning("journal: closing file %x: %s", file_id, exc)

    # -----------------------------------------------------------------------------------------
    # Internals: completion and failure

    def _ack(self, batch: _Batch) -> None:
        if batch.done.is_set():
            return
        if self._unfinished and self._unfinished[0] is batch:
            self._unfinished.popleft()
        self._durable = LogMark(batch.file_id, batch.start + batch.nbytes)
        lat = (time.perf_counter() - batch.t0) * 1000.0
        self.metrics.add_entry.observe_many([lat] * batch.count)
        batch.done.set()

    def _fail_pending(self, error: JournalError) -> None:
        for b in [*self._unfinished, self._open]:
            if not b.done.is_set():
                b.error = error
                b.done.set()
        self._unfinished.clear()
        self._space.set()
        self._wake.set()

    def _fail(self, exc: BaseException, what: str, *, for_good: bool = False) -> None:
        """Fail every pending add: a full disk while starting or SERVING suspends (NO_SPACE);
        anything else, anything while CLOSING, or ``for_good``, fails the journal for good. The
        first error wins."""
        if self._error is None:
            if not for_good and is_space_error(exc) and self._state in (_SERVING, JournalState.CREATED):
                self._error = JournalNoSpaceError(
                    f"journal {what} failed: {exc}; adds are refused until space is freed"
                )
                self._state = _NO_SPACE
                self._suspensions += 1
                self.metrics.no_space.inc()
                log.error(
                    "journal OUT OF SPACE while %s: %s; nothing after %s is acknowledged until it "
                    "resumes on a fresh file",
                    what,
                    exc,
                    self._durable,
                )
            else:
                self._error = JournalIOError(f"journal {what} failed: {exc}")
                self._state = JournalState.FAILED
                self.metrics.io_errors.inc()
                log.error("journal FAILED while %s: %s; no further adds will be acknowledged", what, exc)
            self._error.__cause__ = exc
            self._fail_pending(self._error)
            self._notify()
            return
        self._fail_pending(self._error)

    def _notify(self) -> None:
        if self.on_state_change is not None:
            try:
                self.on_state_change(self._state)
            except Exception:  # the owner's bug must not take the journal down
                log.exception("journal state listener failed")

    def _shutdown(self) -> None:
        if self._state is not JournalState.FAILED:
            self._state = JournalState.CLOSED
        self._fail_pending(self._error or JournalClosedError("journal closed"))
        self._close_files()
        self._resume_done.set()
        self._stopped.set()
