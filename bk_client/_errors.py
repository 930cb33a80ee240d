"""The error types of the BookKeeper client.

Every failure the client reports is a ``BKError``. Each subclass carries BookKeeper's numeric
result code (``BKException.Code`` in the Java client: negative numbers) in ``code`` so logs and
metrics can name failures the way BookKeeper operators know them, and a message that says what
failed and on which ledger / entry / bookie when known.

``error_for_bookie_status`` maps a bookie's wire status (EOK 0, ENOLEDGER 402, ...) to the
matching exception so every operation translates responses the same way.
"""

from __future__ import annotations

from protocols.bookkeeper import DigestMismatch as _ProtocolDigestMismatch
from protocols.bookkeeper import NoSuchEntry as _ProtocolNoSuchEntry
from protocols.bookkeeper import NoSuchLedger as _ProtocolNoSuchLedger

__all__ = [
    "BKError",
    "ReadError",
    "WriteError",
    "DigestMismatch",
    "NotEnoughBookies",
    "NoSuchLedger",
    "BookieUnavailable",
    "MetadataStoreError",
    "LedgerRecoveryError",
    "LedgerClosed",
    "NoSuchEntry",
    "MetadataVersionConflict",
    "ClientClosed",
    "LedgerExists",
    "Timeout",
    "LedgerFenced",
    "Unauthorized",
    "ReadOnlyBookie",
    "TooManyRequests",
    "EntryTooLarge",
    "LedgerIdOverflow",
    "error_for_bookie_status",
]


class BKError(Exception):
    """Base of every BookKeeper client error.

    ``code`` is BookKeeper's result code for this kind of failure; ``ledger_id`` is set when the
    failure concerns one ledger (else ``None``).
    """

    code: int = -999  # BookKeeper's UnexpectedConditionException
    default_message = "unexpected condition"

    def __init__(self, message: str | None = None, *, ledger_id: int | None = None) -> None:
        self.ledger_id = ledger_id
        text = message or self.default_message
        if ledger_id is not None and message is None:
            text = f"{text} (ledger {ledger_id})"
        super().__init__(text)


class ReadError(BKError):
    """A read failed on every bookie that could have served it."""

    code = -1
    default_message = "read failed on the bookies"


class WriteError(BKError):
    """A write failed at a bookie (for a reason other than fencing, read-only or throttling)."""

    code = -12
    default_message = "write failed on a bookie"


class DigestMismatch(BKError, _ProtocolDigestMismatch):
    """An entry's digest did not verify: the bytes read are not the bytes that were written.

    Also a ``protocols.bookkeeper.DigestMismatch``, so code catching the codec's error catches this too;
    the client raises it (chaining the codec's error) with the ledger / entry concerned.
    """

    code = -5
    default_message = "entry digest does not match"


class NotEnoughBookies(BKError):
    """Fewer usable bookies than needed to form (or repair) an ensemble.

    ``needed`` is how many bookies the operation had to pick, ``available`` how many candidates it
    had after exclusions.
    """

    code = -6

    def __init__(self, needed: int, available: int, *, detail: str = "", ledger_id: int | None = None) -> None:
        self.needed = needed
        self.available = available
        msg = f"not enough bookies: needed {needed}, {available} available"
        if detail:
            msg = f"{msg} ({detail})"
        if ledger_id is not None:
            msg = f"{msg} for ledger {ledger_id}"
        super().__init__(msg, ledger_id=ledger_id)


class NoSuchLedger(BKError, _ProtocolNoSuchLedger):
    """The ledger does not exist (no metadata, or the bookie has no such ledger).

    Also a ``protocols.bookkeeper.NoSuchLedger`` (the ENOLEDGER status), whose constructor sets
    the message and ``ledger_id``: ``BKError``'s would pass its message on to it as a ledger id.
    """

    code = -7

    def __init__(self, ledger_id: int | None = None, message: str | None = None) -> None:
        _ProtocolNoSuchLedger.__init__(self, ledger_id, message)


class BookieUnavailable(BKError):
    """A bookie could not be reached (connection refused, closed, or not registered)."""

    code = -8

    def __init__(self, bookie_id: str | None = None, message: str | None = None) -> None:
        self.bookie_id = bookie_id
        if message is None:
            message = "bookie unavailable" if bookie_id is None else f"bookie unavailable: {bookie_id}"
        super().__init__(message)


class MetadataStoreError(BKError):
    """The metadata store failed (session lost, connection loss, unexpected error)."""

    code = -9  # ZKException: the metadata store is ZooKeeper in BookKeeper
    default_message = "metadata store operation failed"


class LedgerRecoveryError(BKError):
    """Recovering a ledger (fence, find the last entry, close) could not complete."""

    code = -10
    default_message = "ledger recovery failed"


class LedgerClosed(BKError):
    """An operation needed an open ledger (or handle), but it is closed."""

    code = -11
    default_message = "ledger is closed"


class NoSuchEntry(BKError, _ProtocolNoSuchEntry):
    """The entry does not exist (beyond the last entry, or never written to the bookie asked).

    Also a ``protocols.bookkeeper.NoSuchEntry`` (the ENOENTRY status), whose constructor sets the
    message, ``ledger_id`` and ``entry_id`` (as for `NoSuchLedger`).
    """

    code = -13

    def __init__(self, ledger_id: int | None = None, entry_id: int | None = None, message: str | None = None) -> None:
        _ProtocolNoSuchEntry.__init__(self, ledger_id, entry_id, message)


class MetadataVersionConflict(BKError):
    """A compare-and-set write of ledger metadata lost: someone else wrote a newer version.

    ``expected`` is the version the writer based its change on; re-read, merge and retry.
    """

    code = -17

    def __init__(self, ledger_id: int, expected: int, message: str | None = None) -> None:
        self.expected = expected
        if message is None:
            message = f"ledger {ledger_id} metadata changed concurrently: expected version {expected} is stale"
        super().__init__(message, ledger_id=ledger_id)


class ClientClosed(BKError):
    """The client was closed; no further operations are accepted."""

    code = -19
    default_message = "client is closed"


class LedgerExists(BKError):
    """A ledger with this id already exists (create never overwrites)."""

    code = -20

    def __init__(self, ledger_id: int) -> None:
        super().__init__(f"ledger already exists: {ledger_id}", ledger_id=ledger_id)


class Timeout(BKError):
    """An operation did not complete in its time limit; its outcome is unknown."""

    code = -23
    default_message = "operation timed out"


class LedgerFenced(BKError):
    """The ledger was fenced by a new owner (recovery); this writer may no longer add entries.

    An add that fails this way has an unknown outcome: recovery may still have kept the entry.
    """

    code = -101
    default_message = "ledger is fenced"


class Unauthorized(BKError):
    """The bookie refused the request (wrong password / master key, or not permitted)."""

    code = -102
    default_message = "unauthorized"


class ReadOnlyBookie(BKError):
    """A write reached a bookie that is read-only."""

    code = -104
    default_message = "bookie is read-only"


class TooManyRequests(BKError):
    """The bookie (or the client's own in-flight bound) rejected the request as over capacity."""

    code = -105
    default_message = "too many requests"


class EntryTooLarge(BKError):
    """An add whose frame would exceed the configured ``max_frame_size``: no bookie would accept it,
    so it is refused before an entry id is taken and the handle stays usable."""

    code = -100  # BookKeeper's IllegalOpException: an operation that can never succeed
    default_message = "entry too large"


class LedgerIdOverflow(BKError):
    """The ledger id generator ran out of 64-bit ids."""

    code = -106
    default_message = "ledger id space exhausted"


# Bookie wire status codes (BookkeeperProtocol.proto StatusCode) -> client error.
_STATUS_ERRORS: dict[int, type[BKError]] = {
    402: NoSuchLedger,  # ENOLEDGER
    403: NoSuchEntry,  # ENOENTRY
    404: BKError,  # EBADREQ
    501: WriteError,  # EIO
    502: Unauthorized,  # EUA
    503: MetadataVersionConflict,  # EBADVERSION, only with a ledger id
    504: LedgerFenced,  # EFENCED
    505: ReadOnlyBookie,  # EREADONLY
    506: TooManyRequests,  # ETOOMANYREQUESTS
}


def error_for_bookie_status(
    status: int,
    *,
    ledger_id: int | None = None,
    entry_id: int | None = None,
    bookie_id: str | None = None,
    reading: bool = False,
) -> BKError | None:
    """The client error for a bookie's response status, or ``None`` for EOK (0).

    ``reading`` selects ``ReadError`` instead of ``WriteError`` for EIO. Unknown statuses map to a
    plain ``BKError`` naming the status. The message names the bookie when given.
    """
    if status == 0:
        return None
    where = f" from bookie {bookie_id}" if bookie_id else ""
    kind = _STATUS_ERRORS.get(status)
    if kind is NoSuchLedger:
        return NoSuchLedger(ledger_id, f"no such ledger: {ledger_id}{where}")
    if kind is NoSuchEntry:
        return NoSuchEntry(ledger_id, entry_id, f"no such entry: {entry_id} in ledger {ledger_id}{where}")
    if kind is MetadataVersionConflict:
        return BKError(f"bad version (status {status}) for ledger {ledger_id}{where}", ledger_id=ledger_id)
    if kind is WriteError and reading:
        kind = ReadError
    if kind is None or kind is BKError:
        return BKError(f"bookie status {status}{where}", ledger_id=ledger_id)
    err = kind(
        f"{kind.default_message}{where}" + (f" (ledger {ledger_id})" if ledger_id is not None else ""),
        ledger_id=ledger_id,
    )
    return err
