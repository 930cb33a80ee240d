"""Reads of one managed ledger: the entry cache first, then the BookKeeper client.

The current ledger is read through its write handle (it can read up to what this writer had
acknowledged); closed ledgers through read handles opened without recovery (never fencing
anything), kept in a small LRU bounded by ``max_handles``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import trio

from bk_client import Unauthorized
from bk_client.api import BookKeeperClient, ReadHandle, WriteHandle
from managed_ledger._cache import EntryCache
from managed_ledger._errors import ManagedLedgerError
from managed_ledger._types import Entry
from protocols.managed_ledger import Position

__all__ = ["LedgerReader", "open_with_passwords"]


async def open_with_passwords(bk: BookKeeperClient, ledger_id: int, passwords: tuple[bytes, ...], *,
                              recovery: bool) -> ReadHandle:
    """Open ``ledger_id`` with the first of ``passwords`` it accepts (`ManagedLedgerConfig.read_passwords`:
    the configured one, then the legacy empty one); the last ``Unauthorized`` when none fits."""
    for i, password in enumerate(passwords):
        try:
            return await bk.open_ledger(ledger_id, password=password, recovery=recovery)
        except Unauthorized:
            if i == len(passwords) - 1:
                raise
    raise ValueError("no password to open the ledger with")


class LedgerReader:
    """Reads entry runs of one managed ledger; owns its read handles.

    ``transform`` (if given) is applied to each entry's bytes as the bookies return them, before
    they are cached: the owner's way to read entries another writer stored in another shape.
    """

    def __init__(self, name: str, bk: BookKeeperClient, cache: EntryCache, max_handles: int,
                 passwords: tuple[bytes, ...] = (b"",),
                 transform: Callable[[bytes], bytes] | None = None) -> None:
        self._name = name
        self._transform = transform
        self._bk = bk
        self._cache = cache
        self._max_handles = max_handles
        self._passwords = passwords
        self._handles: OrderedDict[int, ReadHandle] = OrderedDict()
        self._open_lock = trio.Lock()
        self.write_ledger: tuple[int, WriteHandle] | None = None
        """The ledger being written and its handle, set by the managed ledger."""

    async def read(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` of one ledger, in order. Raises `ManagedLedgerError` (with the
        client's error as cause) when the storage cannot serve them."""
        out: list[Entry] = []
        eid = first
        while eid <= last:
            data = self._cache.get(self._name, ledger_id, eid)
            if data is None:
                break
            out.append(Entry(Position(ledger_id, eid), data))
            eid += 1
        if eid > last:
            return out
        handle = await self._handle(ledger_id)
        try:
            got = await handle.read(eid, last)
        except Exception as exc:
            raise ManagedLedgerError(
                f"{self._name}: cannot read entries {eid}..{last} of ledger {ledger_id}: {exc}") from exc
        self._cache.count_misses(len(got))
        for le in got:
            data = le.data if self._transform is None else self._transform(le.data)
            self._cache.put(self._name, ledger_id, le.entry_id, data)
            out.append(Entry(Position(ledger_id, le.entry_id), data))
        return out

    async def _handle(self, ledger_id: int) -> ReadHandle:
        if self.write_ledger is not None and self.write_ledger[0] == ledger_id:
            return self.write_ledger[1]
        handle = self._handles.get(ledger_id)
        if handle is not None:
            self._handles.move_to_end(ledger_id)
            return handle
        async with self._open_lock:
            handle = self._handles.get(ledger_id)
            if handle is not None:
                return handle
            try:
                handle = await open_with_passwords(self._bk, ledger_id, self._passwords, recovery=False)
            except Exception as exc:
                raise ManagedLedgerError(f"{self._name}: cannot open ledger {ledger_id}: {exc}") from exc
            self._handles[ledger_id] = handle
            while len(self._handles) > self._max_handles:
                _, old = self._handles.popitem(last=False)
                await self._close_quietly(old)
            return handle

    async def forget(self, ledger_id: int) -> None:
        """Close the ledger's read handle and drop its cached entries (it was deleted)."""
        self._cache.invalidate(self._name, ledger_id)
        handle = self._handles.pop(ledger_id, None)
        if handle is not None:
            await self._close_quietly(handle)

    async def close(self) -> None:
        """Close every read handle (the write handle belongs to the managed ledger)."""
        handles = list(self._handles.values())
        self._handles.clear()
        for h in handles:
            await self._close_quietly(h)

    @staticmethod
    async def _close_quietly(handle: ReadHandle) -> None:
        try:
            await handle.close()
        except Exception:
            pass  # releasing a reader cannot fail in a way the caller could act on
