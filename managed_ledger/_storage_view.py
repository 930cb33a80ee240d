"""Where a managed ledger's ledgers are stored: their ensembles, read from the ledger metadata.

The broker may not import the BookKeeper client, yet explaining storage ("which bookies still
hold this topic's bytes?") needs the ensembles of its ledgers. `ledger_placements` reads them
through the client's public `LedgerManager` and returns plain frozen records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import trio

from bk_client import LedgerManager, MetadataStoreError, NoSuchLedger
from metadata import MetadataStore
from protocols.bookkeeper import BookieServiceInfo, RegistrationFormatError

__all__ = ["LedgerPlacement", "bookie_http_url", "ledger_placements"]


def bookie_http_url(registration: bytes, bookie_id: str) -> str | None:
    """The URL of the HTTP server a bookie publishes in its registration node's data (BookKeeper's
    service info, or the JSON earlier Magnetar bookies wrote), or None when it publishes none or
    the data is unreadable."""
    try:
        urls = BookieServiceInfo.decode(registration, bookie_id).http_urls()
    except RegistrationFormatError:
        return None
    return urls[0] if urls else None


@dataclass(frozen=True)
class LedgerPlacement:
    """One ledger as its metadata describes it.

    ``state`` is the metadata state name (``OPEN``, ``IN_RECOVERY``, ``CLOSED``), ``"ABSENT"``
    when the metadata node does not exist (the ledger was deleted) or ``"UNREADABLE"`` when it
    could not be read or decoded (``error`` says why). ``bookies`` is the union of the ensembles of
    every segment, in first-seen order (empty unless the metadata was read).
    """

    ledger_id: int
    state: str
    bookies: tuple[str, ...] = ()
    length: int = 0
    last_entry_id: int = -1
    error: str | None = None


async def ledger_placements(
    store: MetadataStore, ledger_ids: Iterable[int], *, root: str = "", concurrency: int = 16
) -> dict[int, LedgerPlacement]:
    """Read the metadata of each of ``ledger_ids`` (at most ``concurrency`` reads at a time).

    Never raises for one ledger: a missing node gives state ``ABSENT``, a failed read
    ``UNREADABLE``. Cancellation propagates. The ledger layout (flat or hierarchical) is the one
    the cluster's LAYOUT node records; ``MetadataStoreError`` if that node cannot be read.
    """
    manager = await LedgerManager.discover(store, root)  # flat or hierarchical, as the cluster records
    out: dict[int, LedgerPlacement] = {}
    limit = trio.CapacityLimiter(max(1, concurrency))

    async def one(lid: int) -> None:
        async with limit:
            try:
                md, _version = await manager.read(lid)
            except NoSuchLedger:
                out[lid] = LedgerPlacement(lid, "ABSENT")
                return
            except (MetadataStoreError, ValueError) as exc:
                out[lid] = LedgerPlacement(lid, "UNREADABLE", error=str(exc))
                return
        bookies: list[str] = []
        for segment in md.segments:
            bookies.extend(b for b in segment.ensemble if b not in bookies)
        out[lid] = LedgerPlacement(lid, md.state.name, tuple(bookies), md.length, md.last_entry_id)

    async with trio.open_nursery() as nursery:
        for lid in dict.fromkeys(ledger_ids):
            nursery.start_soon(one, lid)
    return out
