"""Replication workers against fake bookies: every entry ends up on Qw bookies of the new
ensembles; open ledgers, failures with backoff, the rate limiter."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from autorecovery import AutoRecovery, AutoRecoveryConfig, RateLimiter, RetryTable, UnderReplicationManager
from bk_client import DistributionSchedule, LedgerFenced
from protocols.bookkeeper import LedgerMetadata, LedgerState
from tests.autorecovery.ar_helpers import ROOT
from tests.support.fake_bookie import Cluster, fake_cluster
from tests.support.waiting import wait_until_async

FAST = dict(poll_interval_s=0.05, retry_backoff_min_s=0.05, retry_backoff_max_s=0.2, lost_bookie_recovery_delay_s=0)


@asynccontextmanager
async def autorecovery(c: Cluster, **overrides: object) -> AsyncIterator[AutoRecovery]:
    settings = {**FAST, "replication_workers": 2, **overrides}
    async with trio.open_nursery() as nursery:
        ar = AutoRecovery(c.store, ROOT, AutoRecoveryConfig(**settings))  # type: ignore[arg-type]
        await nursery.start(ar.run)
        yield ar
        nursery.cancel_scope.cancel()


async def write_ledger(c: Cluster, entries: int, *, close: bool = True):
    lh = await c.bk.create_ledger(3, 2, 2, password=b"secret")
    for i in range(entries):
        await lh.add_entry(f"ledger {lh.ledger_id} entry {i}".encode())
    if close:
        await lh.close()
    return lh


def assert_fully_replicated(c: Cluster, lid: int, meta: LedgerMetadata, gone: set[str]) -> None:
    """Every entry of the ledger is on each bookie of its write set, identical everywhere."""
    schedule = DistributionSchedule(meta.ensemble_size, meta.write_quorum, meta.ack_quorum)
    assert not gone & {b for seg in meta.segments for b in seg.ensemble}
    for entry in range(meta.last_entry_id + 1):
        ensemble = meta.ensemble_for(entry)
        holders = [ensemble[i] for i in schedule.write_set(entry)]
        bodies = {c.bookie(b).ledgers[lid].entries.get(entry) for b in holders}
        assert None not in bodies, f"entry {entry} of ledger {lid} is missing on one of {holders}"
        assert len(bodies) == 1


async def fully_repaired(c: Cluster, ids: list[int], gone: set[str]) -> bool:
    urm = UnderReplicationManager(c.store, ROOT)
    if await urm.list():
        return False
    for lid in ids:
        meta, _ = await c.bk.ledger_manager.read(lid)
        if gone & {b for seg in meta.segments for b in seg.ensemble}:
            return False
    return True


async def test_workers_restore_full_replication_after_bookies_die() -> None:
    async with fake_cluster(5) as c:
        ledgers = [await write_ledger(c, 25) for _ in range(4)]
        # a ledger with two segments: `first` dies mid-write and is replaced by an ensemble change
        lh = await c.bk.create_ledger(3, 2, 2, password=b"secret")
        for i in range(10):
            await lh.add_entry(b"before %d" % i)
        first = lh._metadata.last_segment.ensemble[0]
        await c.bookie(first).kill()
        for i in range(10):
            await lh.add_entry(b"after %d" % i)
        await lh.close()
        assert len(lh._metadata.segments) == 2
        ids = [x.ledger_id for x in ledgers] + [lh.ledger_id]
        async with autorecovery(c) as ar:
            await wait_until_async(lambda: fully_repaired(c, ids, {first}), "every ledger repaired")
            for lid in ids:
                meta, _ = await c.bk.ledger_manager.read(lid)
                assert_fully_replicated(c, lid, meta, {first})
            # a second bookie dies once the first loss is repaired
            meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
            second = meta.segments[1].ensemble[1]
            await c.bookie(second).kill()
            await wait_until_async(lambda: fully_repaired(c, ids, {first, second}), "repaired again")
            stats = [w.statistics() for w in ar.workers]
            assert sum(s.ledgers_replicated for s in stats) >= 3
            assert sum(s.fragments_replicated for s in stats) >= 3
        for lid in ids:
            meta, _ = await c.bk.ledger_manager.read(lid)
            assert meta.state is LedgerState.CLOSED
            assert_fully_replicated(c, lid, meta, {first, second})
        # the data read back through the client is what was written
        rh = await c.bk.open_ledger(lh.ledger_id, password=b"secret", recovery=False)
        got = [e.data for e in await rh.read(0, 19)]
        assert got == [b"before %d" % i for i in range(10)] + [b"after %d" % i for i in range(10)]


async def test_open_ledger_last_fragment_waits_for_the_grace_period_then_is_recovered() -> None:
    async with fake_cluster(4) as c:
        lh = await write_ledger(c, 12, close=False)
        victim = c.bookie(lh._metadata.last_segment.ensemble[0])
        await victim.kill()
        async with autorecovery(c, open_ledger_rereplication_grace_period_s=0.6) as ar:
            await wait_until_async(
                lambda: sum(w.statistics().ledgers_deferred for w in ar.workers) >= 1, "the open ledger deferred"
            )
            meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
            assert meta.state is LedgerState.OPEN  # the writer still owns it during the grace period
            await wait_until_async(
                lambda: fully_repaired(c, [lh.ledger_id], {victim.bookie_id}), "open ledger recovered and repaired"
            )
            assert sum(w.statistics().open_ledgers_recovered for w in ar.workers) == 1
        meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 11
        assert_fully_replicated(c, lh.ledger_id, meta, {victim.bookie_id})
        with pytest.raises(LedgerFenced):
            await lh.add_entry(b"too late")


async def test_no_replacement_bookie_fails_then_retries_with_backoff() -> None:
    async with fake_cluster(3) as c:
        lh = await write_ledger(c, 9)
        victim = c.bookies[0]
        await victim.kill()
        async with autorecovery(c, replication_workers=1) as ar:
            await wait_until_async(lambda: ar.workers[0].statistics().failures >= 2, "repeated failures")
            urm = UnderReplicationManager(c.store, ROOT)
            assert await urm.list() == [lh.ledger_id]  # the mark stays
            assert not await urm.is_locked(lh.ledger_id)  # and the lock was released
            await c.add_bookie()
            await wait_until_async(
                lambda: fully_repaired(c, [lh.ledger_id], {victim.bookie_id}), "repaired once a bookie is available"
            )
        meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert_fully_replicated(c, lh.ledger_id, meta, {victim.bookie_id})


async def test_entry_without_surviving_replica_is_a_failure_not_a_silent_loss() -> None:
    async with fake_cluster(5) as c:
        lh = await write_ledger(c, 6)
        ensemble = lh._metadata.last_segment.ensemble
        # entry 0 lives on ensemble[0] and ensemble[1]: lose both, and AutoRecovery cannot copy it
        for b in ensemble[:2]:
            await c.bookie(b).kill()
        async with autorecovery(c, replication_workers=1) as ar:
            await wait_until_async(lambda: ar.workers[0].statistics().failures >= 1, "a failure")
            assert await UnderReplicationManager(c.store, ROOT).list() == [lh.ledger_id]
            meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
            assert meta.last_segment.ensemble == ensemble  # nothing installed


async def test_disabled_autorecovery_leaves_marks_alone() -> None:
    async with fake_cluster(4) as c:
        lh = await write_ledger(c, 6)
        urm = UnderReplicationManager(c.store, ROOT)
        await urm.disable()
        victim = c.bookie(lh._metadata.last_segment.ensemble[2])
        await victim.kill()
        async with autorecovery(c) as ar:
            # nothing should happen while replication is disabled: a bounded chance for a mark to show
            await trio.sleep(0.3)
            assert await urm.list() == []  # the auditor waits too
            await urm.enable()
            await wait_until_async(
                lambda: fully_repaired(c, [lh.ledger_id], {victim.bookie_id}), "repaired after enable"
            )
            # a worker counts the ledger once its rereplication has returned, a moment after the
            # metadata shows it repaired
            await wait_until_async(
                lambda: sum(w.statistics().ledgers_replicated for w in ar.workers) >= 1,
                "the worker to count its rereplicated ledger",
            )
            assert sum(w.statistics().ledgers_replicated for w in ar.workers) == 1


async def test_rate_limiter_paces_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    limiter = RateLimiter(5, burst=1)
    start = trio.current_time()
    for _ in range(11):
        await limiter.acquire()
    assert trio.current_time() - start >= 2.0 - 1e-9
    unlimited = RateLimiter(0)
    start = trio.current_time()
    for _ in range(1000):
        await unlimited.acquire()
    assert trio.current_time() == start


async def test_retry_table_doubles_and_forgets(autojump_clock: trio.testing.MockClock) -> None:
    table = RetryTable(min_s=1, max_s=3)
    t0 = trio.current_time()
    assert table.failed(7) == t0 + 1
    assert table.failed(7) == t0 + 2
    assert table.failed(7) == t0 + 3  # capped
    assert table.blocked() == {7}
    await trio.sleep(3)  # virtual time (autojump clock): the capped 3 s delay passes
    assert table.blocked() == set()
    table.succeeded(7)
    assert table.next_retry() == float("inf")
