"""A full disk in the journal: ENOSPC suspends (NO_SPACE) instead of failing, `resume` continues on
a fresh file, replay keeps every acknowledged record across the break, the space guard shrinks
preallocation, and a start without room for a file spends the reserve file."""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path

import pytest
import trio

from bookie import DiskUsage, SpaceGuard
from bookie.journal import (
    RESERVE_FILE,
    AddEntry,
    Journal,
    JournalConfig,
    JournalDisk,
    JournalIOError,
    JournalNoSpaceError,
    JournalState,
    LogMark,
)
from bookie.journal._codec import (
    FILE_HEADER_SIZE,
    decode_file_header,
    decode_file_prev,
    encode_add_header,
    encode_file_header,
)
from bookie.journal._files import list_journal_files

from .journal_helpers import FailingDisk, adds, open_journal, payload, replay_all

pytestmark = pytest.mark.timeout(60)

KiB = 1024
MiB = 1024 * KiB


def _record(ledger: int, entry: int, data: bytes) -> bytes:
    return encode_add_header(ledger, entry, data) + data


def _header(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(FILE_HEADER_SIZE)


async def test_enospc_suspends_and_resume_continues_on_a_fresh_file(tmp_path: Path) -> None:
    disk = FailingDisk()
    cfg = JournalConfig(flush_when_queue_empty=True, prealloc_size=64 * KiB)
    journal = await Journal.open(tmp_path / "journal", [tmp_path / "l"], cfg, disk=disk)
    acked: dict[tuple[int, int], bytes] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.serve)
        for i in range(20):
            await journal.log_add_entry(1, i, payload(1, i))
            acked[(1, i)] = payload(1, i)
        broken = journal.statistics().current_file_id
        disk.fail_write = True  # every write, and the at-once retry's file creation, fail: ENOSPC
        with pytest.raises(JournalNoSpaceError):
            await journal.log_add_entry(1, 20, payload(1, 20))
        assert journal.state is JournalState.NO_SPACE
        with pytest.raises(JournalIOError):  # the base class: callers that only know it still stop
            await journal.log_fence(1)
        assert not await journal.resume()  # still no space
        assert journal.state is JournalState.NO_SPACE
        disk.fail_write = False
        assert await journal.resume()
        assert journal.state is JournalState.SERVING
        fresh = journal.statistics().current_file_id
        assert fresh is not None and broken is not None and fresh > broken
        for i in range(21, 30):
            await journal.log_add_entry(1, i, payload(1, i))
            acked[(1, i)] = payload(1, i)
        stats = journal.statistics()
        assert stats.no_space_suspensions == 1 and stats.resumes == 1
        await journal.aclose()
    assert journal.state is JournalState.CLOSED
    files = list_journal_files(tmp_path / "journal")
    prev = decode_file_prev(_header(dict(files)[fresh]))
    assert prev is not None and prev.file_id == broken
    records, report = replay_all(tmp_path)
    assert report.stop is None
    got = adds(records)
    assert {k: got[k] for k in acked} == acked  # nothing acknowledged is lost, on both sides of the break


async def test_a_full_disk_while_closing_still_fails_for_good(tmp_path: Path) -> None:
    disk = FailingDisk()
    journal = await Journal.open(tmp_path / "journal", [tmp_path / "l"], JournalConfig(), disk=disk)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.serve)
        disk.write_errno = errno.EDQUOT  # a quota counts as a full disk too
        disk.fail_write = True
        with pytest.raises(JournalNoSpaceError):
            await journal.log_add_entry(1, 0, b"x")
        assert journal.state is JournalState.NO_SPACE
        await journal.aclose()
    assert journal.state is JournalState.CLOSED


def _write_file(
    directory: Path, file_id: int, records: list[bytes], prev: LogMark | None = None, tail: bytes = b"", size: int = 0
) -> int:
    """A journal file by hand; returns the offset where its records end."""
    data = encode_file_header(file_id, prev) + b"".join(records)
    end = len(data)
    data += tail
    data += bytes(max(0, size - len(data)))
    (directory / f"{file_id:x}.txn").write_bytes(data)
    return end


@pytest.mark.parametrize("tail", ["garbage", "torn record", "zeros then garbage"])
def test_replay_keeps_both_files_across_a_damaged_tail(tmp_path: Path, tail: str) -> None:
    jdir = tmp_path / "journal"
    jdir.mkdir()
    first = [_record(1, i, payload(1, i)) for i in range(5)]
    damage = {
        "garbage": os.urandom(3000),
        "torn record": _record(1, 5, payload(1, 5))[:40],
        "zeros then garbage": bytes(500) + os.urandom(100),
    }[tail]
    end = _write_file(jdir, 0x100, first, tail=damage, size=8 * KiB)
    _write_file(jdir, 0x200, [_record(2, i, payload(2, i)) for i in range(3)], prev=LogMark(0x100, end))
    records, report = replay_all(tmp_path)
    assert report.stop is None and len(report.bridged) == 1 and report.bridged[0].offset == end
    assert adds(records) == {**{(1, i): payload(1, i) for i in range(5)}, **{(2, i): payload(2, i) for i in range(3)}}


def test_replay_without_a_declaration_still_stops_at_damage_in_an_earlier_file(tmp_path: Path) -> None:
    jdir = tmp_path / "journal"
    jdir.mkdir()
    end = _write_file(jdir, 0x100, [_record(1, 0, b"a")], tail=os.urandom(300))
    # a newer file that declares a LATER end than the damage: its writer saw records there
    _write_file(jdir, 0x200, [_record(2, 0, b"b")], prev=LogMark(0x100, end + 100))
    records, report = replay_all(tmp_path)
    assert adds(records) == {(1, 0): b"a"}
    assert report.stop is not None and report.stop.file_id == 0x100 and not report.stop.last_file


def test_replay_passes_over_dead_files_a_later_file_declares(tmp_path: Path) -> None:
    jdir = tmp_path / "journal"
    jdir.mkdir()
    end = _write_file(jdir, 0x100, [_record(1, 0, b"a")], tail=os.urandom(200))
    _write_file(
        jdir, 0x180, [_record(9, 9, b"never acknowledged")], prev=LogMark(0x100, end + 500), tail=os.urandom(50)
    )
    _write_file(jdir, 0x200, [_record(2, 0, b"b")], prev=LogMark(0x100, end))
    records, report = replay_all(tmp_path)
    assert adds(records) == {(1, 0): b"a", (2, 0): b"b"}
    assert report.skipped_files == [0x180] and report.stop is None


def test_header_declaration_round_trip_and_old_headers(tmp_path: Path) -> None:
    head = encode_file_header(0x42, LogMark(0x41, 4096))
    assert decode_file_header(head) == 0x42 and decode_file_prev(head) == LogMark(0x41, 4096)
    assert decode_file_prev(encode_file_header(0x42)) is None
    bad = bytearray(head)
    bad[30] ^= 1
    with pytest.raises(ValueError):
        decode_file_prev(bytes(bad))


async def test_each_new_file_declares_where_the_journal_was(tmp_path: Path) -> None:
    journal = await open_journal(tmp_path, max_file_size=8 * KiB, prealloc_size=8 * KiB, flush_when_queue_empty=True)
    async with journal.running():
        for i in range(30):
            await journal.log_add_entry(1, i, payload(1, i, 1000))
    journal = await open_journal(tmp_path)
    await journal.replay()
    async with journal.running():
        await journal.log_add_entry(2, 0, b"after restart")
    files = list_journal_files(tmp_path / "journal")
    assert len(files) > 3
    for (prev_id, _), (_, path) in itertools.pairwise(files):
        prev = decode_file_prev(_header(path))
        assert prev is not None and prev.file_id == prev_id
    records, report = replay_all(tmp_path)
    assert report.stop is None and len(adds(records)) == 31


class _Usage:
    """A fake file system for the guard: ``headroom`` bytes left before the threshold."""

    def __init__(self, headroom: int) -> None:
        self.headroom = headroom

    def __call__(self, path: str) -> DiskUsage:
        total = 100 * MiB
        return DiskUsage(path, total, self.headroom + int(0.05 * total) + 1)


async def test_guard_shrinks_preallocation_then_reports_full(tmp_path: Path) -> None:
    usage = _Usage(100 * MiB)
    reports: list[str] = []
    guard = SpaceGuard(0.95, measure=usage, on_full=reports.append)
    journal = await Journal.open(
        tmp_path / "journal",
        [tmp_path / "l"],
        JournalConfig(prealloc_size=1 * MiB, flush_when_queue_empty=True),
        space_guard=guard,
    )
    async with journal.running():
        path = list_journal_files(tmp_path / "journal")[-1][1]
        assert os.path.getsize(path) == 1 * MiB  # room: a whole chunk
        usage.headroom = 300 * KiB  # less than a chunk: grow by what the headroom allows
        for i in range(20):
            await journal.log_add_entry(1, i, bytes(60 * KiB))
        size = os.path.getsize(path)
        assert 1 * MiB < size <= 1 * MiB + 300 * KiB + 64 * KiB and not reports
        usage.headroom = 4 * KiB  # not even the small step fits: read-only at once, write anyway
        for i in range(20, 30):
            await journal.log_add_entry(1, i, bytes(60 * KiB))
        assert reports and "journal preallocation" in reports[0]
        assert os.path.getsize(path) < 2 * MiB  # never a whole chunk past the threshold
    records, _ = replay_all(tmp_path)
    assert len(adds(records)) == 30


class _NoRoomWhileReserved(JournalDisk):
    """Creating a journal file fails with ENOSPC while the reserve file (or ``full``) takes the room."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.full = False

    def create(self, path: Path) -> int:
        if path.suffix == ".txn" and (self.full or (self.directory / RESERVE_FILE).exists()):
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return super().create(path)


async def test_start_without_room_for_a_file_spends_the_reserve(tmp_path: Path) -> None:
    journal = await open_journal(tmp_path)
    async with journal.running():
        await journal.log_add_entry(1, 0, b"before")
    jdir = tmp_path / "journal"
    assert (jdir / RESERVE_FILE).stat().st_size > 0  # made at the first start
    reports: list[str] = []
    guard = SpaceGuard(0.95, measure=_Usage(-1), on_full=reports.append)  # past the threshold
    journal = await Journal.open(jdir, [tmp_path / "ledgers0"], disk=_NoRoomWhileReserved(jdir), space_guard=guard)
    await journal.replay()
    async with journal.running():
        assert journal.state is JournalState.SERVING  # the reserve made room for a small file
        assert not (jdir / RESERVE_FILE).exists()  # and is not made again on a full disk
        assert reports  # the bookie would be read-only (DISK_FULL) at once
        await journal.log_fence(1)
        assert journal.statistics().no_space_suspensions == 1
        size = os.path.getsize(list_journal_files(jdir)[-1][1])
        assert size < 256 * KiB  # a small file, not a whole chunk
    records, report = replay_all(tmp_path)
    assert report.stop is None and adds(records) == {(1, 0): b"before"} and len(records) == 2


async def test_start_with_no_room_at_all_waits_in_no_space(tmp_path: Path) -> None:
    journal = await open_journal(tmp_path)
    async with journal.running():
        await journal.log_add_entry(1, 0, b"before")
    jdir = tmp_path / "journal"
    disk = _NoRoomWhileReserved(jdir)
    disk.full = True
    journal = await Journal.open(jdir, [tmp_path / "ledgers0"], disk=disk)
    await journal.replay()
    async with journal.running():
        assert journal.state is JournalState.NO_SPACE
        with pytest.raises(JournalNoSpaceError):
            await journal.log_fence(1)
        disk.full = False
        assert await journal.resume()
        await journal.log_add_entry(1, 1, b"after")
        assert (jdir / RESERVE_FILE).exists()  # made again once there was room
    records, report = replay_all(tmp_path)
    assert report.stop is None and adds(records) == {(1, 0): b"before", (1, 1): b"after"}
    assert all(isinstance(r, AddEntry) for _, r in records)


async def test_no_backups_are_kept_while_the_disk_is_past_the_threshold(tmp_path: Path) -> None:
    usage = _Usage(100 * MiB)
    guard = SpaceGuard(0.95, measure=usage)
    journal = await Journal.open(
        tmp_path / "journal",
        [tmp_path / "l"],
        JournalConfig(max_file_size=8 * KiB, prealloc_size=8 * KiB, max_backups=5, flush_when_queue_empty=True),
        space_guard=guard,
    )
    async with journal.running():
        for i in range(80):
            await journal.log_add_entry(1, i, payload(1, i, 1000))
        first = await journal.log_add_entry(1, 80, b"x")
        await journal.persist_last_mark(first)
        kept = [fid for fid, _ in list_journal_files(tmp_path / "journal") if fid < first.file_id]
        assert len(kept) == 5  # backups while there is room
        for i in range(81, 100):
            await journal.log_add_entry(1, i, payload(1, i, 1000))
        usage.headroom = -10 * KiB
        second = await journal.log_add_entry(1, 100, b"y")
        await journal.persist_last_mark(second)
        assert [fid for fid, _ in list_journal_files(tmp_path / "journal") if fid < second.file_id] == []
