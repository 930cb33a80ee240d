"""Closing a ledger the writer owns: compare-and-set CLOSED with the last acknowledged entry and
the length, resolving conflicts as BookKeeper's writer does (seed 001, "Closing"):

* Rule 1: the CAS wins: the ledger is CLOSED at the writer's last acknowledged entry.
* Rule 2: the CAS loses and the ledger is still OPEN (someone changed other fields, e.g. an
  ensemble of an older segment): re-read and try again.
* Rule 3: the ledger is IN_RECOVERY: a new owner is recovering it; close fails with
  ``LedgerFenced``.
* Rule 4: the ledger is already CLOSED: if at the same last entry and length, close succeeds
  (someone closed it exactly where the writer would have); otherwise it fails with
  ``LedgerFenced`` (recovery closed it elsewhere: the writer's view is no longer the ledger's).

Whatever the outcome, the handle ends CLOSED (or stays FAILED) and accepts no more adds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocols.bookkeeper import LedgerState

from ._errors import LedgerFenced, MetadataVersionConflict, NoSuchLedger

if TYPE_CHECKING:
    from ._write_handle import LedgerWriteHandle

__all__ = ["close_write_handle"]

_MAX_ATTEMPTS = 100  # rule 2 loops only while other writers keep changing an OPEN ledger


async def close_write_handle(handle: LedgerWriteHandle) -> None:
    """Close ``handle`` (see the module rules). Idempotent once CLOSED.

    Raises ``LedgerFenced`` (rules 3, 4), ``NoSuchLedger`` if the ledger was deleted,
    ``MetadataStoreError``.
    """
    from ._write_handle import HandleState

    if handle.state is HandleState.CLOSED:
        return
    if handle.state is HandleState.OPEN:
        handle.state = HandleState.CLOSING
    try:
        await handle.wait_idle()
        if handle.state is HandleState.FAILED and isinstance(handle._error, LedgerFenced):
            return  # the new owner closes the ledger; this writer only lets go
        await _close_metadata(handle)
    finally:
        handle._stop()


async def _close_metadata(handle: LedgerWriteHandle) -> None:
    ledgers = handle._ctx.ledgers
    lid = handle.ledger_id
    last, length = handle.last_add_confirmed, handle.length
    meta, version = handle._metadata, handle._version
    for _ in range(_MAX_ATTEMPTS):
        if meta.state is LedgerState.IN_RECOVERY:
            raise LedgerFenced(f"cannot close ledger {lid}: it is being recovered by a new owner", ledger_id=lid)
        if meta.state is LedgerState.CLOSED:
            if meta.last_entry_id == last and meta.length == length:
                handle._metadata, handle._version = meta, version
                return
            raise LedgerFenced(f"ledger {lid} was closed by another client at entry {meta.last_entry_id} "
                               f"(length {meta.length}); this writer had {last} (length {length})",
                               ledger_id=lid)
        closed = meta.closed(last, length)
        try:
            version = await ledgers.write(lid, closed, version)
        except MetadataVersionConflict:
            meta, version = await ledgers.read(lid)
            continue
        except NoSuchLedger:
            raise
        handle._metadata, handle._version = closed, version
        return
    raise LedgerFenced(f"ledger {lid} kept changing while closing it", ledger_id=lid)
