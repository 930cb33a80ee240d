"""Errors, states, statistics, batches and tickets of the journal (shared with its callers)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import trio

from .._errors import BookieException
from ._codec import LogMark

__all__ = [
    "JournalError",
    "JournalIOError",
    "JournalNoSpaceError",
    "JournalClosedError",
    "JournalState",
    "FlushReason",
    "JournalStatistics",
    "JournalTicket",
]


class JournalError(BookieException):
    """Base class of journal errors."""


class JournalIOError(JournalError):
    """A journal write, sync or file creation failed; the journal is FAILED for good.

    The bookie should turn read-only. Records that got this error may or may not be on disk
    (and may be replayed later) but were never acknowledged.
    """


class JournalNoSpaceError(JournalIOError):
    """The journal's file system is full (ENOSPC) or the quota is used up (EDQUOT).

    The journal is NO_SPACE, not FAILED: `Journal.resume` continues on a fresh file once space is
    back. Records that got this error were never acknowledged (as with `JournalIOError`).
    """


class JournalClosedError(JournalError):
    """The journal is not serving (not started yet, closing, or closed)."""


class JournalState(enum.Enum):
    """Lifecycle of a `Journal`; the rules are in the module docstring."""

    CREATED = "created"
    SERVING = "serving"
    NO_SPACE = "no_space"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class FlushReason(enum.Enum):
    """Why a batch was written."""

    MAX_WAIT = "max_wait"
    MAX_OUTSTANDING_BYTES = "max_outstanding_bytes"
    MAX_OUTSTANDING_ENTRIES = "max_outstanding_entries"
    EMPTY_QUEUE = "empty_queue"
    CLOSE = "close"


@dataclass(frozen=True, slots=True)
class JournalStatistics:
    """A snapshot of the journal's counters (`Journal.statistics`)."""

    state: JournalState
    flushes: dict[str, int]
    records_written: int
    bytes_written: int
    force_writes: int
    rolls: int
    backpressure_waits: int
    queued_entries: int
    queued_bytes: int
    force_write_queue: int
    current_file_id: int | None
    durable_mark: LogMark
    persisted_mark: LogMark
    no_space_suspensions: int = 0
    resumes: int = 0


class _Batch:
    """Records appended by adds and written together; `done` is set once they are acknowledged."""

    __slots__ = ("parts", "t0", "nbytes", "count", "first", "done", "error", "file_id", "start")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        # perf_counter() of the first record: the latency histogram counts every record of the
        # batch from there (an upper bound for later records; one clock read per batch, not per add)
        self.t0 = 0.0
        self.nbytes = 0
        self.count = 0
        self.first = 0.0  # trio time of the first record (the group-wait deadline starts here)
        self.done = trio.Event()
        self.error: JournalError | None = None
        self.file_id = 0
        self.start = 0


class JournalTicket:
    """A record enqueued by `Journal.submit`: ``done`` once acknowledged or failed."""

    __slots__ = ("_batch", "_rel_end")

    def __init__(self, batch: _Batch, rel_end: int) -> None:
        self._batch = batch
        self._rel_end = rel_end

    @property
    def done(self) -> bool:
        """Whether the record's batch was acknowledged (durable) or failed."""
        return self._batch.done.is_set()

    async def wait(self) -> LogMark:
        """Wait until done; return the record's mark or raise the journal's error."""
        await self._batch.done.wait()
        return self.result()

    @property
    def failed(self) -> bool:
        """Whether the record's batch failed (cheaper than `result` on the hot path)."""
        return self._batch.error is not None

    def result(self) -> LogMark:
        """The record's mark once done; raises the JournalError that failed it, or RuntimeError
        if it is not done yet."""
        batch = self._batch
        if not batch.done.is_set():
            raise RuntimeError("journal record is not acknowledged yet")
        if batch.error is not None:
            _reraise(batch.error)
        return LogMark(batch.file_id, batch.start + self._rel_end)


def _reraise(error: JournalError) -> None:
    """Raise a fresh copy of a shared error, so concurrent raisers do not share a traceback."""
    raise type(error)(*error.args) from error
