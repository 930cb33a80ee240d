"""Fixtures of the managed-ledger tests: the in-memory metadata store, MockBookKeeper, a fake
clock and a factory helper."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bk_client.testing import MockBookKeeper
from metadata import open_metadata_store


class FakeClock:
    """A settable wall clock (seconds)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


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
