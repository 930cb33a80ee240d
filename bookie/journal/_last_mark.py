"""The persisted LastLogMark: a small ``lastMark`` file in every ledger directory.

Blocking functions; the journal calls them through ``trio.to_thread.run_sync``.

Why every ledger directory: the mark says "everything before it is flushed to ledger storage",
and ledger storage spans all ledger directories. Reading takes the highest readable mark; a
missing or damaged copy is skipped with a warning (it can only make replay start earlier, which
is safe). Writing goes to a temporary file, is fsynced, renamed over ``lastMark`` and the
directory is fsynced, so a crash leaves either the old or the new mark, never a torn one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from ._codec import JournalFormatError, LogMark, decode_last_mark, encode_last_mark

__all__ = ["LAST_MARK_FILE", "last_mark_file", "read_last_mark", "write_last_mark"]

log = logging.getLogger(__name__)

LAST_MARK_FILE = "lastMark"


def last_mark_file(journal_index: int) -> str:
    """The lastMark file name of the journal at ``journal_index`` of a bookie's journal
    directories: ``lastMark`` for the first (so a bookie given more directories keeps its
    first journal's mark), ``lastMark.{i}`` for the others."""
    return LAST_MARK_FILE if journal_index == 0 else f"{LAST_MARK_FILE}.{journal_index}"


def read_last_mark(ledger_dirs: Iterable[str | os.PathLike[str]], name: str = LAST_MARK_FILE) -> LogMark:
    """The highest mark found in the ledger directories (file ``name``), or ``LogMark(0, 0)``
    if there is none."""
    best = LogMark(0, 0)
    for d in ledger_dirs:
        path = Path(d) / name
        try:
            mark = decode_last_mark(path.read_bytes())
        except FileNotFoundError:
            continue
        except (OSError, JournalFormatError) as exc:
            log.warning("ignoring unreadable %s: %s", path, exc)
            continue
        best = max(best, mark)
    return best


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_last_mark(ledger_dirs: Iterable[str | os.PathLike[str]], mark: LogMark, name: str = LAST_MARK_FILE) -> None:
    """Durably write `mark` to ``name`` (``lastMark``) in every ledger directory.

    Tries every directory; if any failed, raises the first OSError after the others were written
    (the bookie should then treat that directory as failed).
    """
    data = encode_last_mark(mark)
    first_error: OSError | None = None
    for d in ledger_dirs:
        directory = Path(d)
        tmp = directory / (name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, directory / name)
            _fsync_dir(directory)
        except OSError as exc:
            log.error("could not persist lastMark %s in %s: %s", mark, directory, exc)
            if first_error is None:
                first_error = exc
    if first_error is not None:
        raise first_error
