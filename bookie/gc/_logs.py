"""Entry-log usage tracking and deletion of dead logs (BookKeeper's doGcEntryLogs).

For every rolled entry log the tracker keeps the log's ledgers map (ledger -> bytes, read from
the map at the log's end, or rebuilt by a scan for a log that never rolled) and, at each
`EntryLogTracker.refresh`, drops the ledgers the storage no longer has::

    usage = remaining / total        remaining = bytes of ledgers still stored

A rolled log whose remaining bytes are 0 is dead: `EntryLogTracker.delete_dead` removes its file.
Current logs (still being written) are never measured as candidates nor touched.

Rules:

1. The list of candidate logs is taken while the storage's write lock is held, so no flush that
   wrote into a rolled log is still waiting to index it.
2. An error on one log (unreadable map, failed unlink) is reported for that log and the others go
   on; `SkipList` then keeps the log out of GC for ``error_skip_period_ms``.
3. Every blocking call runs in a worker thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from ..storage import DbLedgerStorage, EntryLogger

__all__ = ["LogInfo", "LogError", "EntryLogTracker", "SkipList"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogInfo:
    """One rolled entry log as GC sees it.

    ``ledgers`` holds only the ledgers still stored (with their bytes in this log), ``total`` the
    record bytes of every ledger ever written to it, ``file_size`` the file's size on disk.
    """

    log_id: int
    directory: str
    file_size: int
    total: int
    ledgers: dict[int, int] = field(default_factory=dict)

    @property
    def remaining(self) -> int:
        """Bytes of records of ledgers still stored."""
        return sum(self.ledgers.values())

    @property
    def usage(self) -> float:
        """``remaining / total`` (0.0 for a log without records)."""
        return self.remaining / self.total if self.total else 0.0

    @property
    def dead(self) -> bool:
        """No stored ledger has a record in this log: the whole file can go."""
        return not self.ledgers


@dataclass(frozen=True, slots=True)
class LogError:
    """An error met while handling one log."""

    log_id: int
    phase: str
    message: str


class SkipList:
    """Logs to leave alone until a time (after an error), with the error to explain it.

    ``clock`` gives wall-clock milliseconds. Bounded by the number of logs on disk: entries for
    logs that no longer exist are dropped by `retain`.
    """

    def __init__(self, period_ms: int, clock: Callable[[], float]) -> None:
        self._period_ms = period_ms
        self._clock = clock
        self._until: dict[int, tuple[int, str]] = {}

    def add(self, log_id: int, message: str) -> None:
        """Skip ``log_id`` for the configured period from now."""
        self._until[log_id] = (int(self._clock()) + self._period_ms, message)

    def get(self, log_id: int) -> tuple[int, str] | None:
        """``(until_ms, message)`` while the log is skipped, else None."""
        item = self._until.get(log_id)
        if item is None:
            return None
        if item[0] <= self._clock():
            del self._until[log_id]
            return None
        return item

    def retain(self, log_ids: set[int]) -> None:
        """Forget logs not in ``log_ids``."""
        for lid in [k for k in self._until if k not in log_ids]:
            del self._until[lid]


class EntryLogTracker:
    """Per-log usage of a `DbLedgerStorage`'s rolled entry logs, and dead-log deletion."""

    def __init__(self, storage: DbLedgerStorage, skips: SkipList) -> None:
        self._storage = storage
        self._logger: EntryLogger = storage.entry_logger
        self._skips = skips
        self._logs: dict[int, LogInfo] = {}
        self._current: set[int] = set()

    @property
    def logs(self) -> dict[int, LogInfo]:
        """The rolled logs measured by the last `refresh` (id -> info)."""
        return dict(self._logs)

    @property
    def current(self) -> set[int]:
        """Ids of the logs that were still being written at the last `refresh`."""
        return set(self._current)

    async def refresh(self) -> list[LogError]:
        """Re-measure every rolled log (rule 1); returns the per-log errors (those logs are skipped)."""
        async with self._storage.write_lock:
            all_ids = await trio.to_thread.run_sync(self._logger.list_logs)
            current = await trio.to_thread.run_sync(self._logger.current_log_ids)
        exists = self._storage.ledger_exists
        infos, errors = await trio.to_thread.run_sync(self._measure, [i for i in all_ids if i not in current], exists)
        self._current = current
        self._logs = infos
        self._skips.retain(set(all_ids))
        for err in errors:
            self._skips.add(err.log_id, err.message)
        return errors

    def _measure(self, ids: list[int], exists: Callable[[int], bool]) -> tuple[dict[int, LogInfo], list[LogError]]:
        infos: dict[int, LogInfo] = {}
        errors: list[LogError] = []
        for log_id in ids:
            try:
                usage = self._logger.usage(log_id)
                path = self._logger.log_path(log_id)
                size = os.stat(path).st_size
            except FileNotFoundError:
                continue  # removed meanwhile
            except Exception as exc:
                log.error("GC: cannot read the ledgers map of entry log %x: %s", log_id, exc)
                errors.append(LogError(log_id, "usage", f"{type(exc).__name__}: {exc}"))
                continue
            live = {lid: n for lid, n in usage.ledgers.items() if exists(lid)}
            infos[log_id] = LogInfo(log_id, str(path.parent), size, usage.total_size, live)
        return infos, errors

    async def delete_dead(self) -> tuple[int, int, list[LogError]]:
        """Remove every dead rolled log not being skipped; returns ``(logs removed, file bytes
        reclaimed, errors)``. Liveness is checked again right before each removal."""
        removed = reclaimed = 0
        errors: list[LogError] = []
        for log_id, info in sorted(self._logs.items()):
            if not info.dead or self._skips.get(log_id) is not None:
                continue
            try:
                # a ledger may have been written again (recovery re-adds) since the refresh
                if any(
                    self._storage.ledger_exists(lid) for lid in await trio.to_thread.run_sync(self._ledgers_of, log_id)
                ):
                    continue
                await trio.to_thread.run_sync(self._logger.remove_log, log_id)
            except FileNotFoundError:
                pass
            except Exception as exc:
                log.error("GC: cannot delete dead entry log %x: %s", log_id, exc)
                errors.append(LogError(log_id, "delete", f"{type(exc).__name__}: {exc}"))
                self._skips.add(log_id, f"delete failed: {exc}")
                continue
            log.info(
                "GC: deleted entry log %x (%d bytes): none of its ledgers is stored any more", log_id, info.file_size
            )
            removed += 1
            reclaimed += info.file_size
            del self._logs[log_id]
        return removed, reclaimed, errors

    def _ledgers_of(self, log_id: int) -> list[int]:
        try:
            return list(self._logger.usage(log_id).ledgers)
        except FileNotFoundError:
            return []

    def forget(self, log_id: int) -> None:
        """Drop a log removed by compaction."""
        self._logs.pop(log_id, None)
