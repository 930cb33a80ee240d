"""The broker-plus-admin-server harness: `tests.broker.broker_harness.BrokerThread` with ``admin=True``.

Tests talk to it with the official ``pulsar-client`` (``url``), with httpx against the real HTTP
server (``http``), and run coroutines on the broker's loop with `call`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pulsar

from broker import BrokerConfig
from managed_ledger import ManagedLedgerConfig
from tests.broker.broker_harness import BrokerThread, pulsar_client

__all__ = ["AdminBroker", "pulsar_client", "wait_until", "new_tenant_ns", "receive_all", "V2"]

V2 = "/admin/v2"


def wait_until(check: Callable[[], object], what: str, bound_s: float = 30.0) -> None:
    """Poll ``check`` until it is true; AssertionError naming ``what`` after ``bound_s`` seconds."""
    deadline = time.monotonic() + bound_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def new_tenant_ns(http: httpx.Client, name: str) -> str:
    """Create tenant ``name`` and its namespace ``ns``; returns ``"name/ns"``."""
    assert http.put(f"{V2}/tenants/{name}").status_code == 204
    assert http.put(f"{V2}/namespaces/{name}/ns").status_code == 204
    return f"{name}/ns"


def receive_all(consumer: pulsar.Consumer, quiet_ms: int = 1500) -> list[pulsar.Message]:
    """Every message the consumer gets (each acknowledged) until it has been quiet for ``quiet_ms``."""
    out = []
    while True:
        try:
            m = consumer.receive(quiet_ms)
        except pulsar.Timeout:
            return out
        consumer.acknowledge(m)
        out.append(m)


class AdminBroker(BrokerThread):
    """A `BrokerThread` that also serves the admin REST API. Start with `start()` (or ``with``),
    stop with `stop()`."""

    def __init__(self, config: BrokerConfig | None = None, ml_config: ManagedLedgerConfig | None = None, *,
                 tier: Any = None) -> None:
        super().__init__(config, ml_config, admin=True, tier=tier)
