"""Durable node storage for the embedded backend: sqlite in WAL mode, one exclusive owner.

Why sqlite: it is in the standard library, and WAL with ``synchronous=FULL`` fsyncs the log on
every commit, so a write acknowledged to the caller survives kill -9 and power loss. Each
`Tree.apply` is one ``BEGIN IMMEDIATE ... COMMIT``.

Ownership: the directory's ``LOCK`` file is flock'ed exclusively for as long as the database is
open, so a second process fails at once with StoreLockedError naming the holder's pid. The lock
goes away with the process, so a crash never leaves a stale lock.

All methods block on disk I/O: callers run them in a worker thread, one call at a time (the
connection is opened with ``check_same_thread=False`` for that reason).

A full disk: the store keeps a ``space-reserve`` file of ``RESERVE_BYTES`` beside the database.
When sqlite reports the disk full (SQLITE_FULL) while opening or committing, the reserve is
deleted and the operation retried once, so the metadata a restart needs (claiming ledger lists,
registering a read-only bookie, persisting cursors) can still be written while the data disk is
full; the reserve is created again once there is room (checked at most every
``_RESERVE_RETRY_S``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from . import _paths
from ._errors import StoreLockedError
from ._tree import ROOT_NODE, Node

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    data BLOB NOT NULL,
    version INTEGER NOT NULL,
    cversion INTEGER NOT NULL,
    ctime INTEGER NOT NULL,
    mtime INTEGER NOT NULL,
    owner INTEGER NOT NULL,
    num_children INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes(parent);
CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes(owner) WHERE owner != 0;
CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY, next INTEGER NOT NULL);
"""

DB_FILE = "metadata.sqlite"
LOCK_FILE = "LOCK"
RESERVE_FILE = "space-reserve"
RESERVE_BYTES = 4 * 1024 * 1024
_RESERVE_RETRY_S = 10.0

log = logging.getLogger(__name__)
T = TypeVar("T")


def _disk_full(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


class SpaceReserve:
    """A file of ``size`` bytes kept only to be given back when the disk fills (see the module
    docstring). ``release`` deletes it; ``ensure`` creates it when missing and there is room."""

    def __init__(self, path: Path, size: int = RESERVE_BYTES) -> None:
        self.path = path
        self.size = size
        self._next_try = 0.0

    def ensure(self) -> None:
        """Create the reserve if it is missing; on a full disk, try again later."""
        if self.path.exists() or time.monotonic() < self._next_try:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.posix_fallocate(fd, 0, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            self._next_try = time.monotonic() + _RESERVE_RETRY_S

    def release(self) -> bool:
        """Delete the reserve; False when there was none to give back."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        self._next_try = time.monotonic() + _RESERVE_RETRY_S
        log.warning("metadata store %s: disk full; released its %d-byte space reserve", self.path.parent, self.size)
        return True


class DirectoryLock:
    """An exclusive flock on ``<dir>/LOCK`` holding the owner's pid."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise StoreLockedError naming the pid that holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreLockedError(
                f"embedded metadata store {self.path.parent} is in use by another process (pid {holder})",
                str(self.path.parent),
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


class SqliteStorage:
    """`TreeStorage` over a sqlite database in ``directory`` (created if missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = DirectoryLock(self.directory)
        self._lock.acquire()
        self._reserve = SpaceReserve(self.directory / RESERVE_FILE)
        try:
            self._db = sqlite3.connect(self.directory / DB_FILE, isolation_level=None, check_same_thread=False)
            self._with_space(self._prepare)
        except BaseException:
            self._lock.release()
            raise
        self._reserve.ensure()

    def _prepare(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        self._db.execute(
            "INSERT OR IGNORE INTO nodes VALUES (?, '', ?, 0, 0, 0, 0, 0, 0)", (_paths.ROOT, ROOT_NODE.data)
        )

    def _with_space(self, op: Callable[[], T]) -> T:
        # On SQLITE_FULL give the reserve back and try once more (see the module docstring).
        try:
            return op()
        except sqlite3.OperationalError as exc:
            if not _disk_full(exc) or not self._reserve.release():
                raise
            return op()

    def close(self) -> None:
        """Close the database, then release the directory lock."""
        try:
            self._db.close()
        finally:
            self._lock.release()

    def load(self, path: str) -> Node | None:
        row = self._db.execute(
            "SELECT data, version, cversion, ctime, mtime, owner, num_children FROM nodes WHERE path = ?",
            (path,),
        ).fetchone()
        return None if row is None else Node(bytes(row[0]), *row[1:])

    def child_names(self, path: str) -> list[str]:
        rows = self._db.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
        return sorted(_paths.name(r[0]) for r in rows)

    def owned_by(self, owner: int) -> list[str]:
        rows = self._db.execute("SELECT path FROM nodes WHERE owner = ? AND owner != 0", (owner,))
        return sorted(r[0] for r in rows)

    def all_ephemerals(self) -> list[str]:
        return sorted(r[0] for r in self._db.execute("SELECT path FROM nodes WHERE owner != 0"))

    def counter(self, key: str) -> int:
        row = self._db.execute("SELECT next FROM counters WHERE key = ?", (key,)).fetchone()
        return 0 if row is None else int(row[0])

    def begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def rollback(self) -> None:
        self._db.execute("ROLLBACK")

    def commit(self, writes: dict[str, Node | None], counters: dict[str, int]) -> None:
        """Write ``writes`` and ``counters`` and commit the transaction `begin` opened; on a full
        disk the reserve is given back and the whole transaction redone once."""
        try:
            self._commit(writes, counters)
        except sqlite3.OperationalError as exc:
            if not _disk_full(exc) or not self._reserve.release():
                raise
            self.begin()
            self._commit(writes, counters)
        self._reserve.ensure()

    def _commit(self, writes: dict[str, Node | None], counters: dict[str, int]) -> None:
        try:
            for path, node in writes.items():
                if node is None:
                    self._db.execute("DELETE FROM nodes WHERE path = ?", (path,))
                else:
                    parent = "" if path == _paths.ROOT else _paths.parent(path)
                    self._db.execute(
                        "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            path,
                            parent,
                            node.data,
                            node.version,
                            node.cversion,
                            node.ctime_ms,
                            node.mtime_ms,
                            node.owner,
                            node.num_children,
                        ),
                    )
            self._db.executemany("INSERT OR REPLACE INTO counters VALUES (?, ?)", sorted(counters.items()))
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
