"""MockBookKeeper's ``append`` keeps the ``WriteHandle.append`` contract: ids in call order,
outcomes in id order, failures on cue arrive on the pending add and poison the handle."""

from __future__ import annotations

import pytest
import trio

from bk_client import LedgerClosed, LedgerFenced, WriteError
from bk_client.api import PendingAppend, WriteHandle
from bk_client.testing import MockBookKeeper


async def test_append_fixes_ids_in_call_order_and_finishes_in_order() -> None:
    bk = MockBookKeeper(add_delay=0.1)
    wh = await bk.create_ledger(1, 1, 1)
    assert isinstance(wh, WriteHandle)
    pendings = [await wh.append(b"e%d" % i) for i in range(20)]
    assert isinstance(pendings[0], PendingAppend)
    assert [p.entry_id for p in pendings] == list(range(20))
    assert not any(p.finished for p in pendings)  # the acks wait for add_delay
    finished_order: list[int] = []
    while len(finished_order) < 20:
        await trio.sleep(0.001)
        done = [p.entry_id for p in pendings if p.finished]
        assert done == list(range(len(done)))  # a prefix: never out of order
        finished_order = done
    assert [await p.result() for p in pendings] == list(range(20))
    assert all(p.error is None for p in pendings)
    assert bk.ledger_entries(wh.ledger_id) == [b"e%d" % i for i in range(20)]


async def test_injected_failure_arrives_on_the_pending_add_and_poisons_the_handle() -> None:
    bk = MockBookKeeper(add_delay=0.01)
    wh = await bk.create_ledger(1, 1, 1)
    bk.fail_after(2, WriteError("injected"), ops={"add"})
    pendings = [await wh.append(b"%d" % i) for i in range(3)]
    with pytest.raises(WriteError):
        await wh.append(b"later")  # the handle knows it failed: no add is started
    assert await pendings[0].result() == 0
    assert await pendings[1].result() == 1  # adds before the failure still complete
    with pytest.raises(WriteError):
        await pendings[2].result()
    assert isinstance(pendings[2].error, WriteError) and pendings[2].finished
    with pytest.raises(WriteError):
        await wh.add_entry(b"again")
    assert bk.ledger_entries(wh.ledger_id) == [b"0", b"1"]


async def test_fence_fails_the_adds_in_flight() -> None:
    bk = MockBookKeeper(add_delay=0.2)
    wh = await bk.create_ledger(1, 1, 1)
    await wh.add_entry(b"kept")
    pendings = [await wh.append(b"x") for _ in range(3)]
    rh = await bk.open_ledger(wh.ledger_id, recovery=True)
    assert rh.last_add_confirmed == 0
    for p in pendings:
        with pytest.raises(LedgerFenced):
            await p.result()
    with pytest.raises(LedgerFenced):
        await wh.append(b"y")
    assert bk.ledger_entries(wh.ledger_id) == [b"kept"]


async def test_close_waits_for_appended_adds_then_refuses_more() -> None:
    bk = MockBookKeeper(add_delay=0.01)
    wh = await bk.create_ledger(1, 1, 1)
    pendings = [await wh.append(b"%d" % i) for i in range(5)]
    await wh.close()
    assert all(p.finished and p.error is None for p in pendings)
    assert wh.last_add_confirmed == 4
    with pytest.raises(LedgerClosed):
        await wh.append(b"late")


async def test_cancelling_the_wait_does_not_withdraw_the_add() -> None:
    bk = MockBookKeeper(add_delay=0.05)
    wh = await bk.create_ledger(1, 1, 1)
    with trio.move_on_after(0.01):
        await wh.add_entry(b"a")
    assert await wh.add_entry(b"b") == 1
    assert bk.ledger_entries(wh.ledger_id) == [b"a", b"b"]
