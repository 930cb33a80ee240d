"""Group commit: concurrent adders, flush reasons, backpressure, failures on cue, replay."""

from __future__ import annotations

import errno

import pytest
import trio
import trio.testing

from bookie.journal import (
    AddEntry,
    ExplicitLac,
    FenceLedger,
    Journal,
    JournalClosedError,
    JournalConfig,
    JournalIOError,
    JournalState,
    LogMark,
    MasterKey,
)
from magnetar.common.config import ConfigError

from .journal_helpers import FailingDisk, adds, open_journal, payload, replay_all

pytestmark = pytest.mark.timeout(30)


async def test_many_concurrent_adders_all_replay_byte_for_byte(tmp_path) -> None:
    journal = await open_journal(tmp_path, max_file_size=256 * 1024, prealloc_size=64 * 1024)
    acked: dict[tuple[int, int], LogMark] = {}

    async def adder(ledger: int) -> None:
        for entry in range(60):
            acked[(ledger, entry)] = await journal.log_add_entry(ledger, entry, payload(ledger, entry, 50 + ledger))

    async with journal.running():
        async with trio.open_nursery() as nursery:
            for ledger in range(40):
                nursery.start_soon(adder, ledger)
        mark = await journal.log_fence(7)
        await journal.log_explicit_lac(7, 59, b"lac")
        await journal.log_master_key(8, b"key")
        assert journal.current_mark() >= mark
    assert journal.state is JournalState.CLOSED
    records, report = replay_all(tmp_path)
    assert report.stop is None
    got = adds(records)
    assert got == {k: payload(k[0], k[1], 50 + k[0]) for k in acked}
    # each add's returned mark is exactly where replay finds the record
    marks = {(r.ledger_id, r.entry_id): m for m, r in records if isinstance(r, AddEntry)}
    assert marks == acked
    tail = [r for _, r in records[-3:]]
    assert tail == [FenceLedger(7), ExplicitLac(7, 59, b"lac"), MasterKey(8, b"key")]
    # per ledger, entries are in order in the journal
    for ledger in range(40):
        seq = [r.entry_id for _, r in records if isinstance(r, AddEntry) and r.ledger_id == ledger]
        assert seq == list(range(60))


async def test_reopen_replays_then_writes_a_new_file(tmp_path) -> None:
    j1 = await open_journal(tmp_path)
    async with j1.running():
        await j1.log_add_entry(1, 0, b"a")
        first_file = j1.statistics().current_file_id
    j2 = await open_journal(tmp_path)
    seen = []

    async def apply(mark, record):
        seen.append(record)

    report = await j2.replay(apply)
    assert seen == [AddEntry(1, 0, b"a")] and report.records == 1
    async with j2.running():
        mark = await j2.log_add_entry(1, 1, b"b")
        assert mark.file_id > first_file
    records, _ = replay_all(tmp_path)
    assert [r for _, r in records] == [AddEntry(1, 0, b"a"), AddEntry(1, 1, b"b")]


async def _run_adds(journal: Journal, n: int, size: int = 100, tasks: int = 1) -> None:
    async def adder(t: int) -> None:
        for i in range(n):
            await journal.log_add_entry(t, i, payload(t, i, size))

    async with trio.open_nursery() as nursery:
        for t in range(tasks):
            nursery.start_soon(adder, t)


async def test_flush_reason_max_wait(tmp_path) -> None:
    journal = await open_journal(tmp_path, max_group_wait_ms=1)
    async with journal.running():
        await _run_adds(journal, 5)
        stats = journal.statistics()
    assert stats.flushes["max_wait"] == 5
    assert journal.metrics.num_flush_max_wait._value.get() == 5
    assert stats.flushes["max_outstanding_bytes"] == stats.flushes["empty_queue"] == 0


async def test_flush_reason_bytes_threshold(tmp_path) -> None:
    # a long group wait so that only the byte threshold can flush
    journal = await open_journal(tmp_path, max_group_wait_ms=60_000, buffered_writes_threshold=1000)
    async with journal.running():
        await _run_adds(journal, 1, size=2000)
        stats = journal.statistics()
    assert stats.flushes["max_outstanding_bytes"] == 1
    assert journal.metrics.num_flush_max_outstanding_bytes._value.get() == 1


async def test_flush_reason_entries_threshold(tmp_path) -> None:
    journal = await open_journal(tmp_path, max_group_wait_ms=60_000, buffered_entries_threshold=4)
    async with journal.running():
        await _run_adds(journal, 1, tasks=8)
        stats = journal.statistics()
    assert stats.flushes["max_outstanding_entries"] >= 1
    assert journal.metrics.num_flush_max_outstanding_entries._value.get() >= 1
    assert stats.flushes["max_wait"] == 0


async def test_flush_reason_empty_queue(tmp_path) -> None:
    journal = await open_journal(tmp_path, max_group_wait_ms=60_000, flush_when_queue_empty=True)
    async with journal.running():
        await _run_adds(journal, 3)
        stats = journal.statistics()
    assert stats.flushes["empty_queue"] == 3
    assert journal.metrics.num_flush_empty_queue._value.get() == 3


async def test_add_latency_and_sync_metrics_are_recorded(tmp_path) -> None:
    journal = await open_journal(tmp_path, flush_when_queue_empty=True)
    async with journal.running():
        await _run_adds(journal, 10, tasks=3)
    m = journal.metrics
    assert m.add_entry.count() == 30
    assert m.num_force_writes._value.get() >= 1
    names = {s.name for fam in m.registry.collect() for s in fam.samples}
    for name in (
        "bookie_journal_JOURNAL_ADD_ENTRY_count",
        "bookie_journal_JOURNAL_SYNC_count",
        "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES_sum",
        "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES_sum",
        "bookie_journal_JOURNAL_QUEUE_SIZE",
        "bookie_journal_JOURNAL_FORCE_WRITE_QUEUE_SIZE",
        "bookie_journal_JOURNAL_FLUSH_LATENCY_count",
        "bookie_journal_JOURNAL_NUM_FLUSH_MAX_WAIT_total",
    ):
        assert name in names


async def test_backpressure_adds_wait_when_queue_is_full(tmp_path) -> None:
    disk = FailingDisk()
    disk.token = trio.lowlevel.current_trio_token()
    journal = await Journal.open(
        tmp_path / "journal",
        [tmp_path / "l"],
        JournalConfig(
            queue_max_entries=4, queue_max_bytes=1024 * 1024, force_write_queue_max=1, flush_when_queue_empty=True
        ),
        disk=disk,
    )
    done = []
    async with journal.running():
        disk.sync_gate = trio.Event()  # hold every sync from now on
        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(lambda i=i: _add_and_record(journal, i, done))
            await trio.testing.wait_all_tasks_blocked()
            stats = journal.statistics()
            # syncs are held: at most a few batches are in flight, the rest wait for queue space
            assert len(done) == 0
            assert stats.queued_entries <= 4
            assert stats.backpressure_waits > 0
            disk.sync_gate.set()
        assert sorted(done) == list(range(40))


async def _add_and_record(journal: Journal, i: int, done: list[int]) -> None:
    await journal.log_add_entry(1, i, b"x" * 10)
    done.append(i)


async def test_queue_bytes_bound(tmp_path) -> None:
    disk = FailingDisk()
    disk.token = trio.lowlevel.current_trio_token()
    journal = await Journal.open(
        tmp_path / "journal",
        [tmp_path / "l"],
        JournalConfig(
            queue_max_bytes=4096, buffered_writes_threshold=2048, force_write_queue_max=1, flush_when_queue_empty=True
        ),
        disk=disk,
    )
    async with journal.running():
        disk.sync_gate = trio.Event()
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(journal.log_add_entry, 1, i, b"y" * 1000)
            await trio.testing.wait_all_tasks_blocked()
            assert journal.statistics().queued_bytes <= 4096 + 1100
            disk.sync_gate.set()


async def test_fsync_failure_fails_pending_and_nothing_later_is_acked(tmp_path) -> None:
    disk = FailingDisk()
    journal = await Journal.open(
        tmp_path / "journal", [tmp_path / "l"], JournalConfig(flush_when_queue_empty=True), disk=disk
    )
    acked, failed = [], []

    async def adder(i: int) -> None:
        try:
            await journal.log_add_entry(1, i, b"z")
            acked.append(i)
        except JournalIOError:
            failed.append(i)

    async with trio.open_nursery() as nursery:
        await nursery.start(journal.serve)
        await adder(0)
        disk.fail_sync = True
        for i in range(1, 20):
            nursery.start_soon(adder, i)
    assert acked == [0]
    assert sorted(failed) == list(range(1, 20))
    assert journal.state is JournalState.FAILED
    assert isinstance(journal.error, JournalIOError)
    disk.fail_sync = False
    with pytest.raises(JournalIOError):
        await journal.log_add_entry(1, 99, b"late")
    assert journal.metrics.io_errors._value.get() == 1


async def test_write_failure_fails_the_batch(tmp_path) -> None:
    disk = FailingDisk()
    journal = await Journal.open(tmp_path / "journal", [tmp_path / "l"], JournalConfig(), disk=disk)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.serve)
        disk.write_errno = errno.EIO  # not a full disk: the journal fails for good
        disk.fail_write = True
        with pytest.raises(JournalIOError, match="injected write failure"):
            await journal.log_add_entry(1, 0, b"never")
    assert journal.state is JournalState.FAILED
    with pytest.raises(JournalIOError):
        await journal.log_fence(1)


async def test_no_sync_data_acks_before_fsync_and_close_syncs(tmp_path) -> None:
    disk = FailingDisk()
    journal = await Journal.open(
        tmp_path / "journal", [tmp_path / "l"], JournalConfig(sync_data=False, flush_when_queue_empty=True), disk=disk
    )
    async with journal.running():
        syncs_at_start = disk.syncs
        for i in range(5):
            await journal.log_add_entry(1, i, b"n")
        assert disk.syncs == syncs_at_start
    assert disk.syncs == syncs_at_start + 1  # the clean close
    records, _ = replay_all(tmp_path)
    assert len(records) == 5


async def test_adds_refused_before_serve_and_after_close(tmp_path) -> None:
    journal = await open_journal(tmp_path)
    with pytest.raises(JournalClosedError):
        await journal.log_add_entry(1, 0, b"x")
    async with journal.running():
        await journal.log_add_entry(1, 0, b"x")
    with pytest.raises(JournalClosedError):
        await journal.log_add_entry(1, 1, b"x")
    with pytest.raises(RuntimeError):
        await journal.replay()


async def test_cancelled_serve_fails_pending_adds(tmp_path) -> None:
    journal = await open_journal(tmp_path, max_group_wait_ms=60_000)
    errors = []

    async def adder() -> None:
        try:
            await journal.log_add_entry(1, 0, b"x")
        except JournalClosedError as exc:
            errors.append(exc)

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as inner:
            await inner.start(journal.serve)
            outer.start_soon(adder)
            await trio.testing.wait_all_tasks_blocked()
            inner.cancel_scope.cancel()
    assert len(errors) == 1


def test_config_validation() -> None:
    with pytest.raises(ConfigError) as info:
        JournalConfig(queue_max_bytes=10, buffered_writes_threshold=100).validate()
    assert info.value.key == "queue_max_bytes"
    with pytest.raises(ConfigError):
        JournalConfig(max_file_size=0).validate()


async def test_submit_keeps_call_order_and_tickets_resolve(tmp_path) -> None:
    journal = await open_journal(tmp_path, queue_max_entries=8, flush_when_queue_empty=True)
    async with journal.running():
        tickets = []
        for i in range(30):
            while True:
                try:
                    tickets.append(journal.submit_add_entry(1, i, payload(1, i)))
                    break
                except trio.WouldBlock:
                    await journal.wait_for_space()
        assert not tickets[-1].done or tickets[-1].result()
        marks = [await t.wait() for t in tickets]
        assert marks == sorted(marks)
        assert tickets[0].done and tickets[0].result() == marks[0]
        fence = journal.submit(FenceLedger(1))
        assert await fence.wait() > marks[-1]
    records, _ = replay_all(tmp_path)
    assert [r.entry_id for _, r in records[:-1]] == list(range(30))
