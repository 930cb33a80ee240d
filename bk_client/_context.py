"""What every ledger operation of one client shares (BookKeeper's ``ClientContext``): the bookie
connections, the ledger metadata manager, the placement policy, the config, the metrics and the
client's nursery for the few background tasks (connections, ensemble changes, add timeouts)."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from ._config import ClientConfig
from ._connection import ConnectionPool
from ._errors import ClientClosed
from ._ledger_manager import LedgerManager
from ._placement import EnsemblePlacementPolicy
from .metrics import ClientMetrics

__all__ = ["ClientContext", "master_key"]


def master_key(password: bytes) -> bytes:
    """The key bookies check on adds and fencing reads, derived from the ledger password the way
    BookKeeper's digest managers do (SHA-1 over ``b"ledger"`` and the password)."""
    return hashlib.sha1(b"ledger" + password).digest()


@dataclass
class ClientContext:
    """Shared parts of one client; handles and operations hold a reference, never a copy."""

    pool: ConnectionPool
    ledgers: LedgerManager
    placement: EnsemblePlacementPolicy
    config: ClientConfig
    metrics: ClientMetrics
    nursery: trio.Nursery
    closed: bool = False

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a background task of this client; ``ClientClosed`` once the client closed."""
        if self.closed:
            raise ClientClosed()
        self.nursery.start_soon(fn, *args)
