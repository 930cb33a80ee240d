"""Closing a ledger the writer owns (``LedgerCloseOp``): compare-and-set CLOSED with the last
acknowledged entry and the length, resolving conflicts as BookKeeper's writer does:

* Rule 1: the CAS wins: the ledger is CLOSED at the writer's last acknowledged entry.
* Rule 2: the CAS loses and the ledger is still OPEN (someone changed other fields, e.g. an
  ensemble of an older segment): re-read and try again.
* Rule 3: the ledger is IN_RECOVERY: a new owner is recovering it; close fails with
  ``LedgerFenced``.
* Rule 4: the ledger is already CLOSED: if at the same last entry and length, close succeeds
  (someone closed it exactly where the writer would have); otherwise it fails with
  ``LedgerFenced`` (recovery closed it elsewhere: the writer's view is no longer the ledger's).

Whatever the outcome, the handle ends CLOSED (or stays FAILED) and accepts no more adds.

The op holds an explicit reference to its ``LedgerWriteHandle`` and the ledger manager, and
drives the handle only through the handle's declared operation interface (``begin_close``,
``wait_idle``, ``record_closed``, ``finish_close`` and read-only properties; see
``bk_client._write_handle``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocols.bookkeeper import LedgerMetadata, LedgerState

from ._errors import LedgerFenced, MetadataVersionConflict
from ._ledger_manager import LedgerManager

if TYPE_CHECKING:
    from ._write_handle import LedgerWriteHandle

__all__ = ["LedgerCloseOp"]

_MAX_ATTEMPTS = 100  # rule 2 loops only while other writers keep changing an OPEN ledger


class LedgerCloseOp:
    """One close of one write handle (module rules). Built by ``LedgerWriteHandle.close``."""

    __slots__ = ("_handle", "_ledgers")

    def __init__(self, handle: LedgerWriteHandle, ledgers: LedgerManager) -> None:
        self._handle = handle
        self._ledgers = ledgers

    async def run(self) -> None:
        """Stop new adds, wait for the pending ones and any ensemble change, then write CLOSED
        (rules 1-4). A handle fenced meanwhile is only released: the new owner closes the ledger.
        Idempotent once the handle is CLOSED. The handle ends CLOSED (or FAILED) even when this
        raises.

        Raises ``LedgerFenced`` (rules 3, 4), ``NoSuchLedger`` if the ledger was deleted,
        ``MetadataStoreError``.
        """
        handle = self._handle
        if not handle.begin_close():
            return
        try:
            await handle.wait_idle()
            if isinstance(handle.error, LedgerFenced):
                return  # the new owner closes the ledger; this writer only lets go
            metadata, version = await self._write_closed()
            handle.record_closed(metadata, version)
        finally:
            handle.finish_close()

    async def _write_closed(self) -> tuple[LedgerMetadata, int]:
        """Rules 1-4 on the store: the CLOSED metadata and its version, or raise."""
        handle, ledgers = self._handle, self._ledgers
        lid = handle.ledger_id
        last, length = handle.last_add_confirmed, handle.length
        meta, version = handle.metadata, handle.metadata_version
        for _ in range(_MAX_ATTEMPTS):
            if meta.state is LedgerState.IN_RECOVERY:
                raise LedgerFenced(f"cannot close ledger {lid}: it is being recovered by a new owner", ledger_id=lid)
            if meta.state is LedgerState.CLOSED:
                if meta.last_entry_id == last and meta.length == length:
                    return meta, version
                raise LedgerFenced(
                    f"ledger {lid} was closed by another client at entry {meta.last_entry_id} "
                    f"(length {meta.length}); this writer had {last} (length {length})",
                    ledger_id=lid,
                )
            closed = meta.closed(last, length)
            try:
                version = await ledgers.write(lid, closed, version)
            except MetadataVersionConflict:
                meta, version = await ledgers.read(lid)
                continue
            return closed, version
        raise LedgerFenced(f"ledger {lid} kept changing while closing it", ledger_id=lid)
