"""Helpers for the AutoRecovery tests: store URLs per backend, waiting for a condition, bookie
registrations without bookies, and ledger metadata made by hand."""

from __future__ import annotations

import uuid

import pytest

from bk_client import LedgerManager
from metadata import MetadataStore
from protocols.bookkeeper import LedgerMetadata, Segment, available_path, readonly_path

ROOT = "/magnetar"

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("zk", id="zk", marks=pytest.mark.slow),
]


def store_url_for(request: pytest.FixtureRequest) -> str:
    """A fresh store on the parametrised backend (``memory`` or ``zk``)."""
    if request.param == "memory":
        return f"memory://ar-{uuid.uuid4().hex}"
    return str(request.getfixturevalue("zk_url"))


async def register(store: MetadataStore, bookie: str, *, readonly: bool = False) -> str:
    """Register ``bookie`` as the real bookie does (ephemeral node); returns the node path."""
    path = readonly_path(ROOT, bookie) if readonly else available_path(ROOT, bookie)
    await store.create(path, b"", ephemeral=True, make_parents=True)
    return path


def metadata(
    *segments: tuple[int, tuple[str, ...]], e: int = 3, qw: int = 2, qa: int = 2, closed_at: int | None = None
) -> LedgerMetadata:
    """Ledger metadata with the given (first entry, ensemble) segments."""
    meta = LedgerMetadata(
        ensemble_size=e,
        write_quorum=qw,
        ack_quorum=qa,
        segments=tuple(Segment(f, ens) for f, ens in segments),
        password=b"pw",
    )
    if closed_at is not None:
        meta = meta.closed(closed_at, closed_at + 1)
    return meta


async def make_ledger(
    lm: LedgerManager, ledger_id: int, *segments: tuple[int, tuple[str, ...]], closed_at: int | None = 10
) -> None:
    """Create ledger ``ledger_id`` with the given segments (closed at ``closed_at`` by default)."""
    await lm.create(ledger_id, metadata(*segments, closed_at=closed_at))


__all__ = ["BACKENDS", "ROOT", "make_ledger", "metadata", "register", "store_url_for"]
