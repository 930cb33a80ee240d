"""Several ledger directories, each with its own writer (`EntryLogger` rule 10): one append writes
the directories' shares at the same time (a barrier that both writers must reach together would
break if they ran one after the other), syncs run in parallel too, a failure in one directory
leaves the others' records readable and a retry succeeds, and log ids never repeat."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from bookie.storage import EntryLogger, FileOps, StorageIOError
from bookie.storage._entry_log_codec import HEADER_SIZE, split_location

PAYLOAD = 3000


class BarrierOps(FileOps):
    """Record writes (bigger than a header) and syncs wait at a barrier of ``parties`` threads:
    they pass only if that many directory writers are inside at once."""

    def __init__(self, parties: int) -> None:
        self.writes = threading.Barrier(parties, timeout=30)
        self.syncs = threading.Barrier(parties, timeout=30)
        self.arm_writes = self.arm_syncs = False
        self.fail_fds: set[int] = set()
        self.threads: set[str] = set()

    def write(self, fd: int, data: memoryview) -> int:
        if fd in self.fail_fds:
            raise OSError(errno.ENOSPC, "No space left on device")
        if self.arm_writes and len(data) > HEADER_SIZE:
            self.threads.add(threading.current_thread().name)
            self.writes.wait()
        return os.write(fd, data)

    def sync(self, fd: int) -> None:
        if self.arm_syncs:
            self.syncs.wait()
        os.fdatasync(fd)


def body(lid: int, eid: int) -> bytes:
    return (b"%d:%d;" % (lid, eid) * PAYLOAD)[:PAYLOAD]


def test_directories_are_written_and_synced_in_parallel(tmp_path: Path) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    ops = BarrierOps(3)
    logger = EntryLogger(dirs, file_ops=ops)
    try:
        entries = [(lid, eid, body(lid, eid)) for eid in range(20) for lid in range(1, 7)]
        ops.arm_writes = True  # the first data write of each directory: all three at once
        locations = logger.append(entries)
        ops.arm_writes = False
        assert len(ops.threads) == 3  # three writer threads (the caller's among them)
        ops.arm_syncs = True
        logger.sync()
        ops.arm_syncs = False
        log_dirs = {}
        for (lid, eid, data), loc in zip(entries, locations, strict=True):
            assert logger.read(loc, lid, eid) == data
            log_dirs.setdefault(lid % 3, set()).add(split_location(loc)[0])
        ids = [i for s in log_dirs.values() for i in s]
        assert len(ids) == len(set(ids)) == 3  # one current log per directory, distinct ids
        for i, d in enumerate(dirs):
            assert any(n.endswith(".log") for n in os.listdir(d)), i
    finally:
        logger.close()


def test_many_parallel_rolls_never_reuse_a_log_id(tmp_path: Path) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(4)]
    logger = EntryLogger(dirs, log_size_limit=HEADER_SIZE + 4 * (PAYLOAD + 20))
    try:
        entries = [(lid, eid, body(lid, eid)) for eid in range(40) for lid in range(1, 9)]
        locations = logger.append(entries)
        logger.sync()
        assert len({split_location(loc)[0] for loc in locations}) >= 4 * 10 - 4
        assert len(logger.list_logs()) == len(set(logger.list_logs()))
        for (lid, eid, data), loc in zip(entries, locations, strict=True):
            assert logger.read(loc, lid, eid) == data
    finally:
        logger.close()
    reopened = EntryLogger(dirs)  # ids go on above every directory's lastId
    try:
        loc = reopened.append([(1, 99, b"x")])[0]
        assert split_location(loc)[0] > max(split_location(x)[0] for x in locations)
    finally:
        reopened.close()


def test_a_failed_directory_fails_the_append_and_a_retry_succeeds(tmp_path: Path) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(2)]
    ops = BarrierOps(1)
    logger = EntryLogger(dirs, file_ops=ops)
    try:
        first = logger.append([(1, 0, body(1, 0)), (2, 0, body(2, 0))])  # opens both current logs
        logger.sync()
        failing = logger._current[(1, -1)].fd  # directory 1's current log
        ops.fail_fds.add(failing)
        entries = [(lid, eid, body(lid, eid)) for eid in range(1, 10) for lid in (1, 2)]
        with pytest.raises(StorageIOError):
            logger.append(entries)
        ops.fail_fds.clear()
        locations = logger.append(entries)  # the retry opens a new log in directory 1
        logger.sync()
        for (lid, eid, data), loc in zip(
            [(1, 0, body(1, 0)), (2, 0, body(2, 0)), *entries], [*first, *locations], strict=True
        ):
            assert logger.read(loc, lid, eid) == data
    finally:
        logger.close()
