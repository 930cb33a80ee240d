"""Entry logs on disk: routing, rolling, ledgers maps vs scans, ids, reads, failures, GC hooks."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bookie.storage import EntryLogger, StorageIOError
from bookie.storage._entry_log_codec import HEADER_SIZE, decode_header, split_location
from tests.support.fake_files import FailingFileOps


def _entries(ledgers: range, per: int, size: int = 100) -> list[tuple[int, int, bytes]]:
    return [(lid, eid, bytes([lid % 256, eid % 256]) * (size // 2)) for lid in ledgers for eid in range(per)]


def test_append_read_and_directory_routing(tmp_path: Path) -> None:
    el = EntryLogger([tmp_path / "a", tmp_path / "b"])
    entries = _entries(range(4), 10)
    locs = el.append(entries)
    el.sync()
    for (lid, eid, payload), loc in zip(entries, locs, strict=True):
        assert el.read(loc, lid, eid) == payload
        log_id, offset = split_location(loc)
        assert offset >= HEADER_SIZE
        assert el.log_path(log_id).parent.name == ("a" if lid % 2 == 0 else "b")
    assert len(el.current_log_ids()) == 2
    el.close()


def test_one_write_call_per_directory_per_batch(tmp_path: Path) -> None:
    ops = FailingFileOps()
    el = EntryLogger([tmp_path], file_ops=ops)
    el.append(_entries(range(1), 1))  # creates the log (header write) first
    before = ops.writes
    el.append(_entries(range(50), 20))
    assert ops.writes == before + 1
    el.close()


def test_roll_writes_ledgers_map_matching_a_scan(tmp_path: Path) -> None:
    el = EntryLogger([tmp_path], log_size_limit=64 * 1024)
    entries = _entries(range(5), 200, size=200)  # ~220 KB -> several logs
    locs = el.append(entries)
    el.sync()
    el.close()
    logs = el.list_logs()
    assert len(logs) >= 3
    reopened = EntryLogger([tmp_path], log_size_limit=64 * 1024)
    total = 0
    for log_id in logs:
        path = reopened.log_path(log_id)
        assert path.stat().st_size <= 64 * 1024 + 10_000  # limit plus the ledgers map
        with open(path, "rb") as f:
            header = decode_header(f.read(HEADER_SIZE))
        assert header.ledgers_map_offset > 0  # every log was rolled or closed cleanly
        usage = reopened.usage(log_id)
        scanned: dict[int, int] = {}
        for rec in reopened.scan(log_id):
            scanned[rec.ledger_id] = scanned.get(rec.ledger_id, 0) + 20 + len(rec.payload)
        assert usage.ledgers == scanned
        assert usage.total_size == sum(scanned.values())
        total += usage.total_size
    assert total == sum(20 + len(p) for _, _, p in entries)
    # every location still reads back after the rolls and a reopen
    for (lid, eid, payload), loc in zip(entries, locs, strict=True):
        assert reopened.read(loc, lid, eid) == payload
    reopened.close()


def test_log_without_map_is_rebuilt_by_scan_and_stops_at_torn_tail(tmp_path: Path) -> None:
    el = EntryLogger([tmp_path])
    entries = _entries(range(3), 10)
    el.append(entries)
    el.sync()
    (log_id,) = el.current_log_ids()
    path = el.log_path(log_id)
    # simulate a crash: no close (no map), plus a torn half record at the tail
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01\x00" + b"\x00" * 30)
    crashed = EntryLogger([tmp_path])
    usage = crashed.usage(log_id)
    assert usage.ledgers == {lid: 10 * (20 + 100) for lid in range(3)}
    recs = list(crashed.scan(log_id))
    assert [(r.ledger_id, r.entry_id, r.payload) for r in recs] == entries
    crashed.close()


@pytest.mark.parametrize("read_size", [1, 100, 4096, 64 * 1024])
def test_a_scan_in_small_reads_yields_what_a_whole_scan_does(tmp_path: Path, read_size: int) -> None:
    """Compaction scans in reads of its chunk size: records larger than a read, records split
    across reads and the ledgers map at the end come out exactly as with the default reads."""
    el = EntryLogger([tmp_path])
    entries = [
        (lid, eid, os.urandom(size))
        for lid, eid, size in [(1, 0, 10), (2, 0, 5000), (1, 1, 100_000), (3, 0, 1), (2, 1, 4096), (1, 2, 70_000)]
    ]
    el.append(entries)
    el.roll_all()  # the ledgers map follows the records: a scan must stop before it
    (log_id,) = el.list_logs()
    whole = [(r.ledger_id, r.entry_id, r.location, r.payload) for r in el.scan(log_id)]
    small = [(r.ledger_id, r.entry_id, r.location, r.payload) for r in el.scan(log_id, read_size=read_size)]
    assert small == whole
    assert [(lid, eid, p) for lid, eid, _, p in small] == entries
    el.close()


def test_log_ids_never_repeat_even_after_removal(tmp_path: Path) -> None:
    el = EntryLogger([tmp_path])
    el.append(_entries(range(1), 5))
    el.close()
    (first,) = el.list_logs()
    el2 = EntryLogger([tmp_path])
    el2.append(_entries(range(1), 5))
    el2.roll_all()
    second = max(el2.list_logs())
    assert second > first
    el2.remove_log(second)  # GC removes the highest log
    el2.close()
    el3 = EntryLogger([tmp_path])
    el3.append(_entries(range(1), 5))
    (third,) = el3.current_log_ids()
    assert third > second
    el3.close()


def test_read_following_stops_at_ledger_change_and_limits(tmp_path: Path) -> None:
    el = EntryLogger([tmp_path])
    entries = _entries(range(2), 10)
    locs = el.append(entries)
    el.sync()
    got = el.read_following(locs[3], 0, 100, 1 << 20)
    assert [e for e, _ in got] == list(range(3, 10))  # stops before ledger 1
    assert got[0][1] == entries[3][2]
    assert [e for e, _ in el.read_following(locs[3], 0, 2, 1 << 20)] == [3, 4]
    assert [e for e, _ in el.read_following(locs[3], 0, 100, 250)] == [3, 4]  # whole records only
    el.close()


def test_failed_write_raises_truncates_and_moves_to_a_new_log(tmp_path: Path) -> None:
    ops = FailingFileOps()
    el = EntryLogger([tmp_path], file_ops=ops)
    good = _entries(range(1), 5)
    good_locs = el.append(good)
    el.sync()
    (log_id,) = el.current_log_ids()
    size_before = el.log_path(log_id).stat().st_size
    ops.partial_then_fail = True
    with pytest.raises(StorageIOError) as info:
        el.append(_entries(range(1, 2), 50))
    assert info.value.errno == errno.ENOSPC
    assert el.log_path(log_id).stat().st_size == size_before  # torn bytes cut off
    assert el.current_log_ids() == set()
    ops.fail_writes = False
    locs = el.append(_entries(range(1, 2), 50))
    el.sync()
    assert split_location(locs[0])[0] > log_id
    for (lid, eid, payload), loc in zip(good, good_locs, strict=True):
        assert el.read(loc, lid, eid) == payload
    el.close()


def test_failed_sync_raises_storage_io_error(tmp_path: Path) -> None:
    ops = FailingFileOps()
    el = EntryLogger([tmp_path], file_ops=ops)
    el.append(_entries(range(1), 5))
    ops.fail_syncs = True
    with pytest.raises(StorageIOError):
        el.sync()
    ops.fail_syncs = False
    el.close()


def test_remove_log_and_refuse_current(tmp_path: Path) -> None:
    el = EntryLogger([tmp_path])
    locs = el.append(_entries(range(1), 5))
    (cur,) = el.current_log_ids()
    with pytest.raises(ValueError):
        el.remove_log(cur)
    el.roll_all()
    el.remove_log(cur)
    assert cur not in el.list_logs()
    assert not any(name.endswith(".log") for name in os.listdir(tmp_path))
    with pytest.raises(FileNotFoundError):
        el.read(locs[0])
    el.close()


def test_rejects_bad_limits(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        EntryLogger([tmp_path], log_size_limit=2**31 + 1)
    with pytest.raises(ValueError):
        EntryLogger([])


def test_roll_current_rolls_named_logs_early_with_their_maps(tmp_path: Path) -> None:
    now = [100.0]
    el = EntryLogger([tmp_path / "a", tmp_path / "b"], clock=lambda: now[0])
    entries = _entries(range(4), 10)
    locs = el.append(entries)
    el.sync()
    now[0] = 130.0
    infos = {i.log_id: i for i in el.current_logs()}
    assert len(infos) == 2 and all(i.age_s == 30.0 for i in infos.values())
    first, second = sorted(infos)
    assert infos[first].total == sum(infos[first].ledgers.values()) > 0
    assert el.roll_current([first, 12345]) == [first]  # an unknown id is ignored
    assert el.current_log_ids() == {second}
    with open(el.log_path(first), "rb") as f:
        assert decode_header(f.read(HEADER_SIZE)).ledgers_map_offset > 0
    assert el.usage(first).ledgers == infos[first].ledgers
    for (lid, eid, payload), loc in zip(entries, locs, strict=True):
        assert el.read(loc, lid, eid) == payload  # rolling moved nothing
    assert el.roll_current([first]) == []  # no longer current
    el.append(_entries(range(0, 4, 2), 1))  # the rolled directory opens a new log
    assert len(el.current_log_ids()) == 2 and first not in el.current_log_ids()
    assert el.statistics().early_rolls == 1
    el.close()


class _SyncLog(FailingFileOps):
    """Records, per sync, how many bytes had been written so far."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.sync_points: list[int] = []

    def write(self, fd: int, data: memoryview) -> int:
        n = super().write(fd, data)
        self.written += n
        return n

    def sync(self, fd: int) -> None:
        super().sync(fd)
        self.sync_points.append(self.written)


def test_flush_entrylog_bytes_syncs_in_bounded_pieces_while_appending(tmp_path: Path) -> None:
    ops = _SyncLog()
    el = EntryLogger([tmp_path], file_ops=ops, flush_entrylog_bytes=64 * 1024, write_chunk_bytes=8 << 20)
    entries = _entries(range(3), 200, size=1000)  # ~600 KB: one 8 MiB chunk without the option
    locs = el.append(entries)
    during = [n for n in ops.sync_points if n > 0]  # not the new log's header sync
    el.sync()
    # about one sync per 64 KiB written, never more than 64 KiB written between two syncs
    assert len(during) >= 8 and el.statistics().incremental_syncs == len(during)
    gaps = [b - a for a, b in zip([0, *during], [*during, ops.written], strict=True)]
    assert gaps[0] <= 64 * 1024 + HEADER_SIZE and max(gaps[1:]) <= 64 * 1024  # the first holds the log header
    assert ops.sync_points[-1] == ops.written  # the final sync covers the tail
    for (lid, eid, payload), loc in zip(entries, locs, strict=True):
        assert el.read(loc, lid, eid) == payload
    el.close()


def test_without_flush_entrylog_bytes_an_append_does_not_sync(tmp_path: Path) -> None:
    ops = _SyncLog()
    el = EntryLogger([tmp_path], file_ops=ops)
    el.append(_entries(range(3), 200, size=1000))
    assert ops.sync_points == [0] and el.statistics().incremental_syncs == 0  # the new log's header only
    el.sync()
    assert len(ops.sync_points) == 2
    el.close()


def test_a_failed_incremental_sync_abandons_the_log_and_raises(tmp_path: Path) -> None:
    ops = _SyncLog()
    el = EntryLogger([tmp_path], file_ops=ops, flush_entrylog_bytes=16 * 1024)
    ops.fail_syncs = True
    with pytest.raises(StorageIOError):
        el.append(_entries(range(2), 100, size=1000))
    ops.fail_syncs = False
    entries = _entries(range(2), 5)
    locs = el.append(entries)  # a fresh log takes the retry
    el.sync()
    assert [el.read(loc, lid, eid) for (lid, eid, _), loc in zip(entries, locs, strict=True)] == [
        p for _, _, p in entries
    ]
    el.close()


def test_negative_flush_entrylog_bytes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="flush_entrylog_bytes"):
        EntryLogger([tmp_path], flush_entrylog_bytes=-1)


# ------------------------------------------------------------ per-ledger placement (rule 9)


def test_per_ledger_placement_gives_each_ledger_its_own_logs(tmp_path: Path) -> None:
    el = EntryLogger([tmp_path / "a", tmp_path / "b"], per_ledger=True)
    entries = [(lid, eid, b"%d-%d" % (lid, eid) * 40) for eid in range(20) for lid in range(1, 5)]  # interleaved
    locs = el.append(entries)
    el.sync()
    for (lid, eid, payload), loc in zip(entries, locs, strict=True):
        assert el.read(loc, lid, eid) == payload
        assert el.log_path(split_location(loc)[0]).parent.name == ("a" if lid % 2 == 0 else "b")
    current = el.current_logs()
    assert len(current) == 4 and sorted(len(c.ledgers) for c in current) == [1, 1, 1, 1]
    el.close()
    for log_id in el.list_logs():  # rolled with their maps: one ledger each
        assert len(el.usage(log_id).ledgers) == 1


def test_max_active_logs_rolls_the_least_recently_written(tmp_path: Path) -> None:
    el = EntryLogger([tmp_path], per_ledger=True, max_active_logs=2)
    first = el.append([(1, 0, b"one")])
    el.append([(2, 0, b"two")])
    el.append([(1, 1, b"one again")])  # ledger 1 is now the most recently written
    third = el.append([(3, 0, b"three")])  # rolls ledger 2's log, not ledger 1's
    el.sync()
    assert len(el.current_log_ids()) == 2 and el.statistics().rolls == 1
    rolled = [i for i in el.list_logs() if i not in el.current_log_ids()]
    assert len(rolled) == 1 and set(el.usage(rolled[0]).ledgers) == {2}
    assert el.read(first[0], 1, 0) == b"one" and el.read(third[0], 3, 0) == b"three"
    el.close()


def test_max_active_logs_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_active_logs"):
        EntryLogger([tmp_path], per_ledger=True, max_active_logs=0)
