"""The managed ledger's exceptions. Every one is a `ManagedLedgerError` with a message that names
the managed ledger (and cursor) concerned, so a broker log line says what failed."""

from __future__ import annotations

__all__ = [
    "ManagedLedgerError",
    "ManagedLedgerFenced",
    "ManagedLedgerTerminated",
    "ManagedLedgerClosed",
    "CursorNotFound",
    "EntryTooLarge",
    "NoMoreEntries",
    "StorageUnavailable",
    "SideLedgerMissing",
]


class ManagedLedgerError(Exception):
    """Base of every managed-ledger failure (also raised for invalid arguments and for storage
    failures that could not be repaired by rolling to a new ledger)."""


class ManagedLedgerFenced(ManagedLedgerError):
    """Another owner took this managed ledger (its ledger was fenced, or a compare-and-set of the
    metadata lost). Final: every later write on this instance raises it; reopen elsewhere."""


class ManagedLedgerTerminated(ManagedLedgerError):
    """The managed ledger was terminated: no more entries can be added (reads still work)."""


class ManagedLedgerClosed(ManagedLedgerError):
    """The managed ledger (or the cursor) was closed on this instance."""


class CursorNotFound(ManagedLedgerError):
    """No cursor with that name exists."""


class NoMoreEntries(ManagedLedgerError):
    """A read waited on a terminated managed ledger whose last entry the cursor already read."""


class EntryTooLarge(ManagedLedgerError):
    """An entry larger than storage can ever take (``ManagedLedger.max_entry_size``); refused
    before admission, so it neither waits nor rolls ledgers, and later adds are unaffected."""


class StorageUnavailable(ManagedLedgerError):
    """No ledger can be created now (too few writable bookies: full disks, read-only or down), so
    nothing can be added. Adds fail at once while it lasts; creation is retried on demand (an add
    or ``ensure_writable``), at most once a second, so writes resume by themselves once bookies are
    writable again."""


class SideLedgerMissing(ManagedLedgerError):
    """A side ledger (`SideLedgers`) does not exist: deleted, or never created. Final for that
    ledger id, unlike the other read failures, which may pass once storage is back."""
