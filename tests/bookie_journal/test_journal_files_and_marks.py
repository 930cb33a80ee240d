"""Files on disk: rolling, preallocation, lastMark persistence, backups, torn tails on replay."""

from __future__ import annotations

import itertools
import os
import random

import pytest
import trio
import trio.lowlevel

from bookie.journal import AddEntry, Journal, JournalConfig, LogMark
from bookie.journal._codec import FILE_HEADER_SIZE, StopReason
from bookie.journal._files import JournalDisk, list_journal_files
from bookie.journal._journal import ZERO_STEP
from bookie.journal._last_mark import LAST_MARK_FILE, read_last_mark, write_last_mark

from .journal_helpers import adds, open_journal, payload, replay_all

pytestmark = pytest.mark.timeout(60)

KiB = 1024


async def _write(tmp_path, n: int, size: int = 1000, **cfg) -> dict[tuple[int, int], LogMark]:
    journal = await open_journal(tmp_path, flush_when_queue_empty=True, **cfg)
    marks = {}
    async with journal.running():
        for i in range(n):
            marks[(1, i)] = await journal.log_add_entry(1, i, payload(1, i, size))
    return marks


async def test_roll_at_size_limit(tmp_path) -> None:
    marks = await _write(tmp_path, 50, max_file_size=10 * KiB, prealloc_size=4 * KiB)
    files = list_journal_files(tmp_path / "journal")
    ids = [fid for fid, _ in files]
    assert ids == sorted(ids) and len(ids) >= 5
    # no file holds records starting past the limit: each roll happens once the limit is passed
    for fid in ids[:-1]:
        in_file = [m.offset for m in marks.values() if m.file_id == fid]
        assert in_file and max(in_file) >= 10 * KiB and sorted(in_file)[-2] < 10 * KiB
    records, report = replay_all(tmp_path)
    assert report.stop is None and adds(records) == {k: payload(1, k[1], 1000) for k in marks}


async def test_preallocation_grows_in_chunks(tmp_path) -> None:
    journal = await open_journal(tmp_path, prealloc_size=64 * KiB, flush_when_queue_empty=True)
    sizes = []
    async with journal.running():
        path = list_journal_files(tmp_path / "journal")[-1][1]
        sizes.append(os.path.getsize(path))
        for i in range(100):
            await journal.log_add_entry(1, i, bytes(1500))
            sizes.append(os.path.getsize(path))
    assert sizes[0] == 64 * KiB
    assert all(s % (64 * KiB) == 0 for s in sizes)
    assert sorted(set(sizes)) == [64 * KiB, 128 * KiB, 192 * KiB]


class _ZeroLog(JournalDisk):
    """The real disk, recording each reserve and zero call as (fd, offset, length)."""

    def __init__(self) -> None:
        self.reserved: list[tuple[int, int, int]] = []
        self.zeroed: list[tuple[int, int, int]] = []

    def reserve(self, fd: int, offset: int, length: int) -> None:
        self.reserved.append((fd, offset, length))
        super().reserve(fd, offset, length)

    def zero(self, fd: int, offset: int, length: int) -> None:
        self.zeroed.append((fd, offset, length))
        super().zero(fd, offset, length)


async def test_files_are_reserved_in_chunks_and_zeroed_a_step_at_a_time(tmp_path) -> None:
    disk = _ZeroLog()
    journal = await Journal.open(
        tmp_path / "journal",
        [tmp_path / "ledgers"],
        JournalConfig(prealloc_size=4 * ZERO_STEP, flush_when_queue_empty=True),
        disk=disk,
    )
    marks = {}
    async with journal.running():
        for i in range(90):  # 90 x 64 KiB: into the second 4 MiB chunk
            marks[(1, i)] = await journal.log_add_entry(1, i, payload(1, i, 64 * KiB))
    (fd,) = {fd for fd, offset, length in disk.reserved if length == 4 * ZERO_STEP and offset == 0}
    reserved = [(o, n) for f, o, n in disk.reserved if f == fd]  # not the reserve file's
    zeroed = [(o, n) for f, o, n in disk.zeroed if f == fd]
    assert reserved == [(0, 4 * ZERO_STEP), (4 * ZERO_STEP, 4 * ZERO_STEP)]
    # zeros go down one step at a time, each range right after the last, never past the reserve
    assert zeroed[0] == (0, ZERO_STEP) and all(n <= ZERO_STEP for _, n in zeroed)
    assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(zeroed))
    last = max(m.offset for m in marks.values())
    assert last < zeroed[-1][0] + zeroed[-1][1] <= 8 * ZERO_STEP
    records, report = replay_all(tmp_path)  # the reserved, unzeroed rest reads as a clean end
    assert report.stop is None and adds(records) == {k: payload(1, k[1], 64 * KiB) for k in marks}


async def test_last_mark_is_written_to_every_ledger_dir_and_read_as_max(tmp_path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    assert read_last_mark(dirs) == LogMark(0, 0)
    write_last_mark(dirs, LogMark(5, 100))
    assert all((d / LAST_MARK_FILE).exists() for d in dirs)
    write_last_mark(dirs[:1], LogMark(6, 10))
    assert read_last_mark(dirs) == LogMark(6, 10)
    (dirs[0] / LAST_MARK_FILE).write_bytes(b"garbage")  # a damaged copy is skipped
    assert read_last_mark(dirs) == LogMark(5, 100)


async def test_persist_last_mark_deletes_old_files_beyond_backups(tmp_path) -> None:
    journal = await open_journal(
        tmp_path, max_file_size=4 * KiB, prealloc_size=4 * KiB, max_backups=2, flush_when_queue_empty=True
    )
    async with journal.running():
        for i in range(40):
            await journal.log_add_entry(1, i, bytes(1000))
        before = [fid for fid, _ in list_journal_files(tmp_path / "journal")]
        mark = journal.current_mark()
        with pytest.raises(ValueError):
            await journal.persist_last_mark(LogMark(mark.file_id + 1, 0))
        removed = await journal.persist_last_mark(mark)
        after = [fid for fid, _ in list_journal_files(tmp_path / "journal")]
    below = [f for f in before if f < mark.file_id]
    assert removed == below[:-2]
    assert after == below[-2:] + [f for f in before if f >= mark.file_id]
    assert journal.persisted_mark == mark
    assert read_last_mark([tmp_path / "ledgers0"]) == mark == read_last_mark([tmp_path / "ledgers1"])
    # a reopened journal replays from the persisted mark only
    j2 = await open_journal(tmp_path)
    assert j2.persisted_mark == mark
    report = await j2.replay()
    assert report.records == 0


async def test_replay_from_mark_skips_earlier_records(tmp_path) -> None:
    marks = await _write(tmp_path, 10)
    records, _ = replay_all(tmp_path, marks[(1, 4)])
    assert [r.entry_id for _, r in records] == [5, 6, 7, 8, 9]


def _last_file(tmp_path):
    return list_journal_files(tmp_path / "journal")[-1][1]


@pytest.mark.parametrize("seed", range(6))
async def test_replay_ignores_torn_tail_at_random_offsets(tmp_path, seed) -> None:
    marks = await _write(tmp_path, 30, size=300)
    path = _last_file(tmp_path)
    rng = random.Random(seed)
    end = max(m.offset for m in marks.values())
    cut = rng.randrange(FILE_HEADER_SIZE, end)
    with open(path, "r+b") as f:
        f.truncate(cut)
    records, report = replay_all(tmp_path)
    kept = {k for k, m in marks.items() if m.offset <= cut}
    assert set(adds(records)) == kept
    assert all(adds(records)[k] == payload(1, k[1], 300) for k in kept)
    if cut not in {m.offset for m in marks.values()}:
        assert report.stop is not None and report.stop.last_file
        assert report.stop.reason is StopReason.TRUNCATED


@pytest.mark.parametrize("seed", range(6))
async def test_replay_stops_at_bit_flip_in_last_file_and_new_writes_go_to_a_new_file(tmp_path, seed) -> None:
    marks = await _write(tmp_path, 30, size=300)
    path = _last_file(tmp_path)
    rng = random.Random(seed)
    end = max(m.offset for m in marks.values())
    pos = rng.randrange(FILE_HEADER_SIZE, end)
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    journal = await open_journal(tmp_path)
    seen = []
    report = await journal.replay(lambda m, r: seen.append(r))
    kept = sorted(k for k, m in marks.items() if m.offset <= pos)
    assert [(r.ledger_id, r.entry_id) for r in seen] == kept
    assert report.stop is not None and report.stop.last_file and report.stop.offset <= pos
    async with journal.running():
        new_mark = await journal.log_add_entry(2, 0, b"after")
    assert new_mark.file_id > int(path.stem, 16)
    # the damaged file was cut where replay stopped, so the next replay passes through cleanly
    records, report2 = replay_all(tmp_path)
    assert report2.stop is None
    assert [(r.ledger_id, r.entry_id) for _, r in records] == [*kept, (2, 0)]


async def test_corruption_in_an_earlier_file_stops_replay_there(tmp_path, caplog) -> None:
    marks = await _write(tmp_path, 40, size=1000, max_file_size=8 * KiB, prealloc_size=8 * KiB)
    files = list_journal_files(tmp_path / "journal")
    first_id, first_path = files[0]
    in_first = sorted(m.offset for m in marks.values() if m.file_id == first_id)
    with open(first_path, "r+b") as f:
        f.seek(in_first[1] + 20)  # inside the third record
        f.write(b"\xff\xff")
    records, report = replay_all(tmp_path)
    assert len(records) == 2
    assert report.stop is not None and not report.stop.last_file
    assert report.stop.file_id == first_id and report.stop.offset == in_first[1]
    assert any("CORRUPT" in r.message for r in caplog.records)


async def test_torn_header_of_last_file_is_set_aside(tmp_path) -> None:
    await _write(tmp_path, 3)
    jdir = tmp_path / "journal"
    bogus = jdir / f"{0xFFFFFFFFFFFF:x}.txn"
    bogus.write_bytes(bytes(100))  # created, header never written
    journal = await open_journal(tmp_path)
    report = await journal.replay()
    assert report.records == 3 and report.stop is not None and report.stop.offset == 0
    assert not bogus.exists() and bogus.with_name(bogus.name + ".torn").exists()
    async with journal.running():
        mark = await journal.log_add_entry(9, 9, b"x")
    assert mark.file_id > 0xFFFFFFFFFFFF  # ids never go backwards, even past a bad file


async def test_serve_without_replay_still_repairs_torn_tail(tmp_path) -> None:
    marks = await _write(tmp_path, 5, size=300)
    path = _last_file(tmp_path)
    end = max(m.offset for m in marks.values())
    with open(path, "r+b") as f:
        f.truncate(end - 10)
    journal = await open_journal(tmp_path)
    async with journal.running():
        await journal.log_add_entry(2, 0, b"new")
    records, report = replay_all(tmp_path)
    assert report.stop is None
    assert [(r.ledger_id, r.entry_id) for _, r in records] == [(1, i) for i in range(4)] + [(2, 0)]
    assert isinstance(records[-1][1], AddEntry)


async def test_file_ids_increase_across_restarts(tmp_path) -> None:
    ids = []
    for _ in range(3):
        journal = await open_journal(tmp_path)
        async with journal.running():
            ids.append(journal.statistics().current_file_id)
        await trio.lowlevel.checkpoint()
    assert ids == sorted(set(ids))
