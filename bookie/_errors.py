"""The root of the bookie's errors, and the one a request fails with.

Every error the bookie package defines derives from `BookieException`, so an owner can tell the
bookie's failures from its own bugs with one ``except``. The tree:

* `BookieError`: a request failed with a bookie protocol ``status`` (a `StatusCode`). The core
  (`bookie.server._bookie`) raises only this one from its request methods; the protocol server
  answers with its status. Component errors become statuses there and nowhere else: journal
  errors EIO, `StorageIOError` EIO, `WriteCacheFull` and `TooManyWaiters` ETOOMANYREQUESTS, and the
  storage's ``protocols.bookkeeper.NoSuchLedger`` / ``NoSuchEntry`` (wire-level errors, defined
  there because the client maps the same statuses back to them) ENOLEDGER / ENOENTRY.
* journal (`bookie.journal`): `JournalError` and its subclasses; `JournalFormatError` (a damaged
  journal or lastMark file, also a ValueError).
* storage (`bookie.storage`): `StorageIOError`, `WriteCacheFull`, `CorruptLogError` (a damaged
  entry log, also a ValueError).
* GC (`bookie.gc`): `CompactionTimeout`, `MetadataListingError`.
* server (`bookie.server`): `TooManyWaiters`, `CookieMismatchError`, `BookieFatalError` (also a
  RuntimeError).
"""

from __future__ import annotations

from protocols.bookkeeper import StatusCode

__all__ = ["BookieException", "BookieError"]


class BookieException(Exception):
    """Base class of every error the bookie package defines (see the module docstring)."""


class BookieError(BookieException):
    """A request failed with a bookie protocol ``status`` (a `StatusCode`)."""

    def __init__(self, status: StatusCode, message: str = "") -> None:
        super().__init__(f"{status.name}: {message}" if message else status.name)
        self.status = status
