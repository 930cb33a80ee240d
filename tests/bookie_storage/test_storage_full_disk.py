"""A full disk under the ledger storage: a failed flush leaks no entry log and no space, keeps its
entries readable in the write cache and writes them once space is back; a flush that cannot fit
is refused before any file is touched; a replay that cannot flush holds its entries past the
write cache's bound."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from bookie import DiskUsage, SpaceGuard
from bookie.storage import DbLedgerStorage, FlushReason, StorageIOError
from bookie.storage._entry_log_codec import HEADER_SIZE
from tests.support.fake_files import FailingFileOps, RecordingCheckpointSource
from tests.support.tmpfs import mounted_tmpfs

pytestmark = pytest.mark.timeout(60)

MiB = 1024 * 1024


def _payload(lid: int, eid: int, size: int = 3000) -> bytes:
    return bytes([lid % 251, eid % 251]) * (size // 2)


class DataWritesFail(FailingFileOps):
    """Entry-log headers still fit, record data does not (a disk with a few KiB left): ENOSPC.

    Partial writes land half their bytes first, as a real disk filling up mid-write does."""

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def write(self, fd: int, data: memoryview) -> int:
        if self.full and len(data) != HEADER_SIZE:
            if len(data) > 2:
                os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return super().write(fd, data)


def _logs(*dirs: Path) -> list[str]:
    return sorted(n for d in dirs for n in os.listdir(d) if n.endswith(".log"))


def _bytes_on_disk(*dirs: Path) -> int:
    return sum(os.path.getsize(d / n) for d in dirs for n in os.listdir(d))


async def test_failed_flushes_leak_no_entry_log_and_write_all_once_space_is_back(tmp_path: Path) -> None:
    ops = DataWritesFail()
    source = RecordingCheckpointSource([])
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    st = DbLedgerStorage(dirs, file_ops=ops, checkpoint_source=source, write_cache_max_bytes=4 * MiB)
    for lid in (1, 2):
        for eid in range(40):
            await st.add_entry(lid, eid, _payload(lid, eid))
    await st.flush()  # a first good flush: each directory has a current log with records
    for lid in (1, 2):
        for eid in range(40, 80):
            await st.add_entry(lid, eid, _payload(lid, eid))
    st.set_fenced(2)
    logs_before, size_before = _logs(*dirs), _bytes_on_disk(*dirs)
    ops.full = True
    for _ in range(10):
        with pytest.raises(StorageIOError) as info:
            await st.flush()
        assert info.value.errno == errno.ENOSPC
        for lid in (1, 2):  # reads keep working from the write cache
            assert await st.get_entry(lid, 79) == _payload(lid, 79)
    logs_after = _logs(*dirs)
    # the logs that held records are abandoned (kept); none per failed attempt is left behind
    assert len(logs_after) <= len(logs_before)
    assert _bytes_on_disk(*dirs) <= size_before + 64 * 1024
    assert source.completed == [1]  # no checkpoint while full
    assert st.statistics().entry_logs.removed_empty >= 9
    ops.full = False
    await st.flush(FlushReason.RETRY)
    assert source.completed[-1] > 1
    assert st.statistics().write_cache.count == 0
    for lid in (1, 2):
        for eid in range(80):
            assert await st.get_entry(lid, eid) == _payload(lid, eid)
    await st.aclose()
    st = DbLedgerStorage(dirs)  # the index is whole: everything reads back after a reopen
    for lid in (1, 2):
        for eid in range(80):
            assert await st.get_entry(lid, eid) == _payload(lid, eid)
    assert st.is_fenced(2) and not st.is_fenced(1)
    await st.aclose()


class _Fs:
    """A fake file system for the guard."""

    def __init__(self, free: int, total: int = 100 * MiB) -> None:
        self.free, self.total = free, total

    def __call__(self, path: str) -> DiskUsage:
        return DiskUsage(path, self.total, self.free)


async def test_flush_that_cannot_fit_is_refused_before_touching_a_file(tmp_path: Path) -> None:
    fs = _Fs(free=50 * MiB)
    reports: list[str] = []
    guard = SpaceGuard(0.95, measure=fs, on_full=reports.append)
    ops = FailingFileOps()
    st = DbLedgerStorage([tmp_path / "d0"], file_ops=ops, space_guard=guard, write_cache_max_bytes=8 * MiB)
    for eid in range(100):
        await st.add_entry(1, eid, _payload(1, eid, 10_000))  # ~1 MB
    fs.free = 512 * 1024
    with pytest.raises(StorageIOError) as info:
        await st.flush()
    assert info.value.errno == errno.ENOSPC and "refused" in str(info.value)
    assert ops.writes == 0 and _logs(tmp_path / "d0") == []
    assert reports and "write-cache flush" in reports[0]
    assert st.metrics.flush_no_space._value.get() == 1
    assert await st.get_entry(1, 99) == _payload(1, 99, 10_000)
    fs.free = 5 * MiB + 512 * 1024  # fits, but takes the disk past 95%: reported, and written
    reports.clear()
    await st.flush()
    assert reports and st.statistics().write_cache.count == 0
    fs.free = 50 * MiB
    reports.clear()
    await st.add_entry(1, 100, b"x" * 100)
    await st.flush()
    assert not reports
    await st.aclose()


async def test_hold_entry_keeps_a_replay_past_the_bound_until_it_can_flush(tmp_path: Path) -> None:
    st = DbLedgerStorage([tmp_path / "d0"], write_cache_max_bytes=1 * MiB, max_throttle_time_ms=10)
    for eid in range(300):  # ~3 MB into a 1 MB cache
        st.hold_entry(5, eid, _payload(5, eid, 10_000))
    assert st.statistics().write_cache.size_bytes > 2 * MiB
    assert await st.get_entry(5, 299) == _payload(5, 299, 10_000)
    assert st.last_entry_id(5) == 299
    await st.flush()
    assert st.statistics().write_cache.count == 0
    assert await st.get_entry(5, 0) == _payload(5, 0, 10_000)
    await st.aclose()


async def test_flush_loop_backs_off_then_writes_once_space_is_back(tmp_path: Path) -> None:
    ops = DataWritesFail()
    errors: list[StorageIOError] = []
    st = DbLedgerStorage([tmp_path / "d0"], file_ops=ops, flush_interval_ms=50, on_flush_error=errors.append)
    await st.add_entry(1, 0, _payload(1, 0))
    ops.full = True
    async with trio.open_nursery() as nursery:
        await nursery.start(st.run)
        with trio.fail_after(10):
            while len(errors) < 3:
                await trio.sleep(0.01)
        assert len(_logs(tmp_path / "d0")) == 0
        ops.full = False
        with trio.fail_after(10):
            while st.statistics().write_cache.count:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert st.metrics.flush_reason.labels("retry")._value.get() >= 3
    await st.aclose()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "4m") as disk:
        yield disk


def _fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 20, 4096, 1):
            while True:
                try:
                    if os.write(fd, bytes(chunk)) < chunk:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)


async def test_storage_closed_cleanly_opens_on_a_full_disk(small_tmpfs: Path) -> None:
    # sqlite deletes a WAL database's -wal and -shm files on a clean close, and cannot read the
    # database without them: the index leaves WAL mode on close so that this still opens
    st = DbLedgerStorage([small_tmpfs / "d0"])
    for eid in range(50):
        await st.add_entry(1, eid, _payload(1, eid))
    st.set_fenced(1)
    await st.flush()
    await st.aclose()
    _fill(small_tmpfs / "filler")
    assert os.statvfs(small_tmpfs).f_bavail == 0
    st = DbLedgerStorage([small_tmpfs / "d0"])
    assert [await st.get_entry(1, eid) for eid in range(50)] == [_payload(1, eid) for eid in range(50)]
    assert st.is_fenced(1)
    await st.add_entry(2, 0, b"while full")
    with pytest.raises(StorageIOError):
        await st.flush()
    await st.aclose()  # closing on the full disk does not raise either
    st = DbLedgerStorage([small_tmpfs / "d0"])
    os.unlink(small_tmpfs / "filler")
    await st.add_entry(2, 0, b"after")
    await st.flush()  # back in WAL mode, writes work again
    await st.aclose()
    st = DbLedgerStorage([small_tmpfs / "d0"])
    assert await st.get_entry(2, 0) == b"after" and await st.get_entry(1, 49) == _payload(1, 49)
    await st.aclose()
