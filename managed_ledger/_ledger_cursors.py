"""Cursor bookkeeping, trimming and stats of a managed ledger (a mixin of `ManagedLedger`,
split out to keep modules small; it uses the managed ledger's state directly)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from managed_ledger._cursor import CursorState, ManagedCursor, cursor_from_info, new_cursor_positions
from managed_ledger._errors import CursorNotFound, ManagedLedgerError
from managed_ledger._types import InitialPosition
from metadata import BadVersionError, NodeExistsError, NoNodeError
from protocols.managed_ledger import CursorInfo, LedgerInfo, Position

__all__ = ["CursorsAndTrimming"]

log = logging.getLogger("managed_ledger._ledger")


class CursorsAndTrimming:
    """Durable and non-durable cursors, the trimming API and ``internal_stats``."""

    async def _load_cursors(self) -> None:
        store = self._ctx.store
        for child in sorted(await store.children(self._path)):
            path = f"{self._path}/{child}"
            try:
                value, stat = await store.get(path)
                # Rewriting the node takes it over: a previous owner's late persist now fails.
                stat = await store.set(path, value, version=stat.version)
            except (NoNodeError, BadVersionError) as exc:
                raise ManagedLedgerError(f"{self.name}: cursor {child} changed while opening: {exc}") from exc
            info = CursorInfo.decode(value)
            self._cursors[child] = cursor_from_info(self, child, info, stat.version)
        self._cursors_follow_removed_ledgers()

    async def flush_cursors(self) -> None:
        """Persist every durable cursor whose state changed since its last persist."""
        for cursor in list(self._cursors.values()):
            if cursor.dirty:
                try:
                    await cursor.persist()
                except ManagedLedgerError as exc:
                    log.warning("%s: persisting cursor %s: %s", self.name, cursor.name, exc)

    # --- cursors -----------------------------------------------------------------------------

    async def open_cursor(self, name: str, initial_position: InitialPosition = InitialPosition.LATEST,
                          ) -> ManagedCursor:
        """The durable cursor ``name``; created at ``initial_position`` (and persisted) if missing."""
        self._check_open()
        if not name or "/" in name:
            raise ManagedLedgerError(f"invalid cursor name {name!r}")
        async with self._cursor_lock:
            cursor = self._cursors.get(name)
            if cursor is not None:
                cursor.state = CursorState.OPEN  # reopening a closed durable cursor
                return cursor
            md, read = new_cursor_positions(self._ledgers, initial_position)
            cursor = ManagedCursor(self, name, True, md, read)
            path = f"{self._path}/{name}"
            try:
                await self._ctx.store.create(path, cursor.snapshot().encode())
                cursor.version = 0
            except NodeExistsError:
                value, stat = await self._ctx.store.get(path)
                stat = await self._ctx.store.set(path, value, version=stat.version)
                cursor = cursor_from_info(self, name, CursorInfo.decode(value), stat.version)
            self._cursors[name] = cursor
            return cursor

    def new_non_durable_cursor(self, start: Position | InitialPosition = InitialPosition.LATEST,
                               inclusive: bool = True) -> ManagedCursor:
        """A cursor that is never persisted and does not hold back trimming (for readers).
        ``start`` is a position (read from it, or after it when not ``inclusive``) or an
        initial position."""
        self._check_open()
        if isinstance(start, InitialPosition):
            md, read = new_cursor_positions(self._ledgers, start)
        else:
            read = start if inclusive else Position(start.ledger_id, start.entry_id + 1)
            first = self._ledgers.first_ledger()
            if first is not None and read < Position(first, 0):
                read = Position(first, 0)
            lce = self.last_confirmed_entry
            if read > lce:
                read = Position(lce.ledger_id, lce.entry_id + 1)
            read = self._ledgers.normalize(read)
            md = Position(read.ledger_id, read.entry_id - 1)
        self._reader_seq += 1
        cursor = ManagedCursor(self, f"reader-{self._reader_seq}", False, md, read)
        self._non_durable.add(cursor)
        return cursor

    async def delete_cursor(self, name: str) -> None:
        """Remove a durable cursor and its metadata node. Raises `CursorNotFound`."""
        self._check_open()
        async with self._cursor_lock:
            cursor = self._cursors.pop(name, None)
            if cursor is not None:
                cursor.mark_closed()
            try:
                await self._ctx.store.delete(f"{self._path}/{name}")
            except NoNodeError:
                if cursor is None:
                    raise CursorNotFound(f"{self.name}: no cursor named {name!r}") from None

    def _cursors_follow_removed_ledgers(self) -> None:
        for cursor in list(self._cursors.values()) + list(self._non_durable):
            cursor.ledgers_removed()

    def _forget_cursor(self, cursor: ManagedCursor) -> None:
        self._non_durable.discard(cursor)

    # --- trimming ----------------------------------------------------------------------------

    def trimmable_ledgers(self) -> list[LedgerInfo]:
        """Closed ledgers whose every entry is at or before the slowest durable cursor's
        mark-delete position (every closed ledger when there is no durable cursor). Never the
        current ledger, nor the last ledger of the list."""
        if self._cursors:
            slowest = min(c.mark_delete_position for c in self._cursors.values())
        else:
            slowest = self.last_confirmed_entry
        out = []
        for info in self._ledgers.infos()[:-1]:
            if info.ledger_id == self._ledgers.current:
                break
            if Position(info.ledger_id, info.entries - 1) > slowest:
                break
            out.append(info)
        return out

    async def trim(self, ledger_ids: Iterable[int]) -> list[int]:
        """Remove the given ledgers from the list (CAS) and then delete them in BookKeeper.
        Ids that are not trimmable right now are skipped; returns the ids trimmed."""
        self._check_open()
        async with self._meta_lock:
            allowed = {i.ledger_id for i in self.trimmable_ledgers()}
            ids = sorted(set(ledger_ids) & allowed)
            if not ids:
                return []
            for lid in ids:
                self._ledgers.remove(lid)
            self._cursors_follow_removed_ledgers()
            await self._write_info()
        for lid in ids:
            await self._reader.forget(lid)
            await self._delete_quietly(lid)
        self._ctx.metrics.ledgers_trimmed.inc(len(ids))
        return ids

    # --- stats -------------------------------------------------------------------------------

    def internal_stats(self) -> dict[str, Any]:
        """A snapshot in the shape of Pulsar's ``stats-internal``."""
        ledgers = self._ledgers
        return {
            "entriesAddedCounter": self.entries_added_counter,
            "numberOfEntries": self.number_of_entries,
            "totalSize": self.total_size,
            "currentLedgerEntries": ledgers.current_entries if ledgers.current is not None else 0,
            "currentLedgerSize": ledgers.current_size if ledgers.current is not None else 0,
            "lastLedgerCreatedTimestamp": int(self._ledger_created_at * 1000),
            "pendingAddEntriesCount": len(self._pending),
            "lastConfirmedEntry": str(self.last_confirmed_entry),
            "state": self.state.name,
            "ledgers": [{"ledgerId": i.ledger_id, "entries": i.entries, "size": i.size,
                         "timestamp": i.timestamp_ms, "offloaded": False} for i in ledgers.infos()],
            "cursors": {name: c.stats() for name, c in self._cursors.items()},
        }
