"""Side ledgers: single BookKeeper ledgers a topic owns beside its chain (the compacted view).

A side ledger is written once, start to end, by one writer, closed, and then only read until it
is deleted. It lives in BookKeeper like the managed ledger's own ledgers (same ensemble, quorums
and password, from `ManagedLedgerConfig`), tagged in its custom metadata with the owner's name and
its purpose, so that `explain` tools and operators can tell whom it belongs to. Who remembers its
id (for the compacted view: the ``__compaction`` cursor's properties) is the caller's business;
the managed ledger's ledger list never holds it, so trimming never touches it.

Errors from BookKeeper surface as `ManagedLedgerError` (the broker codes against this package's
errors only); a missing ledger on open as `SideLedgerMissing`, so that its owner can tell a ledger
that is gone for good from one that cannot be read now.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bk_client import NoSuchLedger

from ._errors import ManagedLedgerError, SideLedgerMissing
from ._reader import open_with_passwords

if TYPE_CHECKING:
    from bk_client.api import BookKeeperClient, PendingAppend, ReadHandle, WriteHandle

    from ._config import ManagedLedgerConfig

__all__ = ["SideLedgerWriter", "SideLedgerReader", "SideLedgers"]


class SideLedgerWriter:
    """Appends entries to a new side ledger, many in flight: ``add`` returns once the entry is
    sent (its id fixed: 0, 1, 2, ...), waiting only while the BookKeeper client's in-flight bound
    is full; ``close`` waits until every entry is durable (an ack quorum has it) and seals the
    ledger at its last entry. Raises `ManagedLedgerError` for any storage failure, from ``add`` or
    at the latest from ``close`` (the ledger is then useless: delete it)."""

    def __init__(self, handle: WriteHandle) -> None:
        self._handle = handle
        # Adds finish in id order and, once one failed, every later one fails too (rules 1 and
        # 3 of `bk_client.api`): the outcome of the last add is the outcome of them all.
        self._last: PendingAppend | None = None
        self.entries = 0

    @property
    def ledger_id(self) -> int:
        """The new ledger's id."""
        return self._handle.ledger_id

    async def add(self, data: bytes) -> int:
        """Send one entry; its id (durable once `close` returned)."""
        last = self._last
        if last is not None and last.finished and last.error is not None:
            raise ManagedLedgerError(f"side ledger {self.ledger_id}: add failed: {last.error}")
        try:
            self._last = await self._handle.append(data)
        except Exception as exc:
            raise ManagedLedgerError(f"side ledger {self.ledger_id}: add failed: {exc}") from exc
        self.entries += 1
        return self._last.entry_id

    async def close(self) -> None:
        """Wait for every entry to be durable, then seal the ledger (its last entry becomes final)."""
        try:
            if self._last is not None:
                await self._last.result()
            await self._handle.close()
        except Exception as exc:
            raise ManagedLedgerError(f"side ledger {self.ledger_id}: write or close failed: {exc}") from exc


class SideLedgerReader:
    """Reads a sealed side ledger; ``last_entry_id`` is -1 when it is empty."""

    def __init__(self, handle: ReadHandle) -> None:
        self._handle = handle

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self._handle.ledger_id

    @property
    def last_entry_id(self) -> int:
        """The id of its last entry (-1 when it has none)."""
        return self._handle.last_add_confirmed

    @property
    def size(self) -> int:
        """Its payload bytes."""
        return self._handle.length

    async def read(self, first: int, last: int) -> Sequence[bytes]:
        """The entries ``first..last`` inclusive, in order."""
        try:
            return [e.data for e in await self._handle.read(first, last)]
        except Exception as exc:
            raise ManagedLedgerError(f"side ledger {self.ledger_id}: read {first}..{last} failed: {exc}") from exc

    async def close(self) -> None:
        """Release the handle."""
        try:
            await self._handle.close()
        except Exception:
            pass  # a read handle holds nothing worth reporting


class SideLedgers:
    """Creates, opens and deletes side ledgers over the factory's BookKeeper client."""

    def __init__(self, bk: BookKeeperClient, config: ManagedLedgerConfig) -> None:
        self._bk = bk
        self._cfg = config

    async def create(self, owner: str, purpose: str) -> SideLedgerWriter:
        """A new, empty side ledger of ``owner`` (a managed-ledger name) for ``purpose``."""
        cfg = self._cfg
        try:
            handle = await self._bk.create_ledger(
                cfg.ensemble_size,
                cfg.write_quorum,
                cfg.ack_quorum,
                password=cfg.ledger_password,
                custom_metadata={
                    "application": b"magnetar",
                    "component": purpose.encode(),
                    "pulsar/managed-ledger": owner.encode(),
                },
            )
        except Exception as exc:
            raise ManagedLedgerError(f"{owner}: cannot create a {purpose} ledger: {exc}") from exc
        return SideLedgerWriter(handle)

    async def open(self, ledger_id: int) -> SideLedgerReader:
        """Open a sealed side ledger for reading (no recovery: its writer closed it). Raises
        `SideLedgerMissing` when it does not exist, `ManagedLedgerError` when it cannot be opened."""
        try:
            handle = await open_with_passwords(self._bk, ledger_id, self._cfg.read_passwords, recovery=False)
        except NoSuchLedger as exc:
            raise SideLedgerMissing(f"side ledger {ledger_id} does not exist") from exc
        except Exception as exc:
            raise ManagedLedgerError(f"cannot open side ledger {ledger_id}: {exc}") from exc
        return SideLedgerReader(handle)

    async def delete(self, ledger_id: int) -> bool:
        """Delete a side ledger; False when it was already gone."""
        try:
            await self._bk.delete_ledger(ledger_id)
        except NoSuchLedger:
            return False
        except Exception as exc:
            raise ManagedLedgerError(f"cannot delete side ledger {ledger_id}: {exc}") from exc
        return True
