"""The contract of the BookKeeper client, as the managed ledger and the tools use it.

Two implementations honour it: the real client over bookies (`bk_client.BookKeeper`) and the
in-memory `bk_client.testing.MockBookKeeper` used by unit tests of higher layers, which can be
told to fail on cue. Code above the client depends only on these Protocols.

Rules every implementation keeps:

1. Entry ids of a ledger are 0, 1, 2, ... with no gaps. ``add_entry`` and ``append`` calls on one
   handle get their ids in the order the calls start (FIFO), and complete in id order: when an add
   succeeds with ``n``, every entry below ``n`` has been acknowledged too.
2. An add is acknowledged only after an ack quorum of bookies made it durable.
3. After a handle failed (``LedgerFenced``, quorum lost, closed), every later add fails with the
   same kind of error; entries acknowledged before stay readable.
4. ``close`` records the last acknowledged entry and the length in the ledger metadata; a ledger
   opened with recovery is closed at the last entry any writer could have had acknowledged, and
   its old writer is fenced (its next add raises ``LedgerFenced``).
5. Reads return exactly the bytes that were added, verified against their digest.
6. In-flight adds are bounded in bytes and count; a writer over the bound waits.
7. An entry larger than the client's ``max_entry_size`` is refused at once with ``EntryTooLarge``,
   before an entry id is taken: no bookie could accept it, and the handle stays usable.

Error types (``bk_client.BKError`` and subclasses such as ``LedgerFenced``, ``NoSuchLedger``,
``NoSuchEntry``, ``NotEnoughBookies``, ``LedgerClosed``) are defined in the package and shared by
both implementations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from protocols.bookkeeper import DigestType

__all__ = ["LedgerEntry", "PendingAppend", "WriteHandle", "ReadHandle", "BookKeeperClient"]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One entry read back from a ledger: its position and the exact bytes that were added."""

    ledger_id: int
    entry_id: int
    data: bytes


@runtime_checkable
class ReadHandle(Protocol):
    """An open ledger for reading (opened with or without recovery)."""

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        ...

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id known to be readable (-1 when none); for a closed ledger its last entry."""
        ...

    @property
    def is_closed(self) -> bool:
        """True when the ledger's metadata says CLOSED (its last entry is final)."""
        ...

    @property
    def length(self) -> int:
        """Total payload bytes of the entries known to be confirmed."""
        ...

    async def read(self, first: int, last: int) -> Sequence[LedgerEntry]:
        """Entries ``first..last`` inclusive, in order. Raises ``NoSuchEntry`` past the LAC."""
        ...

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the current LAC (for ledgers still being written); update and return it."""
        ...

    async def wait_for_lac(self, previous: int, timeout: float) -> int:  # noqa: ASYNC109 - a request field
        """Long-poll: return as soon as the LAC is above ``previous``, or after ``timeout`` seconds with
        the LAC then known (which may still equal ``previous``).

        ``timeout`` is part of the request, not a local deadline: the bookies hold the long-poll
        read up to that long (BookKeeper's ``readLastAddConfirmedAndEntry``), and running out of it
        is a normal answer, not an error. A caller's cancel scope still cancels the wait."""
        ...

    async def close(self) -> None:
        """Release the handle (does not change the ledger)."""
        ...


@runtime_checkable
class PendingAppend(Protocol):
    """An add started by ``WriteHandle.append``, on its way to an ack quorum.

    ``bk_client.PendingAdd`` (the real client) and the mock's pending add implement it. Once
    ``finished`` is True it never changes again, and ``entry_id`` / ``error`` are final.
    """

    @property
    def entry_id(self) -> int:
        """The entry id, fixed when ``append`` started (rule 1)."""
        ...

    @property
    def error(self) -> BaseException | None:
        """Why the add failed, once ``finished``; None while in flight or after success."""
        ...

    @property
    def finished(self) -> bool:
        """True once the add succeeded or failed. It succeeds only after every earlier add of the
        handle succeeded, so reading ``finished`` in id order sees outcomes in id order."""
        ...

    async def result(self) -> int:
        """Wait for the outcome: the entry id, or raise (a copy of) ``error``. Cancelling the wait
        does not cancel the add."""
        ...


@runtime_checkable
class WriteHandle(ReadHandle, Protocol):
    """A ledger being written by this client (the only writer)."""

    async def append(self, data: bytes) -> PendingAppend:
        """Start adding ``data`` and return once it is sent, without waiting for its ack; the
        returned add reports the outcome. This lets one task keep many adds in flight.

        Guarantees: the entry id is fixed before the first schedule point, so ids follow the
        order in which ``append`` calls start (rule 1); the adds of a handle finish in id order,
        each succeeding only once an ack quorum has it durable (rule 2); once one add failed,
        every add after it fails too and later ``append`` calls raise (rule 3); ``append`` waits
        while the in-flight bound is full (rule 6). Cancelling that wait does not withdraw the
        add: its id is taken and it is still sent, its outcome unknown to the caller.
        Raises right away (no add is started) when the handle already knows it cannot accept
        adds: ``LedgerClosed`` after close, or the error that failed the handle (for example
        ``LedgerFenced``), and ``EntryTooLarge`` for an entry over the client's ``max_entry_size``
        (rule 7; the handle stays usable). Other failures arrive on the returned add.
        """
        ...

    async def add_entry(self, data: bytes) -> int:
        """Append ``data``; return its entry id once an ack quorum has it durable (rules 1, 2, 6);
        the same as ``await (await append(data)).result()``.

        Raises ``LedgerFenced`` when a new owner recovered the ledger, ``LedgerClosed`` after close,
        ``NotEnoughBookies`` when no ensemble change can restore a write quorum.
        """
        ...

    async def close(self) -> None:
        """Wait for pending adds, then mark the ledger CLOSED at its last acknowledged entry."""
        ...


@runtime_checkable
class BookKeeperClient(Protocol):
    """Creates, opens and deletes ledgers."""

    @property
    def max_entry_size(self) -> int:
        """The largest entry payload an add accepts (rule 7): what fits in one frame of the
        configured ``max_frame_size`` with the add's headers."""
        ...

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        *,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        digest_type: DigestType = DigestType.CRC32C,
    ) -> WriteHandle:
        """Create a new ledger with a fresh unique id and open it for writing; its entries are
        framed with ``digest_type`` (recorded in its metadata) and verified by every reader."""
        ...

    async def open_ledger(self, ledger_id: int, *, password: bytes = b"", recovery: bool = True) -> ReadHandle:
        """Open a ledger for reading. With ``recovery`` (what a new owner does) the ledger is fenced,
        recovered and closed first (rule 4); without it the handle reads up to the bookies' LAC and
        can follow a ledger still being written. Raises ``NoSuchLedger``."""
        ...

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies reclaim its space by garbage collection.
        Deleting a ledger that does not exist raises ``NoSuchLedger``."""
        ...
