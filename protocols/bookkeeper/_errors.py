"""The bookie protocol's "not found" statuses as exceptions: `NoSuchLedger` (ENOLEDGER) and
`NoSuchEntry` (ENOENTRY).

One home for both sides of the wire: the bookie's storage raises them and the bookie answers
with their `status`; the client maps those statuses back (``bk_client.NoSuchLedger`` and
``bk_client.NoSuchEntry`` derive from these and from ``bk_client.BKError``), so code catching
these catches the client's too. Both are LookupErrors; ``ledger_id`` and ``entry_id`` are None
when unknown. A subclass whose other base has a different constructor (``BKError``) calls the
constructor here directly, so that one message format serves both sides.
"""

from __future__ import annotations

from typing import ClassVar

from ._codes import StatusCode

__all__ = ["NoSuchLedger", "NoSuchEntry"]


class NoSuchLedger(LookupError):
    """The ledger does not exist (no metadata, or the bookie holds nothing for it): ENOLEDGER."""

    status: ClassVar[StatusCode] = StatusCode.ENOLEDGER

    def __init__(self, ledger_id: int | None = None, message: str | None = None) -> None:
        if message is None:
            message = "no such ledger" if ledger_id is None else f"no such ledger: {ledger_id}"
        super().__init__(message)
        self.ledger_id = ledger_id


class NoSuchEntry(LookupError):
    """The entry does not exist (past the last entry, or not stored on the bookie asked): ENOENTRY."""

    status: ClassVar[StatusCode] = StatusCode.ENOENTRY

    def __init__(self, ledger_id: int | None = None, entry_id: int | None = None, message: str | None = None) -> None:
        if message is None:
            message = "no such entry"
            if entry_id is not None:
                message = f"{message}: {entry_id}"
            if ledger_id is not None:
                message = f"{message} in ledger {ledger_id}"
        super().__init__(message)
        self.ledger_id = ledger_id
        self.entry_id = entry_id
