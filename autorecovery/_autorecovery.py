"""The AutoRecovery process: an auditor candidate and N replication workers in one nursery.

    async with trio.open_nursery() as nursery:
        ar = await nursery.start(run_autorecovery, "zk://127.0.0.1:2181", "/magnetar", AutoRecoveryConfig())

``run_autorecovery`` opens its own metadata session (as BookKeeper's AutoRecoveryMain has its own
ZooKeeper client), so it runs standalone (``magnetar autorecovery``) or inside a bookie process
next to the bookie's session. ``AutoRecovery.run`` does the same on a store the caller opened.
Everything stops when the task is cancelled: workers release their locks, the auditor vote is
withdrawn, bookie connections close.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import trio
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from bk_client import BookKeeper, ClientConfig, ClientMetrics, LedgerManager
from magnetar.common.config import ConfigError, config_field
from metadata import MetadataStore, ZkSecurity, ZkTls, open_metadata_store

from ._auditor import Auditor, AuditorElection
from ._replication import RateLimiter, ReplicationWorker, RetryTable
from ._underreplication import UnderReplicationManager

__all__ = ["AutoRecovery", "AutoRecoveryConfig", "AutoRecoveryMetrics", "run_autorecovery"]


@dataclass(frozen=True)
class AutoRecoveryConfig:
    """Settings of an AutoRecovery process (BookKeeper's names where the unit is the same).

    ``validate()`` (run on construction) raises ``ConfigError`` naming the offending key.
    """

    auditor_enabled: bool = config_field(
        True, help="take part in the auditor election (false: replication workers only)"
    )
    lost_bookie_recovery_delay_s: float = config_field(
        0.0,
        alias="lostBookieRecoveryDelay",
        help="seconds a bookie must stay gone before its ledgers are marked under-replicated (0: at once)",
    )
    auditor_periodic_check_interval_s: float = config_field(
        604800.0,
        alias="auditorPeriodicCheckInterval",
        help="seconds between full scans of all ledgers for lost replicas (0: never)",
    )
    replication_workers: int = config_field(
        1, help="replication workers in this process (each repairs one ledger at a time)"
    )
    rereplication_entry_batch_size: int = config_field(
        64, alias="rereplicationEntryBatchSize", help="entries one worker copies at the same time"
    )
    replication_rate_limit: float = config_field(
        0.0, help="entries per second this process copies at most (0: unlimited)"
    )
    open_ledger_rereplication_grace_period_s: float = config_field(
        30.0,
        help="seconds an open ledger's last fragment is left to its writer before the worker "
        "fences and recovers the ledger to repair it",
    )
    poll_interval_s: float = config_field(1.0, help="seconds between looks for ledgers marked by other processes")
    retry_backoff_min_s: float = config_field(1.0, help="first delay before retrying a ledger whose repair failed")
    retry_backoff_max_s: float = config_field(60.0, help="longest delay between retries of one ledger")
    identity: str = config_field("", help="name written in the auditor vote and ledger locks (default host:pid)")
    zk_enable_security: bool = config_field(
        False,
        alias="zkEnableSecurity",
        help="Authenticate to ZooKeeper with zkDigestCredentials and create every node with the ACL "
        "CREATOR_ALL (only that credential may read, change or delete it); every component of "
        "the cluster must use the same credential.",
    )
    zk_digest_credentials: str = config_field(
        "",
        alias="zkDigestCredentials",
        help="ZooKeeper digest credential user:password, or file:/path to a file holding it.",
    )
    metadata_store_config_path: str = config_field(
        "",
        alias="metadataStoreConfigPath",
        help="ZooKeeper client configuration file, as Pulsar's metadataStoreConfigPath: with "
        "zookeeper.client.secure=true the ZooKeeper session uses TLS (zookeeper.ssl.keyStore.location: this "
        "client's key and certificate; zookeeper.ssl.trustStore.location: the CA; PEM files). '' = plain.",
    )

    def __post_init__(self) -> None:
        self.validate()

    def zk_security(self) -> ZkSecurity | None:
        """The ZooKeeper digest credential to open the metadata store with (None: security off)."""
        return ZkSecurity.from_config(self.zk_enable_security, self.zk_digest_credentials)

    def zk_tls(self) -> ZkTls | None:
        """TLS to ZooKeeper from ``metadataStoreConfigPath`` (None: plain); `ConfigError` names the key."""
        return ZkTls.from_config_file(self.metadata_store_config_path)

    def validate(self) -> None:
        """Check every value; ``ConfigError(key, message)`` on the first bad one."""
        for key in (
            "lost_bookie_recovery_delay_s",
            "auditor_periodic_check_interval_s",
            "replication_rate_limit",
            "open_ledger_rereplication_grace_period_s",
        ):
            if getattr(self, key) < 0:
                raise ConfigError(key, "must be >= 0")
        for key in ("poll_interval_s", "retry_backoff_min_s"):
            if getattr(self, key) <= 0:
                raise ConfigError(key, "must be > 0")
        if self.retry_backoff_max_s < self.retry_backoff_min_s:
            raise ConfigError("retry_backoff_max_s", "must be >= retry_backoff_min_s")
        if self.replication_workers < 0:
            raise ConfigError("replication_workers", "must be >= 0")
        if self.rereplication_entry_batch_size < 1:
            raise ConfigError("rereplication_entry_batch_size", "must be >= 1")
        self.zk_security()
        self.zk_tls()


def default_identity() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


class AutoRecovery:
    """One AutoRecovery process on an open metadata store (see the module docstring).

    ``auditor`` is the auditor this process runs while elected; ``election`` is None when
    ``auditor_enabled`` is false. ``workers`` are the replication workers.
    """

    def __init__(
        self,
        store: MetadataStore,
        root: str = "",
        config: AutoRecoveryConfig | None = None,
        *,
        client_config: ClientConfig | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = cfg = config or AutoRecoveryConfig()
        self.identity = cfg.identity or default_identity()
        self.store = store
        self.root = root
        self.client_config = client_config or ClientConfig()
        self.ledgers = LedgerManager(store, root, layout=self.client_config.ledger_layout)
        self.under_replication = UnderReplicationManager(store, root, identity=self.identity)
        self.auditor = Auditor(
            store,
            root,
            lost_bookie_recovery_delay_s=cfg.lost_bookie_recovery_delay_s,
            periodic_check_interval_s=cfg.auditor_periodic_check_interval_s,
            ledgers=self.ledgers,
            under_replication=self.under_replication,
        )
        self.election = AuditorElection(store, root, identity=self.identity) if cfg.auditor_enabled else None
        self.workers: list[ReplicationWorker] = []
        self.client_metrics = ClientMetrics()
        self.metrics = AutoRecoveryMetrics(self, registry)

    async def run(self, *, task_status: trio.TaskStatus[AutoRecovery] = trio.TASK_STATUS_IGNORED) -> None:
        """Vote for auditor and run the workers until cancelled; ``task_status.started(self)``
        once the vote is cast and the workers run. The workers share one ``bk_client.BookKeeper``
        client on ``store`` (settings ``client_config``, metrics ``client_metrics``), closed
        before the ledger locks are released on exit. Raises what the store raises while
        starting."""
        cfg = self.config
        await self.ledgers.ensure_layout()  # the auditor walks the layout the cluster records
        async with (
            BookKeeper.open(
                self.store, root=self.root, config=self.client_config, metrics=self.client_metrics
            ) as client,
            trio.open_nursery() as nursery,
        ):
            rate = RateLimiter(cfg.replication_rate_limit)
            retry = RetryTable(min_s=cfg.retry_backoff_min_s, max_s=cfg.retry_backoff_max_s)
            self.workers = [
                ReplicationWorker(
                    client,
                    self.under_replication,
                    rate_limiter=rate,
                    retry=retry,
                    max_entries_in_flight=cfg.rereplication_entry_batch_size,
                    poll_interval_s=cfg.poll_interval_s,
                    open_ledger_grace_period_s=cfg.open_ledger_rereplication_grace_period_s,
                    name=f"{self.identity}/worker-{i}",
                )
                for i in range(cfg.replication_workers)
            ]
            try:
                if self.election is not None:
                    await nursery.start(self.election.run, self.auditor.run)
                for worker in self.workers:
                    await nursery.start(worker.run)
                task_status.started(self)
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await client.close()  # bookie requests in flight fail before the locks go
                    await self.under_replication.release_all()
                nursery.cancel_scope.cancel()

    @property
    def is_auditor(self) -> bool:
        """True while this process is the elected auditor."""
        return self.election is not None and self.election.is_leader


async def run_autorecovery(
    store_url: str,
    root: str = "",
    config: AutoRecoveryConfig | None = None,
    *,
    client_config: ClientConfig | None = None,
    registry: CollectorRegistry | None = None,
    task_status: trio.TaskStatus[AutoRecovery] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Open a metadata session on ``store_url`` and run AutoRecovery under ``root`` until
    cancelled; ``task_status.started`` gets the ``AutoRecovery``. Raises ``ValueError`` for a bad
    URL and the store's errors while connecting."""
    security = config.zk_security() if config is not None else None
    tls = config.zk_tls() if config is not None else None
    async with open_metadata_store(store_url, security=security, tls=tls) as store:
        ar = AutoRecovery(store, root, config, client_config=client_config, registry=registry)
        await ar.run(task_status=task_status)


class AutoRecoveryMetrics:
    """Prometheus view of an ``AutoRecovery``'s auditor and workers, read from their
    ``statistics()`` at scrape time (names after BookKeeper's auditor / replication worker
    stats). Registered on ``registry`` or a fresh one (``.registry``)."""

    def __init__(self, ar: AutoRecovery, registry: CollectorRegistry | None = None) -> None:
        self._ar = ar
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(self)

    def describe(self) -> list[Metric]:
        """The metric families (prometheus-client calls this once, on registration)."""
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        """Current values, read from the auditor's and workers' ``statistics()``."""
        ar = self._ar
        a = ar.auditor.statistics()
        yield GaugeMetricFamily(
            "auditor_IS_AUDITOR", "1 while this process is the elected auditor", value=1.0 if ar.is_auditor else 0.0
        )
        yield CounterMetricFamily(
            "auditor_NUM_UNDER_REPLICATED_LEDGERS",
            "Ledgers marked under-replicated by this auditor",
            value=a.ledgers_marked,
        )
        yield CounterMetricFamily(
            "auditor_NUM_LOST_BOOKIES", "Bookies declared lost after their grace period", value=a.lost_bookies
        )
        yield GaugeMetricFamily(
            "auditor_NUM_BOOKIE_AUDITS_DELAYED",
            "Gone bookies waiting for their grace period or an audit",
            value=a.pending_bookies,
        )
        yield CounterMetricFamily("auditor_AUDIT_BOOKIES", "Audits of lost bookies", value=a.audits)
        yield CounterMetricFamily(
            "auditor_AUDIT_TIME_SECONDS", "Time spent in audits and full checks", value=a.audit_time_s
        )
        yield CounterMetricFamily("auditor_CHECK_ALL_LEDGERS", "Periodic full checks", value=a.full_checks)
        yield CounterMetricFamily(
            "auditor_NUM_LEDGERS_CHECKED", "Ledgers read by periodic full checks", value=a.ledgers_checked
        )
        stats = [w.statistics() for w in ar.workers]
        for name, help_text, field in (
            (
                "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED",
                "Ledgers fully repaired",
                "ledgers_replicated",
            ),
            (
                "replication_worker_NUM_DEFERRED_LEDGERS",
                "Repairs deferred (open ledger's last fragment)",
                "ledgers_deferred",
            ),
            ("replication_worker_REREPLICATE_FAILURES", "Repairs that failed and will be retried", "failures"),
            ("replication_worker_NUM_FRAGMENTS_REPLICATED", "Fragments copied and installed", "fragments_replicated"),
            ("replication_worker_NUM_ENTRIES_WRITTEN", "Entries copied to replacement bookies", "entries_copied"),
            ("replication_worker_NUM_BYTES_WRITTEN", "Bytes written to replacement bookies", "bytes_copied"),
            (
                "replication_worker_NUM_OPEN_LEDGERS_RECOVERED",
                "Open ledgers fenced and closed to repair them",
                "open_ledgers_recovered",
            ),
            ("replication_worker_REREPLICATE_TIME_SECONDS", "Time spent repairing ledgers", "replicate_time_s"),
        ):
            yield CounterMetricFamily(name, help_text, value=sum(getattr(s, field) for s in stats))
