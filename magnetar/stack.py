"""Compose Magnetar's services: a broker over real bookies, and standalone Magnetar.

`serve_broker_stack` runs what ``magnetar broker`` runs: a BookKeeper client and a managed-ledger
factory on a metadata store, the Pulsar protocol server and the admin REST API. `serve_standalone`
runs what ``magnetar standalone`` runs: the embedded metadata store, one or more bookies and that
broker stack, in one process with all data under one directory, so that a restart finds every
topic, subscription and message where it was.

Both are ``serve_x(..., task_status=...)`` functions: they report their endpoints once every
service listens, and shut down in reverse order when cancelled (the broker stops taking
requests, the managed ledgers close their ledgers and persist cursors, then the bookies sync their
journals and checkpoint).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

from bk_client import BookKeeper, ClientConfig, TransportFactory
from bookie import BookieConfig, serve_bookie_process
from broker import MESSAGE_SIZE_FRAME_PADDING, BrokerConfig, BrokerService, Ownership, serve_broker
from broker.admin import BookieGcView, serve_admin
from magnetar._inprocess import in_process_transport
from magnetar.common.config import ConfigError, config_field
from magnetar.common.tls import client_context
from managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from metadata import MetadataStore, open_metadata_store
from protocols.pulsar import stored_entry_block
from tiered_storage import TieredStorage, TieredStorageConfig

__all__ = [
    "STANDALONE_DEFAULTS",
    "StandaloneConfig",
    "BrokerEndpoints",
    "StandaloneEndpoints",
    "check_message_size",
    "serve_broker_stack",
    "serve_standalone",
]

log = logging.getLogger(__name__)

STANDALONE_DEFAULTS: dict[str, dict[str, Any]] = {
    "broker": {"bind_address": "127.0.0.1"},
    "bookie": {"listen_address": "127.0.0.1", "http_address": "127.0.0.1"},
}
"""Defaults ``magnetar standalone`` uses instead of the components' own: a standalone listens on
loopback only unless its config says otherwise (``bindAddress = "0.0.0.0"`` to serve other hosts);
deploy/standalone.toml shows them."""

STORAGE_CLOSE_TIMEOUT_S = 30.0
"""How long a stopping broker waits for its managed ledgers and BookKeeper client to close
gracefully (bookies may be gone) before cancelling them."""


@dataclass(frozen=True)
class StandaloneConfig:
    """Settings of standalone Magnetar itself (the ``[standalone]`` table of standalone.toml).

    Each bookie ``i`` (from 0) keeps its journal and entry logs under ``{data_dir}/bookie-{i}``
    and listens on ``bookie_port + i`` (protocol) and ``bookie_http_port + i`` (REST, metrics).
    """

    data_dir: str = config_field("data", help="Directory holding the metadata store and every bookie's data.")
    num_bookies: int = config_field(1, alias="numBookies", help="How many bookies to run in this process.")
    bookie_port: int = config_field(3181, alias="bookiePort", help="Protocol port of the first bookie.")
    bookie_http_port: int = config_field(
        8000, alias="httpServerPort", help="REST and /metrics port of the first bookie."
    )
    metadata_url: str = config_field(
        "",
        alias="metadataServiceUri",
        help="Metadata store URL; empty means the embedded store in {data_dir}/metadata.",
    )
    in_process_transport: bool = config_field(
        True,
        help="The broker reaches the bookies of this process without a socket (same semantics, "
        "less CPU per entry); false sends every request over loopback TCP.",
    )

    def validate(self) -> None:
        """Raise `ConfigError` naming the key when a value cannot work."""
        if not 1 <= self.num_bookies <= 16:
            raise ConfigError("num_bookies", f"must be between 1 and 16, got {self.num_bookies}")
        for key in ("bookie_port", "bookie_http_port"):
            value = getattr(self, key)
            if value != 0 and not 1 <= value <= 65535 - self.num_bookies:
                raise ConfigError(key, f"must be 0 or a TCP port leaving room for {self.num_bookies} bookies")

    def store_url(self) -> str:
        """The metadata store this standalone uses."""
        return self.metadata_url or f"embedded://{Path(self.data_dir).resolve()}/metadata"

    def bookie_config(self, template: BookieConfig, index: int) -> BookieConfig:
        """The config of bookie ``index``: the template with its own directories and ports."""
        base = Path(self.data_dir).resolve() / f"bookie-{index}"

        def port(first: int) -> int:
            return 0 if first == 0 else first + index

        return dataclasses.replace(
            template,
            journal_dir=str(base / "journal"),
            journal_dirs=(),  # the template's journalDirectories would be shared by every bookie
            ledger_dirs=(str(base / "ledgers"),),
            port=port(self.bookie_port),
            http_port=port(self.bookie_http_port),
            metadata_url=self.store_url(),
            bookie_id=template.bookie_id if self.num_bookies == 1 and template.bookie_id else "",
        )


@dataclass(frozen=True)
class BrokerEndpoints:
    """Where a started broker listens."""

    service_url: str
    web_url: str
    broker_port: int
    web_port: int
    # TLS ("" when the TLS port is off); service_url / web_url are "" when the plain port is off,
    # and broker_port / web_port then are the TLS ports
    service_url_tls: str = ""
    web_url_tls: str = ""


@dataclass(frozen=True)
class StandaloneEndpoints:
    """Where every service of a started standalone listens."""

    broker: BrokerEndpoints
    bookies: tuple[Any, ...]  # bookie.BookieEndpoints
    metadata_url: str
    data_dir: str


def check_message_size(broker: BrokerConfig, client: ClientConfig, bookie: BookieConfig | None = None) -> None:
    """Raise `ConfigError` unless every message the broker admits fits in one bookie frame.

    The broker admits ``max_message_size`` plus 10 KiB of metadata (``MESSAGE_SIZE_FRAME_PADDING``,
    as Pulsar), so the BookKeeper client's frame limit (``nettyMaxFrameSizeBytes``) must be at least
    that, and in standalone the bookies' must be at least the client's. Otherwise a message the
    client is allowed to send could never be stored.
    """
    needed = broker.max_message_size + MESSAGE_SIZE_FRAME_PADDING
    if client.max_frame_size < needed:
        raise ConfigError(
            "max_message_size",
            f"{broker.max_message_size} needs the BookKeeper client's "
            f"max_frame_size (nettyMaxFrameSizeBytes) to be at least {needed} (max_message_size "
            f"+ 10 KiB), but it is {client.max_frame_size}",
        )
    if bookie is not None and bookie.max_frame_size < client.max_frame_size:
        raise ConfigError(
            "max_frame_size",
            f"the bookie's max_frame_size ({bookie.max_frame_size}) is below "
            f"the BookKeeper client's ({client.max_frame_size}): large entries would be refused",
        )


def _quorum_for(ml: ManagedLedgerConfig, bookies: int) -> ManagedLedgerConfig:
    """Shrink the default ensemble to what a small standalone has, keeping Qa <= Qw <= E."""
    e = min(ml.ensemble_size, bookies)
    qw = min(ml.write_quorum, e)
    qa = min(ml.ack_quorum, qw)
    if (e, qw, qa) == (ml.ensemble_size, ml.write_quorum, ml.ack_quorum):
        return ml
    log.info(
        "ensemble %d/%d/%d reduced to %d/%d/%d for %d bookie(s)",
        ml.ensemble_size,
        ml.write_quorum,
        ml.ack_quorum,
        e,
        qw,
        qa,
        bookies,
    )
    return dataclasses.replace(ml, ensemble_size=e, write_quorum=qw, ack_quorum=qa)


async def serve_broker_stack(
    store: MetadataStore,
    broker: BrokerConfig,
    ml: ManagedLedgerConfig,
    client: ClientConfig,
    *,
    metadata_root: str = "",
    broker_port: int | None = None,
    web_port: int | None = None,
    multi_broker: bool = False,
    transport: TransportFactory | None = None,
    offload: TieredStorageConfig | None = None,
    task_status: trio.TaskStatus[BrokerEndpoints] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a broker (protocol server and admin REST) over the bookies registered in ``store``.

    ``offload``: the broker's tiered-storage settings (the ``[offload]`` table); the managed
    ledgers always have a `TieredStorage`, so that namespace or topic offload policies work even
    when the broker level names no driver.

    ``multi_broker`` (what ``magnetar broker`` runs): the broker shares the cluster's bundles with
    the other brokers of the store (`broker.Ownership`: registration, bundle ownership, lookups
    redirecting to owners); without it (standalone) it owns every topic. ``transport`` is how the
    BookKeeper client reaches the bookies (`BookKeeper.open`; the network by default).

    Ports default to the broker config's; 0 picks free ones. Reports `BrokerEndpoints` once both
    listen. The store is the caller's: it is used, never closed. A `broker.admin.BookieGcView`
    joins the bookies' GC explain into explain-storage and feeds
    ``magnetar_retention_bytes_awaiting_gc`` on ``/metrics``. Raises `ConfigError` when the
    broker's message size and the client's frame limit disagree (`check_message_size`).
    """
    check_message_size(broker, client)
    # The BookKeeper client and the managed ledgers run shielded, so that a shutdown does not
    # cancel them while the broker still closes its topics over them (finishing adds, persisting
    # cursors: seen hanging forever once the client's connection tasks were cancelled first).
    # They close once the broker has stopped, within STORAGE_CLOSE_TIMEOUT_S.
    storage_scope = trio.CancelScope(shield=True)
    broker_stopped = trio.Event()
    tier = TieredStorage(offload)
    client_registries: list[Any] = []  # the BookKeeper client's metrics, exported on the broker's /metrics

    async def run_storage(*, task_status: trio.TaskStatus[ManagedLedgerFactory]) -> None:
        with storage_scope:
            async with BookKeeper.open(store, root=metadata_root, config=client, transport=transport) as bk:
                client_registries.append(bk.metrics.registry)
                async with ManagedLedgerFactory(bk, store, ml, tier=tier, read_transform=stored_entry_block) as factory:
                    task_status.started(factory)
                    await broker_stopped.wait()  # then the factory closes what is still open

    async with trio.open_nursery() as outer:
        factory = await outer.start(run_storage)
        try:
            service = BrokerService(factory, store, broker)
            service.metrics.extra_registries.extend(client_registries)
            ownership = Ownership(service, store) if multi_broker else None
            service.ownership = ownership  # set before the port opens: lookups wait for registration
            # explain-storage and /metrics ask the bookies (found in the metadata store) about GC;
            # the numbers for /metrics refresh about as often as retention runs
            gc_view = BookieGcView(
                store,
                metadata_root=metadata_root,
                retention=service.retention,
                refresh_interval_s=max(1.0, min(15.0, broker.retention_check_interval_s)),
                client_factory=_bookie_http_client_factory(client),
            )
            service.metrics.gc_pending_hook = gc_view.bytes_awaiting_gc
            # httpx logs every request at INFO: the view's periodic refresh would fill the log
            logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger("httpx").level))
            async with trio.open_nursery() as nursery:
                port = await nursery.start(
                    lambda task_status: serve_broker(service, port=broker_port, task_status=task_status)
                )
                http = await nursery.start(
                    lambda task_status: serve_admin(
                        service, port=web_port, gc_explain=gc_view.explain, task_status=task_status
                    )
                )
                nursery.start_soon(gc_view.run)
                nursery.start_soon(tier.run)  # the offload / tiered-read rate gauges
                if ownership is not None:
                    await nursery.start(ownership.run)  # registers with the URLs the ports gave
                task_status.started(
                    BrokerEndpoints(
                        service.service_url,
                        service.web_service_url,
                        port,
                        http,
                        service_url_tls=service.service_url_tls,
                        web_url_tls=service.web_service_url_tls,
                    )
                )
                await trio.sleep_forever()
        finally:
            broker_stopped.set()
            storage_scope.deadline = trio.current_time() + STORAGE_CLOSE_TIMEOUT_S


def _bookie_http_client_factory(client: ClientConfig) -> Callable[[float], httpx.AsyncClient] | None:
    """How the broker reaches the bookies' REST: with the BookKeeper client's TLS settings (its CA
    and certificate) when it talks TLS to the bookies, for bookies with httpServerTlsEnable."""
    if not client.tls_enabled:
        return None
    ctx = client_context(client.tls_settings())
    return lambda timeout_s: httpx.AsyncClient(timeout=timeout_s, verify=ctx)


def _make_data_dir(data_dir: str) -> str:
    """Create ``data_dir`` (once, at start-up, before anything runs) and return its absolute path."""
    path = Path(data_dir)
    path.mkdir(parents=True, exist_ok=True)
    return str(path.resolve())


async def serve_standalone(
    config: StandaloneConfig,
    broker: BrokerConfig,
    bookie: BookieConfig,
    ml: ManagedLedgerConfig,
    client: ClientConfig,
    *,
    offload: TieredStorageConfig | None = None,
    task_status: trio.TaskStatus[StandaloneEndpoints] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run standalone Magnetar until cancelled; report `StandaloneEndpoints` once all listen.

    Bookies start first (each registers itself, so ledgers can be placed on them), then the
    broker stack. The managed ledgers' ensemble is reduced to the number of bookies. With
    ``in_process_transport`` (the default) the broker's BookKeeper client reaches these bookies
    in process (`magnetar._inprocess`), and any other bookie over the network; the bookies still
    listen on their ports for other clients (AutoRecovery, tools, another broker).
    """
    config.validate()
    check_message_size(broker, client, bookie)
    data_dir = _make_data_dir(config.data_dir)
    url = config.store_url()
    # The bookies run in a shielded scope so that a shutdown stops the broker first (closing
    # ledgers and persisting cursors needs the bookies) and only then the bookies.
    bookie_scope = trio.CancelScope(shield=True)

    async def run_bookies(*, task_status: trio.TaskStatus[list[Any]]) -> None:
        with bookie_scope:
            async with trio.open_nursery() as nursery:
                started = []
                for i in range(config.num_bookies):
                    cfg = config.bookie_config(bookie, i)
                    started.append(
                        await nursery.start(
                            lambda task_status, cfg=cfg: serve_bookie_process(cfg, task_status=task_status)
                        )
                    )
                task_status.started(started)
                await trio.sleep_forever()

    # one ZooKeeper identity for the whole process: the broker's session must be able to use
    # the nodes its bookies create (the [bookie] zkEnableSecurity and metadataStoreConfigPath keys;
    # zk:// metadata only)
    async with open_metadata_store(url, security=bookie.zk_security(), tls=bookie.zk_tls()) as store:
        async with trio.open_nursery() as outer:
            bookies = await outer.start(run_bookies)
            try:
                transport = None
                if config.in_process_transport:
                    transport = in_process_transport({b.bookie_id: b.core for b in bookies if b.core is not None})
                async with trio.open_nursery() as inner:
                    endpoints = await inner.start(
                        lambda task_status: serve_broker_stack(
                            store,
                            broker,
                            _quorum_for(ml, config.num_bookies),
                            client,
                            metadata_root=bookie.metadata_root,
                            transport=transport,
                            offload=offload,
                            task_status=task_status,
                        )
                    )
                    task_status.started(StandaloneEndpoints(endpoints, tuple(bookies), url, data_dir))
                    await trio.sleep_forever()
            finally:
                # Only now that the broker has closed its ledgers do the bookies stop.
                bookie_scope.cancel()
