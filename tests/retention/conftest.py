"""Fixtures of the retention tests: the in-memory metadata store, MockBookKeeper and a fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bk_client.testing import MockBookKeeper
from metadata import open_metadata_store
from tests.support.clocks import FakeClock


@pytest.fixture
async def store() -> AsyncIterator[object]:
    async with open_metadata_store("memory://retention-tests") as s:
        yield s


@pytest.fixture
def bk() -> MockBookKeeper:
    return MockBookKeeper()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
