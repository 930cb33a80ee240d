"""Reads of one managed ledger: the entry cache first, then the BookKeeper client or the tier.

The current ledger is read through its write handle (it can read up to what this writer had
acknowledged); closed ledgers through read handles opened without recovery (never fencing
anything), kept in a small LRU bounded by ``max_handles``.

Offloaded ledgers (``_offload``): a ledger whose copy in the tier is complete is read from the tier
when its bookie copy is gone or the read priority is tiered-storage-first, and from the bookies
otherwise, falling back to the tier when they no longer have it. Opened offloaded ledgers (their
index loaded) are kept in an LRU bounded by ``max_handles`` too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

import trio

from bk_client import Unauthorized
from bk_client.api import BookKeeperClient, ReadHandle, WriteHandle
from managed_ledger._cache import EntryCache
from managed_ledger._errors import ManagedLedgerError
from managed_ledger._types import Entry
from protocols.managed_ledger import OffloadContext, Position
from tiered_storage import OffloadedLedger, TierError

__all__ = ["LedgerReader", "TierRoute", "open_with_passwords"]


class TierRoute(Protocol):
    """How the reader finds offloaded ledgers (given by the managed ledger)."""

    def offload_of(self, ledger_id: int) -> OffloadContext | None:
        """The ledger's offload context if its tier copy is complete, else None."""
        ...

    def tier_first(self, ctx: OffloadContext) -> bool:
        """Whether to read this offloaded ledger from the tier rather than the bookies."""
        ...

    async def open(self, ledger_id: int, ctx: OffloadContext) -> OffloadedLedger:
        """Open the ledger's tier copy (raises `TierError`)."""
        ...


async def open_with_passwords(
    bk: BookKeeperClient, ledger_id: int, passwords: tuple[bytes, ...], *, recovery: bool
) -> ReadHandle:
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

    def __init__(
        self,
        name: str,
        bk: BookKeeperClient,
        cache: EntryCache,
        max_handles: int,
        passwords: tuple[bytes, ...] = (b"",),
        tier: TierRoute | None = None,
        transform: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self._name = name
        self.tier = tier
        self._transform = transform
        self._offloaded: OrderedDict[int, OffloadedLedger] = OrderedDict()
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
        ctx = self.tier.offload_of(ledger_id) if self.tier is not None else None
        if ctx is not None and self.tier is not None and self.tier.tier_first(ctx):
            got = await self._read_tier(ledger_id, ctx, eid, last)
        else:
            try:
                got = await self._read_bookies(ledger_id, eid, last)
            except ManagedLedgerError:
                if ctx is None:
                    raise
                # the bookie copy went meanwhile, or the bookies fail: the verified tier copy serves
                got = await self._read_tier(ledger_id, ctx, eid, last)
        self._cache.count_misses(len(got))
        for entry_id, data in got:
            if self._transform is not None:
                data = self._transform(data)
            self._cache.put(self._name, ledger_id, entry_id, data)
            out.append(Entry(Position(ledger_id, entry_id), data))
        return out

    async def _read_bookies(self, ledger_id: int, first: int, last: int) -> list[tuple[int, bytes]]:
        handle = await self._handle(ledger_id)
        try:
            got = await handle.read(first, last)
        except Exception as exc:
            raise ManagedLedgerError(
                f"{self._name}: cannot read entries {first}..{last} of ledger {ledger_id}: {exc}"
            ) from exc
        return [(le.entry_id, le.data) for le in got]

    async def _read_tier(
        self,
        ledger_id: int,
        ctx: OffloadContext,
        first: int,
        last: int,
    ) -> list[tuple[int, bytes]]:
        assert self.tier is not None
        try:
            ledger = self._offloaded.get(ledger_id)
            if ledger is None or ledger.uid != ctx.uid:
                async with self._open_lock:
                    ledger = self._offloaded.get(ledger_id)
                    if ledger is None or ledger.uid != ctx.uid:
                        ledger = await self.tier.open(ledger_id, ctx)
                        self._offloaded[ledger_id] = ledger
                        while len(self._offloaded) > self._max_handles:
                            self._offloaded.popitem(last=False)
            self._offloaded.move_to_end(ledger_id)
            got = await ledger.read(first, last)
        except TierError as exc:
            raise ManagedLedgerError(
                f"{self._name}: cannot read entries {first}..{last} of offloaded ledger "
                f"{ledger_id} from the tier: {exc}"
            ) from exc
        if not got or got[0][0] != first:
            raise ManagedLedgerError(f"{self._name}: offloaded ledger {ledger_id} has no entry {first}")
        return got

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

    async def forget_bookie_handle(self, ledger_id: int) -> None:
        """Close the ledger's bookie read handle (its bookie copy was deleted)."""
        handle = self._handles.pop(ledger_id, None)
        if handle is not None:
            await self._close_quietly(handle)

    async def forget(self, ledger_id: int) -> None:
        """Close the ledger's read handle and drop its cached entries (it was deleted)."""
        self._cache.invalidate(self._name, ledger_id)
        self._offloaded.pop(ledger_id, None)
        handle = self._handles.pop(ledger_id, None)
        if handle is not None:
            await self._close_quietly(handle)

    async def close(self) -> None:
        """Close every read handle (the write handle belongs to the managed ledger)."""
        handles = list(self._handles.values())
        self._handles.clear()
        self._offloaded.clear()
        for h in handles:
            await self._close_quietly(h)

    @staticmethod
    async def _close_quietly(handle: ReadHandle) -> None:
        try:
            await handle.close()
        except Exception:
            pass  # releasing a reader cannot fail in a way the caller could act on
