"""Settings of the BookKeeper client (one frozen dataclass, loadable with ``magnetar.common.config``).

Names follow BookKeeper's client configuration; the alias is the BookKeeper key only where the
unit is the same (BookKeeper gives some times in milliseconds, Magnetar always in seconds).
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.common.config import ConfigError, config_field, require_at_least, require_positive
from magnetar.common.tls import TlsSettings, bookkeeper_settings, client_context
from protocols.bookkeeper import DEFAULT_MAX_FRAME_SIZE, LayoutFormatError, LedgerLayout, parse_layout_name

__all__ = ["ClientConfig"]


@dataclass(frozen=True)
class ClientConfig:
    """Timeouts, in-flight bounds and placement of a ``BookKeeper`` client.

    ``validate()`` (run on construction) raises ``ConfigError`` naming the offending key.
    """

    add_entry_timeout_s: float = config_field(
        5.0,
        alias="addEntryTimeoutSec",
        help="a bookie that has not answered an add within this time is treated as failed (ensemble change)",
    )
    read_entry_timeout_s: float = config_field(
        5.0,
        alias="readEntryTimeoutSec",
        help="a read unanswered by a bookie within this time moves on to the next replica",
    )
    speculative_read_timeout_s: float = config_field(
        0.5,
        help="after this time without an answer a read is also sent to the next replica (0 disables speculative reads)",
    )
    connect_timeout_s: float = config_field(5.0, help="TCP connect timeout to a bookie")
    reconnect_backoff_min_s: float = config_field(
        0.1, help="first delay before reconnecting to a bookie whose connection failed"
    )
    reconnect_backoff_max_s: float = config_field(5.0, help="longest delay between reconnect attempts to one bookie")
    max_pending_requests_per_bookie: int = config_field(
        100_000, help="requests waiting for an answer on one connection; more fail with TooManyRequests"
    )
    max_in_flight_adds: int = config_field(
        10_000, help="adds of one ledger handle sent but not yet acknowledged; more wait"
    )
    max_in_flight_bytes: int = config_field(
        64 * 1024 * 1024, help="payload bytes of one ledger handle in flight; more adds wait"
    )
    max_read_window: int = config_field(
        1024, help="entries of one read(first, last) requested from bookies at the same time"
    )
    bookie_quarantine_time_s: float = config_field(
        10.0,
        alias="bookieQuarantineTimeSeconds",
        help="a bookie that failed a write (unreachable, timed out, refused) is kept out of new ledgers and "
        "ensemble changes this long; with too few other bookies, creating a ledger fails (storage "
        "unavailable) instead of placing it on the failed bookie again (0 disables the quarantine)",
    )
    ensemble_change_retries: int = config_field(
        5, help="metadata compare-and-set attempts per ensemble change before the handle fails"
    )
    recovery_timeout_s: float = config_field(
        30.0, help="upper bound on fencing / reading LAC during open with recovery"
    )
    long_poll_max_s: float = config_field(10.0, help="longest time a bookie is asked to hold a long-poll LAC read")
    rack_aware_placement: bool = config_field(True, help="spread ensembles over racks when bookies carry rack labels")
    explicit_lac_interval_ms: int = config_field(
        0,
        alias="explicitLacInterval",
        help="when a writer has sent no add for this long and its last acknowledged entry's LAC "
        "was never piggybacked on an add, send it to the ensemble with WRITE_LAC so tailing "
        "readers see that entry (0 disables explicit LAC)",
    )
    max_frame_size: int = config_field(
        DEFAULT_MAX_FRAME_SIZE,
        alias="nettyMaxFrameSizeBytes",
        help="largest frame sent or accepted (5 MiB + 10 KiB, as Pulsar ships it; keep it equal to the "
        "bookies'): an add whose frame would be larger fails at once with EntryTooLarge",
    )

    # TLS to the bookies (BookKeeper's keys, PEM files)
    tls_enabled: bool = config_field(
        False,
        help="Connect to the bookies over TLS (they must have tls_enabled); BookKeeper turns this on "
        "by naming a tlsProviderFactoryClass. The bookie's certificate is checked against "
        "tlsTrustStore (not its host name: bookie ids are often addresses).",
    )
    tls_key_store_type: str = config_field(
        "PEM", alias="tlsKeyStoreType", help="Format of tlsKeyStore; only PEM is supported."
    )
    tls_key_store: str = config_field("", alias="tlsKeyStore", help="PEM private key of tlsCertificatePath.")
    tls_certificate_path: str = config_field(
        "",
        alias="tlsCertificatePath",
        help="PEM certificate (chain) presented to bookies that require client authentication.",
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

    ledger_manager_factory_class: str = config_field(
        "",
        alias="ledgerManagerFactoryClass",
        help="Ledger metadata layout, as BookKeeper names them: hierarchical (BookKeeper's default: "
        "10-digit paths below 2^31-1, 19-digit ones above), longhierarchical (19-digit paths for "
        "every id) or flat (every ledger a child of one node: few ledgers), or the factory class. "
        "Empty: the one the cluster's LAYOUT node records (hierarchical for a new cluster). The "
        "first client or bookie records it; a configured one must match the record.",
    )

    def __post_init__(self) -> None:
        self.validate()

    @property
    def ledger_layout(self) -> LedgerLayout | None:
        """``ledger_manager_factory_class`` as a ``LedgerLayout``; None to follow the cluster's
        record (validated at construction)."""
        return parse_layout_name(self.ledger_manager_factory_class)

    def tls_settings(self) -> TlsSettings:
        """The TLS keys as `magnetar.common.tls.TlsSettings` (errors name BookKeeper's keys)."""
        return bookkeeper_settings(self)

    def validate(self) -> None:
        """Check every value; ``ConfigError(key, message)`` on the first bad one."""
        require_positive(
            self,
            "add_entry_timeout_s",
            "read_entry_timeout_s",
            "connect_timeout_s",
            "reconnect_backoff_min_s",
            "reconnect_backoff_max_s",
            "recovery_timeout_s",
            "long_poll_max_s",
            message="must be > 0",
        )
        if self.tls_enabled:
            client_context(self.tls_settings())  # the files exist and hold a key pair, or an error names the key
        require_at_least(self, "explicit_lac_interval_ms", message="must be >= 0 (0 disables explicit LAC)")
        require_at_least(self, "bookie_quarantine_time_s", message="must be >= 0 (0 disables the quarantine)")
        require_at_least(self, "speculative_read_timeout_s", message="must be >= 0")
        if self.reconnect_backoff_max_s < self.reconnect_backoff_min_s:
            raise ConfigError("reconnect_backoff_max_s", "must be >= reconnect_backoff_min_s")
        try:
            parse_layout_name(self.ledger_manager_factory_class)
        except LayoutFormatError as exc:
            raise ConfigError("ledger_manager_factory_class", str(exc)) from None
        require_at_least(
            self,
            "max_pending_requests_per_bookie",
            "max_in_flight_adds",
            "max_in_flight_bytes",
            "max_read_window",
            "ensemble_change_retries",
            "max_frame_size",
            minimum=1,
            message="must be >= 1",
        )
