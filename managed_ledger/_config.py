"""`ManagedLedgerConfig`: the managed ledger's settings, with Pulsar's broker.conf names as aliases.

Time fields keep the unit of their Pulsar alias (a TOML ``managedLedgerMinLedgerRolloverTimeMinutes
= 10`` means ten minutes, as in broker.conf); the ``*_s`` properties give every duration in seconds
for the code.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.common.config import ConfigError, config_field, require_at_least, require_positive
from protocols.bookkeeper import DigestType

__all__ = ["ManagedLedgerConfig"]

_MB = 1024 * 1024
# Pulsar's names (BookKeeper's client DigestType: MAC, CRC32, CRC32C, DUMMY); HMAC is the metadata's
_DIGEST_TYPES = {
    "CRC32C": DigestType.CRC32C,
    "CRC32": DigestType.CRC32,
    "MAC": DigestType.HMAC,
    "HMAC": DigestType.HMAC,
    "DUMMY": DigestType.DUMMY,
}


@dataclass(frozen=True)
class ManagedLedgerConfig:
    """Settings of every managed ledger a factory opens. ``validate()`` raises `ConfigError`."""

    ensemble_size: int = config_field(
        2, alias="managedLedgerDefaultEnsembleSize", help="bookies each ledger is striped over"
    )
    write_quorum: int = config_field(2, alias="managedLedgerDefaultWriteQuorum", help="copies written of each entry")
    ack_quorum: int = config_field(2, alias="managedLedgerDefaultAckQuorum", help="acks needed before an add completes")
    max_entries_per_ledger: int = config_field(
        50000, alias="managedLedgerMaxEntriesPerLedger", help="roll to a new ledger after this many entries"
    )
    max_size_per_ledger_mb: int = config_field(
        2048, alias="managedLedgerMaxSizePerLedgerMbytes", help="roll to a new ledger after this many MB"
    )
    min_ledger_rollover_time_minutes: float = config_field(
        10.0,
        alias="managedLedgerMinLedgerRolloverTimeMinutes",
        help="a ledger is never rolled (for size, entries or time) younger than this",
    )
    max_ledger_rollover_time_minutes: float = config_field(
        240.0, alias="managedLedgerMaxLedgerRolloverTimeMinutes", help="roll a non-empty ledger once it is this old"
    )
    inactive_ledger_rollover_time_s: float = config_field(
        0.0,
        alias="managedLedgerInactiveLedgerRolloverTimeSeconds",
        help="roll a non-empty ledger that had no add for this long (0 = never)",
    )
    cursor_persist_interval_s: float = config_field(
        60.0,
        alias="managedLedgerCursorPositionFlushSeconds",
        help="how often changed cursor positions are written to the metadata store",
    )
    max_unacked_ranges_to_persist: int = config_field(
        10000,
        alias="managedLedgerMaxUnackedRangesToPersist",
        help="acked ranges persisted per cursor; beyond it only the first ranges are kept",
    )
    cache_size_mb: float = config_field(
        64.0, alias="managedLedgerCacheSizeMB", help="bytes of entries cached for tailing reads, per factory"
    )
    password: str = config_field(
        "",
        alias="managedLedgerPassword",
        help="password of the ledgers managed ledgers create (the bookies' master key derives from it); "
        "'' keeps the old default: set a secret in a cluster. Ledgers written with '' stay readable "
        "after it is set",
    )
    digest_type: str = config_field(
        "CRC32C",
        alias="managedLedgerDigestType",
        help="checksum of the entries of new ledgers: CRC32C, CRC32, MAC (BookKeeper's HMAC-SHA1 keyed by the "
        "password) or DUMMY (none). Recorded per ledger, so ledgers written with another type stay "
        "readable after a change",
    )
    max_pending_add_bytes: int = config_field(
        16 * _MB, help="bytes of adds in flight per managed ledger; further adds wait"
    )
    max_open_read_handles: int = config_field(16, help="read handles on closed ledgers kept open per managed ledger")
    rollover_check_interval_s: float = config_field(10.0, help="how often the time-based rollover rules are checked")

    def validate(self) -> None:
        """Raise `ConfigError` naming the key when a value or a combination is invalid."""
        if self.ack_quorum < 1:
            raise ConfigError("ack_quorum", "must be at least 1")
        if self.write_quorum < self.ack_quorum:
            raise ConfigError("write_quorum", "must be at least ack_quorum")
        if self.ensemble_size < self.write_quorum:
            raise ConfigError("ensemble_size", "must be at least write_quorum")
        require_at_least(
            self,
            "max_entries_per_ledger",
            "max_size_per_ledger_mb",
            "max_unacked_ranges_to_persist",
            "max_pending_add_bytes",
            "max_open_read_handles",
            minimum=1,
        )
        require_at_least(
            self,
            "min_ledger_rollover_time_minutes",
            "max_ledger_rollover_time_minutes",
            "inactive_ledger_rollover_time_s",
            "cache_size_mb",
        )
        if self.min_ledger_rollover_time_minutes > self.max_ledger_rollover_time_minutes:
            raise ConfigError("min_ledger_rollover_time_minutes", "must not exceed max_ledger_rollover_time_minutes")
        require_positive(self, "cursor_persist_interval_s", "rollover_check_interval_s")
        if self.digest_type.upper() not in _DIGEST_TYPES:
            raise ConfigError(
                "digest_type", f"must be one of {', '.join(sorted(_DIGEST_TYPES))}, got {self.digest_type!r}"
            )

    @property
    def ledger_password(self) -> bytes:
        """``password`` as the bytes BookKeeper takes."""
        return self.password.encode("utf-8")

    @property
    def ledger_digest_type(self) -> DigestType:
        """``digest_type`` as the ledger metadata's enum (call after ``validate``: ``KeyError``
        for an unknown name)."""
        return _DIGEST_TYPES[self.digest_type.upper()]

    @property
    def read_passwords(self) -> tuple[bytes, ...]:
        """The passwords ledgers are opened with, in order: ``password``, then the legacy empty one
        (ledgers created before ``managedLedgerPassword`` was set)."""
        return (self.ledger_password, b"") if self.password else (b"",)

    @property
    def minimum_rollover_time_s(self) -> float:
        """``min_ledger_rollover_time_minutes`` in seconds."""
        return self.min_ledger_rollover_time_minutes * 60.0

    @property
    def maximum_rollover_time_s(self) -> float:
        """``max_ledger_rollover_time_minutes`` in seconds."""
        return self.max_ledger_rollover_time_minutes * 60.0

    @property
    def max_size_per_ledger_bytes(self) -> int:
        """``max_size_per_ledger_mb`` in bytes."""
        return self.max_size_per_ledger_mb * _MB

    @property
    def cache_size_bytes(self) -> int:
        """``cache_size_mb`` in bytes."""
        return int(self.cache_size_mb * _MB)
