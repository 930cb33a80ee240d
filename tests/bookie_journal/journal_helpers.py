"""Shared helpers for the journal tests: opening journals, replaying, a disk that fails on cue."""

from __future__ import annotations

import errno
from pathlib import Path

import trio

from bookie.journal import AddEntry, Journal, JournalConfig, JournalDisk, JournalRecord, LogMark, ReplayReport
from bookie.journal._files import iter_journal


def payload(ledger: int, entry: int, size: int = 100) -> bytes:
    """Deterministic entry bytes, so a replay can be checked byte for byte."""
    seed = f"{ledger}:{entry}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


async def open_journal(tmp: Path, **cfg) -> Journal:
    return await Journal.open(tmp / "journal", [tmp / "ledgers0", tmp / "ledgers1"], JournalConfig(**cfg))


_JOURNAL_START = LogMark(0, 0)  # frozen, so sharing it as a default is safe


def replay_all(
    tmp: Path, from_mark: LogMark = _JOURNAL_START
) -> tuple[list[tuple[LogMark, JournalRecord]], ReplayReport]:
    report = ReplayReport()
    return list(iter_journal(tmp / "journal", from_mark, report)), report


def adds(records: list[tuple[LogMark, JournalRecord]]) -> dict[tuple[int, int], bytes]:
    return {(r.ledger_id, r.entry_id): r.data for _, r in records if isinstance(r, AddEntry)}


class FailingDisk(JournalDisk):
    """A real disk whose fdatasync / pwrite fail once told to (``fail_sync``, ``fail_write``).

    A failed write raises ``OSError(write_errno)``: ENOSPC by default (the journal then waits in
    NO_SPACE for `Journal.resume`), EIO for an error that fails the journal for good.

    ``sync_gate`` (if set) is awaited from the worker thread before each sync, so a test can
    hold a sync in progress.
    """

    def __init__(self) -> None:
        self.fail_sync = False
        self.fail_write = False
        self.write_errno = errno.ENOSPC
        self.syncs = 0
        self.writes = 0
        self.sync_gate: trio.Event | None = None
        self.token: trio.lowlevel.TrioToken | None = None

    def fdatasync(self, fd: int) -> None:
        if self.sync_gate is not None and self.token is not None:
            trio.from_thread.run(self.sync_gate.wait, trio_token=self.token)
        if self.fail_sync:
            raise OSError(errno.EIO, "injected fdatasync failure")
        self.syncs += 1
        super().fdatasync(fd)

    def pwrite(self, fd: int, data, offset: int) -> None:
        if self.fail_write:
            raise OSError(self.write_errno, "injected write failure")
        self.writes += 1
        super().pwrite(fd, data, offset)
