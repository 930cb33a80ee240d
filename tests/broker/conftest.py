"""Fixtures of the broker tests: one in-process broker per module and a client factory."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

import pulsar
import pytest

from tests.broker.broker_harness import BrokerThread

_names = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    b = BrokerThread().start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=logging.getLogger("pulsar-client"))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test."""
    return f"persistent://public/default/{request.node.name.replace('[', '-').replace(']', '')}-{next(_names)}"
