"""Roll-over triggers and the "no empty ledger left behind" rule."""

from __future__ import annotations

import trio

from managed_ledger import InitialPosition, ManagedLedgerFactory, ManagedLedgerState
from tests.support.managed_ledger import NAME, config


async def _add(ml, n: int, prefix: bytes = b"e") -> list:
    return [await ml.add_entry(prefix + b"%d" % i) for i in range(n)]


async def _wait_opened(ml) -> None:
    await ml._roll_done.wait()
    assert ml.state is ManagedLedgerState.LEDGER_OPENED


def _rolls(f: ManagedLedgerFactory, reason: str) -> float:
    return f.metrics.sample("pulsar_ml_ledger_rollovers_total", {"reason": reason})


async def test_roll_on_max_entries(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock) as f:
        ml = await f.open(NAME)
        positions = await _add(ml, 12)
        await _wait_opened(ml)
        assert [i.entries for i in ml.ledgers] == [5, 5, 2]
        assert positions[5].ledger_id == ml.ledgers[1].ledger_id and positions[5].entry_id == 0
        assert _rolls(f, "entries") == 2
        c = await ml.open_cursor("c", InitialPosition.EARLIEST)
        assert [e.data for e in await c.read_entries(100)] == [b"e%d" % i for i in range(12)]


async def test_roll_on_size(store, bk, clock) -> None:
    cfg = config(max_size_per_ledger_mb=1)
    async with ManagedLedgerFactory(bk, store, cfg, clock) as f:
        ml = await f.open(NAME)
        big = b"x" * (400 * 1024)
        for _ in range(3):
            await ml.add_entry(big)
        await _wait_opened(ml)
        assert [i.entries for i in ml.ledgers] == [3, 0]
        assert ml.ledgers[0].size == 3 * len(big)
        assert _rolls(f, "size") == 1


async def test_minimum_age_holds_back_every_trigger(store, bk, clock) -> None:
    cfg = config(max_entries_per_ledger=2, min_ledger_rollover_time_minutes=1.0)
    async with ManagedLedgerFactory(bk, store, cfg, clock) as f:
        ml = await f.open(NAME)
        await _add(ml, 4)
        assert len(ml.ledgers) == 1  # full, but younger than the minimum age
        clock.advance(61)
        await ml.add_entry(b"more")
        await _wait_opened(ml)
        assert [i.entries for i in ml.ledgers] == [5, 0]


async def test_roll_on_max_age_only_when_not_empty(store, bk, clock) -> None:
    cfg = config(max_ledger_rollover_time_minutes=10.0, min_ledger_rollover_time_minutes=5.0)
    async with ManagedLedgerFactory(bk, store, cfg, clock) as f:
        ml = await f.open(NAME)
        clock.advance(3600)
        assert ml.check_rollover() is None  # empty ledgers are never rolled
        await ml.add_entry(b"a")  # the add itself sees the ledger is old enough
        await _wait_opened(ml)
        assert [i.entries for i in ml.ledgers] == [1, 0]
        await ml.add_entry(b"b")
        clock.advance(4 * 60)
        assert ml.check_rollover() is None  # younger than the minimum age
        clock.advance(7 * 60)
        assert ml.check_rollover() == "time"
        await _wait_opened(ml)
        assert [i.entries for i in ml.ledgers] == [1, 1, 0]
        assert _rolls(f, "time") == 2


async def test_idle_ledger_rolls(store, bk, clock) -> None:
    cfg = config(inactive_ledger_rollover_time_s=30.0)
    async with ManagedLedgerFactory(bk, store, cfg, clock) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        clock.advance(10)
        assert ml.check_rollover() is None
        clock.advance(25)
        assert ml.check_rollover() == "inactive"
        await _wait_opened(ml)
        assert [i.entries for i in ml.ledgers] == [1, 0]
        clock.advance(100)
        assert ml.check_rollover() is None  # the new ledger is empty


async def test_background_loop_rolls(store, bk, autojump_clock) -> None:
    cfg = config(inactive_ledger_rollover_time_s=5.0, rollover_check_interval_s=1.0)
    async with ManagedLedgerFactory(bk, store, cfg, trio.current_time) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        await trio.sleep(10)  # virtual time (autojump clock): past the 5 s inactivity, checked every 1 s
        assert [i.entries for i in ml.ledgers] == [1, 0]


async def test_manual_rollover_and_no_empty_ledgers_left(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        first = ml.ledgers[0].ledger_id
        await ml.rollover()  # empty: nothing to do
        assert [i.ledger_id for i in ml.ledgers] == [first]
        await ml.add_entry(b"a")
        await ml.rollover()
        assert [i.entries for i in ml.ledgers] == [1, 0]
        empty = ml.ledgers[1].ledger_id
    # closing removed the empty current ledger from the list and deleted it
    assert empty in bk.deleted_ledgers
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        assert [i.entries for i in ml.ledgers] == [1, 0]
        assert ml.ledgers[0].ledger_id == first


async def test_crash_with_empty_ledger_is_cleaned_on_reopen(store, bk, clock) -> None:
    async with trio.open_nursery() as n:
        f = ManagedLedgerFactory(bk, store, config(), clock)
        await n.start(f.run)
        ml = await f.open(NAME)
        await ml.add_entry(b"a")
        await ml.rollover()
        empty = ml.ledgers[-1].ledger_id
        n.cancel_scope.cancel()  # crash: no close
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        assert empty not in [i.ledger_id for i in ml.ledgers]
        assert empty in bk.deleted_ledgers
        assert [i.entries for i in ml.ledgers] == [1, 0]
