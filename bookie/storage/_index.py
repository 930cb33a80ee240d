"""Durable location index ((ledger, entry) -> location) and ledger index (per-ledger state).

Storage choice: one sqlite3 database (stdlib) per storage, in WAL mode with ``synchronous=FULL``,
holding both tables, so that one checkpoint is one transaction: the locations of a whole flush
and the ledger states it carries commit (and are synced) together or not at all. BookKeeper's
DbLedgerStorage uses RocksDB for the same reason (bulk, ordered, durable key-value writes); the
alternative of per-ledger index files (InterleavedLedgerStorage) needs one file and one fsync per
active ledger per checkpoint and its own page cache. sqlite gives ordered primary keys
(``WITHOUT ROWID`` tables clustered on (ledger, entry), so "last entry of a ledger" and "delete a
ledger" are range operations), crash safety, and ``executemany`` of a sorted batch in C.

Threading: every method blocks (sqlite I/O, fsync of the WAL at commit), so the storage calls
them through ``trio.to_thread.run_sync``. Writes go through one connection under a lock; reads
use a second connection (WAL lets readers run beside a writer) under its own lock.

Full disk. A database in WAL mode cannot even be read without its ``-wal`` and ``-shm`` files,
and sqlite deletes both when the last connection closes: a bookie stopped cleanly could then not
start again on a full disk. So `close` leaves the database in rollback-journal mode (which reads
need no extra file for), and opening switches it to WAL again; when that fails for lack of space
the index runs in rollback mode (reads work; writes fail until there is space) and switches to
WAL before the next write that can.

Ids are stored as sqlite's signed 64-bit integers: ledger and entry ids must be in [0, 2**63).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["EntryIndex", "LedgerInfo", "IndexStats"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS locations (
    ledger INTEGER NOT NULL, entry INTEGER NOT NULL, location INTEGER NOT NULL,
    PRIMARY KEY (ledger, entry)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledgers (
    ledger INTEGER PRIMARY KEY, fenced INTEGER NOT NULL, master_key BLOB NOT NULL,
    explicit_lac BLOB, last_entry INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS gc_rolled (
    log_id INTEGER PRIMARY KEY, reason TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """What the bookie keeps per ledger: fenced flag, master key, explicit LAC, last entry id (-1: none)."""

    fenced: bool = False
    master_key: bytes = b""
    explicit_lac: bytes | None = None
    last_entry: int = -1


@dataclass(frozen=True, slots=True)
class IndexStats:
    """Snapshot of `EntryIndex` counters."""

    batches: int
    locations_written: int
    ledgers_written: int
    lookups: int
    deletes: int


class EntryIndex:
    """The sqlite-backed location and ledger index at ``path`` (created if missing).

    Raises ``sqlite3.Error`` (for example "database or disk is full") from any method; the
    storage turns those into `StorageIOError`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        self._wlock = threading.Lock()
        self._rlock = threading.Lock()
        self._w = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._wal = self._try_wal()
        self._w.execute("PRAGMA synchronous=FULL")
        self._w.executescript(_SCHEMA)
        self._r = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._batches = self._locations = self._ledgers = self._lookups = self._deletes = 0

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction under the write lock (switching to WAL first when it can): committed,
        and synced, when the block ends; rolled back when it raises."""
        with self._wlock:
            if not self._wal:
                self._wal = self._try_wal()
            cur = self._w.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._w.in_transaction:
                    cur.execute("ROLLBACK")
                raise

    def _try_wal(self) -> bool:
        """Switch the database to WAL; False (and rollback mode) when the disk has no room for it."""
        try:
            mode = self._w.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            log.warning("index %s stays in rollback-journal mode for now (%s)", self._path, exc)
            return False
        return str(mode).lower() == "wal"

    def put_batch(self, locations: Sequence[tuple[int, int, int]], ledgers: Mapping[int, LedgerInfo]) -> None:
        """Store ``(ledger, entry, location)`` rows and ledger states in one durable transaction.

        Existing rows for the same keys are replaced. When this returns the batch is synced.
        """
        rows = [(lid, int(i.fenced), i.master_key, i.explicit_lac, i.last_entry) for lid, i in ledgers.items()]
        with self._transaction() as cur:
            if locations:
                cur.executemany("INSERT OR REPLACE INTO locations VALUES (?, ?, ?)", locations)
            if rows:
                cur.executemany("INSERT OR REPLACE INTO ledgers VALUES (?, ?, ?, ?, ?)", rows)
        self._batches += 1
        self._locations += len(locations)
        self._ledgers += len(rows)

    def get_location(self, ledger_id: int, entry_id: int) -> int | None:
        """The location of an entry, or None when it is not indexed."""
        self._lookups += 1
        with self._rlock:
            row = self._r.execute(
                "SELECT location FROM locations WHERE ledger = ? AND entry = ?", (ledger_id, entry_id)
            ).fetchone()
        return None if row is None else row[0]

    def last_entry(self, ledger_id: int) -> int | None:
        """The highest indexed entry id of a ledger, or None."""
        with self._rlock:
            row = self._r.execute("SELECT max(entry) FROM locations WHERE ledger = ?", (ledger_id,)).fetchone()
        return row[0]

    def load_ledgers(self) -> dict[int, LedgerInfo]:
        """Every ledger's stored state (read once at startup; the storage keeps them in memory)."""
        with self._rlock:
            rows = self._r.execute("SELECT ledger, fenced, master_key, explicit_lac, last_entry FROM ledgers")
            return {
                r[0]: LedgerInfo(bool(r[1]), bytes(r[2]), None if r[3] is None else bytes(r[3]), r[4]) for r in rows
            }

    def list_ledgers(self) -> list[int]:
        """Ids of the ledgers in the ledger index, ascending."""
        with self._rlock:
            return [r[0] for r in self._r.execute("SELECT ledger FROM ledgers ORDER BY ledger")]

    def delete_ledger(self, ledger_id: int) -> int:
        """Remove a ledger's state and every location of it (GC); returns the locations removed."""
        with self._transaction() as cur:
            n = cur.execute("DELETE FROM locations WHERE ledger = ?", (ledger_id,)).rowcount
            cur.execute("DELETE FROM ledgers WHERE ledger = ?", (ledger_id,))
        self._deletes += 1
        return n

    def update_locations(self, updates: Iterable[tuple[int, int, int]], old_log_id: int) -> int:
        """Compaction: point ``(ledger, entry, new_location)`` at a new log, but only for rows whose
        location is still in ``old_log_id`` (an entry rewritten or deleted since is left alone).

        One durable transaction; returns the number of rows changed.
        """
        params = [(new, lid, eid, old_log_id) for lid, eid, new in updates]
        with self._transaction() as cur:
            before = self._w.total_changes
            cur.executemany(
                "UPDATE locations SET location = ? WHERE ledger = ? AND entry = ? AND (location >> 32) = ?", params
            )
            changed = self._w.total_changes - before
        return changed

    def record_rolled(self, rolled: Mapping[int, str]) -> None:
        """Remember (durably) that GC rolled these entry logs early, and why (``gc/explain`` shows
        it for as long as the log is on disk, across restarts)."""
        with self._transaction() as cur:
            cur.executemany("INSERT OR REPLACE INTO gc_rolled VALUES (?, ?)", list(rolled.items()))

    def forget_rolled(self, log_ids: Iterable[int]) -> None:
        """Drop the early-roll records of these logs (GC removed them)."""
        with self._transaction() as cur:
            cur.executemany("DELETE FROM gc_rolled WHERE log_id = ?", [(i,) for i in log_ids])

    def rolled_logs(self) -> dict[int, str]:
        """Every log GC rolled early that is still recorded, with why (`record_rolled`)."""
        with self._rlock:
            return {r[0]: r[1] for r in self._r.execute("SELECT log_id, reason FROM gc_rolled")}

    def statistics(self) -> IndexStats:
        """A snapshot of the index counters."""
        return IndexStats(self._batches, self._locations, self._ledgers, self._lookups, self._deletes)

    def close(self) -> None:
        """Close both connections (the data is already durable), leaving the database in
        rollback-journal mode so that it opens on a full disk too (module docstring)."""
        with self._wlock, self._rlock:
            self._r.close()
            try:
                self._w.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.Error as exc:
                log.warning("index %s: could not leave WAL mode on close: %s", self._path, exc)
            self._w.close()
