"""Auditor election and the auditor: grace period, marks, periodic check, take-over."""

from __future__ import annotations

import uuid

import pytest
import trio
from prometheus_client import generate_latest

from autorecovery import (
    Auditor,
    AuditorElection,
    AutoRecovery,
    AutoRecoveryConfig,
    UnderReplicationManager,
    current_auditor,
)
from bk_client import LedgerManager
from metadata import open_metadata_store
from tests.autorecovery.ar_helpers import BACKENDS, ROOT, make_ledger, register, store_url_for
from tests.support.waiting import wait_until_async


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> str:
    return store_url_for(request)


async def test_election_one_leader_and_take_over(url: str) -> None:
    async with open_metadata_store(url) as s1, open_metadata_store(url) as s2, open_metadata_store(url) as s3:
        led: list[str] = []

        def leader(name: str):
            async def lead() -> None:
                led.append(name)
                await trio.sleep_forever()

            return lead

        async with trio.open_nursery() as nursery:
            e1 = AuditorElection(s1, ROOT, identity="a1")
            e2 = AuditorElection(s2, ROOT, identity="a2")
            e3 = AuditorElection(s3, ROOT, identity="a3")
            scope1 = trio.CancelScope()

            async def run1() -> None:
                with scope1:
                    await e1.run(leader("a1"))

            nursery.start_soon(run1)
            await wait_until_async(lambda: e1.is_leader, "a1 elected")
            await nursery.start(e2.run, leader("a2"))
            await nursery.start(e3.run, leader("a3"))
            # nothing should happen: give a wrong takeover by a2 or a3 (each watches the node ahead of
            # it) a bounded chance to show before checking that a1 still leads
            await trio.sleep(0.2)
            assert (e1.is_leader, e2.is_leader, e3.is_leader) == (True, False, False)
            assert await current_auditor(s2, ROOT) == "a1"
            scope1.cancel()  # a1 withdraws: a2 (next in line) takes over, a3 keeps waiting
            await wait_until_async(lambda: e2.is_leader, "a2 takes over")
            assert not e3.is_leader
            assert await current_auditor(s3, ROOT) == "a2"
            assert led == ["a1", "a2"]
            nursery.cancel_scope.cancel()
        assert await current_auditor(s1, ROOT) is None


async def test_election_leader_session_closes(url: str) -> None:
    async with open_metadata_store(url) as s2:
        e2 = AuditorElection(s2, ROOT, identity="a2")
        async with trio.open_nursery() as nursery:
            async with open_metadata_store(url) as s1:
                e1 = AuditorElection(s1, ROOT, identity="a1")
                nursery.start_soon(e1.run, trio.sleep_forever)
                await wait_until_async(lambda: e1.is_leader, "a1 elected")
                await nursery.start(e2.run, trio.sleep_forever)
                assert not e2.is_leader
            # a1's session ended (crash-like: its vote vanished with the session)
            await wait_until_async(lambda: e2.is_leader, "a2 takes over after a1's session closed")
            nursery.cancel_scope.cancel()


async def _cluster(store, lm: LedgerManager) -> None:
    for b in ("b1:1", "b2:1", "b3:1", "b4:1"):
        await register(store, b)
    await make_ledger(lm, 1, (0, ("b1:1", "b2:1", "b3:1")))
    await make_ledger(lm, 2, (0, ("b2:1", "b3:1", "b4:1")))
    await make_ledger(lm, 3, (0, ("b2:1", "b3:1", "b4:1")), (5, ("b1:1", "b3:1", "b4:1")))
    await make_ledger(lm, 4, (0, ("b2:1", "b3:1", "b4:1")), closed_at=None)


async def test_auditor_marks_after_the_grace_period_not_before() -> None:
    url = f"memory://ar-{uuid.uuid4().hex}"
    async with open_metadata_store(url) as store, open_metadata_store(url) as bookies:
        lm = LedgerManager(store, ROOT)
        urm = UnderReplicationManager(store, ROOT)
        await _cluster(bookies, lm)
        auditor = Auditor(store, ROOT, lost_bookie_recovery_delay_s=1.0)
        async with trio.open_nursery() as nursery:
            await nursery.start(auditor.run)
            assert auditor.live_bookies == {"b1:1", "b2:1", "b3:1", "b4:1"}
            await bookies.delete(f"{ROOT}/ledgers/available/b1:1")
            await wait_until_async(lambda: auditor.pending_bookies == {"b1:1"}, "auditor sees b1 leave")
            assert await urm.list() == []  # in its grace period: nothing marked yet
            with trio.fail_after(10):
                await auditor.audit_done.wait()
            assert await urm.list() == [1, 3]
            rec = await urm.get(3)
            assert rec is not None and rec.missing == ("b1:1",)
            assert auditor.lost_bookies == {"b1:1"}
            stats = auditor.statistics()
            assert stats.audits == 1 and stats.ledgers_marked == 2 and stats.lost_bookies == 1
            nursery.cancel_scope.cancel()


async def test_bookie_back_within_grace_is_not_audited() -> None:
    url = f"memory://ar-{uuid.uuid4().hex}"
    async with open_metadata_store(url) as store, open_metadata_store(url) as bookies:
        lm = LedgerManager(store, ROOT)
        await _cluster(bookies, lm)
        auditor = Auditor(store, ROOT, lost_bookie_recovery_delay_s=0.5)
        async with trio.open_nursery() as nursery:
            await nursery.start(auditor.run)
            await bookies.delete(f"{ROOT}/ledgers/available/b4:1")
            await wait_until_async(lambda: auditor.pending_bookies == {"b4:1"}, "auditor sees b4 leave")
            await register(bookies, "b4:1", readonly=True)  # back, read-only: its replicas are readable
            await wait_until_async(lambda: not auditor.pending_bookies, "auditor sees b4 back")
            # past the 0.5 s lostBookieRecoveryDelay b4 would have been audited after: nothing is marked
            await trio.sleep(0.8)
            assert await UnderReplicationManager(store, ROOT).list() == []
            assert auditor.statistics().audits == 0
            nursery.cancel_scope.cancel()


async def test_zero_delay_marks_at_once_and_startup_finds_bookies_gone_before(url: str) -> None:
    async with open_metadata_store(url) as store, open_metadata_store(url) as bookies:
        lm = LedgerManager(store, ROOT)
        urm = UnderReplicationManager(store, ROOT)
        await _cluster(bookies, lm)
        await bookies.delete(f"{ROOT}/ledgers/available/b4:1")  # gone before the auditor starts
        auditor = Auditor(store, ROOT, lost_bookie_recovery_delay_s=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(auditor.run)
            await wait_until_async(lambda: auditor.lost_bookies == {"b4:1"}, "b4 audited (rule 3)")
            assert await urm.list() == [2, 3, 4]
            await bookies.delete(f"{ROOT}/ledgers/available/b2:1")
            await wait_until_async(lambda: auditor.lost_bookies == {"b2:1", "b4:1"}, "b2 audited")
            assert await urm.list() == [1, 2, 3, 4]
            rec = await urm.get(2)
            assert rec is not None and rec.missing == ("b2:1", "b4:1")
            nursery.cancel_scope.cancel()


async def test_disabled_replication_postpones_audits() -> None:
    url = f"memory://ar-{uuid.uuid4().hex}"
    async with open_metadata_store(url) as store, open_metadata_store(url) as bookies:
        lm = LedgerManager(store, ROOT)
        urm = UnderReplicationManager(store, ROOT)
        await _cluster(bookies, lm)
        await urm.disable()
        auditor = Auditor(store, ROOT, lost_bookie_recovery_delay_s=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(auditor.run)
            await bookies.delete(f"{ROOT}/ledgers/available/b1:1")
            await wait_until_async(lambda: auditor.pending_bookies == {"b1:1"}, "b1 seen leaving")
            # with a delay of 0 an enabled auditor marks at once; disabled, nothing is marked in this time
            await trio.sleep(0.2)
            assert await urm.list() == []
            await urm.enable()
            await wait_until_async(lambda: auditor.lost_bookies == {"b1:1"}, "audit after enable")
            assert await urm.list() == [1, 3]
            nursery.cancel_scope.cancel()


async def test_periodic_check_marks_ledgers_again() -> None:
    url = f"memory://ar-{uuid.uuid4().hex}"
    async with open_metadata_store(url) as store, open_metadata_store(url) as bookies:
        lm = LedgerManager(store, ROOT)
        urm = UnderReplicationManager(store, ROOT)
        await _cluster(bookies, lm)
        auditor = Auditor(store, ROOT, lost_bookie_recovery_delay_s=0, periodic_check_interval_s=0.2)
        async with trio.open_nursery() as nursery:
            await nursery.start(auditor.run)
            await bookies.delete(f"{ROOT}/ledgers/available/b1:1")
            await wait_until_async(lambda: auditor.lost_bookies == {"b1:1"}, "b1 audited")
            for lid in await urm.list():  # an operator clears the marks without repairing
                rec = await urm.try_lock(lid)
                assert rec is not None
                await urm.mark_replicated(lid, rec.version)
            assert await urm.list() == []
            await wait_until_async(lambda: auditor.statistics().full_checks >= 2, "two full checks")
            assert await urm.list() == [1, 3]
            assert auditor.statistics().ledgers_checked >= 8
            nursery.cancel_scope.cancel()


async def test_two_autorecovery_processes_one_auditor_acts(url: str) -> None:
    async with open_metadata_store(url) as bookies:
        lm = LedgerManager(bookies, ROOT)
        await _cluster(bookies, lm)
        async with open_metadata_store(url) as s1, open_metadata_store(url) as s2, trio.open_nursery() as nursery:
            scope1 = trio.CancelScope()
            started: list[AutoRecovery] = []

            async def first(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                with scope1:
                    ar = AutoRecovery(s1, ROOT, AutoRecoveryConfig(replication_workers=0, identity="ar1"))
                    started.append(ar)
                    await ar.run(task_status=task_status)

            await nursery.start(first)
            ar1 = started[0]
            await wait_until_async(lambda: ar1.is_auditor, "ar1 elected")
            ar2 = AutoRecovery(s2, ROOT, AutoRecoveryConfig(replication_workers=0, identity="ar2"))
            await nursery.start(ar2.run)
            await bookies.delete(f"{ROOT}/ledgers/available/b1:1")
            await wait_until_async(lambda: ar1.auditor.lost_bookies == {"b1:1"}, "ar1 audits b1")
            # nothing should happen on ar2 (not elected): a bounded chance for a second audit to show
            await trio.sleep(0.1)
            assert not ar2.is_auditor and ar2.auditor.statistics().audits == 0
            assert ar1.auditor.statistics().ledgers_marked == 2
            scope1.cancel()
            await wait_until_async(lambda: ar2.is_auditor, "ar2 takes over")
            # the new auditor finds b1 absent at start-up and (delay 0) marks its ledgers again
            await bookies.delete(f"{ROOT}/ledgers/available/b4:1")
            await wait_until_async(lambda: ar2.auditor.lost_bookies >= {"b4:1"}, "ar2 audits b4")
            urm = UnderReplicationManager(bookies, ROOT)
            assert await urm.list() == [1, 2, 3, 4]
            text = generate_latest(ar2.metrics.registry).decode()
            assert "auditor_IS_AUDITOR 1.0" in text
            nursery.cancel_scope.cancel()
