"""The BookKeeper client over real bookies (implements ``bk_client.api.BookKeeperClient``).

    async with open_metadata_store(url) as store:
        async with BookKeeper.open(store, root="/magnetar") as bk:
            lh = await bk.create_ledger(3, 2, 2, password=b"pw")
            await lh.add_entry(b"hello")
            await lh.close()

The client owns a nursery: bookie connections, add-timeout monitors and ensemble changes run
there, and all stop when the ``open`` block exits (pending requests then fail with
``ClientClosed``). Ledger metadata goes through ``LedgerManager`` (compare-and-set on every
update); bookies are the ones registered under ``{root}/ledgers/available``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

from metadata import MetadataStore
from protocols.bookkeeper import MAX_ENTRY_HEADER_SIZE, DigestType, LedgerMetadata, Segment, max_add_payload

from ._bookie_client import BookieClient
from ._config import ClientConfig
from ._connection import ConnectionPool
from ._context import ClientContext, Quarantine
from ._errors import ClientClosed
from ._ledger_manager import LedgerManager
from ._placement import EnsemblePlacementPolicy
from ._read_handle import LedgerReadHandle
from ._read_lac import read_last_confirmed
from ._recovery import check_password, recover_ledger
from ._transport import TransportFactory
from ._write_handle import LedgerWriteHandle
from .metrics import ClientMetrics

__all__ = ["BookKeeper"]


class BookKeeper:
    """A BookKeeper client bound to one metadata store and cluster root.

    Build it with ``BookKeeper.open(...)`` (an async context manager owning the client's tasks).
    Every method raises ``ClientClosed`` once the client is closed.
    """

    def __init__(self, ctx: ClientContext) -> None:
        self._ctx = ctx
        self._bookie_client = BookieClient(ctx.pool)
        self._max_entry_config: ClientConfig | None = None  # what `max_entry_size` was computed for
        self._max_entry_size = 0

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        store: MetadataStore,
        *,
        root: str = "",
        config: ClientConfig | None = None,
        placement: EnsemblePlacementPolicy | None = None,
        metrics: ClientMetrics | None = None,
        transport: TransportFactory | None = None,
    ) -> AsyncIterator[BookKeeper]:
        """Start a client; on exit close it and stop its tasks.

        ``placement`` defaults to a rack-aware-if-labelled ``EnsemblePlacementPolicy``;
        ``metrics`` to a fresh ``ClientMetrics`` on its own registry; ``transport`` (how requests
        reach the bookies, `bk_client.BookieTransport`) to the network's `ConnectionPool`.
        Records the configured ledger layout in the cluster's ``LAYOUT`` node, or raises
        ``MetadataStoreError`` when the cluster records the other one (``LedgerManager.ensure_layout``).
        """
        cfg = config or ClientConfig()
        ledgers = LedgerManager(store, root, layout=cfg.ledger_layout)
        await ledgers.ensure_layout()  # before any task: a wrong layout is a plain error, not a group
        async with trio.open_nursery() as nursery:
            mx = metrics or ClientMetrics()
            ctx = ClientContext(
                pool=(
                    transport(nursery, cfg, mx)
                    if transport is not None
                    else ConnectionPool(nursery, cfg, mx, resolve=ledgers.bookie_address)
                ),
                ledgers=ledgers,
                placement=placement or EnsemblePlacementPolicy(rack_aware=cfg.rack_aware_placement),
                config=cfg,
                metrics=mx,
                nursery=nursery,
                quarantine=Quarantine(cfg.bookie_quarantine_time_s),
            )
            client = cls(ctx)
            try:
                yield client
            finally:
                client._shutdown()
                nursery.cancel_scope.cancel()

    @property
    def config(self) -> ClientConfig:
        """The client's settings."""
        return self._ctx.config

    @property
    def max_entry_size(self) -> int:
        """The largest entry payload an add accepts (rule 7 of `bk_client.api`)."""
        # the largest digest header of any type, so the bound holds for every ledger's digest;
        # asked per add by the broker, so kept for the config it was computed from
        config = self._ctx.config
        if config is not self._max_entry_config:
            self._max_entry_size = max_add_payload(config.max_frame_size, header_size=MAX_ENTRY_HEADER_SIZE)
            self._max_entry_config = config
        return self._max_entry_size

    @property
    def metrics(self) -> ClientMetrics:
        """The client's metrics (own registry unless one was passed to ``open``)."""
        return self._ctx.metrics

    @property
    def ledger_manager(self) -> LedgerManager:
        """The ledger metadata manager the client uses."""
        return self._ctx.ledgers

    @property
    def placement(self) -> EnsemblePlacementPolicy:
        """The placement policy the client chooses ensembles and replacement bookies with."""
        return self._ctx.placement

    @property
    def bookie_client(self) -> BookieClient:
        """Requests to one named bookie over this client's connections, below ledger handles
        (for tools that repair replicas; see ``bk_client._bookie_client``)."""
        return self._bookie_client

    def _check_open(self) -> None:
        if self._ctx.closed:
            raise ClientClosed()

    def _shutdown(self) -> None:
        self._ctx.closed = True
        self._ctx.pool.close()

    async def close(self) -> None:
        """Stop accepting operations and drop bookie connections (pending requests fail with
        ``ClientClosed``). The ``open`` block does this on exit; calling it early is allowed."""
        self._shutdown()
        await trio.lowlevel.checkpoint()

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        *,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        digest_type: DigestType = DigestType.CRC32C,
    ) -> LedgerWriteHandle:
        """Create an OPEN ledger with a fresh unique id on ``ensemble_size`` registered bookies
        and open it for writing. ``digest_type`` (recorded in the ledger's metadata) frames every
        entry and LAC the ledger stores; every reader verifies with it (HMAC keys on ``password``).

        Raises ``ValueError`` unless 1 <= Qa <= Qw <= E or for an unknown ``digest_type``,
        ``NotEnoughBookies`` when fewer than E bookies are registered, ``MetadataStoreError``.
        """
        self._check_open()
        if not 1 <= ack_quorum <= write_quorum <= ensemble_size:
            raise ValueError(
                f"need 1 <= ack_quorum <= write_quorum <= ensemble_size, got "
                f"E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}"
            )
        ctx = self._ctx
        available = await ctx.ledgers.list_bookies()
        ensemble = ctx.placement.new_ensemble(ensemble_size, available, exclude=ctx.quarantine.active())
        ledger_id = await ctx.ledgers.generate_ledger_id()
        meta = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            segments=(Segment(0, ensemble),),
            digest_type=DigestType(digest_type),
            password=password,
            ctime_ms=int(time.time() * 1000),
            custom_metadata=dict(custom_metadata or {}),
        )
        version = await ctx.ledgers.create(ledger_id, meta)
        self._check_open()
        return LedgerWriteHandle(ctx, ledger_id, meta, version, password)

    async def open_ledger(
        self,
        ledger_id: int,
        *,
        password: bytes = b"",
        recovery: bool = True,
    ) -> LedgerReadHandle:
        """Open a ledger for reading.

        With ``recovery`` (a new owner): fence, recover and close it first, so the handle sees
        the final ledger and the old writer's next add fails with ``LedgerFenced``. Without: read
        the LAC from the bookies; the handle follows the ledger while it is written.

        Raises ``NoSuchLedger``, ``Unauthorized`` (wrong password), ``LedgerRecoveryError``,
        ``ReadError`` (no LAC answer covers the ensemble).
        """
        self._check_open()
        ctx = self._ctx
        if recovery:
            meta, _ = await recover_ledger(ctx, ledger_id, password)
            return LedgerReadHandle(ctx, ledger_id, meta, meta.last_entry_id)
        meta, _ = await ctx.ledgers.read(ledger_id)
        check_password(ledger_id, meta, password)
        lac = meta.last_entry_id
        if not meta.is_closed:
            lac = (await read_last_confirmed(ctx, ledger_id, meta)).lac
        return LedgerReadHandle(ctx, ledger_id, meta, lac)

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata (bookies reclaim space by GC). Raises ``NoSuchLedger``."""
        self._check_open()
        await self._ctx.ledgers.delete(ledger_id)
