"""`GcConfig`: the garbage collector's and compactor's settings, BookKeeper key names as aliases.

Units follow BookKeeper so a ``bk_server.conf`` value copies over unchanged: ``gcWaitTime`` and the
``*MaxTimeMillis`` keys in milliseconds, the compaction intervals in seconds, thresholds as
fractions of an entry log's bytes that are still live (``usage = remaining / total``).

Rules checked by `GcConfig.validate` (each raises `ConfigError` naming the key):

* thresholds are in [0, 1]; a threshold of 0 or an interval <= 0 disables that compaction kind;
* when both kinds are enabled, ``minorCompactionThreshold`` < ``majorCompactionThreshold`` and
  ``minorCompactionInterval`` < ``majorCompactionInterval`` (minor runs more often on emptier logs);
* rates are positive, wait times and periods not negative.

Rolling the current entry log early (Magnetar's keys, no BookKeeper spelling): BookKeeper leaves a
log alone until it reaches ``logSizeLimit`` (1 GiB), so data deleted from it stays on disk until
a gigabyte more was written. ``gc_roll_dead_current_log`` rolls it in a GC run when its live
share is below the threshold of the compaction that run does (or it has no live data left);
``gc_roll_current_log_after_s`` rolls it once it is that old, so a quiet bookie's log becomes
collectable at all. Default 1800 s: a current log then waits at most about 30 min plus one
``gcWaitTime`` before GC may take it, and the cost is one more (smaller) log file per ledger
directory per half hour; an age roll copies nothing by itself, compaction still only copies logs
under its thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.common.config import ConfigError, config_field, require_at_least, require_fraction, require_positive
from protocols.bookkeeper import LayoutFormatError, LedgerLayout, parse_layout_name

__all__ = ["GcConfig"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class GcConfig:
    """Settings of one bookie's GC. Build with ``magnetar.common.config.load_config(GcConfig, ...)``.

    The only declaration of the GC keys: `bookie.BookieConfig` inherits these fields, so a
    bookie's TOML table takes them flat under the same names and aliases.
    """

    gc_wait_time_ms: int = config_field(
        900_000, alias="gcWaitTime", help="Run ledger GC, dead-log deletion and (when due) compaction this often (ms)."
    )
    gc_overreplicated_ledger_wait_time_ms: int = config_field(
        86_400_000,
        alias="gcOverreplicatedLedgerWaitTime",
        help="How often to look for ledgers whose metadata no longer lists this bookie (ms).",
    )
    delete_overreplicated_ledgers: bool = config_field(
        False, help="Delete local ledgers whose (closed) metadata says this bookie is in no ensemble."
    )
    verify_metadata_on_gc: bool = config_field(
        True,
        alias="verifyMetadataOnGc",
        help="Re-read a ledger's metadata right before deleting it for not listing this bookie "
        "(the absence of deleted ledgers' metadata is always checked twice).",
    )
    minor_compaction_interval_s: int = config_field(
        3600, alias="minorCompactionInterval", help="Seconds between minor compactions (<= 0: off)."
    )
    minor_compaction_threshold: float = config_field(
        0.2,
        alias="minorCompactionThreshold",
        help="Minor compaction rewrites logs whose live share is below this (0: off); must be below "
        "majorCompactionThreshold.",
    )
    major_compaction_interval_s: int = config_field(
        86400, alias="majorCompactionInterval", help="Seconds between major compactions (<= 0: off)."
    )
    major_compaction_threshold: float = config_field(
        0.8,
        alias="majorCompactionThreshold",
        help="Major compaction rewrites logs whose live share is below this (0: off).",
    )
    minor_compaction_max_time_ms: int = config_field(
        -1, alias="minorCompactionMaxTimeMillis", help="Stop a minor compaction run after this long (<= 0: no limit)."
    )
    major_compaction_max_time_ms: int = config_field(
        -1, alias="majorCompactionMaxTimeMillis", help="Stop a major compaction run after this long (<= 0: no limit)."
    )
    compaction_rate_by_entries: int = config_field(
        1000, alias="compactionRateByEntries", help="Entries copied per second when throttling by entries."
    )
    compaction_rate_by_bytes: int = config_field(
        1_000_000,
        alias="compactionRateByBytes",
        help="Bytes per second when throttling by bytes; counts every byte compaction reads "
        "(dead entries included) and writes.",
    )
    throttle_by_bytes: bool = config_field(
        False, alias="isThrottleByBytes", help="Throttle compaction by bytes instead of entries."
    )
    error_skip_period_ms: int = config_field(
        600_000, help="After an error on an entry log, leave that log alone this long (ms)."
    )
    gc_roll_dead_current_log: bool = config_field(
        True,
        help="In a GC run, roll the current entry log when its live share is below the threshold "
        "of the compaction the run does (or it holds no live data), so its dead data goes "
        "in that run instead of after logSizeLimit more bytes.",
    )
    gc_roll_current_log_after_s: int = config_field(
        1800,
        help="In a GC run, roll a current entry log older than this many seconds so GC can "
        "reclaim it (<= 0: only logSizeLimit and gc_roll_dead_current_log roll it).",
    )
    compaction_free_space_reserve_bytes: int = config_field(
        16 * MiB,
        help="Compact a log only if its directory has this much free space beyond the "
        "log's live bytes (its output); deleting whole dead logs needs none.",
    )
    ledger_manager_factory_class: str = config_field(
        "",
        alias="ledgerManagerFactoryClass",
        help="Ledger metadata layout GC lists: hierarchical, longhierarchical or flat (or a BookKeeper "
        "factory class name); empty: the one the cluster's LAYOUT node records (hierarchical for "
        "a new cluster). A configured one must be the recorded one (checked at start).",
    )

    @property
    def ledger_layout(self) -> LedgerLayout:
        """``ledger_manager_factory_class`` as a ``LedgerLayout``, hierarchical when empty (call
        after ``validate``; the bookie sets the recorded one before GC starts)."""
        return parse_layout_name(self.ledger_manager_factory_class) or LedgerLayout.HIERARCHICAL

    @property
    def minor_enabled(self) -> bool:
        """Minor compaction runs at all (threshold and interval positive)."""
        return self.minor_compaction_threshold > 0 and self.minor_compaction_interval_s > 0

    @property
    def major_enabled(self) -> bool:
        """Major compaction runs at all (threshold and interval positive)."""
        return self.major_compaction_threshold > 0 and self.major_compaction_interval_s > 0

    def validate(self) -> None:
        """Raise `ConfigError` naming the first invalid key (module docstring rules)."""
        try:
            parse_layout_name(self.ledger_manager_factory_class)
        except LayoutFormatError as exc:
            raise ConfigError("ledger_manager_factory_class", str(exc)) from None
        require_fraction(
            self,
            "minor_compaction_threshold",
            "major_compaction_threshold",
            message="{alias} must be a fraction in [0, 1], got {value}",
        )
        if self.minor_enabled and self.major_enabled:
            if self.minor_compaction_threshold >= self.major_compaction_threshold:
                raise ConfigError(
                    "minor_compaction_threshold",
                    f"minorCompactionThreshold ({self.minor_compaction_threshold}) must be below "
                    f"majorCompactionThreshold ({self.major_compaction_threshold})",
                )
            if self.minor_compaction_interval_s >= self.major_compaction_interval_s:
                raise ConfigError(
                    "minor_compaction_interval_s",
                    f"minorCompactionInterval ({self.minor_compaction_interval_s}s) must be below "
                    f"majorCompactionInterval ({self.major_compaction_interval_s}s)",
                )
        require_positive(self, "compaction_rate_by_entries", "compaction_rate_by_bytes", "gc_wait_time_ms")
        require_at_least(
            self, "gc_overreplicated_ledger_wait_time_ms", "error_skip_period_ms", "compaction_free_space_reserve_bytes"
        )
