"""Cursor state survives close/reopen exactly, and a crash keeps exactly what was persisted."""

from __future__ import annotations

import itertools

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bk_client.testing import MockBookKeeper
from managed_ledger import InitialPosition, ManagedLedgerFactory
from metadata import open_metadata_store
from tests.support.clocks import FakeClock
from tests.support.managed_ledger import NAME, config
from tests.support.waiting import wait_until_async

_N = 30
_counter = itertools.count()

ops = st.lists(
    st.one_of(
        st.tuples(st.just("ack"), st.lists(st.integers(0, _N - 1), max_size=8)),
        st.tuples(st.just("md"), st.integers(0, _N - 1)),
        st.tuples(st.just("batch"), st.integers(0, 3), st.lists(st.integers(0, 7), max_size=6)),
        st.tuples(st.just("persist")),
    ),
    max_size=15,
)


def _state(cursor, positions):
    return (
        cursor.mark_delete_position,
        cursor.individually_deleted_ranges,
        [cursor.is_acked(p) for p in positions],
        {p: cursor.batch_acked_indexes(p) for p in positions if cursor.batch_acked_indexes(p)},
        cursor.backlog,
    )


async def _scenario(steps, crash: bool, max_ranges: int) -> None:
    bk = MockBookKeeper()
    cfg = config(max_entries_per_ledger=7, max_unacked_ranges_to_persist=max_ranges)
    clock = FakeClock()
    async with open_metadata_store(f"memory://cursor-prop-{next(_counter)}") as store:
        persisted = None
        async with trio.open_nursery() as n:
            f = ManagedLedgerFactory(bk, store, cfg, clock)
            await n.start(f.run)
            ml = await f.open(NAME)
            positions = [await ml.add_entry(b"%d" % i) for i in range(_N)]
            cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
            persisted = _state(cursor, positions)
            truth = set()  # what was acked, as the model
            batches: dict[int, set[int]] = {}
            for step in steps:
                if step[0] == "ack":
                    await cursor.delete(positions[i] for i in step[1])
                    truth.update(step[1])
                elif step[0] == "md":
                    await cursor.mark_delete(positions[step[1]])
                    truth.update(range(step[1] + 1))
                elif step[0] == "batch":
                    await cursor.delete_batch_indexes(positions[step[1]], 8, step[2])
                    if step[1] not in truth:
                        batches.setdefault(step[1], set()).update(step[2])
                        if len(batches[step[1]]) == 8:
                            truth.add(step[1])
                else:
                    await cursor.persist()
                    persisted = _state(cursor, positions)
                # the in-memory state agrees with the model
                assert [cursor.is_acked(p) for p in positions] == [i in truth for i in range(_N)]
            final = _state(cursor, positions)
            if crash:
                n.cancel_scope.cancel()
            else:
                await f.close()
                n.cancel_scope.cancel()
        async with ManagedLedgerFactory(bk, store, cfg, clock) as f2:
            ml2 = await f2.open(NAME)
            restored = _state(ml2.cursors["sub"], positions)
            expected = persisted if crash else final
            if max_ranges >= _N:
                assert restored == expected
            else:
                # bounded: same mark-delete; may forget acks, never invents one
                assert restored[0] == expected[0]
                assert all(not r or e for r, e in zip(restored[2], expected[2], strict=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=ops, crash=st.booleans())
def test_cursor_recovers_as_persisted(steps, crash) -> None:
    trio.run(_scenario, steps, crash, 10_000)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=ops, crash=st.booleans())
def test_bounded_ranges_never_skip_an_unacked_entry(steps, crash) -> None:
    trio.run(_scenario, steps, crash, 2)


async def test_truncated_persist_is_counted(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_unacked_ranges_to_persist=2), clock) as f:
        ml = await f.open(NAME)
        pos = [await ml.add_entry(b"x") for _ in range(10)]
        c = await ml.open_cursor("c", InitialPosition.EARLIEST)
        await c.delete([pos[1], pos[3], pos[5], pos[7]])
        await c.persist()
        assert f.metrics.sample("pulsar_ml_cursor_persisted_ranges_truncated_total") == 1
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        c = (await f.open(NAME)).cursors["c"]
        assert [c.is_acked(p) for p in pos] == [False, True, False, True] + [False] * 6
        assert [e.position for e in await c.read_entries(100)] == [pos[i] for i in (0, 2, 4, 5, 6, 7, 8, 9)]


async def test_flush_loop_persists_dirty_cursors(store, bk, autojump_clock) -> None:
    cfg = config(cursor_persist_interval_s=5.0)
    async with trio.open_nursery() as n:
        f = ManagedLedgerFactory(bk, store, cfg, trio.current_time)
        await n.start(f.run)
        ml = await f.open(NAME)
        pos = [await ml.add_entry(b"x") for _ in range(3)]
        c = await ml.open_cursor("c", InitialPosition.EARLIEST)
        await c.mark_delete(pos[1])
        assert c.dirty
        await wait_until_async(lambda: not c.dirty, "the background flush of the cursor", timeout_s=30)
        n.cancel_scope.cancel()
    async with ManagedLedgerFactory(bk, store, cfg, trio.current_time) as f:
        assert (await f.open(NAME)).cursors["c"].mark_delete_position == pos[1]


# --- several lives: restart, add more (new ledgers), ack across ledgers, crash or close ------

_life = st.tuples(
    st.integers(0, 12),  # entries added in this life
    st.lists(
        st.tuples(st.sampled_from(["ack", "md", "persist", "roll", "trim"]), st.integers(0, 10**6), st.integers(1, 6)),
        max_size=10,
    ),
    st.sampled_from(["crash", "close"]),
)


async def _lives(lives, per_ledger: int) -> None:
    bk = MockBookKeeper()
    cfg = config(max_entries_per_ledger=per_ledger)
    positions = []  # every entry ever added, in order
    announced: set[int] = set()  # acks asked for in any life (a crash may lose the unpersisted ones)
    async with open_metadata_store(f"memory://cursor-lives-{next(_counter)}") as store:
        for adds, life_ops, end in lives:
            async with trio.open_nursery() as n:
                f = ManagedLedgerFactory(bk, store, cfg, FakeClock())
                await n.start(f.run)
                ml = await f.open(NAME)
                cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
                trimmed = {p for p in positions if p.ledger_id not in {i.ledger_id for i in ml.ledgers}}
                for i, p in enumerate(positions):  # acked only if asked for; trimmed only if acked
                    assert not cursor.is_acked(p) or i in announced, (i, p, cursor)
                    assert p not in trimmed or i in announced, (i, p, "trimmed while unacked")
                delivered = {e.position for e in await cursor.read_entries(10_000)}
                for i, p in enumerate(positions):  # redelivery allowed, skipping never
                    assert i in announced or p in delivered, (i, p, cursor.individually_deleted_ranges)
                for _ in range(adds):
                    positions.append(await ml.add_entry(b"x"))
                for op, a, b in life_ops:
                    if not positions:
                        continue
                    i = a % len(positions)
                    if op == "ack":
                        idx = list(range(i, min(i + b, len(positions))))
                        await cursor.delete(positions[j] for j in idx)
                        announced.update(idx)
                    elif op == "md":
                        await cursor.mark_delete(positions[i])
                        announced.update(range(i + 1))
                    elif op == "persist":
                        await cursor.persist()
                    elif op == "roll":
                        await ml.rollover()
                    else:
                        await ml.trim([info.ledger_id for info in ml.trimmable_ledgers()])
                if end == "crash":
                    n.cancel_scope.cancel()
                else:
                    await f.close()
                    n.cancel_scope.cancel()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lives=st.lists(_life, min_size=2, max_size=5), per_ledger=st.integers(2, 6))
def test_no_life_skips_an_unacknowledged_entry(lives, per_ledger) -> None:
    trio.run(_lives, lives, per_ledger)
