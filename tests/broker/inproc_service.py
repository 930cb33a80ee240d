"""A `BrokerService` running in the test's own trio run (MockBookKeeper storage, memory:// metadata),
for tests that drive the service or its connections directly instead of through a socket."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator

import trio

from bk_client.testing import MockBookKeeper
from broker import BrokerConfig, BrokerService
from managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from metadata import open_metadata_store

_ids = itertools.count()


def inproc_config(**overrides: object) -> BrokerConfig:
    """A broker config on loopback, free ports, no retention loop (tests call it), plus ``overrides``."""
    base: dict[str, object] = {
        "advertised_address": "127.0.0.1",
        "bind_address": "127.0.0.1",
        "broker_service_port": 0,
        "web_service_port": 0,
        "retention_enabled": False,
    }
    base.update(overrides)
    return BrokerConfig(**base)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def running_service(
    config: BrokerConfig, ml_config: ManagedLedgerConfig | None = None
) -> AsyncIterator[tuple[BrokerService, trio.Nursery]]:
    """The service (started: default namespace, background loops) and a nursery for the test's
    own tasks; both stop when the block exits."""
    ml_config = ml_config or ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)
    async with open_metadata_store(f"memory://inproc-broker-{next(_ids)}") as store:
        factory = ManagedLedgerFactory(MockBookKeeper(), store, ml_config)
        async with trio.open_nursery() as nursery:
            await nursery.start(factory.run)
            service = BrokerService(factory, store, config)
            await nursery.start(service.run)
            yield service, nursery
            nursery.cancel_scope.cancel()
