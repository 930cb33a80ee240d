"""Fixtures: one broker + admin server per module, an httpx client, a pulsar client, unique names."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pulsar
import pytest

from tests.broker_admin.admin_harness import AdminBroker
from tests.support.clients import pulsar_client

_names = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[AdminBroker]:
    with AdminBroker() as b:
        yield b


@pytest.fixture
def http(broker: AdminBroker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.http, timeout=10) as c:
        yield c


@pytest.fixture
def client(broker: AdminBroker) -> Iterator[pulsar.Client]:
    with pulsar_client(broker.url) as c:
        yield c


@pytest.fixture
def name() -> str:
    """A unique short name."""
    return f"n{next(_names)}"
