"""Durable node storage for the embedded backend: sqlite in WAL mode, one exclusive owner.

Why sqlite: it is in the standard library, and WAL with ``synchronous=FULL`` fsyncs the log on
every commit, so a write acknowledged to the caller survives kill -9 and power loss. Each
`Tree.apply` is one ``BEGIN IMMEDIATE ... COMMIT``.

Ownership: the directory's ``LOCK`` file is flock'ed exclusively for as long as the database is
open, so a second process fails at once with StoreLockedError naming the holder's pid. The lock
goes away with the process, so a crash never leaves a stale lock.

All methods block on disk I/O: callers run them in a worker thread, one call at a time (the
connection is opened with ``check_same_thread=False`` for that reason).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

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
        try:
            self._db = sqlite3.connect(
                self.directory / DB_FILE, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            self._db.execute(
                "INSERT OR IGNORE INTO nodes VALUES (?, '', ?, 0, 0, 0, 0, 0, 0)", (_paths.ROOT, ROOT_NODE.data)
            )
        except BaseException:
            self._lock.release()
            raise

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
        try:
            for path, node in writes.items():
                if node is None:
                    self._db.execute("DELETE FROM nodes WHERE path = ?", (path,))
                else:
                    parent = "" if path == _paths.ROOT else _paths.parent(path)
                    self._db.execute(
                        "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (path, parent, node.data, node.version, node.cversion, node.ctime_ms,
                         node.mtime_ms, node.owner, node.num_children),
                    )
            self._db.executemany(
                "INSERT OR REPLACE INTO counters VALUES (?, ?)", sorted(counters.items())
            )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
