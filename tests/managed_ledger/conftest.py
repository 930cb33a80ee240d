"""Fixtures of the managed-ledger tests: the in-memory metadata store, MockBookKeeper, a fake
clock and a factory helper."""

from __future__ import annotations

from collections.abc import AsyncIterator

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

