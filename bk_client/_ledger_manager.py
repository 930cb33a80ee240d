"""Ledger metadata on the metadata store: ids, create / read / compare-and-set / delete, watches,
ordered iteration, and the registered bookies, as BookKeeper's ZooKeeper ledger managers keep them.

Layout (``protocols.bookkeeper``; ``root`` is the cluster root, "" or "/magnetar"):

* one node per ledger holding ``LedgerMetadata.encode()``, where the cluster's layout puts it
  (hierarchical: ``{root}/ledgers/00/0000/L0001`` for ids below 2**31 - 1 and the long form
  above; long hierarchical; flat); the node's data version is the metadata version every write
  must name (compare-and-set).
* ``{root}/ledgers/LAYOUT``: which layout; ``ensure_layout`` writes it if absent (the configured
  one, else BookKeeper's default, hierarchical), follows it when none is configured, and refuses
  a cluster recorded with another one than configured.
* ``{root}/ledgers/available/{bookie}``: ephemeral node per writable bookie;
  ``{root}/ledgers/available/readonly/{bookie}`` per read-only bookie.

Ledger ids, drawn as BookKeeper's id generators draw them, so that Magnetar and BookKeeper clients
can create ledgers in one cluster. A ZooKeeper sequential node's counter is a signed 32-bit
number per parent, so:

* *short ids* (hierarchical layouts until they run out; always in the flat layout): the sequence
  number of an ephemeral sequential node ``{root}/ledgers/idgen/ID-`` (flat:
  ``{root}/ledgers/ID-``), created and at once deleted (``ZkLedgerIdGenerator``). A number
  >= 2**31 - 1 means the short ids are exhausted.
* *long ids*, once ``{root}/ledgers/idgen-long`` exists (``LongZkLedgerIdGenerator``): the newest
  persistent ``idgen-long/HOB-{10 digits}`` node gives the high 32 bits, an ephemeral sequential
  ``ID-`` node under it the low ones: ``id = hob << 32 | seq``. When ``seq`` reaches 2**31 - 1 the
  node ``HOB-{hob + 1}`` is created and the draw retried; the first is ``HOB-0000000001``.
  Hierarchical layouts switch to long ids when the short ones are exhausted; a flat cluster uses
  them only when ``idgen-long`` exists (clusters made by earlier Magnetar versions, which drew
  every id this way with sequential HOB nodes: their ranges stay below the new ones).

Unique: a parent's sequence counter never repeats (not after deletes, not across restarts),
short ids are below 2**31 - 1 and long ones above, and two HOB nodes cover disjoint ranges. Ids
of one client are increasing. (ZooKeeper's counter also advances on each delete, so consecutive
draws differ by 2; uniqueness is what matters.)

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
    MAX_LEDGER_ID,
    READONLY,
    BookieServiceInfo,
    LayoutFormatError,
    LedgerLayout,
    LedgerMetadata,
    RegistrationFormatError,
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
    trees,
)

from ._errors import (
    BookieUnavailable,
    LedgerExists,
    LedgerIdOverflow,
    MetadataStoreError,
    MetadataVersionConflict,
    NoSuchLedger,
)

__all__ = ["LedgerManager", "LedgerMetadataUpdate"]

T = TypeVar("T")

_HOB_PREFIX = "HOB-"
_ID_PREFIX = "ID-"
_SHORT_IDGEN = "idgen"
_SEQ_LIMIT = 2**31 - 1  # a sequence number from here on means the counter is exhausted (Java's Integer.MAX_VALUE)


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
    return int(name[len(prefix) :])


class LedgerManager:
    """Ledger metadata and bookie registry over a ``metadata.MetadataStore``.

    Store failures other than the ones named below surface as ``MetadataStoreError`` (the original
    error chained). The manager holds no background tasks; watches own theirs while open.
    """

    def __init__(
        self,
        store: MetadataStore,
        root: str = "",
        *,
        layout: LedgerLayout | None = None,
        id_seq_limit: int = _SEQ_LIMIT,
    ) -> None:
        if not 1 <= id_seq_limit <= _SEQ_LIMIT:
            raise ValueError(
                f"id_seq_limit must be 1..{_SEQ_LIMIT} (ZooKeeper counters are 31-bit), got {id_seq_limit}"
            )
        self._store = store
        self._root = root.rstrip("/")
        self._configured = layout
        self._layout = layout or LedgerLayout.HIERARCHICAL
        self._seq_limit = id_seq_limit  # tests lower it to see the HOB roll over
        self._hob: int | None = None  # newest HOB known to this client
        self._long_ids: bool | None = None  # idgen-long seen (True) / not seen (False) / not checked
        self._hob_lock = trio.Lock()

    @property
    def root(self) -> str:
        """The cluster root the layout hangs under ("" for "/")."""
        return self._root

    @classmethod
    async def discover(cls, store: MetadataStore, root: str = "") -> LedgerManager:
        """A manager in the layout the cluster's ``LAYOUT`` node records (hierarchical, BookKeeper's
        default, when there is none yet), for tools that read ledger metadata without a configured
        layout.

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
        """The ledger layout this manager reads and writes (the recorded one once
        ``ensure_layout`` ran when none was configured)."""
        return self._layout

    def ledger_path(self, ledger_id: int) -> str:
        """The metadata node of ``ledger_id``; ``ValueError`` outside 0..2**63-1."""
        return ledger_path(self._root, ledger_id, self._layout)

    async def ensure_layout(self) -> LedgerLayout:
        """Record the layout in the ``LAYOUT`` node if the cluster has none yet (the configured
        one, else hierarchical), else adopt the recorded one when none is configured or check
        that it is the configured one; return the layout in force.

        Raises ``MetadataStoreError`` naming both layouts when they differ (a client of the other
        layout would neither see nor garbage-collect this one's ledgers) or when the node is
        unreadable, and for store failures.
        """
        path = layout_path(self._root)
        try:
            try:
                await self._store.create(path, encode_layout(self._layout), make_parents=True)
                return self._layout
            except NodeExistsError:
                data, _ = await self._store.get(path)
            recorded = decode_layout(data)
        except LayoutFormatError as exc:
            raise MetadataStoreError(f"{path}: {exc}") from exc
        except MetadataError as exc:
            raise MetadataStoreError(f"reading the ledger layout at {path} failed: {exc}") from exc
        conflict = layout_conflict(recorded, self._configured)
        if conflict is not None:
            raise MetadataStoreError(conflict)
        self._layout = recorded
        return recorded

    # ---- ids ---------------------------------------------------------------------------------

    def _idgen_path(self) -> str:
        return f"{ledgers_root(self._root)}/{IDGEN}"

    def _hobs(self, names: Sequence[str]) -> list[int]:
        n = len(_HOB_PREFIX)
        return [int(x[n:]) for x in names if x.startswith(_HOB_PREFIX) and x[n:].isascii() and x[n:].isdigit()]

    async def _newest_hob(self, full: int | None) -> int:
        """The HOB to draw from: the cached one, or (when ``full`` is the HOB that just ran out,
        or none is known) the newest one in the store, creating ``HOB-{full + 1}`` (or the first,
        ``HOB-0000000001``) when there is none newer."""
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
                hob = 1 if full is None else full + 1
                try:  # a concurrent client may create the same one: both then draw from it
                    await self._store.create(f"{base}/{_HOB_PREFIX}{hob:010d}", make_parents=True)
                except NodeExistsError:
                    pass
                hobs = [hob]
            self._hob = max(hobs)
            return self._hob

    async def _draw(self, prefix: str) -> int:
        """The sequence number of a new ephemeral sequential node ``prefix`` (deleted at once)."""
        node = await self._store.create(prefix, ephemeral=True, sequential=True, make_parents=True)
        try:
            await self._store.delete(node)
        except NoNodeError:
            pass
        return _seq_of(node, _ID_PREFIX)

    async def _uses_long_ids(self) -> bool:
        if self._long_ids is None:
            self._long_ids = await self._store.exists(self._idgen_path()) is not None
        return self._long_ids

    async def generate_ledger_id(self) -> int:
        """A ledger id no other call (this process or another, a BookKeeper client's included,
        before or after a restart) got; see the module docstring.

        Raises ``LedgerIdOverflow`` if the id space is exhausted, ``MetadataStoreError``.
        """
        try:
            if not await self._uses_long_ids():
                short_parent = (
                    ledgers_root(self._root)
                    if self._layout is LedgerLayout.FLAT
                    else f"{ledgers_root(self._root)}/{_SHORT_IDGEN}"
                )
                seq = await self._draw(f"{short_parent}/{_ID_PREFIX}")
                if 0 <= seq < self._seq_limit:
                    return seq
                if self._layout is LedgerLayout.FLAT:  # BookKeeper's flat manager has 31-bit ids only
                    raise LedgerIdOverflow()
                try:
                    await self._store.create(self._idgen_path(), make_parents=True)
                except NodeExistsError:
                    pass
                self._long_ids = True
            full: int | None = None
            for _ in range(64):
                hob = await self._newest_hob(full)
                if hob > MAX_LEDGER_ID >> 32:
                    raise LedgerIdOverflow()
                try:
                    seq = await self._draw(f"{self._idgen_path()}/{_HOB_PREFIX}{hob:010d}/{_ID_PREFIX}")
                except NoNodeError:
                    full = hob  # the HOB vanished (removed by an operator or a BookKeeper client): move on
                    continue
                if 0 <= seq < self._seq_limit:
                    return (hob << 32) | seq
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
            raise MetadataStoreError(f"ledger {ledger_id} has unreadable metadata: {exc}", ledger_id=ledger_id) from exc

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
        async with _follow(
            self._store.watch_data(self.ledger_path(ledger_id)), lambda: self._snapshot(ledger_id)
        ) as recv:
            yield recv

    async def iterate_ledger_ids(self, start: int = 0, end: int | None = None) -> AsyncIterator[int]:
        """Yield the ids of existing ledgers with ``start <= id < end`` (``end=None``: no bound)
        in increasing order.

        Walks each tree of the layout one node at a time, listing only the children of nodes
        whose id range meets the requested range (the flat layout: one listing of the ledgers
        root), so memory stays at one child list per level. Ledgers created or deleted during the
        walk may or may not be seen; a subtree deleted under the walk is skipped.
        """
        stop = MAX_LEDGER_ID + 1 if end is None else min(end, MAX_LEDGER_ID + 1)
        if start >= stop:
            return
        if self._layout is LedgerLayout.FLAT:  # one child list holds every ledger
            for ledger_id in flat_ledger_ids(await self._children([])):
                if start <= ledger_id < stop:
                    yield ledger_id
            return
        for levels, ids in trees(self._layout):
            lo, hi = max(start, ids.start, 0), min(stop, ids.stop)
            if lo < hi:
                async for ledger_id in self._walk([], levels, lo, hi):
                    yield ledger_id

    async def _children(self, parents: Sequence[str]) -> list[str]:
        path = "/".join([ledgers_root(self._root), *parents])
        try:
            return await self._store.children(path)
        except NoNodeError:
            return []
        except MetadataError as exc:
            raise MetadataStoreError(f"listing {path} failed: {exc}") from exc

    async def _walk(self, parents: list[str], levels: tuple[int, ...], start: int, stop: int) -> AsyncIterator[int]:
        names = await self._children(parents)
        level = len(parents)
        if level == len(levels) - 1:
            for ledger_id in ledger_ids_in(parents, names, levels):
                if start <= ledger_id < stop:
                    yield ledger_id
            return
        for name in ledger_level_children(level, names, levels):
            span = id_range_of([*parents, name], levels)
            if span.stop <= start or not span:
                continue
            if span.start >= stop:
                break
            async for ledger_id in self._walk([*parents, name], levels, start, stop):
                yield ledger_id

    # ---- bookies ---------------------------------------------------------------------------

    async def bookie_address(self, bookie_id: str) -> tuple[str, int]:
        """Where to connect to ``bookie_id``: the ``bookie-rpc`` endpoint its registration (writable,
        else read-only) publishes, as BookKeeper's ``DefaultBookieAddressResolver`` finds it; the
        address the id names when it is not registered or publishes none.

        Raises ``BookieUnavailable`` when neither gives an address (a custom id not registered,
        unreadable registration data) or the store cannot be read.
        """
        for path in (available_path(self._root, bookie_id), readonly_path(self._root, bookie_id)):
            try:
                data, _ = await self._store.get(path)
            except NoNodeError:
                continue
            except MetadataError as exc:
                raise BookieUnavailable(
                    bookie_id, f"reading the registration of bookie {bookie_id} failed: {exc}"
                ) from exc
            try:
                address = BookieServiceInfo.decode(data, bookie_id).rpc_address()
            except RegistrationFormatError as exc:
                raise BookieUnavailable(bookie_id, f"bookie {bookie_id}'s registration is unreadable: {exc}") from exc
            if address is not None:
                return address
            break
        address = BookieServiceInfo.legacy(bookie_id).rpc_address()
        if address is None:
            raise BookieUnavailable(bookie_id, f"bookie {bookie_id} is not registered and its id is not host:port")
        return address

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
async def _follow(
    watch: AbstractAsyncContextManager[trio.abc.ReceiveChannel[Any]], snapshot: Callable[[], Awaitable[T]]
) -> AsyncIterator[trio.abc.ReceiveChannel[T]]:
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
