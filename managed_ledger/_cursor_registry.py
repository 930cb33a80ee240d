"""`CursorRegistry`: the cursors of one managed ledger.

Durable cursors are kept by name, each persisted in its own metadata node under the managed
ledger's node (``{node_path}/{name}``); non-durable ones (readers) are kept while open so that
they follow trimmed ledgers and are closed with the managed ledger. The registry decides nothing
about the managed ledger's state: `ManagedLedger` checks that it is open before calling in, and
the cursors reach the managed ledger only through their `CursorHost`.

Taking over: loading (on open) and re-opening an existing node rewrite the node with a
compare-and-set, so a previous owner's late persist of that cursor fails (and fences it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import trio

from managed_ledger._cursor import CursorHost, CursorState, ManagedCursor, cursor_from_info, new_cursor_positions
from managed_ledger._errors import CursorNotFound, ManagedLedgerError
from managed_ledger._types import InitialPosition
from metadata import BadVersionError, NodeExistsError, NoNodeError
from protocols.managed_ledger import CursorInfo, Position

__all__ = ["CursorRegistry"]

log = logging.getLogger("managed_ledger._ledger")


class CursorRegistry:
    """Durable cursors by name and the open non-durable ones (see the module header)."""

    def __init__(self, host: CursorHost) -> None:
        self._host = host
        self._durable: dict[str, ManagedCursor] = {}
        self._non_durable: set[ManagedCursor] = set()
        self._lock = trio.Lock()  # opens and deletes of durable cursors, one at a time
        self._reader_seq = 0

    @property
    def durable(self) -> Mapping[str, ManagedCursor]:
        """The durable cursors by name (live: copy it before awaiting)."""
        return self._durable

    def all(self) -> list[ManagedCursor]:
        """Every cursor, durable ones first (a copy)."""
        return list(self._durable.values()) + list(self._non_durable)

    async def load(self) -> None:
        """Take over every durable cursor stored under the managed ledger's node (rewriting each
        node, see the module header). Raises `ManagedLedgerError` when a node changes meanwhile."""
        host = self._host
        store, parent = host.store, host.node_path
        for child in sorted(await store.children(parent)):
            path = f"{parent}/{child}"
            try:
                value, stat = await store.get(path)
                stat = await store.set(path, value, version=stat.version)
            except (NoNodeError, BadVersionError) as exc:
                raise ManagedLedgerError(f"{host.name}: cursor {child} changed while opening: {exc}") from exc
            self._durable[child] = cursor_from_info(host, child, CursorInfo.decode(value), stat.version)
        self.ledgers_removed()

    async def open(self, name: str, initial_position: InitialPosition) -> ManagedCursor:
        """The durable cursor ``name`` (reopened if closed); created at ``initial_position`` and
        persisted when missing. Raises `ManagedLedgerError` for a name that cannot name a node."""
        if not name or "/" in name:
            raise ManagedLedgerError(f"invalid cursor name {name!r}")
        host = self._host
        async with self._lock:
            cursor = self._durable.get(name)
            if cursor is not None:
                cursor.state = CursorState.OPEN  # reopening a closed durable cursor
                return cursor
            md, read = new_cursor_positions(host.ledgers, initial_position)
            cursor = ManagedCursor(host, name, True, md, read)
            path = f"{host.node_path}/{name}"
            try:
                await host.store.create(path, cursor.snapshot().encode())
                cursor.version = 0
            except NodeExistsError:
                value, stat = await host.store.get(path)
                stat = await host.store.set(path, value, version=stat.version)
                cursor = cursor_from_info(host, name, CursorInfo.decode(value), stat.version)
            self._durable[name] = cursor
            return cursor

    def new_non_durable(self, start: Position | InitialPosition, inclusive: bool) -> ManagedCursor:
        """A reader's cursor (see `ManagedLedger.new_non_durable_cursor`)."""
        ledgers = self._host.ledgers
        if isinstance(start, InitialPosition):
            md, read = new_cursor_positions(ledgers, start)
        else:
            read = start if inclusive else Position(start.ledger_id, start.entry_id + 1)
            first = ledgers.first_ledger()
            if first is not None and read < Position(first, 0):
                read = Position(first, 0)
            lce = ledgers.last_confirmed()
            if read > lce:
                read = Position(lce.ledger_id, lce.entry_id + 1)
            read = ledgers.normalize(read)
            md = Position(read.ledger_id, read.entry_id - 1)
        self._reader_seq += 1
        cursor = ManagedCursor(self._host, f"reader-{self._reader_seq}", False, md, read)
        self._non_durable.add(cursor)
        return cursor

    async def delete(self, name: str) -> None:
        """Close the durable cursor ``name`` (without persisting) and delete its node. Raises
        `CursorNotFound` when there is neither."""
        async with self._lock:
            cursor = self._durable.pop(name, None)
            if cursor is not None:
                cursor.mark_closed()
            try:
                await self._host.store.delete(f"{self._host.node_path}/{name}")
            except NoNodeError:
                if cursor is None:
                    raise CursorNotFound(f"{self._host.name}: no cursor named {name!r}") from None

    def forget(self, cursor: ManagedCursor) -> None:
        """A cursor closed: stop tracking it if it is non-durable (a closed durable cursor stays,
        to be reopened)."""
        self._non_durable.discard(cursor)

    def ledgers_removed(self) -> None:
        """Ledgers left the list (trimmed, or empty and deleted): move every cursor out of them."""
        for cursor in self.all():
            cursor.ledgers_removed()

    def slowest_mark_delete(self) -> Position | None:
        """The lowest mark-delete position of the durable cursors (None without one): what
        trimming must keep after."""
        if not self._durable:
            return None
        return min(c.mark_delete_position for c in self._durable.values())

    async def flush(self) -> None:
        """Persist every durable cursor whose state changed since its last persist; a failure is
        logged and the cursor stays dirty (retried by the next flush)."""
        for cursor in list(self._durable.values()):
            if cursor.dirty:
                try:
                    await cursor.persist()
                except ManagedLedgerError as exc:
                    log.warning("%s: persisting cursor %s: %s", self._host.name, cursor.name, exc)

    def stats(self) -> dict[str, Any]:
        """``stats()`` of each durable cursor, by name."""
        return {name: c.stats() for name, c in self._durable.items()}
