"""The broker-plus-admin-server harness: `tests.support.broker_thread.BrokerThread` with ``admin=True``.

Tests talk to it with the official ``pulsar-client`` (``url``), with httpx against the real HTTP
server (``http``), and run coroutines on the broker's loop with `call`.
"""

from __future__ import annotations

from typing import Any

from broker import BrokerConfig
from managed_ledger import ManagedLedgerConfig
from tests.support.broker_thread import BrokerThread

__all__ = ["AdminBroker"]


class AdminBroker(BrokerThread):
    """A `BrokerThread` that also serves the admin REST API. Start with `start()` (or ``with``),
    stop with `stop()`."""

    def __init__(
        self, config: BrokerConfig | None = None, ml_config: ManagedLedgerConfig | None = None, *, tier: Any = None
    ) -> None:
        super().__init__(config, ml_config, admin=True, tier=tier)
