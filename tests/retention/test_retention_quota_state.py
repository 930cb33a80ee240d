"""Where the retention service keeps the backlog-quota decisions producers are held or refused by:
for loaded topics only, for as long as they stay loaded, however many topics are checked, while
the explain reports are bounded on their own (`retention._service` item 4)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bk_client.testing import MockBookKeeper
from managed_ledger import InitialPosition, ManagedLedgerFactory
from metadata import open_metadata_store
from retention import (
    BacklogQuota,
    BacklogQuotaType,
    LoadedQuotaStates,
    QuotaAction,
    RetentionService,
    topic_of,
)
from tests.support.clocks import FakeClock
from tests.support.managed_ledger import config

from .retention_helpers import fill, provider

HOLD = {BacklogQuotaType.DESTINATION_STORAGE: BacklogQuota(1000, -1)}


@pytest.fixture
async def store() -> AsyncIterator[object]:
    async with open_metadata_store("memory://retention-quota-state") as s:
        yield s


def ml_name(i: int) -> str:
    return f"public/default/persistent/q{i}"


async def over_quota(f: ManagedLedgerFactory, clock: FakeClock, name: str):  # type: ignore[no-untyped-def]
    ml = await f.open(name)
    await ml.open_cursor("slow", InitialPosition.EARLIEST)
    await fill(ml, clock, 20)  # 2000 bytes of backlog: over the 1000-byte quota
    return ml


async def test_enforcement_outlives_the_explain_reports(store) -> None:  # type: ignore[no-untyped-def]
    clock = FakeClock()
    async with ManagedLedgerFactory(MockBookKeeper(), store, config(max_entries_per_ledger=5), clock) as f:
        mls = [await over_quota(f, clock, ml_name(i)) for i in range(8)]
        svc = RetentionService(f, provider(quotas=HOLD), clock, max_reports=3)
        for ml in mls:
            await svc.check_topic(ml.name)
        # explain keeps the last three checks only ...
        assert set(svc.reports()) == {topic_of(ml_name(i)) for i in (5, 6, 7)}
        # ... while every loaded topic stays held
        for i in range(8):
            action = svc.producer_quota_action(topic_of(ml_name(i)))
            assert action is not None and action.action is QuotaAction.HOLD_PRODUCERS, i
        assert svc.explain(topic_of(ml_name(0))) is None


async def test_the_state_goes_when_the_topic_unloads(store) -> None:  # type: ignore[no-untyped-def]
    clock = FakeClock()
    async with ManagedLedgerFactory(MockBookKeeper(), store, config(max_entries_per_ledger=5), clock) as f:
        mls = [await over_quota(f, clock, ml_name(i)) for i in range(5)]
        svc = RetentionService(f, provider(quotas=HOLD), clock)
        states = svc.quota_states
        assert isinstance(states, LoadedQuotaStates)
        for ml in mls:
            await svc.check_topic(ml.name)
        assert len(states) == 5
        await mls[0].close()
        # seen unloaded by the lookup itself
        assert svc.producer_quota_action(topic_of(ml_name(0))) is None
        assert len(states) == 4
        for ml in mls[1:3]:
            await ml.close()
        await svc.run_once(force=True)  # each pass forgets what unloaded since
        assert len(states) == 2
        assert svc.producer_quota_action(topic_of(ml_name(3))) is not None


async def test_a_topic_checked_while_not_loaded_leaves_no_state(store) -> None:  # type: ignore[no-untyped-def]
    clock = FakeClock()
    async with ManagedLedgerFactory(MockBookKeeper(), store, config(max_entries_per_ledger=5), clock) as f:
        for i in range(4):
            await (await over_quota(f, clock, ml_name(i))).close()
        svc = RetentionService(f, provider(quotas=HOLD), clock)
        reports = await svc.run_once(force=True)  # opens each stored topic, checks it, closes it
        assert len(reports) == 4 and all(r.quota for r in reports)  # over quota, and explained so
        assert len(svc.quota_states) == 0  # type: ignore[arg-type]
        assert all(svc.producer_quota_action(topic_of(ml_name(i))) is None for i in range(4))
        # loaded again (a producer attaches): its check holds it
        await f.open(ml_name(0))
        await svc.check_topic(ml_name(0))
        assert svc.producer_quota_action(topic_of(ml_name(0))) is not None
