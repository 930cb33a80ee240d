"""Fixtures of the managed-ledger tests: the in-memory metadata store, MockBookKeeper, a fake
clock and a factory helper."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from bk_client.testing import MockBookKeeper
from metadata import open_metadata_store
from tests.support.clocks import FakeClock


@pytest.fixture
async def store() -> AsyncIterator[object]:
    async with open_metadata_store("memory://ml-tests") as s:
        yield s


@pytest.fixture
def bk() -> MockBookKeeper:
    return MockBookKeeper()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def transitions_follow_the_rules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every managed-ledger test also checks that each change of state it caused is one the
    module header's rules allow (`managed_ledger._ledger.TRANSITIONS`)."""
    from managed_ledger import _ledger

    seen: list[str] = []
    monkeypatch.setattr(
        _ledger, "_illegal_transition", lambda name, old, new: seen.append(f"{name}: {old.name} -> {new.name}")
    )
    yield
    assert not seen, f"state changes outside the transition table: {seen}"
