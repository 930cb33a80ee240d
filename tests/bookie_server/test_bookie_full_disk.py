"""A full disk seen by the bookie core (`open_bookie`), with ENOSPC injected where a real tmpfs is
awkward (see test_bookie_full_disk_process.py for real processes on a tmpfs):

* an allocation that would pass diskUsageThreshold turns the bookie read-only at once;
* ENOSPC in the journal is recoverable: nothing unacknowledged is acknowledged, the bookie is
  read-only (JOURNAL_NO_SPACE) and writable again, by itself, once the disk checker sees space;
* a fence whose journal record failed is journaled again, not answered from memory;
* a bookie opened on a full disk replays into memory, comes up read-only, serves reads, LAC reads
  and fences, and turns writable once space is back; nothing acknowledged is lost.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from bookie import (
    BookieError,
    BookieState,
    DiskUsage,
    JournalDisk,
    ReadOnlyReason,
    open_bookie,
    run_disk_checker,
)
from bookie.journal import FenceLedger, LogMark
from bookie.journal._files import iter_journal
from bookie.storage._entry_log_codec import HEADER_SIZE
from protocols.bookkeeper import StatusCode
from tests.support.bookie_server import KEY, entry, make_config
from tests.support.fake_files import FailingFileOps

pytestmark = pytest.mark.timeout(60)

KiB = 1024
MiB = 1024 * KiB
RESERVE_FILE = "reserve.space"  # bookie.journal._journal.RESERVE_FILE


class _FullJournalDisk(JournalDisk):
    """Journal writes and file creations fail with ENOSPC while ``full``. Given ``journal_dir``,
    only creating a journal file fails, and only while the journal's reserve file exists (deleting
    it makes room, as on a real full disk)."""

    def __init__(self, journal_dir: Path | None = None) -> None:
        self.full = False
        self.journal_dir = journal_dir

    def _no_room(self) -> bool:
        if self.journal_dir is not None:
            return (self.journal_dir / RESERVE_FILE).exists()
        return self.full

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        if self.full and self.journal_dir is None:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        super().pwrite(fd, data, offset)

    def create(self, path: Path) -> int:
        if path.suffix == ".txn" and self._no_room():
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return super().create(path)


class _FullLedgerDisk(FailingFileOps):
    """Entry-log record data fails with ENOSPC while ``full`` (headers still fit)."""

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def write(self, fd: int, data: memoryview) -> int:
        if self.full and len(data) != HEADER_SIZE:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return super().write(fd, data)


def _usage(fraction: float):
    def measure(paths: Sequence[str]) -> list[DiskUsage]:
        return [DiskUsage(p, 1000, int(1000 * (1 - fraction))) for p in paths]

    return measure


async def _status(call) -> StatusCode:
    try:
        await call
    except BookieError as exc:
        return exc.status
    return StatusCode.EOK


async def test_allocation_past_the_threshold_turns_read_only_before_the_disk_checker(tmp_path: Path) -> None:
    fs = {"headroom": 500 * MiB}

    def measure(path: str) -> DiskUsage:
        total = 1000 * MiB
        return DiskUsage(path, total, fs["headroom"] + int(0.05 * total))

    from bookie import SpaceGuard

    cfg = make_config(tmp_path, journal_prealloc_size_mb=1, write_cache_max_mb=16)
    async with open_bookie(cfg, space_guard=SpaceGuard(cfg.disk_usage_threshold, measure=measure)) as b:
        for i in range(5):
            await b.add_entry(1, i, KEY, entry(1, i, bytes(60 * KiB)))
        fs["headroom"] = 8 * KiB  # no disk checker runs: only the allocations can notice
        added = 5
        while b.state is BookieState.WRITABLE and added < 100:
            await b.add_entry(1, added, KEY, entry(1, added, bytes(60 * KiB)))
            added += 1
        assert b.state is BookieState.READ_ONLY and added < 40  # at the journal's next preallocation
        assert b.read_only_reasons == {ReadOnlyReason.DISK_FULL}
        assert b.metrics.disk_full_early._value.get() == 1
        assert await _status(b.add_entry(1, added, KEY, entry(1, added, b"x"))) is StatusCode.EREADONLY
        await b.storage.flush()  # the flush still runs (it fits): the journal's data moves on
        assert [await b.read_entry(1, i) for i in range(added)] == [entry(1, i, bytes(60 * KiB)) for i in range(added)]
        fs["headroom"] = 500 * MiB
        async with trio.open_nursery() as nursery:  # only the disk checker clears DISK_FULL
            await nursery.start(lambda task_status: run_disk_checker(b, measure=_usage(0.5), task_status=task_status))
            assert b.state is BookieState.WRITABLE
            nursery.cancel_scope.cancel()
        await b.add_entry(1, added, KEY, entry(1, added, b"again"))


async def test_journal_out_of_space_turns_read_only_and_resumes_by_itself(tmp_path: Path) -> None:
    disk = _FullJournalDisk()
    cfg = make_config(tmp_path, disk_check_interval_ms=20)
    usage = {"fraction": 0.5}

    def measure(paths: Sequence[str]) -> list[DiskUsage]:
        return _usage(usage["fraction"])(paths)

    async with open_bookie(cfg, journal_disk=disk) as b:
        for i in range(10):
            await b.add_entry(1, i, KEY, entry(1, i, b"ok"))
        disk.full = True
        usage["fraction"] = 0.99
        assert await _status(b.add_entry(1, 10, KEY, entry(1, 10, b"never acked"))) is StatusCode.EIO
        assert b.read_only_reasons == {ReadOnlyReason.JOURNAL_NO_SPACE}
        assert b.journal.state.value == "no_space"
        assert await _status(b.add_entry(1, 11, KEY, entry(1, 11, b"x"))) is StatusCode.EREADONLY
        recovery = b.add_entry(1, 11, KEY, entry(1, 11, b"x"), recovery=True)
        assert await _status(recovery) is StatusCode.EREADONLY
        assert await _status(b.fence(1, KEY)) is StatusCode.EIO  # no journal record possible
        assert [await b.read_entry(1, i) for i in range(10)] == [entry(1, i, b"ok") for i in range(10)]
        assert await b.lac(1) == 8
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: run_disk_checker(b, measure=measure, task_status=task_status))
            assert b.read_only_reasons == {ReadOnlyReason.JOURNAL_NO_SPACE, ReadOnlyReason.DISK_FULL}
            usage["fraction"] = 0.5  # below the LWM, but the journal still cannot create a file
            with trio.fail_after(10):
                while ReadOnlyReason.DISK_FULL in b.read_only_reasons:
                    await trio.sleep(0.01)
            # nothing should clear JOURNAL_NO_SPACE while the journal still cannot create a file: a
            # bounded chance (several disk checks) for that to go wrong
            await trio.sleep(0.1)
            assert b.read_only_reasons == {ReadOnlyReason.JOURNAL_NO_SPACE}
            disk.full = False  # space is back: the next check resumes the journal
            with trio.fail_after(10):
                while b.state is BookieState.READ_ONLY:
                    await b.wait_state_change()
            nursery.cancel_scope.cancel()
        for i in range(10, 20):
            await b.add_entry(1, i, KEY, entry(1, i, b"after"))
        await b.fence(1, KEY)
        assert b.journal.statistics().resumes == 1
    async with open_bookie(cfg) as b:  # nothing acknowledged is lost, on either side of the break
        want = [entry(1, i, b"ok") for i in range(10)] + [entry(1, i, b"after") for i in range(10, 20)]
        assert [await b.read_entry(1, i) for i in range(20)] == want
        assert await _status(b.add_entry(1, 20, KEY, entry(1, 20, b"x"))) is StatusCode.EFENCED


async def test_a_fence_whose_record_failed_is_journaled_again(tmp_path: Path) -> None:
    disk = _FullJournalDisk()
    cfg = make_config(tmp_path)
    async with open_bookie(cfg, journal_disk=disk) as b:
        await b.add_entry(2, 0, KEY, entry(2, 0, b"a"))
        disk.full = True
        assert await _status(b.fence(2, KEY)) is StatusCode.EIO  # submitted, then the write failed
        # fenced in memory (adds are refused) but not durable: a second fence must not say OK
        assert await _status(b.fence(2, KEY)) is StatusCode.EIO
        disk.full = False
        await b.space_available()
        assert b.state is BookieState.WRITABLE
        await b.fence(2, KEY)
        fences = [r for _, r in iter_journal(cfg.journal_dir, LogMark(0, 0)) if isinstance(r, FenceLedger)]
        assert fences == [FenceLedger(2)]


async def test_open_on_a_full_disk_comes_up_read_only_then_turns_writable(tmp_path: Path) -> None:
    ops = _FullLedgerDisk()
    big = make_config(tmp_path, write_cache_max_mb=16)
    body = bytes(50 * KiB)
    async with open_bookie(big, file_ops=ops) as b:
        for i in range(60):  # 3 MB: in the write cache and the journal, not flushed yet
            await b.add_entry(3, i, KEY, entry(3, i, body))
        await b.fence(4, KEY)
        await b.add_entry(5, 0, KEY, entry(5, 0, b"five"))
        ops.full = True  # the final checkpoint fails: everything stays in the journal only
    # a smaller write cache: the replay has to flush halfway, which fails, so it holds the rest
    small = make_config(tmp_path, write_cache_max_mb=2)
    jdisk = _FullJournalDisk(Path(small.journal_dir))  # a journal file fits once the reserve is gone
    assert (Path(small.journal_dir) / RESERVE_FILE).exists()
    async with open_bookie(small, file_ops=ops, journal_disk=jdisk) as b:
        assert b.state is BookieState.READ_ONLY
        assert ReadOnlyReason.STORAGE_ERROR in b.read_only_reasons
        assert ReadOnlyReason.JOURNAL_NO_SPACE in b.read_only_reasons
        assert [await b.read_entry(3, i) for i in range(60)] == [entry(3, i, body) for i in range(60)]
        assert await b.lac(3) == 58
        assert await b.read_lac(5) == (None, entry(5, 0, b"five"))
        assert await _status(b.add_entry(5, 1, KEY, entry(5, 1, b"x"))) is StatusCode.EREADONLY
        await b.fence(3, KEY)  # a new owner can fence: the journal spent its reserve for this
        await b.fence(4, KEY)
        recovery = b.add_entry(3, 60, KEY, entry(3, 60, b"x"), recovery=True)
        assert await _status(recovery) is StatusCode.EREADONLY
        ops.full = False
        await b.space_available()  # what the disk checker calls once usage is below the LWM
        assert b.state is BookieState.WRITABLE
        await b.add_entry(5, 1, KEY, entry(5, 1, b"five again"))
        assert (Path(small.journal_dir) / RESERVE_FILE).exists()  # made again
    async with open_bookie(small) as b:
        assert [await b.read_entry(3, i) for i in range(60)] == [entry(3, i, body) for i in range(60)]
        assert await b.read_entry(5, 1) == entry(5, 1, b"five again")
        for ledger in (3, 4):
            assert await _status(b.add_entry(ledger, 99, KEY, entry(ledger, 99, b"x"))) is StatusCode.EFENCED
        assert b.state is BookieState.WRITABLE


async def test_disk_checker_judges_before_it_reports_started(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: run_disk_checker(b, measure=_usage(0.99), task_status=task_status))
            assert b.read_only_reasons == {ReadOnlyReason.DISK_FULL}  # before registration would run
            nursery.cancel_scope.cancel()
