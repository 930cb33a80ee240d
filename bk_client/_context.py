"""What every ledger operation of one client shares (BookKeeper's ``ClientContext``): the bookie
transport (``pool``: the network's connection pool unless another was given), the ledger
metadata manager, the placement policy, the bookies in quarantine, the config, the metrics and
the client's nursery for the few background tasks (connections, ensemble changes, add
timeouts)."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from ._config import ClientConfig
from ._errors import ClientClosed
from ._ledger_manager import LedgerManager
from ._placement import EnsemblePlacementPolicy
from ._transport import BookieTransport
from .metrics import ClientMetrics

__all__ = ["ClientContext", "Quarantine", "master_key"]


def master_key(password: bytes) -> bytes:
    """The key bookies check on adds and fencing reads, derived from the ledger password the way
    BookKeeper's digest managers do (SHA-1 over ``b"ledger"`` and the password)."""
    return hashlib.sha1(b"ledger" + password).digest()


class Quarantine:
    """Bookies that failed a write recently, kept out of new ensembles and ensemble changes for
    ``seconds`` (BookKeeper's bookie quarantine, ``bookieQuarantineTimeSeconds``).

    A bookie that was killed stays registered until its metadata session expires; without the
    quarantine every new ledger would be placed on it again, fail at once and roll, hundreds of
    ledgers a minute. Unlike BookKeeper, placement does not fall back to quarantined bookies when
    too few healthy ones remain: creating a ledger then fails (``NotEnoughBookies``) and the
    writer reports storage unavailable until a bookie is healthy or a quarantine ends.
    Reads are unaffected. Bounded by the number of bookies (expired entries are pruned)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until: dict[str, float] = {}

    def add(self, bookie: str) -> None:
        """Quarantine ``bookie`` for ``seconds`` from now (extending a running quarantine)."""
        if self.seconds > 0:
            self._until[bookie] = trio.current_time() + self.seconds

    def active(self) -> frozenset[str]:
        """The bookies in quarantine now."""
        if not self._until:
            return frozenset()
        now = trio.current_time()
        for bookie in [b for b, until in self._until.items() if until <= now]:
            del self._until[bookie]
        return frozenset(self._until)


@dataclass
class ClientContext:
    """Shared parts of one client; handles and operations hold a reference, never a copy."""

    pool: BookieTransport
    ledgers: LedgerManager
    placement: EnsemblePlacementPolicy
    config: ClientConfig
    metrics: ClientMetrics
    nursery: trio.Nursery
    quarantine: Quarantine
    closed: bool = False

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a background task of this client; ``ClientClosed`` once the client closed."""
        if self.closed:
            raise ClientClosed()
        self.nursery.start_soon(fn, *args)
