"""`ManagedLedger.append`: admission without waiting for storage, and the guarantees of its
`PendingAdd` (order, failures that stop the sequence, bounded bytes, errors raised at once)."""

from __future__ import annotations

import pytest
import trio

from bk_client import NotEnoughBookies
from bk_client.testing import MockBookKeeper
from managed_ledger import (
    EntryTooLarge,
    InitialPosition,
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFactory,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
    PendingAdd,
    Position,
    StorageUnavailable,
)
from tests.support.managed_ledger import NAME, config


async def _read_all(ml) -> list[bytes]:
    cursor = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
    out = []
    while got := await cursor.read_entries(1000):
        out.extend(e.data for e in got)
    return out


async def test_append_returns_before_storage_and_positions_follow_call_order(store, clock) -> None:
    bk = MockBookKeeper(add_delay=0.05)
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        pendings = [await ml.append(b"m%d" % i) for i in range(10)]
        assert all(isinstance(p, PendingAdd) for p in pendings)
        assert not any(p.finished for p in pendings)  # storage has not answered yet
        assert all(p.position is None and p.error is None for p in pendings)
        positions = [await p.result() for p in pendings]
        lid = ml.ledgers[-1].ledger_id
        assert positions == [Position(lid, i) for i in range(10)]
        assert all(p.finished and p.position == pos for p, pos in zip(pendings, positions, strict=True))
        assert await _read_all(ml) == [b"m%d" % i for i in range(10)]


async def test_a_burst_is_admitted_without_a_schedule_point(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        with trio.CancelScope() as scope:
            scope.cancel()
            # any schedule point would raise Cancelled here: the fast path has none
            pendings = [await ml.append(b"%d" % i) for i in range(50)]
        assert not scope.cancelled_caught
        assert [(await p.result()).entry_id for p in pendings] == list(range(50))


async def test_wait_finishes_in_admission_order_and_never_raises(store, clock) -> None:
    bk = MockBookKeeper(add_delay=0.01)
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        pendings = [await ml.append(b"%d" % i) for i in range(20)]
        seen: list[int] = []
        while len(seen) < 20:
            await trio.sleep(0.001)
            done = [i for i, p in enumerate(pendings) if p.finished]
            assert done == list(range(len(done)))  # always a prefix
            seen = done
        bk.fail_now(NotEnoughBookies(1, 0), count=10**6, ops={"add", "create"})
        failing = await ml.append(b"x")
        await failing.wait()  # the error stays on the pending add
        assert isinstance(failing.error, ManagedLedgerError) and failing.position is None
        with pytest.raises(ManagedLedgerError):
            await failing.result()


async def test_adds_behind_a_failed_add_fail_and_later_ones_go_on(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        bk.fail_now(NotEnoughBookies(2, 1), count=3, ops={"add"})  # b fails on 3 ledgers
        behind = [await ml.append(d) for d in (b"b", b"c", b"d")]
        for p in behind:
            await p.wait()
        assert "failed on 3 ledgers" in str(behind[0].error)
        assert all(isinstance(p.error, ManagedLedgerError) for p in behind)
        after = await ml.append(b"e")  # admitted after the failure was reported: unaffected
        assert await after.result() > Position(ml.ledgers[0].ledger_id, 0)
        assert await _read_all(ml) == [b"a", b"e"]
        assert f.metrics.sample("pulsar_ml_add_entry_errors_total") == 3


async def test_errors_raised_at_once_admit_nothing(store, clock, autojump_clock) -> None:
    bk = MockBookKeeper(max_entry_size=100)
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        with pytest.raises(EntryTooLarge):
            await ml.append(b"x" * 101)
        bk.fail_now(NotEnoughBookies(1, 0), count=1, ops={"add"})
        bk.fail_now(NotEnoughBookies(1, 0), count=1000, ops={"create"})
        with pytest.raises(StorageUnavailable):
            await (await ml.append(b"lost")).result()  # no new ledger: fails on the pending add
        with pytest.raises(StorageUnavailable):
            await ml.append(b"refused")  # within the retry interval: raised at once (Rule 4)
        bk.clear_failures()
        await trio.sleep(1.5)  # past the 1 s retry interval of Rule 4
        await (await ml.append(b"kept")).result()
        await ml.terminate()
        with pytest.raises(ManagedLedgerTerminated):
            await ml.append(b"late")
        assert await _read_all(ml) == [b"kept"]
        await ml.close()
        with pytest.raises(ManagedLedgerClosed):
            await ml.append(b"closed")


async def test_cancelling_the_wait_for_room_admits_nothing(store, clock) -> None:
    bk = MockBookKeeper(add_delay=0.05)
    async with ManagedLedgerFactory(bk, store, config(max_pending_add_bytes=10), clock) as f:
        ml = await f.open(NAME)
        first = await ml.append(b"0123456789")
        with trio.move_on_after(0.01) as scope:
            await ml.append(b"waits")  # no room until the first add finishes
        assert scope.cancelled_caught and not first.finished
        third = await ml.append(b"after")  # waits for room, then goes
        assert (await third.result()).entry_id == 1
        assert await _read_all(ml) == [b"0123456789", b"after"]


async def test_fencing_fails_the_pending_adds(store, clock) -> None:
    bk = MockBookKeeper(add_delay=0.2)
    async with (
        ManagedLedgerFactory(bk, store, config(), clock) as f1,
        ManagedLedgerFactory(bk, store, config(), clock) as f2,
    ):
        ml1 = await f1.open(NAME)
        pendings = [await ml1.append(b"%d" % i) for i in range(3)]
        await f2.open(NAME)  # the new owner fences the ledger: the adds in flight fail
        for p in pendings:
            await p.wait()
        assert all(isinstance(p.error, ManagedLedgerFenced) for p in pendings)
        with pytest.raises(ManagedLedgerFenced):
            await ml1.append(b"late")
