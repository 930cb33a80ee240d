"""`ManagedLedgerFactory`: opens, lists and deletes managed ledgers over one BookKeeper client and
one metadata store, and owns the nursery their background tasks run in.

Use it as ``async with ManagedLedgerFactory(...) as factory:`` (closing every managed ledger on
exit) or start it with ``await nursery.start(factory.run)``; cancelling ``run`` stops every task
without closing anything, which is what a crashed broker looks like to the next owner.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING

import trio

from bk_client import NoSuchLedger
from bk_client.api import BookKeeperClient
from managed_ledger._cache import EntryCache
from managed_ledger._config import ManagedLedgerConfig
from managed_ledger._errors import ManagedLedgerClosed, ManagedLedgerError
from managed_ledger._ledger import ML_ROOT, ManagedLedger, _Context
from managed_ledger._offload import OffloadPoliciesResolver
from managed_ledger._side_ledger import SideLedgers
from managed_ledger.metrics import ManagedLedgerMetrics
from metadata import NoNodeError
from protocols.managed_ledger import CursorInfo, ManagedLedgerInfo, MLFormatError
from tiered_storage import TieredStorage, TierError

if TYPE_CHECKING:
    from metadata import MetadataStore

__all__ = ["ManagedLedgerFactory"]

log = logging.getLogger(__name__)

_NAME_DEPTH = 4  # tenant/namespace/persistent/topic


class ManagedLedgerFactory:
    """Opens managed ledgers (one instance per name per factory) and owns their tasks.

    ``clock`` returns seconds (wall time by default); it drives roll-over ages and timestamps, so
    tests pass a fake one. ``metrics`` defaults to a fresh registry per factory. ``tier``: the
    broker's tiered storage (None: no offloading; ledgers offloaded earlier are then unreadable
    once their bookie copy is gone); ``offload_policies`` resolves each managed ledger's offload
    policies (the broker level alone by default); the broker may set it later, before opening.
    ``read_transform`` (pure, never raising) maps each entry's bytes as read from the bookies or the
    tier to what readers get (the broker strips the headers Apache Pulsar's broker stores); entries
    added through this factory reach readers as they were added.
    """

    def __init__(
        self,
        bk: BookKeeperClient,
        store: MetadataStore,
        config: ManagedLedgerConfig | None = None,
        clock: Callable[[], float] = time.time,
        *,
        metrics: ManagedLedgerMetrics | None = None,
        tier: TieredStorage | None = None,
        offload_policies: OffloadPoliciesResolver | None = None,
        read_transform: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self._read_transform = read_transform
        self.config = config if config is not None else ManagedLedgerConfig()
        self.config.validate()
        self.metrics = metrics if metrics is not None else ManagedLedgerMetrics()
        self.cache = EntryCache(self.config.cache_size_bytes, self.metrics)
        self._bk = bk
        self._store = store
        self._clock = clock
        self._ledgers: dict[str, ManagedLedger] = {}
        self._opening: dict[str, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._closed = False
        self.tier = tier
        self.offload_policies = offload_policies
        self.side_ledgers = SideLedgers(bk, self.config)
        """Single ledgers a topic keeps beside its chain (the compacted view): `SideLedgers`."""

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the factory's nursery until cancelled (no graceful close on cancellation)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def __aenter__(self) -> ManagedLedgerFactory:
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._nursery is not None and self._nursery_cm is not None
        try:
            if exc_type is None:
                await self.close()
        finally:
            self._nursery.cancel_scope.cancel()
            result = await self._nursery_cm.__aexit__(exc_type, exc, tb)
        return result

    async def close(self) -> None:
        """Close every open managed ledger (finishing adds, persisting cursors)."""
        self._closed = True
        for ml in list(self._ledgers.values()):
            await ml.close()

    # --- managed ledgers ---------------------------------------------------------------------

    async def open(self, name: str) -> ManagedLedger:
        """The managed ledger ``name`` ("tenant/namespace/persistent/topic"), opened (created if
        new) and owned by this factory; opening fences the previous owner. Concurrent opens of
        one name share one instance. Raises `ManagedLedgerError` (or a subclass)."""
        if self._closed:
            raise ManagedLedgerClosed("the managed ledger factory is closed")
        if self._nursery is None:
            raise ManagedLedgerError(
                "the factory is not running: use `async with factory` or nursery.start(factory.run)"
            )
        while name in self._opening:
            await self._opening[name].wait()
        ml = self._ledgers.get(name)
        if ml is not None:
            return ml
        done = self._opening[name] = trio.Event()
        try:
            ctx = _Context(
                self._bk,
                self._store,
                self.config,
                self._clock,
                self.metrics,
                self.cache,
                self._forget,
                self.tier,
                self.offload_policies,
                self._read_transform,
            )
            ml = ManagedLedger(name, ctx)
            await self._nursery.start(ml._run)
            try:
                await ml._initialize()
            except BaseException:
                assert ml._nursery is not None
                ml._nursery.cancel_scope.cancel()
                raise
            self._ledgers[name] = ml
            return ml
        finally:
            del self._opening[name]
            done.set()

    def _forget(self, name: str) -> None:
        self._ledgers.pop(name, None)

    @property
    def max_entry_size(self) -> int:
        """The largest entry its managed ledgers accept (what the BookKeeper client can send)."""
        return self._bk.max_entry_size

    def get(self, name: str) -> ManagedLedger | None:
        """The managed ledger ``name`` if this factory has it open."""
        return self._ledgers.get(name)

    async def delete(self, name: str) -> None:
        """Delete a managed ledger: close it here if open, delete its ledgers, then its cursors
        and metadata. Raises `ManagedLedgerError` when it does not exist."""
        ml = self._ledgers.get(name)
        if ml is not None:
            await ml.close()
        path = f"{ML_ROOT}/{name}"
        try:
            value, _ = await self._store.get(path)
        except NoNodeError:
            raise ManagedLedgerError(f"managed ledger {name} does not exist") from None
        for info in ManagedLedgerInfo.decode(value).ledgers:
            if info.on_bookies:
                try:
                    await self._bk.delete_ledger(info.ledger_id)
                except NoSuchLedger:
                    pass
            if info.offload is not None and self.tier is not None:
                ctx = info.offload
                try:
                    await self.tier.offloader_for_ledger(ctx.driver, ctx.driver_metadata).delete(
                        info.ledger_id, ctx.uid, namespace="/".join(name.split("/")[:2])
                    )
                except TierError as exc:
                    log.warning("%s: could not delete the tier copy of ledger %s: %s", name, info.ledger_id, exc)
        await self._store.delete(path, recursive=True)
        self.cache.invalidate(name)

    async def stored_cursor_properties(self, name: str, cursor: str) -> dict[str, int] | None:
        """The numeric properties stored with a durable cursor's mark-delete position, read from
        metadata (the managed ledger need not be open); None when it has no such cursor. Owners of
        side ledgers find them there before deleting a managed ledger."""
        ml = self._ledgers.get(name)
        if ml is not None and cursor in ml.cursors:
            return ml.cursors[cursor].properties
        try:
            value, _ = await self._store.get(f"{ML_ROOT}/{name}/{cursor}")
        except NoNodeError:
            return None
        return dict(CursorInfo.decode(value).properties)

    async def stored_cursors(self, name: str) -> dict[str, CursorInfo]:
        """Every durable cursor of a managed ledger as persisted in metadata (the managed ledger
        need not be open; an open one's cursors may have changes not persisted yet). Empty when
        the managed ledger does not exist. Owners of side ledgers recorded in cursor properties
        find them here before deleting a managed ledger."""
        path = f"{ML_ROOT}/{name}"
        try:
            children = await self._store.children(path)
        except NoNodeError:
            return {}
        out: dict[str, CursorInfo] = {}
        for child in sorted(children):
            try:
                value, _ = await self._store.get(f"{path}/{child}")
            except NoNodeError:
                continue
            try:
                out[child] = CursorInfo.decode(value)
            except MLFormatError:
                continue  # not a cursor record: nothing of ours to find in it
        return out

    async def list(self, prefix: str = "") -> list[str]:
        """Names of the managed ledgers stored in metadata whose name starts with ``prefix``
        (names have four segments: tenant/namespace/persistent/topic)."""
        parts = [p for p in prefix.split("/") if p]
        # descend through the whole segments of the prefix; the last may be partial
        fixed = parts if prefix.endswith("/") else parts[:-1]
        fixed = fixed[:_NAME_DEPTH]
        out: list[str] = []

        async def walk(segments: list[str]) -> None:
            if len(segments) == _NAME_DEPTH:
                name = "/".join(segments)
                if name.startswith(prefix.rstrip("/")) or not prefix:
                    out.append(name)
                return
            try:
                children = await self._store.children("/".join([ML_ROOT, *segments]))
            except NoNodeError:
                return
            for child in sorted(children):
                await walk([*segments, child])

        await walk(fixed)
        return sorted(out)
