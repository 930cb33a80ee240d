"""The managed ledger's exceptions. Every one is a `ManagedLedgerError` with a message that names
the managed ledger (and cursor) concerned, so a broker log line says what failed."""

from __future__ import annotations

__all__ = [
    "ManagedLedgerError",
    "ManagedLedgerFenced",
    "ManagedLedgerTerminated",
    "ManagedLedgerClosed",
    "CursorNotFound",
    "NoMoreEntries",
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
