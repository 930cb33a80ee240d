"""Add failures roll to a new ledger; owner change fences the old owner; bounded bytes."""

from __future__ import annotations

import pytest
import trio

from bk_client import LedgerFenced, NotEnoughBookies
from bk_client.testing import MockBookKeeper
from managed_ledger import (
    InitialPosition,
    ManagedLedgerError,
    ManagedLedgerFactory,
    ManagedLedgerFenced,
    ManagedLedgerState,
    ManagedLedgerTerminated,
    Position,
)
from tests.managed_ledger.ml_util import NAME, config


async def _add_many(ml, datas: list[bytes]) -> dict[bytes, Position | BaseException]:
    """Admit the adds in list order (each waits until the previous one is admitted)."""
    results: dict[bytes, Position | BaseException] = {}

    async def one(data: bytes, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            results[data] = await ml.add_entry(data)
        except Exception as exc:  # noqa: BLE001 - collected for assertions
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


async def test_create_failure_fails_queued_adds_then_recovers(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        bk.fail_now(NotEnoughBookies(2, 0), ops={"add"})
        bk.fail_now(NotEnoughBookies(2, 0), ops={"create"})
        with pytest.raises(ManagedLedgerError, match="cannot create"):
            await ml.add_entry(b"b")
        assert ml.state is ManagedLedgerState.LEDGER_CLOSED
        assert await ml.add_entry(b"c") == Position(ml.ledgers[-1].ledger_id, 0)
        assert await _read_all(ml) == [b"a", b"c"]


async def test_owner_change_fences_the_old_owner(store, clock) -> None:
    bk = MockBookKeeper(add_delay=0.001)
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=7), clock) as f1, \
            ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=7), clock) as f2:
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
            await trio.sleep(0.005)
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


async def test_old_owner_cursor_persist_is_fenced(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f1, \
            ManagedLedgerFactory(bk, store, config(), clock) as f2:
        ml1 = await f1.open(NAME)
        pos = [await ml1.add_entry(b"%d" % i) for i in range(3)]
        c1 = await ml1.open_cursor("sub", InitialPosition.EARLIEST)
        ml2 = await f2.open(NAME)
        await c1.mark_delete(pos[2])
        with pytest.raises(ManagedLedgerFenced):
            await c1.persist()
        assert ml1.state is ManagedLedgerState.FENCED
        assert ml2.cursors["sub"].backlog == 3  # the new owner's state was not overwritten
