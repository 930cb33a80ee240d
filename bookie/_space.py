"""Free-space checks where the bookie allocates, so that it turns read-only BEFORE a disk is full.

The disk checker (`bookie.server._disks`) measures every diskCheckInterval (10 s). Between two checks
one journal preallocation chunk (journalPreAllocSizeMB, 16 MiB) or one write-cache flush (half the
cache) can take a small disk from below diskUsageThreshold to full, and then the journal or an
entry log meets ENOSPC instead of the bookie turning read-only in time. So the allocators ask a
`SpaceGuard` first (one ``statvfs``, no I/O):

Rule 1: ``headroom`` is what a file system can still take before its used share passes the
        threshold: ``free - (1 - threshold) * total`` (negative once past it).
Rule 2: an allocator that would use more than the headroom allocates less where it can (the
        journal preallocates a small reserve instead of a whole chunk) and calls `report_full`
        when even what it must write passes the threshold: the owner turns the bookie read-only
        (DISK_FULL) at once. The write still happens if it physically fits (a flush must move
        data out of the journal; a recovery add or fence may still be journaled).
Rule 3: an allocation bigger than the free space fails at once (ENOSPC) instead of creating
        files it would have to remove again.
Rule 4: only the disk checker clears DISK_FULL (below diskUsageLwmThreshold): the guard never
        turns a bookie writable.

A path whose file system cannot be measured is not judged here (the allocation runs and reports
its own error; the disk checker counts such a directory as full).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DiskUsage", "SpaceGuard", "measure_one"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """The file system of ``path``: total and free bytes (free = available to this user)."""

    path: str
    total: int
    free: int

    @property
    def used_fraction(self) -> float:
        """Used share of the file system, 0.0 .. 1.0 (1.0 for an empty or unreadable one)."""
        return 1.0 - self.free / self.total if self.total > 0 else 1.0

    def headroom(self, threshold: float) -> int:
        """Bytes that may still be allocated before the used share passes ``threshold`` (rule 1)."""
        return self.free - int((1.0 - threshold) * self.total)


def measure_one(path: str) -> DiskUsage | None:
    """statvfs ``path``; None when it cannot be measured."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        log.warning("cannot measure free space of %s: %s", path, exc)
        return None
    return DiskUsage(str(path), st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


class SpaceGuard:
    """The allocation-time half of diskUsageThreshold (see the module rules).

    ``on_full(detail)`` is what `report_full` calls (the bookie sets DISK_FULL); the owner may
    set it after construction. ``measure`` is a seam for tests. `usage` and `headroom` may be
    called from any thread; `report_full` must run where ``on_full`` may (the trio thread).
    """

    def __init__(
        self,
        threshold: float,
        *,
        measure: Callable[[str], DiskUsage | None] = measure_one,
        on_full: Callable[[str], None] | None = None,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.on_full = on_full
        self._measure = measure

    def usage(self, path: str | os.PathLike[str]) -> DiskUsage | None:
        """The file system of ``path`` now, or None when it cannot be measured."""
        return self._measure(os.fspath(path))

    def headroom(self, path: str | os.PathLike[str]) -> int | None:
        """Rule 1 for ``path`` now; None when it cannot be measured."""
        usage = self.usage(path)
        return None if usage is None else usage.headroom(self.threshold)

    def report_full(
        self, path: str | os.PathLike[str], nbytes: int, usage: DiskUsage | None = None, what: str = "an allocation"
    ) -> None:
        """Rule 2: ``nbytes`` more in ``path`` would pass the threshold; tell the owner now."""
        usage = usage if usage is not None else self.usage(path)
        share = f"{100 * usage.used_fraction:.1f}% used, {usage.free} bytes free" if usage else "unmeasured"
        detail = (
            f"{what} of {nbytes} bytes in {os.fspath(path)} would pass diskUsageThreshold "
            f"{100 * self.threshold:.0f}% ({share})"
        )
        if self.on_full is not None:
            self.on_full(detail)
        else:
            log.warning("%s", detail)
