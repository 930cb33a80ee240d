"""Closing a ledger: what is recorded, and the conflicts of `bk_client._close` (rules 1-4)."""

from __future__ import annotations

import pytest

from bk_client import LedgerFenced
from protocols.bookkeeper import LedgerState
from tests.support.fake_bookie import fake_cluster


async def test_close_records_last_entry_and_length() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        for data in (b"a", b"bb", b"ccc"):
            await lh.add_entry(data)
        await lh.close()
        meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert meta.state is LedgerState.CLOSED
        assert (meta.last_entry_id, meta.length) == (2, 6)
        assert lh.is_closed
        await lh.close()  # idempotent


async def test_close_of_an_empty_ledger() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.close()
        meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert (meta.state, meta.last_entry_id, meta.length) == (LedgerState.CLOSED, -1, 0)


async def test_close_retries_when_the_ledger_is_still_open() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"a")
        lm = c.bk.ledger_manager
        meta, version = await lm.read(lh.ledger_id)
        await lm.write(lh.ledger_id, meta, version)  # someone bumps the version, still OPEN
        await lh.close()
        meta, _ = await lm.read(lh.ledger_id)
        assert (meta.state, meta.last_entry_id) == (LedgerState.CLOSED, 0)


async def test_close_fails_when_the_ledger_is_in_recovery() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"a")
        lm = c.bk.ledger_manager
        meta, version = await lm.read(lh.ledger_id)
        await lm.write(lh.ledger_id, meta.in_recovery(), version)
        with pytest.raises(LedgerFenced):
            await lh.close()
        meta, _ = await lm.read(lh.ledger_id)
        assert meta.state is LedgerState.IN_RECOVERY


async def test_close_succeeds_when_closed_elsewhere_at_the_same_entry() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"abc")
        lm = c.bk.ledger_manager
        meta, version = await lm.read(lh.ledger_id)
        await lm.write(lh.ledger_id, meta.closed(0, 3), version)
        await lh.close()
        assert lh.is_closed


async def test_close_fails_when_closed_elsewhere_at_another_entry() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"abc")
        await lh.add_entry(b"def")
        lm = c.bk.ledger_manager
        meta, version = await lm.read(lh.ledger_id)
        await lm.write(lh.ledger_id, meta.closed(0, 3), version)
        with pytest.raises(LedgerFenced):
            await lh.close()
        meta, _ = await lm.read(lh.ledger_id)
        assert meta.last_entry_id == 0


async def test_close_waits_for_pending_adds() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        for b in c.bookies:
            b.add_delay = 0.02
        ops = [await lh.append(b"x%d" % i) for i in range(10)]
        await lh.close()
        assert all(op.finished for op in ops)
        meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert meta.last_entry_id == 9
