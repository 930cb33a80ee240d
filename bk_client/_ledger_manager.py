"""Ledger metadata on the metadata store: ids, create / read / compare-and-set / delete, watches,
ordered iteration, and the registered bookies.

Layout (``protocols.bookkeeper``; ``root`` is the cluster root, "" or "/magnetar"):

* ``{root}/ledgers/{3}/{4}/{4}/{4}/L{4}`` (long hierarchical, the default) or
  ``{root}/ledgers/L{10+ digits}`` (flat): one node per ledger holding ``LedgerMetadata.encode()``;
  the node's data version is the metadata version every write must name (compare-and-set).
* ``{root}/ledgers/LAYOUT``: which of the two; ``ensure_layout`` writes it if absent and refuses
  a cluster recorded with the other one.
* ``{root}/ledgers/idgen-long/HOB-{10 digits}/ID-{10 digits}``: id generation (below).
* ``{root}/ledgers/available/{bookie}``: ephemeral node per writable bookie;
  ``{root}/ledgers/available/readonly/{bookie}`` per read-only bookie.

Ledger ids. BookKeeper draws ids from ZooKeeper sequential nodes; ZooKeeper's counter is a
signed 32-bit number per parent, so for 64-bit ids the counter is split like BookKeeper's long id
generator: *high-order bits* come from the sequence number of a persistent sequential "HOB"
node, *low-order bits* from an ephemeral sequential ``ID-`` node created (and at once deleted)
under the newest HOB node::

    ledger id = hob << low_bits | seq          (low_bits = 31 by default)

When ``seq`` would not fit in ``low_bits`` a new HOB node is created and the draw retried.
Unique: a parent's sequence counter never repeats (not after deletes, not across restarts, the
metadata store guarantees it), and two HOB nodes cover disjoint id ranges. Ids of one client are
increasing; ids of different clients interleave. (On ZooKeeper the counter also advances on each
delete, so consecutive draws there differ by 2; uniqueness is what matters.)

Deleting a ledger removes its leaf only; empty intermediate nodes stay (removing them would race
with a concurrent create under the same parent, and there are at most 10,000 per level).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import trio

from metadata import BadVersionError, MetadataError, MetadataStore, NodeExistsError, NoNodeError
from protocols.bookkeeper import (
    IDGEN,
    LEDGER_LEVELS,
    MAX_LEDGER_ID,
    READONLY,
    LayoutFormatError,
    LedgerLayout,
    LedgerMetadata,
    available_path,
    decode_layout,
    encode_layout,
    flat_ledger_ids,
    id_range_of,
    layout_conflict,
    layout_path,
    ledger_ids_in,
    ledger_level_children,
    ledger_path,
    ledgers_root,
    readonly_path,
)

from ._errors import LedgerExists, LedgerIdOverflow, MetadataStoreError, MetadataVersionConflict, NoSuchLedger

__all__ = ["LedgerManager", "LedgerMetadataUpdate"]

T = TypeVar("T")

_HOB_PREFIX = "HOB-"
_ID_PREFIX = "ID-"


@dataclass(frozen=True, slots=True)
class LedgerMetadataUpdate:
    """A snapshot of one ledger's metadata from ``LedgerManager.watch``.

    ``metadata`` is None (and ``version`` -1) when the ledger does not exist (deleted, or not yet
    created).
    """

    ledger_id: int
    metadata: LedgerMetadata | None
    version: int


def _seq_of(path: str, prefix: str) -> int:
    """The sequence number ZooKeeper appended to a sequential node's name."""
    name = path.rsplit("/", 1)[-1]
    if not name.startswith(prefix):
        raise MetadataStoreError(f"unexpected sequential node name {path!r}")
    return int(name[len(prefix):])


class LedgerManager:
    """Ledger metadata and bookie registry over a ``metadata.MetadataStore``.

    Store failures other than the ones named below surface as ``MetadataStoreError`` (the original
    error chained). The manager holds no background tasks; watches own theirs while open.
    """

    def __init__(self, store: MetadataStore, root: str = "", *, id_low_bits: int = 31,
                 layout: LedgerLayout = LedgerLayout.HIERARCHICAL) -> None:
        if not 1 <= id_low_bits <= 31:
            raise ValueError(f"id_low_bits must be 1..31 (ZooKeeper counters are 31-bit), got {id_low_bits}")
        self._store = store
        self._root = root.rstrip("/")
        self._low_bits = id_low_bits
        self._layout = layout
        self._hob: int | None = None  # newest HOB known to this client
        self._hob_lock = trio.Lock()

    @property
    def root(self) -> str:
        """The cluster root the layout hangs under ("" for "/")."""
        return self._root

    @classmethod
    async def discover(cls, store: MetadataStore, root: str = "") -> LedgerManager:
        """A manager in the layout the cluster's ``LAYOUT`` node records (hierarchical when there
        is none yet), for tools that read ledger metadata without a configured layout.

        Raises ``MetadataStoreError`` for an unreadable node or a store failure.
        """
        path = layout_path(root.rstrip("/"))
        try:
            data, _ = await store.get(path)
            layout = decode_layout(data)
        except NoNodeError:
            layout = LedgerLayout.HIERARCHICAL
        except LayoutFormatError as exc:
            raise MetadataStoreError(f"{path}: {exc}") from exc
        except MetadataError as exc:
            raise MetadataStoreError(f"reading the ledger layout at {path} failed: {exc}") from exc
        return cls(store, root, layout=layout)

    @property
    def layout(self) -> LedgerLayout:
        """The ledger layout this manager reads and writes."""
        return self._layout

    def ledger_path(self, ledger_id: int) -> str:
        """The metadata node of ``ledger_id``; ``ValueError`` outside 0..2**63-1."""
        return ledger_path(self._root, ledger_id, self._layout)

    async def ensure_layout(self) -> None:
        """Record this manager's layout in the ``LAYOUT`` node if the cluster has none yet, else
        check that the recorded one is this manager's.

        Raises ``MetadataStoreError`` naming both layouts when they differ (a client of the other
        layout would neither see nor garbage-collect this one's ledgers) or when the node is
        unreadable, and for store failures.
        """
        path = layout_path(self._root)
        try:
            try:
                await self._store.create(path, encode_layout(self._layout), make_parents=True)
                return
            except NodeExistsError:
                data, _ = await self._store.get(path)
            recorded = decode_layout(data)
        except LayoutFormatError as exc:
            raise MetadataStoreError(f"{path}: {exc}") from exc
        except MetadataError as exc:
            raise MetadataStoreError(f"reading the ledger layout at {path} failed: {exc}") from exc
        conflict = layout_conflict(recorded, self._layout)
        if conflict is not None:
            raise MetadataStoreError(conflict)

    # ---- ids ---------------------------------------------------------------------------------

    def _idgen_path(self) -> str:
        return f"{ledgers_root(self._root)}/{IDGEN}"

    def _hobs(self, names: Sequence[str]) -> list[int]:
        n = len(_HOB_PREFIX)
        return [int(x[n:]) for x in names if x.startswith(_HOB_PREFIX) and x[n:].isdigit()]

    async def _newest_hob(self, full: int | None) -> int:
        """The HOB to draw from: the cached one, or (when ``full`` is the HOB that just ran out,
        or none is known) the newest one in the store newer than ``full``, creating one if none."""
        async with self._hob_lock:
            if self._hob is not None and (full is None or self._hob > full):
                return self._hob
            base = self._idgen_path()
            try:
                hobs = self._hobs(await self._store.children(base))
            except NoNodeError:
                hobs = []
            hobs = [h for h in hobs if full is None or h > full]
            if not hobs:
                # Concurrent clients may each create a HOB here; all are valid, and everyone
                # draws from the newest it sees.
                created = await self._store.create(f"{base}/{_HOB_PREFIX}", sequential=True, make_parents=True)
                hobs = [_seq_of(created, _HOB_PREFIX)]
            self._hob = max(hobs)
            return self._hob

    async def generate_ledger_id(self) -> int:
        """A ledger id no other call (this process or another, before or after a restart) got.

        Raises ``LedgerIdOverflow`` if the 63-bit id space is exhausted, ``MetadataStoreError``.
        """
        limit = (1 << self._low_bits) - 1
        full: int | None = None
        try:
            for _ in range(64):
                hob = await self._newest_hob(full)
                if hob > MAX_LEDGER_ID >> self._low_bits:
                    raise LedgerIdOverflow()
                hob_path = f"{self._idgen_path()}/{_HOB_PREFIX}{hob:010d}"
                try:
                    node = await self._store.create(f"{hob_path}/{_ID_PREFIX}", ephemeral=True, sequential=True)
                except NoNodeError:
                    full = hob  # the HOB vanished (removed by an operator): move to a newer one
                    continue
                seq = _seq_of(node, _ID_PREFIX)
                try:
                    await self._store.delete(node)
                except NoNodeError:
                    pass
                if 0 <= seq < limit:
                    return (hob << self._low_bits) | seq
                full = hob
            raise MetadataStoreError("could not draw a ledger id: HOB nodes keep filling up")
        except MetadataError as exc:
            raise MetadataStoreError(f"ledger id generation failed: {exc}") from exc

    # ---- ledger metadata ------------------------------------------------------------------

    async def create(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        """Store the metadata of a new ledger; return its version (0).

        Raises ``LedgerExists`` if the ledger already has metadata (never overwrites).
        """
        path = self.ledger_path(ledger_id)
        try:
            await self._store.create(path, metadata.encode(), make_parents=True)
        except NodeExistsError as exc:
            raise LedgerExists(ledger_id) from exc
        except MetadataError as exc:
            raise MetadataStoreError(f"creating ledger {ledger_id} failed: {exc}", ledger_id=ledger_id) from exc
        return 0

    def _decode(self, ledger_id: int, data: bytes) -> LedgerMetadata:
        try:
            return LedgerMetadata.decode(data)
        except Exception as exc:
            raise MetadataStoreError(f"ledger {ledger_id} has unreadable metadata: {exc}",
                                     ledger_id=ledger_id) from exc

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """The ledger's metadata and its version. Raises ``NoSuchLedger``."""
        try:
            data, stat = await self._store.get(self.ledger_path(ledger_id))
        except NoNodeError as exc:
            raise NoSuchLedger(ledger_id) from exc
        except MetadataError as exc:
            raise MetadataStoreError(f"reading ledger {ledger_id} failed: {exc}", ledger_id=ledger_id) from exc
        return self._decode(ledger_id, data), stat.version

    async def write(self, ledger_id: int, metadata: LedgerMetadata, expected_version: int) -> int:
        """Replace the metadata if it is still at ``expected_version``; return the new version.

        Raises ``MetadataVersionConflict`` when someone wrote in between (re-read and retry),
        ``NoSuchLedger`` when it was deleted, ``ValueError`` for a negative version (every
        metadata write is a compare-and-set).
        """
        if expected_version < 0:
            raise ValueError(f"ledger metadata writes need the expected version, got {expected_version}")
        try:
            stat = await self._store.set(self.ledger_path(ledger_id), metadata.encode(), version=expected_version)
        except BadVersionError as exc:
            raise MetadataVersionConflict(ledger_id, expected_version) from exc
        except NoNodeError as exc:
            raise NoSuchLedger(ledger_id) from exc
        except MetadataError as exc:
            raise MetadataStoreError(f"writing ledger {ledger_id} failed: {exc}", ledger_id=ledger_id) from exc
        return stat.version

    async def delete(self, ledger_id: int, version: int = -1) -> None:
        """Remove the ledger's metadata (at ``version``, or any with -1).

        Raises ``NoSuchLedger``, ``MetadataVersionConflict`` on a version mismatch.
        """
        try:
            await self._store.delete(self.ledger_path(ledger_id), version=version)
        except NoNodeError as exc:
            raise NoSuchLedger(ledger_id) from exc
        except BadVersionError as exc:
            raise MetadataVersionConflict(ledger_id, version) from exc
        except MetadataError as exc:
            raise MetadataStoreError(f"deleting ledger {ledger_id} failed: {exc}", ledger_id=ledger_id) from exc

    async def exists(self, ledger_id: int) -> bool:
        """True when the ledger has metadata."""
        try:
            return await self._store.exists(self.ledger_path(ledger_id)) is not None
        except MetadataError as exc:
            raise MetadataStoreError(f"checking ledger {ledger_id} failed: {exc}", ledger_id=ledger_id) from exc

    async def _snapshot(self, ledger_id: int) -> LedgerMetadataUpdate:
        try:
            meta, version = await self.read(ledger_id)
        except NoSuchLedger:
            return LedgerMetadataUpdate(ledger_id, None, -1)
        return LedgerMetadataUpdate(ledger_id, meta, version)

    @asynccontextmanager
    async def watch(self, ledger_id: int) -> AsyncIterator[trio.abc.ReceiveChannel[LedgerMetadataUpdate]]:
        """Follow one ledger's metadata: the channel yields the current snapshot first, then a
        snapshot after each change (creates, writes, the delete as ``metadata=None``).

        Snapshots are read after the change notification, so a slow consumer may skip
        intermediate versions but always ends with the newest. The channel buffers at most one
        snapshot; the watch task is cancelled when the context exits.
        """
        # read() wraps store errors
        async with _follow(self._store.watch_data(self.ledger_path(ledger_id)),
                           lambda: self._snapshot(ledger_id)) as recv:
            yield recv

    async def iterate_ledger_ids(self, start: int = 0, end: int | None = None) -> AsyncIterator[int]:
        """Yield the ids of existing ledgers with ``start <= id < end`` (``end=None``: no bound)
        in increasing order.

        Walks the hierarchy one node at a time, listing only the children of nodes whose id range
        meets the requested range (the flat layout: one listing of the ledgers root), so memory
        stays at one child list per level. Ledgers created or deleted during the walk may or may
        not be seen; a subtree deleted under the walk is skipped.
        """
        stop = MAX_LEDGER_ID + 1 if end is None else min(end, MAX_LEDGER_ID + 1)
        if start >= stop:
            return
        if self._layout is LedgerLayout.FLAT:  # one child list holds every ledger
            for ledger_id in flat_ledger_ids(await self._children([])):
                if start <= ledger_id < stop:
                    yield ledger_id
            return
        async for ledger_id in self._walk([], max(start, 0), stop):
            yield ledger_id

    async def _children(self, parents: Sequence[str]) -> list[str]:
        path = "/".join([ledgers_root(self._root), *parents])
        try:
            return await self._store.children(path)
        except NoNodeError:
            return []
        except MetadataError as exc:
            raise MetadataStoreError(f"listing {path} failed: {exc}") from exc

    async def _walk(self, parents: list[str], start: int, stop: int) -> AsyncIterator[int]:
        names = await self._children(parents)
        level = len(parents)
        if level == len(LEDGER_LEVELS) - 1:
            for ledger_id in ledger_ids_in(parents, names):
                if start <= ledger_id < stop:
                    yield ledger_id
            return
        for name in ledger_level_children(level, names):
            span = id_range_of([*parents, name])
            if span.stop <= start or not span:
                continue
            if span.start >= stop:
                break
            async for ledger_id in self._walk([*parents, name], start, stop):
                yield ledger_id

    # ---- bookies ---------------------------------------------------------------------------

    async def list_bookies(self, writable: bool = True) -> list[str]:
        """The registered bookie ids, sorted: writable ones (children of ``available`` except the
        ``readonly`` folder) or, with ``writable=False``, the read-only ones."""
        path = available_path(self._root) if writable else readonly_path(self._root)
        try:
            names = await self._store.children(path)
        except NoNodeError:
            return []
        except MetadataError as exc:
            raise MetadataStoreError(f"listing bookies under {path} failed: {exc}") from exc
        return sorted(n for n in names if not (writable and n == READONLY))

    @asynccontextmanager
    async def watch_bookies(self, writable: bool = True) -> AsyncIterator[trio.abc.ReceiveChannel[frozenset[str]]]:
        """Follow the set of writable (or read-only) bookies: the channel yields the current set
        first, then the new set after each change (sets equal to the previous one are skipped).
        Buffers at most one snapshot; the watch task ends when the context exits."""
        path = available_path(self._root) if writable else readonly_path(self._root)

        async def snapshot() -> frozenset[str]:
            return frozenset(await self.list_bookies(writable))  # wraps store errors

        async with _follow(self._store.watch_children(path), snapshot) as recv:
            yield recv


@asynccontextmanager
async def _follow(watch: AbstractAsyncContextManager[trio.abc.ReceiveChannel[Any]],
                  snapshot: Callable[[], Awaitable[T]]) -> AsyncIterator[trio.abc.ReceiveChannel[T]]:
    """A channel of ``snapshot()`` now, then again after each event of ``watch`` when it differs
    from the last one sent; it buffers one snapshot, and the task pumping it ends with the block."""
    send, recv = trio.open_memory_channel[T](1)
    async with watch as events, trio.open_nursery() as nursery:
        async def pump() -> None:
            async with send:
                last = await snapshot()
                await send.send(last)
                async for _ in events:
                    now = await snapshot()
                    if now != last:
                        last = now
                        await send.send(now)

        nursery.start_soon(pump)
        try:
            yield recv
        finally:
            nursery.cancel_scope.cancel()
