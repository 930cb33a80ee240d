"""Settings of the bookie journal (BookKeeper names as aliases where the unit is the same)."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.common.config import ConfigError, config_field

__all__ = ["JournalConfig"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class JournalConfig:
    """Journal tuning. Sizes are in bytes (BookKeeper's ``journalMaxSizeMB`` x 1 MiB and so on).

    `validate` raises `ConfigError` for out-of-range or inconsistent values.
    """

    max_file_size: int = config_field(
        2048 * MiB,
        help="Roll to a new journal file once the current one passes this many bytes (journalMaxSizeMB x 1 MiB).",
    )
    max_backups: int = config_field(
        5,
        alias="journalMaxBackups",
        help="Journal files wholly below the persisted LastLogMark to keep; older ones are deleted.",
    )
    prealloc_size: int = config_field(
        16 * MiB, help="Grow journal files in chunks of this many bytes (journalPreAllocSizeMB x 1 MiB)."
    )
    max_group_wait_ms: float = config_field(
        2.0, alias="journalMaxGroupWaitMSec", help="Flush a batch once its oldest record has waited this long."
    )
    buffered_writes_threshold: int = config_field(
        512 * 1024, alias="journalBufferedWritesThreshold", help="Flush a batch once it holds this many bytes."
    )
    buffered_entries_threshold: int = config_field(
        0, alias="journalBufferedEntriesThreshold", help="Flush a batch once it holds this many records (0 = no limit)."
    )
    flush_when_queue_empty: bool = config_field(
        False,
        alias="journalFlushWhenQueueEmpty",
        help="Flush as soon as no more records are queued instead of waiting for the group wait.",
    )
    sync_data: bool = config_field(
        True,
        alias="journalSyncData",
        help="Acknowledge only after fdatasync; false acknowledges once the page cache has the data.",
    )
    queue_max_entries: int = config_field(
        10000, alias="journalQueueSize", help="Records queued and not yet written before adds wait."
    )
    queue_max_bytes: int = config_field(32 * MiB, help="Bytes queued and not yet written before adds wait.")
    force_write_queue_max: int = config_field(64, help="Written batches waiting for fdatasync before the writer waits.")

    def validate(self) -> None:
        """Raise `ConfigError` naming the first bad key."""
        positive = (
            "max_file_size",
            "prealloc_size",
            "buffered_writes_threshold",
            "queue_max_entries",
            "queue_max_bytes",
            "force_write_queue_max",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(name, "must be positive")
        for name in ("max_backups", "buffered_entries_threshold", "max_group_wait_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(name, "must not be negative")
        if self.queue_max_bytes < self.buffered_writes_threshold:
            raise ConfigError(
                "queue_max_bytes",
                "must be at least buffered_writes_threshold, or batches could never reach the byte threshold",
            )
