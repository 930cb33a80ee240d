"""Add failures roll to a new ledger; owner change fences the old owner; bounded bytes."""

from __future__ import annotations

import pytest
import trio

from bk_client import LedgerFenced, NotEnoughBookies
from bk_client.testing import MockBookKeeper
from managed_ledger import (
    EntryTooLarge,
    InitialPosition,
    ManagedLedgerError,
    ManagedLedgerFactory,
    ManagedLedgerFenced,
    ManagedLedgerState,
    ManagedLedgerTerminated,
    Position,
    StorageUnavailable,
)
from tests.support.managed_ledger import NAME, config


async def _add_many(ml, datas: list[bytes]) -> dict[bytes, Position | BaseException]:
    """Admit the adds in list order (each waits until the previous one is admitted)."""
    results: dict[bytes, Position | BaseException] = {}

    async def one(data: bytes, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            results[data] = await ml.add_entry(data)
        except Exception as exc:
            results[data] = exc

    async with trio.open_nursery() as n:
        for d in datas:
            await n.start(one, d)
    return results


async def _read_all(ml) -> list[bytes]:
    c = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
    out = []
    while True:
        got = await c.read_entries(1000)
        if not got:
            return out
        out.extend(e.data for e in got)


@pytest.mark.parametrize("error", [LedgerFenced(), NotEnoughBookies(2, 1)])
async def test_add_failure_rolls_and_the_log_continues(store, clock, error) -> None:
    bk = MockBookKeeper(add_delay=0.001)
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        datas = [b"m%03d" % i for i in range(40)]
        bk.fail_after(15, error, ops={"add"})
        results = await _add_many(ml, datas)
        assert all(isinstance(results[d], Position) for d in datas), results
        positions = [results[d] for d in datas]
        assert positions == sorted(positions)  # FIFO positions
        assert len(ml.ledgers) == 2 and ml.ledgers[0].entries == 15
        assert await _read_all(ml) == datas
        assert f.metrics.sample("pulsar_ml_ledger_rollovers_total", {"reason": "add_failure"}) == 1
        for d in datas:
            assert (await ml.read_entry(results[d])).data == d


async def test_create_failure_fails_queued_adds_then_recovers(store, bk, clock, autojump_clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        bk.fail_now(NotEnoughBookies(2, 0), ops={"add"})
        bk.fail_now(NotEnoughBookies(2, 0), ops={"create"})
        with pytest.raises(ManagedLedgerError, match="cannot create"):
            await ml.add_entry(b"b")
        assert ml.state is ManagedLedgerState.LEDGER_CLOSED
        await trio.sleep(1.5)  # past the fail-fast interval, the next add creates a ledger
        assert await ml.add_entry(b"c") == Position(ml.ledgers[-1].ledger_id, 0)
        assert await _read_all(ml) == [b"a", b"c"]


async def test_owner_change_fences_the_old_owner(store, clock) -> None:
    bk = MockBookKeeper(add_delay=0.001)
    async with (
        ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=7), clock) as f1,
        ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=7), clock) as f2,
    ):
        ml1 = await f1.open(NAME)
        acked: list[tuple[Position, bytes]] = []
        for i in range(10):
            acked.append((await ml1.add_entry(b"a%d" % i), b"a%d" % i))

        # adds in flight on the old owner while the new owner opens
        async def writer() -> None:
            i = 10
            while True:
                data = b"a%d" % i
                try:
                    acked.append((await ml1.add_entry(data), data))
                except ManagedLedgerFenced:
                    return
                i += 1

        async with trio.open_nursery() as n:
            n.start_soon(writer)
            await trio.sleep(0.005)  # the writer is mid-stream when the new owner opens (the race)
            ml2 = await f2.open(NAME)
        assert ml1.state is ManagedLedgerState.FENCED
        with pytest.raises(ManagedLedgerFenced):
            await ml1.add_entry(b"late")
        # every entry the old owner was told succeeded is readable by the new one, in order
        assert await _read_all(ml2) == [d for _, d in sorted(acked)]
        assert [d for _, d in acked] == [d for _, d in sorted(acked)]
        pos = await ml2.add_entry(b"new")
        assert pos > acked[-1][0]
        for p, d in acked:
            assert (await ml2.read_entry(p)).data == d


async def test_terminate(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        c = await ml.open_cursor("c", InitialPosition.EARLIEST)
        last = None
        for i in range(3):
            last = await ml.add_entry(b"%d" % i)
        assert await ml.terminate() == last
        with pytest.raises(ManagedLedgerTerminated):
            await ml.add_entry(b"x")
        assert len(await c.read_entries(10)) == 3
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        assert ml.state is ManagedLedgerState.TERMINATED
        assert ml.last_confirmed_entry == last
        with pytest.raises(ManagedLedgerTerminated):
            await ml.add_entry(b"x")


async def test_bytes_in_flight_are_bounded(store, clock) -> None:
    bk = MockBookKeeper(add_delay=0.01)
    async with ManagedLedgerFactory(bk, store, config(max_pending_add_bytes=100), clock) as f:
        ml = await f.open(NAME)
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, ml._inflight_bytes)
                await trio.sleep(0.001)

        async with trio.open_nursery() as n:
            n.start_soon(watch)
            results = await _add_many(ml, [b"%02d" % i + b"x" * 38 for i in range(20)])
            n.cancel_scope.cancel()
        assert all(isinstance(r, Position) for r in results.values())
        assert 0 < peak <= 100
        assert ml.number_of_entries == 20


async def test_an_add_storage_keeps_refusing_fails_alone(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        bk.fail_now(NotEnoughBookies(2, 1), count=3, ops={"add"})
        with pytest.raises(ManagedLedgerError, match="failed on 3 ledgers"):
            await ml.add_entry(b"b")
        assert await ml.add_entry(b"c") > Position(ml.ledgers[0].ledger_id, 0)
        assert await _read_all(ml) == [b"a", b"c"]


async def test_adds_behind_an_add_given_up_on_fail_too_and_none_is_stored_after_it(store, bk, clock) -> None:
    # Found by the chaos run (a bookie SIGKILLed): the add given up on failed while the adds
    # behind it were stored; its client resent it after them (reordered) or, with dedup, it was
    # taken for a duplicate of a later sequence id and lost.
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        bk.fail_now(NotEnoughBookies(2, 1), count=3, ops={"add"})
        results = await _add_many(ml, [b"b", b"c", b"d", b"e"])
        assert all(isinstance(r, ManagedLedgerError) for r in results.values()), results
        assert "failed on 3 ledgers" in str(results[b"b"])
        assert await _read_all(ml) == [b"a"]
        await ml.add_entry(b"f")  # the resend order: whatever comes next is stored after "a"
        assert await _read_all(ml) == [b"a", b"f"]


async def test_old_owner_cursor_persist_is_fenced(store, bk, clock) -> None:
    async with (
        ManagedLedgerFactory(bk, store, config(), clock) as f1,
        ManagedLedgerFactory(bk, store, config(), clock) as f2,
    ):
        ml1 = await f1.open(NAME)
        pos = [await ml1.add_entry(b"%d" % i) for i in range(3)]
        c1 = await ml1.open_cursor("sub", InitialPosition.EARLIEST)
        ml2 = await f2.open(NAME)
        await c1.mark_delete(pos[2])
        with pytest.raises(ManagedLedgerFenced):
            await c1.persist()
        assert ml1.state is ManagedLedgerState.FENCED
        assert ml2.cursors["sub"].backlog == 3  # the new owner's state was not overwritten


async def test_an_entry_storage_can_never_take_fails_at_once_without_rolling(store, clock) -> None:
    # Before: the add failed on the bookie, the ledger rolled, the add was retried on the next
    # ledger, and so on - hundreds of ledgers, and the adds behind it waited.
    bk = MockBookKeeper(max_entry_size=1000)
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        assert ml.max_entry_size == f.max_entry_size == 1000
        first = await ml.add_entry(b"a")
        ledgers = bk.ledger_ids()
        with pytest.raises(EntryTooLarge, match="1001 bytes"):
            await ml.add_entry(b"x" * 1001)
        results = await _add_many(ml, [b"b", b"y" * 1000, b"c"])
        assert all(isinstance(p, Position) for p in results.values())
        assert bk.ledger_ids() == ledgers  # nothing rolled
        assert await _read_all(ml) == [b"a", b"b", b"y" * 1000, b"c"]
        assert first.ledger_id == ledgers[-1]


async def test_adds_fail_fast_while_no_ledger_can_be_created_and_resume_after(store, clock, autojump_clock) -> None:
    # Before: each add while the bookies were read-only tried (and failed) to create a ledger,
    # and nothing told callers apart from other failures.
    bk = MockBookKeeper()
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        bk.fail_now(NotEnoughBookies(1, 0), count=1, ops={"add"})
        bk.fail_now(NotEnoughBookies(1, 0), count=1000, ops={"create"})
        with pytest.raises(StorageUnavailable, match="storage unavailable"):
            await ml.add_entry(b"b")
        assert ml.state is ManagedLedgerState.LEDGER_CLOSED and ml.storage_error
        ledgers = bk.ledger_ids()
        for _ in range(5):  # within the retry interval: refused without asking BookKeeper again
            with pytest.raises(StorageUnavailable):
                await ml.add_entry(b"c")
        with pytest.raises(StorageUnavailable):
            await ml.ensure_writable()
        assert bk.ledger_ids() == ledgers
        bk.clear_failures()  # the bookies are writable again
        await trio.sleep(1.5)  # past the 1 s retry interval
        await ml.ensure_writable()
        assert ml.state is ManagedLedgerState.LEDGER_OPENED and ml.storage_error is None
        await ml.add_entry(b"d")
        assert await _read_all(ml) == [b"a", b"d"]


async def test_a_managed_ledger_opens_for_reading_while_no_ledger_can_be_created(store, clock, autojump_clock) -> None:
    # A restart while every bookie is read-only: the topic must still load and serve reads.
    bk = MockBookKeeper()
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        for d in (b"a", b"b", b"c"):
            await ml.add_entry(d)
        await cursor.delete([(await cursor.read_entries(1))[0].position])
        await ml.close()
        bk.fail_now(NotEnoughBookies(1, 0), count=1000, ops={"create"})
        ml = await f.open(NAME)
        assert ml.state is ManagedLedgerState.LEDGER_CLOSED
        assert [e.data for e in await ml.cursors["sub"].read_entries(10)] == [b"b", b"c"]
        with pytest.raises(StorageUnavailable):
            await ml.add_entry(b"d")
        bk.clear_failures()
        await trio.sleep(1.5)  # past the 1 s retry interval
        await ml.add_entry(b"d")  # an add retries the creation too
        assert await _read_all(ml) == [b"a", b"b", b"c", b"d"]
