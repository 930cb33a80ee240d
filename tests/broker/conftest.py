"""Fixtures of the broker tests: one in-process broker per module and a client factory."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pulsar
import pytest

from tests.support.broker_thread import BrokerThread
from tests.support.clients import pulsar_client

_names = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as b:
        yield b


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    with pulsar_client(broker.url) as c:
        yield c


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test."""
    return f"persistent://public/default/{request.node.name.replace('[', '-').replace(']', '')}-{next(_names)}"
