"""Helpers for the GC tests: storages with small logs, interleaved writes, ledger metadata in a
memory store, and a store wrapper that fails (or lies) on cue."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bookie import DbLedgerStorage
from metadata import ConnectionLossError, MetadataStore
from protocols.bookkeeper import (
    LedgerMetadata,
    LedgerState,
    Segment,
    ledger_path,
)

ROOT = "/magnetar"
BOOKIE = "bookie-1:3181"
RECORD_PREFIX = 20


def payload(ledger_id: int, entry_id: int, size: int) -> bytes:
    """Deterministic entry bytes, so a test can check every byte read back."""
    seed = f"<{ledger_id}:{entry_id}>".encode()
    return (seed * (size // len(seed) + 1))[:size]


async def open_storage(
    tmp: Path, *, log_size_limit: int = 32 * 1024, dirs: int = 1, read_cache_bytes: int = 1 << 20
) -> DbLedgerStorage:
    """A storage on ``tmp/ledgers{i}`` with the index outside the ledger dirs (so `du` of the ledger
    dirs counts entry logs only) and no background flush."""
    return await DbLedgerStorage.open(
        [tmp / f"ledgers{i}" for i in range(dirs)],
        log_size_limit=log_size_limit,
        index_path=tmp / "index.sqlite",
        flush_interval_ms=0,
        write_cache_max_bytes=8 << 20,
        read_cache_max_bytes=read_cache_bytes,
    )


async def write_interleaved(
    storage: DbLedgerStorage, ledgers: Sequence[int], entries: int, size: int, *, first_entry: int = 0
) -> None:
    """Add ``entries`` entries to each ledger round-robin, flushing after every round, so each
    entry log holds records of many ledgers."""
    for eid in range(first_entry, first_entry + entries):
        for lid in ledgers:
            await storage.add_entry(lid, eid, payload(lid, eid, size))
        await storage.flush()


def du(tmp: Path) -> int:
    """Sum of the sizes of the files in the ledger directories (what ``du`` would report)."""
    total = 0
    for d in tmp.glob("ledgers*"):
        for name in os.listdir(d):
            total += os.stat(d / name).st_size
    return total


def metadata_for(
    ensemble: Iterable[str] = (BOOKIE,), *, closed: bool = True, custom: dict[str, bytes] | None = None
) -> LedgerMetadata:
    """A ledger's metadata with one segment on ``ensemble``."""
    ens = tuple(ensemble)
    md = LedgerMetadata(len(ens), len(ens), 1, (Segment(0, ens),), custom_metadata=custom or {})
    return md.closed(10, 100) if closed else md


async def create_metadata(store: MetadataStore, ledger_ids: Iterable[int], **kw: Any) -> None:
    """Create metadata nodes for ``ledger_ids`` (``kw`` as for `metadata_for`)."""
    for lid in ledger_ids:
        await store.create(ledger_path(ROOT, lid), metadata_for(**kw).encode(), make_parents=True)


async def delete_metadata(store: MetadataStore, ledger_ids: Iterable[int]) -> None:
    """Delete the metadata nodes of ``ledger_ids`` (what deleting a ledger does)."""
    for lid in ledger_ids:
        await store.delete(ledger_path(ROOT, lid))


class FlakyStore:
    """Wraps a store: ``fail_children_after = n`` makes the (n+1)-th and later ``children`` calls
    raise ConnectionLossError; ``hide`` drops leaf names from listings (a stale view)."""

    def __init__(self, inner: MetadataStore) -> None:
        self._inner = inner
        self.fail_children_after: int | None = None
        self.children_calls = 0
        self.hide: set[str] = set()

    async def children(self, path: str) -> list[str]:
        self.children_calls += 1
        if self.fail_children_after is not None and self.children_calls > self.fail_children_after:
            raise ConnectionLossError("injected: connection lost while listing")
        return [c for c in await self._inner.children(path) if f"{path}/{c}" not in self.hide]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def live_bytes(ledgers: Iterable[int], entries: int, size: int) -> int:
    """Record bytes of ``entries`` entries of ``size`` bytes for each ledger."""
    return sum(entries * (size + RECORD_PREFIX) for _ in ledgers)


async def check_entries(storage: DbLedgerStorage, ledgers: Iterable[int], entries: int, size: int) -> None:
    """Every entry of ``ledgers`` reads back byte for byte."""
    for lid in ledgers:
        for eid in range(entries):
            assert await storage.get_entry(lid, eid) == payload(lid, eid, size), (lid, eid)


__all__ = [
    "ROOT",
    "BOOKIE",
    "payload",
    "open_storage",
    "write_interleaved",
    "du",
    "metadata_for",
    "create_metadata",
    "delete_metadata",
    "FlakyStore",
    "live_bytes",
    "check_entries",
    "LedgerState",
]


# ------------------------------------------------------------------ real bookie processes


def log_bytes(base: Path) -> int:
    """Bytes of entry log files in ``base/ledgers`` (what ``du`` counts for them)."""
    d = base / "ledgers"
    return sum(os.stat(d / n).st_size for n in os.listdir(d) if n.endswith(".log"))
