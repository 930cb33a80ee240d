"""Per-directory disk usage checks that turn the bookie read-only and back.

`classify` is the pure rule; `run_disk_checker` measures every ``diskCheckInterval`` and applies
it: a directory past ``diskUsageWarnThreshold`` is logged and reported (``bookie_disk_usage``);
past ``diskUsageThreshold`` the bookie turns read-only (DISK_FULL); once every directory is
below ``diskUsageLwmThreshold`` it is writable again (if nothing else holds it read-only), and
`Bookie.space_available` resumes what a full disk stopped (a journal in NO_SPACE, a failed
checkpoint). Between the low-water mark and the threshold nothing changes (hysteresis).

The checker only clears DISK_FULL; the journal and the storage set it earlier, when an allocation
would pass the threshold (`bookie._space`). The first check runs before the task reports itself
started, so that a bookie started on a full disk registers as read-only from the first moment.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence

import trio

from .._space import DiskUsage, measure_one
from ._bookie import Bookie

__all__ = ["DiskVerdict", "classify", "measure_usage", "run_disk_checker"]

log = logging.getLogger(__name__)


class DiskVerdict(enum.Enum):
    """What the usage of all directories asks for."""

    FULL = "full"  # some directory above the threshold: go read-only
    CLEAR = "clear"  # all below the low-water mark: writable again
    UNCHANGED = "unchanged"  # between the two: keep the current state


def classify(usages: Sequence[DiskUsage], threshold: float, lwm: float) -> DiskVerdict:
    """The pure rule of the module docstring."""
    if any(u.used_fraction > threshold for u in usages):
        return DiskVerdict.FULL
    if all(u.used_fraction < lwm for u in usages):
        return DiskVerdict.CLEAR
    return DiskVerdict.UNCHANGED


def measure_usage(paths: Sequence[str]) -> list[DiskUsage]:
    """statvfs every path (blocking: call it in a worker thread). Unreadable paths count as full."""
    out = []
    for p in paths:
        usage = measure_one(p)
        out.append(usage if usage is not None else DiskUsage(p, 0, 0))
    return out


async def run_disk_checker(
    bookie: Bookie,
    *,
    measure: Callable[[Sequence[str]], list[DiskUsage]] = measure_usage,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Check the journal and ledger directories every diskCheckInterval until cancelled.

    ``measure`` is a seam for tests (fake usages). Never raises for a disk problem: an unreadable
    directory counts as full. ``task_status.started`` is called after the first check.
    """
    cfg = bookie.config
    paths = [*cfg.journal_directories, *cfg.ledger_dirs]
    warned: set[str] = set()
    started = False
    while True:
        usages = await trio.to_thread.run_sync(measure, paths)
        for u in usages:
            bookie.metrics.disk_usage.labels(u.path).set(u.used_fraction)
            if u.used_fraction > cfg.disk_usage_warn_threshold:
                if u.path not in warned:
                    log.warning(
                        "directory %s is %.1f%% full (warn threshold %.0f%%)",
                        u.path,
                        100 * u.used_fraction,
                        100 * cfg.disk_usage_warn_threshold,
                    )
                    warned.add(u.path)
            else:
                warned.discard(u.path)
        verdict = classify(usages, cfg.disk_usage_threshold, cfg.disk_usage_lwm_threshold)
        if verdict is DiskVerdict.FULL:
            full = ", ".join(
                f"{u.path} {100 * u.used_fraction:.1f}%" for u in usages if u.used_fraction > cfg.disk_usage_threshold
            )
            bookie.set_disk_full(True, f"above diskUsageThreshold: {full}")
        elif verdict is DiskVerdict.CLEAR:
            bookie.set_disk_full(False, "all directories below diskUsageLwmThreshold")
        if not started:
            task_status.started()
            started = True
        if verdict is DiskVerdict.CLEAR:
            await bookie.space_available()
        await trio.sleep(cfg.disk_check_interval_ms / 1000)
