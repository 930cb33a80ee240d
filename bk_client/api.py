"""The contract of the BookKeeper client, as the managed ledger and the tools use it.

Two implementations honour it: the real client over bookies (`bk_client.BookKeeper`) and the
in-memory `bk_client.testing.MockBookKeeper` used by unit tests of higher layers, which can be
told to fail on cue. Code above the client depends only on these Protocols.

Rules every implementation keeps:

1. Entry ids of a ledger are 0, 1, 2, ... with no gaps. ``add_entry`` calls on one handle get
   their ids in the order the calls start (FIFO), and complete in id order: when ``add_entry``
   returns ``n``, every entry below ``n`` has been acknowledged too.
2. An add is acknowledged only after an ack quorum of bookies made it durable.
3. After a handle failed (``LedgerFenced``, quorum lost, closed), every later add fails with the
   same kind of error; entries acknowledged before stay readable.
4. ``close`` records the last acknowledged entry and the length in the ledger metadata; a ledger
   opened with recovery is closed at the last entry any writer could have had acknowledged, and
   its old writer is fenced (its next add raises ``LedgerFenced``).
5. Reads return exactly the bytes that were added, verified against their digest.
6. In-flight adds are bounded in bytes and count; a writer over the bound waits.

Error types (``bk_client.BKError`` and subclasses such as ``LedgerFenced``, ``NoSuchLedger``,
``NoSuchEntry``, ``NotEnoughBookies``, ``LedgerClosed``) are defined in the package and shared by
both implementations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["LedgerEntry", "WriteHandle", "ReadHandle", "BookKeeperClient"]


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

    async def wait_for_lac(self, previous: int, timeout: float) -> int:
        """Long-poll: return as soon as the LAC is above ``previous``, or after ``timeout`` seconds with
        the LAC then known (which may still equal ``previous``)."""
        ...

    async def close(self) -> None:
        """Release the handle (does not change the ledger)."""
        ...


@runtime_checkable
class WriteHandle(ReadHandle, Protocol):
    """A ledger being written by this client (the only writer)."""

    async def add_entry(self, data: bytes) -> int:
        """Append ``data``; return its entry id once an ack quorum has it durable (rules 1, 2, 6).

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

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        *,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> WriteHandle:
        """Create a new ledger with a fresh unique id and open it for writing."""
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
