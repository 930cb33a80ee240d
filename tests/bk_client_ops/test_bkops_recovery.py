"""Open with recovery against fake bookies: fencing the old writer, finding the last entry,
re-replication, concurrent recoveries."""

from __future__ import annotations

import pytest
import trio

from bk_client import ClientConfig, LedgerFenced, LedgerRecoveryError, Unauthorized
from protocols.bookkeeper import LedgerState
from tests.support.fake_bookie import fake_cluster

FAST = ClientConfig(
    add_entry_timeout_s=0.5,
    read_entry_timeout_s=0.5,
    recovery_timeout_s=1.0,
    reconnect_backoff_min_s=0.05,
    reconnect_backoff_max_s=0.2,
)


async def test_recovery_closes_at_the_last_acknowledged_entry_and_fences_the_writer() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2, password=b"pw")
        for i in range(10):
            await lh.add_entry(b"e%d" % i)
        async with c.client() as owner:
            rh = await owner.open_ledger(lh.ledger_id, password=b"pw")
            assert rh.is_closed
            assert rh.last_add_confirmed == 9
            assert rh.length == sum(len(b"e%d" % i) for i in range(10))
            assert [e.data for e in await rh.read(0, 9)] == [b"e%d" % i for i in range(10)]
        with pytest.raises(LedgerFenced):
            await lh.add_entry(b"late")
        meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert (meta.state, meta.last_entry_id) == (LedgerState.CLOSED, 9)
        assert sum(b.is_fenced(lh.ledger_id) for b in c.bookies) >= 2


async def test_writer_died_between_the_qa_th_and_qw_th_ack() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 3, 2)
        laggard = c.bookie(lh.metadata.last_segment.ensemble[2])
        laggard.silent_adds = True  # every entry reaches Qa = 2 bookies, never the third
        for i in range(5):
            await lh.add_entry(b"e%d" % i)
        assert laggard.entry_ids(lh.ledger_id) == []
        # the writer dies here (abandoned); the laggard comes back; a new owner recovers
        laggard.silent_adds = False
        async with c.client() as owner:
            rh = await owner.open_ledger(lh.ledger_id)
            assert rh.last_add_confirmed == 4
            assert [e.data for e in await rh.read(0, 4)] == [b"e%d" % i for i in range(5)]
        # recovery re-replicated what lay beyond the LAC the bookies knew to the whole write quorum
        assert 4 in laggard.entry_ids(lh.ledger_id)


async def test_an_entry_on_fewer_than_qa_bookies_may_be_kept_but_then_fully_replicated() -> None:
    # BookKeeper's recovery keeps an entry any replica returns (its add's outcome was unknown to
    # the writer), and drops it when Qw - Qa + 1 replicas lack it; either way every entry the
    # closed ledger holds is on its write quorum afterwards.
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 3, 2)
        for i in range(3):
            await lh.add_entry(b"e%d" % i)
        ensemble = lh.metadata.last_segment.ensemble
        c.bookie(ensemble[1]).silent_adds = True
        c.bookie(ensemble[2]).silent_adds = True
        op = await lh.append(b"never acknowledged")
        while 3 not in c.bookie(ensemble[0]).entry_ids(lh.ledger_id):
            await trio.sleep(0.001)
        assert not op.finished
        for b in c.bookies:
            b.silent_adds = False
        async with c.client() as owner:
            rh = await owner.open_ledger(lh.ledger_id)
            assert rh.last_add_confirmed in (2, 3)
            last = rh.last_add_confirmed
            assert [e.data for e in await rh.read(0, last)] == [b"e0", b"e1", b"e2", b"never acknowledged"][: last + 1]
            for i in range(last + 1):
                assert sum(i in b.entry_ids(lh.ledger_id) for b in c.bookies) >= 2
        with pytest.raises(LedgerFenced):
            await op.result()


async def test_an_entry_no_replica_has_ends_the_recovered_ledger() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 3, 2)
        for i in range(3):
            await lh.add_entry(b"e%d" % i)
        for b in c.bookies:
            b.silent_adds = True
        seen = [b.requests_seen for b in c.bookies]
        op = await lh.append(b"lost")
        while any(b.requests_seen == n for b, n in zip(c.bookies, seen, strict=True)):
            await trio.sleep(0.001)  # every bookie swallowed the add
        for b in c.bookies:
            b.silent_adds = False
        async with c.client() as owner:
            rh = await owner.open_ledger(lh.ledger_id)
            assert rh.last_add_confirmed == 2
        with pytest.raises(LedgerFenced):
            await op.result()


async def test_concurrent_recoveries_agree() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        for i in range(20):
            await lh.add_entry(b"e%d" % i)
        results: list[int] = []
        async with c.client() as a, c.client() as b:

            async def recover(client) -> None:  # type: ignore[no-untyped-def]
                rh = await client.open_ledger(lh.ledger_id)
                results.append(rh.last_add_confirmed)

            async with trio.open_nursery() as n:
                n.start_soon(recover, a)
                n.start_soon(recover, b)
        assert results == [19, 19]
        meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert meta.last_entry_id == 19


async def test_old_writer_racing_a_recovery_loses_no_acknowledged_entry() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        acked: list[int] = []
        fenced = trio.Event()

        async def old_writer() -> None:
            try:
                for i in range(10_000):
                    acked.append(await lh.add_entry(b"e%d" % i))
            except LedgerFenced:
                fenced.set()

        async with trio.open_nursery() as n:
            n.start_soon(old_writer)
            while len(acked) < 50:
                await trio.sleep(0.001)
            async with c.client() as owner:
                rh = await owner.open_ledger(lh.ledger_id)
                await fenced.wait()
                assert acked == list(range(len(acked)))
                assert rh.last_add_confirmed >= acked[-1]
                entries = await rh.read(0, rh.last_add_confirmed)
                assert [e.data for e in entries] == [b"e%d" % i for i in range(rh.last_add_confirmed + 1)]


async def test_recovery_reaches_a_replacement_when_a_bookie_is_dead() -> None:
    async with fake_cluster(4, FAST) as c:
        lh = await c.bk.create_ledger(3, 3, 2)
        ensemble = lh.metadata.last_segment.ensemble
        laggard = c.bookie(ensemble[2])
        laggard.silent_adds = True
        for i in range(4):
            await lh.add_entry(b"e%d" % i)
        await laggard.kill()
        async with c.client() as owner:
            rh = await owner.open_ledger(lh.ledger_id)
            assert rh.last_add_confirmed == 3
            assert [e.data for e in await rh.read(0, 3)] == [b"e%d" % i for i in range(4)]
        meta, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert laggard.bookie_id not in meta.last_segment.ensemble


async def test_recovery_fails_without_enough_bookies_and_can_be_retried() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 3, 2)  # fencing needs 2 of the 3 bookies
        await lh.add_entry(b"a")
        for b in c.bookies[:2]:
            b.silent_reads = True
        async with c.client() as owner:
            with pytest.raises(LedgerRecoveryError):
                await owner.open_ledger(lh.ledger_id)
            meta, _ = await owner.ledger_manager.read(lh.ledger_id)
            assert meta.state is LedgerState.IN_RECOVERY
            for b in c.bookies:
                b.silent_reads = False
            rh = await owner.open_ledger(lh.ledger_id)
            assert rh.last_add_confirmed == 0


async def test_open_checks_the_password() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2, password=b"right")
        with pytest.raises(Unauthorized):
            await c.bk.open_ledger(lh.ledger_id, password=b"wrong")


async def test_open_with_recovery_of_a_closed_ledger_changes_nothing() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"a")
        await lh.close()
        _, before = await c.bk.ledger_manager.read(lh.ledger_id)
        rh = await c.bk.open_ledger(lh.ledger_id)
        _, after = await c.bk.ledger_manager.read(lh.ledger_id)
        assert before == after
        assert rh.last_add_confirmed == 0
        assert not any(b.is_fenced(lh.ledger_id) for b in c.bookies)
