"""MockBookKeeper keeps the client contract and fails on cue."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from bk_client import LedgerClosed, LedgerFenced, NoSuchEntry, NoSuchLedger, NotEnoughBookies
from bk_client.api import BookKeeperClient, ReadHandle, WriteHandle
from bk_client.testing import MockBookKeeper, MockLedgerState


async def test_implements_the_protocols() -> None:
    bk = MockBookKeeper()
    assert isinstance(bk, BookKeeperClient)
    wh = await bk.create_ledger(3, 2, 2)
    assert isinstance(wh, WriteHandle)
    rh = await bk.open_ledger(wh.ledger_id, recovery=False)
    assert isinstance(rh, ReadHandle)


async def test_ids_increase_and_adds_are_fifo_in_order() -> None:
    bk = MockBookKeeper(add_delay=0.01)
    a = await bk.create_ledger(1, 1, 1)
    b = await bk.create_ledger(1, 1, 1)
    assert b.ledger_id > a.ledger_id
    done: list[int] = []

    async def add(i: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        eid = await a.add_entry(b"x%d" % i)
        assert eid == i
        done.append(eid)

    async with trio.open_nursery() as n:
        for i in range(30):
            await n.start(add, i)
    assert done == list(range(30))
    assert a.last_add_confirmed == 29
    await a.close()
    assert bk.ledger_state(a.ledger_id) is MockLedgerState.CLOSED
    with pytest.raises(LedgerClosed):
        await a.add_entry(b"late")
    rh = await bk.open_ledger(a.ledger_id)
    entries = await rh.read(0, 29)
    assert [e.data for e in entries] == [b"x%d" % i for i in range(30)]
    with pytest.raises(NoSuchEntry):
        await rh.read(0, 30)


async def test_recovery_open_fences_the_writer() -> None:
    bk = MockBookKeeper()
    wh = await bk.create_ledger(1, 1, 1)
    await wh.add_entry(b"a")
    await wh.add_entry(b"b")
    rh = await bk.open_ledger(wh.ledger_id, recovery=True)
    assert rh.is_closed and rh.last_add_confirmed == 1 and rh.length == 2
    with pytest.raises(LedgerFenced):
        await wh.add_entry(b"c")
    assert bk.is_fenced(wh.ledger_id)
    await wh.close()  # closing a ledger recovery already closed is a no-op
    assert bk.ledger_entries(wh.ledger_id) == [b"a", b"b"]


async def test_reader_without_recovery_follows_the_writer() -> None:
    bk = MockBookKeeper()
    wh = await bk.create_ledger(1, 1, 1)
    rh = await bk.open_ledger(wh.ledger_id, recovery=False)
    assert rh.last_add_confirmed == -1 and not rh.is_closed

    async def later() -> None:
        await trio.testing.wait_all_tasks_blocked()  # the reader is waiting
        await wh.add_entry(b"a")

    async with trio.open_nursery() as n:
        n.start_soon(later)
        assert await rh.wait_for_lac(-1, 5.0) == 0
    assert await rh.wait_for_lac(0, 0.01) == 0  # times out with the LAC then known


async def test_fail_now_and_fail_after_poison_the_handle() -> None:
    bk = MockBookKeeper()
    wh = await bk.create_ledger(1, 1, 1)
    bk.fail_after(2, NotEnoughBookies(2, 1), ops={"add"})
    assert await wh.add_entry(b"0") == 0
    assert await wh.add_entry(b"1") == 1
    with pytest.raises(NotEnoughBookies):
        await wh.add_entry(b"2")
    with pytest.raises(NotEnoughBookies):  # a failed handle stays failed
        await wh.add_entry(b"3")
    await wh.close()
    assert bk.ledger_entries(wh.ledger_id) == [b"0", b"1"]

    bk.fail_now(NoSuchLedger, count=2, ops={"open"})
    for _ in range(2):
        with pytest.raises(NoSuchLedger):
            await bk.open_ledger(wh.ledger_id)
    await bk.open_ledger(wh.ledger_id)

    bk.fail_now(LedgerFenced)  # any operation kind
    with pytest.raises(LedgerFenced):
        await bk.create_ledger(1, 1, 1)
    with pytest.raises(ValueError):
        bk.fail_now(LedgerFenced, ops={"bogus"})


async def test_delete() -> None:
    bk = MockBookKeeper()
    wh = await bk.create_ledger(1, 1, 1)
    await bk.delete_ledger(wh.ledger_id)
    assert bk.deleted_ledgers == [wh.ledger_id]
    with pytest.raises(NoSuchLedger):
        await bk.open_ledger(wh.ledger_id)
    with pytest.raises(NoSuchLedger):
        await bk.delete_ledger(wh.ledger_id)
    with pytest.raises(LedgerFenced):
        await wh.add_entry(b"zombie")
