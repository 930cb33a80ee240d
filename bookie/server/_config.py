"""`BookieConfig`: every setting of a bookie process, with BookKeeper's key names as aliases.

Sizes keep BookKeeper's units (``journalMaxSizeMB`` in MiB, ``logSizeLimit`` in bytes) so that a
``bk_server.conf`` value can be copied over unchanged. `BookieConfig.journal_config` turns the
journal keys into the journal's own `JournalConfig` (bytes), so the two never drift apart.

The garbage collector's keys (gcWaitTime, compaction intervals and thresholds, throttling) are
declared once, in `GcConfig`: `BookieConfig` inherits them, so they are flat keys of the bookie
table with the same names, aliases and defaults; `BookieConfig.gc_config` copies them out.
`validate` is the single place for rules that span several keys (it runs the journal's and the
GC's checks too, e.g. minorCompactionThreshold must be below majorCompactionThreshold).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from magnetar.common.config import ConfigError, config_field, require_at_least, require_fraction, require_positive
from magnetar.common.tls import TlsSettings, bookkeeper_settings, server_context
from metadata import ZkSecurity, ZkTls, parse_store_url
from protocols.bookkeeper import DEFAULT_MAX_FRAME_SIZE

from ..gc import GcConfig
from ..journal import JournalConfig
from ._authz import BOOKIE_AUTHZ_FACTORY, CertificateRoleAuthorizer

__all__ = ["BookieConfig"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class BookieConfig(GcConfig):
    """Settings of one bookie. Build it with ``magnetar.common.config.load_config(BookieConfig, ...)``.

    The GC keys are `GcConfig`'s fields (inherited, so they come first in field order).
    `validate` raises `ConfigError` naming the offending key.
    """

    # ------------------------------------------------------------------ identity and endpoints
    bookie_id: str = config_field(
        "",
        alias="bookieId",
        help="The bookie's id in the metadata store and in ledger ensembles; empty means "
        "'{advertised_address}:{port}'.",
    )
    advertised_address: str = config_field(
        "127.0.0.1", alias="advertisedAddress", help="The host name or address clients use to reach this bookie."
    )
    listen_address: str = config_field(
        "0.0.0.0",
        alias="listeningInterface",
        help="Where the bookie protocol server binds: a network interface's name, as in BookKeeper (eth0: "
        "its IPv4 address), or an address or host name.",
    )
    port: int = config_field(3181, alias="bookiePort", help="Bookie protocol (TCP) port; 0 picks a free one.")
    http_enabled: bool = config_field(True, alias="httpServerEnabled", help="Serve /metrics and the REST API.")
    http_port: int = config_field(8000, alias="httpServerPort", help="HTTP port; 0 picks a free one.")
    http_address: str = config_field("0.0.0.0", alias="httpServerHost", help="Address the HTTP server binds to.")
    metadata_url: str = config_field(
        "",
        alias="metadataServiceUri",
        help="Metadata store URL: zk://host:port/chroot, embedded:///dir or memory://name; empty "
        "runs without registration or metadata cookies (tests, tools).",
    )
    metadata_root: str = config_field(
        "",
        alias="zkLedgersRootPath",
        help="Cluster root inside the store; bookies register under {root}/ledgers/available.",
    )

    # ------------------------------------------------------------------ directories
    journal_dir: str = config_field(
        "data/bookie/journal", alias="journalDirectory", help="Directory of the journal files."
    )
    journal_dirs: tuple[str, ...] = config_field(
        [],
        alias="journalDirectories",
        help="Several journal directories, each with its own journal (writer and fsync loop; a ledger "
        "goes to ledgerId % count): put them on separate disks. Empty: journalDirectory alone. The "
        "first keeps its lastMark file name, so directories may be added to an existing bookie; "
        "removing or reordering them strands the entries of their journals.",
    )
    ledger_dirs: tuple[str, ...] = config_field(
        ["data/bookie/ledgers"],
        alias="ledgerDirectories",
        help="Entry log directories (a ledger goes to ledgerId % count); comma separated on the CLI.",
    )

    # ------------------------------------------------------------------ journal
    journal_max_size_mb: int = config_field(
        2048, alias="journalMaxSizeMB", help="Roll the journal file past this many MiB."
    )
    journal_max_backups: int = config_field(
        5, alias="journalMaxBackups", help="Journal files below the LastLogMark to keep."
    )
    journal_prealloc_size_mb: int = config_field(
        16, alias="journalPreAllocSizeMB", help="Preallocate journal files in chunks of this many MiB."
    )
    journal_max_group_wait_ms: float = config_field(
        2.0, alias="journalMaxGroupWaitMSec", help="Group commit: flush once the oldest add waited this long."
    )
    journal_buffered_writes_threshold: int = config_field(
        512 * 1024,
        alias="journalBufferedWritesThreshold",
        help="Group commit: flush once this many bytes are buffered.",
    )
    journal_buffered_entries_threshold: int = config_field(
        0,
        alias="journalBufferedEntriesThreshold",
        help="Group commit: flush once this many records are buffered (0 = no limit).",
    )
    journal_flush_when_queue_empty: bool = config_field(
        True,
        alias="journalFlushWhenQueueEmpty",
        help="Write a batch as soon as the journal task finds adds waiting, instead of waiting "
        "journalMaxGroupWaitMSec. Magnetar defaults to true (BookKeeper: false): under load batches "
        "still form while the previous write and sync are in flight, and a lone add is not "
        "delayed by the group wait (single-add latency drops from ~3 ms to under 1 ms).",
    )
    journal_sync_data: bool = config_field(
        True,
        alias="journalSyncData",
        help="fdatasync before acknowledging; false acknowledges once the page cache has the data.",
    )
    journal_queue_size: int = config_field(
        10000, alias="journalQueueSize", help="Records queued and not yet written before adds wait."
    )
    journal_queue_max_mb: int = config_field(32, help="MiB queued and not yet written before adds wait.")

    # ------------------------------------------------------------------ ledger storage
    log_size_limit: int = config_field(1024 * MiB, alias="logSizeLimit", help="Roll an entry log past this many bytes.")
    write_cache_max_mb: int = config_field(
        64, alias="dbStorage_writeCacheMaxSizeMb", help="Write cache size (both halves) in MiB."
    )
    read_cache_max_mb: int = config_field(64, alias="dbStorage_readAheadCacheMaxSizeMb", help="Read cache size in MiB.")
    read_ahead_batch_size: int = config_field(
        100, alias="dbStorage_readAheadCacheBatchSize", help="Entries read ahead after a read cache miss."
    )
    max_throttle_time_ms: int = config_field(
        10_000,
        alias="dbStorage_maxThrottleTimeMs",
        help="How long an add waits for room in a full write cache before it is rejected.",
    )
    flush_interval_ms: int = config_field(
        60_000, alias="flushInterval", help="Checkpoint (flush the write cache, advance LastLogMark) this often."
    )
    entry_log_per_ledger_enabled: bool = config_field(
        False,
        alias="entryLogPerLedgerEnabled",
        help="Placement: give each ledger entry logs of its own instead of interleaving all ledgers in "
        "one current log per directory, so a deleted ledger's logs die whole and compaction "
        "copies nothing to reclaim them (bench/placement_bench.py). For few, large ledgers; "
        "at most maximumNumberOfActiveEntryLogs logs are open at once.",
    )
    maximum_number_of_active_entry_logs: int = config_field(
        500,
        alias="maximumNumberOfActiveEntryLogs",
        help="With entryLogPerLedgerEnabled: current entry logs open at once; one more rolls the least "
        "recently written.",
    )
    flush_entrylog_bytes: int = config_field(
        0,
        alias="flushEntrylogBytes",
        help="While a checkpoint writes entry logs, sync a log every this many bytes written so the "
        "device gets the write cache in bounded pieces, not in one sync at the end that the "
        "journal's fsyncs queue behind (0: one sync per checkpoint). bench/flush_entrylog_bench.py "
        "measures its effect on add latency.",
    )
    flush_pace_fraction: float = config_field(
        0.5,
        help="Spread each checkpoint of the flush loop over this fraction of the time its write-cache "
        "half took to fill (at most flushInterval), in synced 1 MiB pieces of entry-log writes, so "
        "that each journal fsync meets at most one piece of entry-log writeback on a shared disk "
        "instead of a whole checkpoint's (add p99 at 12 MB/s: 26-29 ms -> 3-5 ms, "
        "bench/flush_entrylog_bench.py). A checkpoint wanted sooner (the next half already full, an "
        "explicit flush, a ledger deletion, GC, shutdown) goes at full speed. 0 writes each "
        "checkpoint at once, as BookKeeper does.",
    )

    # ------------------------------------------------------------------ disks and read-only mode
    disk_usage_threshold: float = config_field(
        0.95, alias="diskUsageThreshold", help="A directory fuller than this turns the bookie read-only."
    )
    disk_usage_warn_threshold: float = config_field(
        0.90, alias="diskUsageWarnThreshold", help="A directory fuller than this is logged and reported."
    )
    disk_usage_lwm_threshold: float = config_field(
        0.90,
        alias="diskUsageLwmThreshold",
        help="A bookie read-only because of full disks is writable again once all are below this.",
    )
    disk_check_interval_ms: int = config_field(
        10_000, alias="diskCheckInterval", help="Check directory usage this often."
    )
    read_only_mode_enabled: bool = config_field(
        True,
        alias="readOnlyModeEnabled",
        help="Turn read-only when disks are full; false shuts the bookie down instead.",
    )

    # ------------------------------------------------------------------ requests
    max_frame_size: int = config_field(
        DEFAULT_MAX_FRAME_SIZE,
        alias="nettyMaxFrameSizeBytes",
        help="Largest request frame accepted; a larger one closes the connection. 5 MiB + 10 KiB, as Pulsar "
        "ships it, so that an entry holding a maxMessageSize message and its metadata fits; keep it "
        "equal to the clients' max_frame_size.",
    )
    max_in_flight_requests: int = config_field(
        10_000,
        alias="maxPendingAddRequestsPerThread",
        help="Requests one connection may have in progress before the server stops reading from it.",
    )
    max_in_flight_bytes: int = config_field(
        64 * MiB, help="Request bytes one connection may have in progress before the server stops reading."
    )
    num_read_worker_threads: int = config_field(
        8,
        alias="numReadWorkerThreads",
        help="Worker threads for ordinary reads that miss the caches (catch-up reads, tailing reads "
        "after a long poll); more such reads wait for a free thread.",
    )
    num_high_priority_worker_threads: int = config_field(
        8,
        alias="numHighPriorityWorkerThreads",
        help="Worker threads for high-priority reads (fencing reads and reads the client marks high "
        "priority: ledger recovery), apart from the ordinary ones so recovery never queues "
        "behind catch-up reads.",
    )
    long_poll_max_waiters: int = config_field(
        10_000, help="Long-poll reads (LAC waits) held at once; more are refused with ETOOMANYREQUESTS."
    )
    long_poll_max_timeout_ms: int = config_field(
        60_000, help="Upper bound on the timeout a long-poll read may ask for."
    )

    # ------------------------------------------------------------------ TLS (BookKeeper's keys, PEM files)
    tls_enabled: bool = config_field(
        False,
        help="Serve the bookie protocol over TLS only (BookKeeper turns TLS on by naming a "
        "tlsProviderFactoryClass and upgrades in-band; Magnetar's bookie port is then TLS-only, "
        "so every client must use TLS too).",
    )
    tls_client_authentication: bool = config_field(
        False,
        alias="tlsClientAuthentication",
        help="Refuse clients without a certificate trusted by tlsTrustStore (mutual TLS): a stranger "
        "cannot then read, fence or overwrite entries.",
    )
    http_server_tls_enable: bool = config_field(
        False,
        alias="httpServerTlsEnable",
        help="Serve the REST API and /metrics over https with the same certificate (and client "
        "authentication rule) as the bookie port.",
    )
    tls_key_store_type: str = config_field(
        "PEM", alias="tlsKeyStoreType", help="Format of tlsKeyStore; only PEM is supported."
    )
    tls_key_store: str = config_field("", alias="tlsKeyStore", help="PEM private key of tlsCertificatePath.")
    tls_certificate_path: str = config_field(
        "", alias="tlsCertificatePath", help="PEM certificate (chain) presented to the other side."
    )
    tls_trust_store_type: str = config_field(
        "PEM", alias="tlsTrustStoreType", help="Format of tlsTrustStore; only PEM is supported."
    )
    tls_trust_store: str = config_field(
        "", alias="tlsTrustStore", help="PEM CA certificates the other side's certificate must chain to."
    )
    tls_enabled_protocols: tuple[str, ...] = config_field(
        (), alias="tlsEnabledProtocols", help='TLS versions allowed, e.g. ["TLSv1.3"]; empty = defaults.'
    )
    tls_enabled_cipher_suites: tuple[str, ...] = config_field(
        (), alias="tlsEnabledCipherSuites", help="OpenSSL cipher names allowed for TLS 1.2; empty = defaults."
    )
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
    bookie_auth_provider_factory_class: str = config_field(
        "",
        alias="bookieAuthProviderFactoryClass",
        help="org.apache.bookkeeper.tls.BookieAuthZFactory: admit only TLS clients whose certificate "
        "carries one of authorizedRoles (needs tlsClientAuthentication); empty = any trusted client.",
    )
    authorized_roles: tuple[str, ...] = config_field(
        (),
        alias="authorizedRoles",
        help="Roles admitted by BookieAuthZFactory, matched against section 0 of the client "
        'certificate\'s OU (OU=0:role1,role2;1:cluster), e.g. ["pulsar-broker"].',
    )

    # ------------------------------------------------------------------ derived values

    @property
    def effective_bookie_id(self) -> str:
        """``bookie_id``, or ``advertised_address:port`` when it is empty."""
        return self.bookie_id or f"{self.advertised_address}:{self.port}"

    def journal_config(self) -> JournalConfig:
        """The journal's settings in the journal's units (bytes)."""
        return JournalConfig(
            max_file_size=self.journal_max_size_mb * MiB,
            max_backups=self.journal_max_backups,
            prealloc_size=self.journal_prealloc_size_mb * MiB,
            max_group_wait_ms=self.journal_max_group_wait_ms,
            buffered_writes_threshold=self.journal_buffered_writes_threshold,
            buffered_entries_threshold=self.journal_buffered_entries_threshold,
            flush_when_queue_empty=self.journal_flush_when_queue_empty,
            sync_data=self.journal_sync_data,
            queue_max_entries=self.journal_queue_size,
            queue_max_bytes=self.journal_queue_max_mb * MiB,
        )

    @property
    def journal_directories(self) -> tuple[str, ...]:
        """The journal directories in use: ``journal_dirs``, or ``journal_dir`` alone."""
        return tuple(self.journal_dirs) or (self.journal_dir,)

    def gc_config(self) -> GcConfig:
        """The garbage collector's settings alone (the inherited GC keys, same names and units)."""
        return GcConfig(**{f.name: getattr(self, f.name) for f in fields(GcConfig)})

    def tls_settings(self) -> TlsSettings:
        """The TLS keys as `magnetar.common.tls.TlsSettings` (errors name BookKeeper's keys)."""
        return bookkeeper_settings(self, client_auth=self.tls_client_authentication)

    def zk_security(self) -> ZkSecurity | None:
        """The ZooKeeper digest credential to open the metadata store with (None: security off)."""
        return ZkSecurity.from_config(self.zk_enable_security, self.zk_digest_credentials)

    def zk_tls(self) -> ZkTls | None:
        """TLS to ZooKeeper from ``metadataStoreConfigPath`` (None: plain); `ConfigError` names the key."""
        return ZkTls.from_config_file(self.metadata_store_config_path)

    def role_authorizer(self) -> CertificateRoleAuthorizer | None:
        """The certificate-role check of ``bookieAuthProviderFactoryClass``, None when it is off."""
        if not self.bookie_auth_provider_factory_class:
            return None
        return CertificateRoleAuthorizer.of(self.authorized_roles)

    def _validate_authorization(self) -> None:
        factory = self.bookie_auth_provider_factory_class
        if not factory:
            return
        if factory != BOOKIE_AUTHZ_FACTORY:
            raise ConfigError(
                "bookieAuthProviderFactoryClass",
                f"{factory!r} is not supported (only {BOOKIE_AUTHZ_FACTORY}, or empty)",
            )
        if not self.tls_enabled or not self.tls_client_authentication:
            raise ConfigError(
                "bookieAuthProviderFactoryClass",
                "BookieAuthZFactory checks client certificates: it needs tls_enabled and tlsClientAuthentication",
            )
        if not [r for r in self.authorized_roles if r.strip()]:
            raise ConfigError("authorizedRoles", "BookieAuthZFactory needs at least one role to admit")

    def validate(self) -> None:
        """Raise `ConfigError` naming the first invalid key (single values, then cross-key rules)."""
        if self.tls_enabled or self.http_server_tls_enable:
            server_context(self.tls_settings())  # the files exist and hold a key pair, or an error names the key
        self._validate_authorization()
        self.zk_security()
        self.zk_tls()
        for name in ("port", "http_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ConfigError(name, "must be a TCP port (0-65535)")
        if not self.journal_dir:
            raise ConfigError("journal_dir", "must not be empty")
        if len({os.path.abspath(d) for d in self.journal_directories}) != len(self.journal_directories):
            raise ConfigError("journal_dirs", "the journal directories must be distinct")
        if not self.ledger_dirs:
            raise ConfigError("ledger_dirs", "needs at least one directory")
        if len(set(self.ledger_dirs)) != len(self.ledger_dirs):
            raise ConfigError("ledger_dirs", "lists a directory twice")
        if self.metadata_url:
            try:
                parse_store_url(self.metadata_url)
            except ValueError as exc:
                raise ConfigError("metadata_url", str(exc)) from None
        require_positive(
            self,
            "journal_max_size_mb",
            "journal_prealloc_size_mb",
            "journal_buffered_writes_threshold",
            "journal_queue_size",
            "journal_queue_max_mb",
            "log_size_limit",
            "write_cache_max_mb",
            "disk_check_interval_ms",
            "max_frame_size",
            "max_in_flight_requests",
            "max_in_flight_bytes",
            "long_poll_max_waiters",
            "num_read_worker_threads",
            "num_high_priority_worker_threads",
            "maximum_number_of_active_entry_logs",
        )
        require_at_least(
            self,
            "journal_max_backups",
            "journal_max_group_wait_ms",
            "journal_buffered_entries_threshold",
            "read_cache_max_mb",
            "read_ahead_batch_size",
            "max_throttle_time_ms",
            "flush_interval_ms",
            "long_poll_max_timeout_ms",
            "flush_entrylog_bytes",
        )
        if self.log_size_limit < 4096:
            raise ConfigError("log_size_limit", "must be at least 4096 bytes (header plus one record)")
        require_fraction(
            self, "disk_usage_threshold", "disk_usage_warn_threshold", "disk_usage_lwm_threshold", zero_ok=False
        )
        require_fraction(self, "flush_pace_fraction")
        if self.disk_usage_warn_threshold > self.disk_usage_threshold:
            raise ConfigError("disk_usage_warn_threshold", "must not exceed disk_usage_threshold (diskUsageThreshold)")
        if self.disk_usage_lwm_threshold > self.disk_usage_threshold:
            raise ConfigError("disk_usage_lwm_threshold", "must not exceed disk_usage_threshold (diskUsageThreshold)")
        if self.max_in_flight_bytes < self.max_frame_size:
            raise ConfigError(
                "max_in_flight_bytes", "must be at least max_frame_size, or a large request could never be read"
            )
        try:
            self.journal_config().validate()
        except ConfigError as exc:
            raise ConfigError(f"journal ({exc.key})", exc.reason) from None
        # the GC keys are inherited under the same names, so its errors already name the right key
        super().validate()
