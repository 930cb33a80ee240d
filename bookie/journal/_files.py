"""Journal files on disk: naming, creation with preallocation, replay scanning, tail repair, cleanup.

All functions here block; the `Journal` runs them in worker threads.

Files are ``{id:x}.txn``. Ids only grow: a new id is ``max(now in ms, highest existing id + 1)``,
so a clock stepping backwards cannot reorder files. Each file starts with a `FILE_HEADER_SIZE`
header, then records; the rest of its preallocated space is zeros.

Replay rules:

* Replay starts at the mark (file id, offset) and continues through every later file in id order.
* The LAST file may end in a torn or corrupt record (a crash mid-write): replay stops there,
  reports file, offset and reason, and `repair_tail` cuts the file at that offset, so that after
  new files are added it still ends cleanly. No acknowledged record is ever after a bad one: an
  add is acknowledged only once everything written before it was synced.
* A file may declare its predecessor in its header (`decode_file_prev`): "the history before me
  ends in file F at offset E". Every file the journal creates declares one (after a roll: the
  rolled file's end; at start: where replay ended; after a full disk: the last acknowledged
  record). When replay finishes file F at offset X (cleanly or at a damaged record) and a later
  file declares ``(F, E)`` with ``E <= X``, replay continues with the first such file: what lies
  in F after E, and any file in between, was never acknowledged (a journal that ran out of space
  and resumed on a fresh file leaves exactly that).
* Any other damaged record in an EARLIER file is not a crash artefact: it is logged as an error
  and replay stops there (later files are not applied: their records would be out of order).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._codec import (
    FILE_HEADER_SIZE,
    DecodeStop,
    JournalFormatError,
    JournalRecord,
    LogMark,
    StopReason,
    decode_file_header,
    decode_file_prev,
    decode_record,
    encode_file_header,
)

__all__ = [
    "JournalDisk",
    "ReplayStop",
    "ReplayReport",
    "journal_file_name",
    "list_journal_files",
    "next_file_id",
    "create_journal_file",
    "iter_journal",
    "repair_tail",
    "remove_old_files",
    "cut_journal",
    "SPACE_ERRNOS",
    "is_space_error",
]

log = logging.getLogger(__name__)

SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errors that mean "no space" (the file system is full, or the user's quota is used up)."""


def is_space_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an OSError meaning the disk (or the quota) is full."""
    return isinstance(exc, OSError) and exc.errno in SPACE_ERRNOS


_NAME = re.compile(r"^([0-9a-f]+)\.txn$")
_ANY_ID = re.compile(r"^([0-9a-f]+)\.txn(\.torn)?$")
_ZEROS = bytes(1024 * 1024)
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


class JournalDisk:
    """The blocking disk calls of the journal, in one object so tests can fail them on cue.

    Every method raises OSError on failure. Subclass and override to inject faults (for example
    an `fdatasync` that raises ``OSError(errno.EIO, ...)``).
    """

    def create(self, path: Path) -> int:
        """Create a new file exclusively and return a read-write descriptor."""
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        """Write all of `data` at `offset` (loops over short writes)."""
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            if n <= 0:
                raise OSError(errno.EIO, "pwrite wrote nothing")
            view = view[n:]
            offset += n

    def pwritev(self, fd: int, parts: Sequence[bytes], offset: int) -> None:
        """Write `parts` back to back at `offset`, without joining them first (one ``pwritev``
        per `IOV_MAX` parts; a short write is finished with `pwrite`).

        A subclass that overrides only `pwrite` (fault injection) still sees every journal write:
        the parts then go to its `pwrite` joined.
        """
        if type(self).pwrite is not JournalDisk.pwrite:
            self.pwrite(fd, b"".join(parts), offset)
            return
        for i in range(0, len(parts), _IOV_MAX):
            chunk = parts[i : i + _IOV_MAX]
            want = sum(map(len, chunk))
            done = os.pwritev(fd, chunk, offset)
            if done < want:
                self.pwrite(fd, memoryview(b"".join(chunk))[done:], offset + done)
            offset += want

    def fdatasync(self, fd: int) -> None:
        """Make the file's data (and the size, if it changed) durable."""
        os.fdatasync(fd)

    def reserve(self, fd: int, offset: int, length: int) -> None:
        """Reserve ``length`` bytes at ``offset`` with fallocate (the file grows; the blocks are
        "unwritten" extents that read as zeros). Filesystems without fallocate are skipped."""
        try:
            os.posix_fallocate(fd, offset, length)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise

    def zero(self, fd: int, offset: int, length: int) -> None:
        """Write zeros over ``length`` bytes at ``offset``.

        The zeros matter on ext4 (and XFS): the first write into an unwritten extent converts it
        at the next fdatasync, a metadata commit that made every journal sync 2-2.5x slower on
        this machine (1 KiB write + fdatasync: 2,150/s into fallocated space, 5,350/s into
        written zeros). Zeroing costs one buffered write per MiB; the first sync after it
        commits the conversion once for the whole range.
        """
        end = offset + length
        while offset < end:
            n = min(len(_ZEROS), end - offset)
            self.pwrite(fd, _ZEROS[:n], offset)
            offset += n

    def allocate(self, fd: int, offset: int, length: int) -> None:
        """`reserve` then `zero` the same range."""
        self.reserve(fd, offset, length)
        self.zero(fd, offset, length)

    def close(self, fd: int) -> None:
        """Close a descriptor."""
        os.close(fd)

    def fsync_dir(self, path: Path) -> None:
        """Make a directory's entries (created, renamed, removed files) durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def journal_file_name(file_id: int) -> str:
    """``{id:x}.txn``."""
    return f"{file_id:x}.txn"


def list_journal_files(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(file id, path)`` of every journal file in `directory`, by increasing id."""
    out = []
    for entry in os.scandir(directory):
        m = _NAME.match(entry.name)
        if m and entry.is_file():
            out.append((int(m.group(1), 16), Path(entry.path)))
    out.sort()
    return out


def next_file_id(directory: str | os.PathLike[str], at_least: int = 0) -> int:
    """A file id above every existing one and `at_least`: the time in ms when that is larger."""
    # set-aside (``.torn``) files count too, so that an id is never reused
    ids = [int(m.group(1), 16) for e in os.scandir(directory) if (m := _ANY_ID.match(e.name))]
    highest = max([at_least - 1, *ids])
    return max(time.time_ns() // 1_000_000, highest + 1)


def create_journal_file(
    disk: JournalDisk,
    directory: Path,
    file_id: int,
    prealloc: int,
    prev: LogMark | None = None,
    zeroed: int | None = None,
) -> int:
    """Create file `file_id` with its header and first preallocated chunk, durably; return its fd.

    ``prealloc`` bytes are reserved, of which the first ``zeroed`` (all when None) are written
    with zeros. ``prev`` is the predecessor the header declares (see the replay rules). The
    header, the allocation and the directory entry are synced here so that a later crash never
    leaves a file whose header is missing while its records are present. On failure the half-made
    file is removed again (a file without a header would read as damage once newer files follow it).
    """
    path = directory / journal_file_name(file_id)
    fd = disk.create(path)
    size = max(prealloc, FILE_HEADER_SIZE)
    try:
        disk.reserve(fd, 0, size)
        disk.zero(fd, 0, size if zeroed is None else max(FILE_HEADER_SIZE, min(zeroed, size)))
        disk.pwrite(fd, encode_file_header(file_id, prev), 0)
        disk.fdatasync(fd)
        disk.fsync_dir(directory)
    except BaseException:
        disk.close(fd)
        try:
            path.unlink()
        except OSError:
            pass
        raise
    return fd


@dataclass(frozen=True, slots=True)
class ReplayStop:
    """Where and why replay of a file stopped early."""

    file_id: int
    path: str
    offset: int
    reason: StopReason | str
    detail: str
    last_file: bool


@dataclass(slots=True)
class ReplayReport:
    """What a replay did: files read, records applied, the end mark and any early stop."""

    files: list[int] = field(default_factory=list)
    records: int = 0
    end: LogMark = LogMark(0, 0)
    stop: ReplayStop | None = None
    last_file_id: int | None = None
    bridged: list[ReplayStop] = field(default_factory=list)  # unacknowledged tails a later file declared
    skipped_files: list[int] = field(default_factory=list)  # files a later file's declaration passed over


def _is_zero_from(f, buf: bytearray, pos: int, chunk: int) -> bool:
    if buf.count(0, pos) != len(buf) - pos:
        return False
    while data := f.read(chunk):
        if data.count(0) != len(data):
            return False
    return True


def _scan_file(path: Path, start: int, chunk: int) -> Iterator[tuple[int, JournalRecord] | DecodeStop]:
    """Yield ``(end offset, record)`` for each good record from `start`, then one `DecodeStop`."""
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        buf = bytearray()
        base, pos, eof = start, 0, False
        while True:
            res = decode_record(buf, pos, final=eof)
            if not isinstance(res, DecodeStop):
                record, pos = res
                yield base + pos, record
                continue
            if res.reason is StopReason.NEED_MORE:
                del buf[:pos]
                base += pos
                pos = 0
                data = f.read(chunk)
                if data:
                    buf += data
                else:
                    eof = True
                continue
            if res.reason is StopReason.ZERO_TAIL and not _is_zero_from(f, buf, pos, chunk):
                res = DecodeStop(StopReason.BAD_LENGTH, pos, "zeroed hole followed by non-zero data")
            yield DecodeStop(res.reason, base + res.offset, res.detail)
            return


def _declarations(files: Sequence[tuple[int, Path]]) -> dict[int, LogMark]:
    """file id -> the predecessor its header declares (files that declare none, or whose header
    cannot be read, are left out: the main loop reports those)."""
    out: dict[int, LogMark] = {}
    for file_id, path in files:
        try:
            with open(path, "rb") as f:
                head = f.read(FILE_HEADER_SIZE)
            if decode_file_header(head) == file_id and (prev := decode_file_prev(head)) is not None:
                out[file_id] = prev
        except (OSError, JournalFormatError):
            continue
    return out


def _successor(files: Sequence[tuple[int, Path]], i: int, declared: dict[int, LogMark], end: LogMark) -> int | None:
    """Index of the first file after ``files[i]`` that declares ``files[i]`` as its predecessor,
    ending at or before ``end.offset`` (see the replay rules), or None."""
    for j in range(i + 1, len(files)):
        prev = declared.get(files[j][0])
        if prev is not None and prev.file_id == end.file_id and prev.offset <= end.offset:
            return j
    return None


def iter_journal(
    directory: str | os.PathLike[str],
    from_mark: LogMark,
    report: ReplayReport | None = None,
    chunk: int = 4 * 1024 * 1024,
) -> Iterator[tuple[LogMark, JournalRecord]]:
    """Yield ``(mark, record)`` for every record at or after `from_mark`, in journal order.

    Follows the replay rules in the module docstring; fills `report` (if given) as it goes. A
    file whose header is unreadable counts as damaged at offset 0. Never raises for damaged data;
    raises OSError if a file cannot be read at all.
    """
    report = report if report is not None else ReplayReport()
    every = list_journal_files(directory)
    report.last_file_id = every[-1][0] if every else None
    files = [(fid, p) for fid, p in every if fid >= from_mark.file_id]
    report.end = from_mark
    declared = _declarations(files[1:])
    i = 0
    while i < len(files):
        file_id, path = files[i]
        last = i == len(files) - 1
        report.files.append(file_id)
        try:
            with open(path, "rb") as f:
                if decode_file_header(f.read(FILE_HEADER_SIZE)) != file_id:
                    raise JournalFormatError("file id in header does not match the file name")
        except JournalFormatError as exc:
            _record_stop(report, ReplayStop(file_id, str(path), 0, "bad file header", str(exc), last))
            return
        start = FILE_HEADER_SIZE
        if file_id == from_mark.file_id:
            start = max(start, from_mark.offset)
        report.end = max(report.end, LogMark(file_id, start))
        stop: DecodeStop | None = None
        for item in _scan_file(path, start, chunk):
            if isinstance(item, DecodeStop):
                stop = item
                break
            end, record = item
            mark = LogMark(file_id, end)
            report.records += 1
            report.end = mark
            yield mark, record
        assert stop is not None  # _scan_file always ends with one
        nxt = _successor(files, i, declared, LogMark(file_id, stop.offset))
        if not stop.reason.clean:
            damage = ReplayStop(file_id, str(path), stop.offset, stop.reason, stop.detail, last)
            if nxt is None:
                _record_stop(report, damage)
                return
            report.bridged.append(damage)
            log.warning(
                "journal replay: %s has an unacknowledged tail from offset %d (%s %s); journal file "
                "%x declares that the history continues there",
                path,
                stop.offset,
                stop.reason.value,
                stop.detail,
                files[nxt][0],
            )
        if nxt is None:
            i += 1
            continue
        passed = [fid for fid, _ in files[i + 1 : nxt]]
        if passed:
            report.skipped_files.extend(passed)
            log.warning(
                "journal replay: skipping files %s: file %x declares that nothing in them was acknowledged",
                [f"{fid:x}" for fid in passed],
                files[nxt][0],
            )
        i = nxt


def _record_stop(report: ReplayReport, stop: ReplayStop) -> None:
    report.stop = stop
    reason = stop.reason.value if isinstance(stop.reason, StopReason) else stop.reason
    if stop.last_file:
        log.warning(
            "journal replay: ignoring torn tail of last file %s at offset %d: %s %s",
            stop.path,
            stop.offset,
            reason,
            stop.detail,
        )
    else:
        log.error(
            "journal replay: CORRUPT record in %s at offset %d (%s %s); NOT replaying anything "
            "after it, including later journal files",
            stop.path,
            stop.offset,
            reason,
            stop.detail,
        )


def repair_tail(disk: JournalDisk, stop: ReplayStop) -> None:
    """Make the last file end cleanly where replay stopped: cut it, or set aside a bad header.

    Only for a stop in the last file (anything after it was never acknowledged). A file with an
    unreadable header is renamed to ``*.txn.torn`` rather than deleted, for inspection.
    """
    if not stop.last_file:
        raise ValueError("only the last journal file may be repaired")
    path = Path(stop.path)
    if stop.offset == 0:
        os.replace(path, path.with_name(path.name + ".torn"))
        disk.fsync_dir(path.parent)
        return
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, stop.offset)
        disk.fdatasync(fd)
    finally:
        os.close(fd)


def cut_journal(disk: JournalDisk, directory: Path, mark: LogMark, own_from: int) -> LogMark | None:
    """Make `mark` the end of the journal before it resumes on a fresh file after a full disk.

    Deletes the files after the mark's file that this run created (ids at least ``own_from``;
    none holds an acknowledged record), newest first; then, if the mark's file is the last one
    left, cuts it at the mark (what follows was never acknowledged, and the cut returns its
    preallocated space). Files of earlier runs are never deleted, and a file followed by one of
    them is left whole (the fresh file's declaration passes over what follows the mark). Returns
    `mark` when its file exists (the predecessor the fresh file then declares), else None.
    Raises OSError.
    """
    files = list_journal_files(directory)
    removed = False
    for file_id, path in reversed(files):
        if file_id > mark.file_id and file_id >= own_from:
            path.unlink(missing_ok=True)
            removed = True
    if removed:
        disk.fsync_dir(directory)
    left = [(fid, p) for fid, p in files if fid <= mark.file_id or fid < own_from]
    for i, (file_id, path) in enumerate(left):
        if file_id != mark.file_id:
            continue
        if i == len(left) - 1 and path.stat().st_size > mark.offset:
            fd = os.open(path, os.O_RDWR)
            try:
                os.ftruncate(fd, mark.offset)
                disk.fdatasync(fd)
            finally:
                os.close(fd)
        return mark
    return None


def remove_old_files(directory: str | os.PathLike[str], mark: LogMark, max_backups: int) -> list[int]:
    """Delete journal files wholly below `mark`, keeping the newest `max_backups` of them.

    Returns the ids deleted. A file is wholly below the mark when its id is lower than the mark's
    file id: the mark's own file, and anything newer, still holds records to replay.
    """
    below = [(fid, p) for fid, p in list_journal_files(directory) if fid < mark.file_id]
    doomed = below[: max(0, len(below) - max_backups)]
    removed = []
    for fid, path in doomed:
        try:
            path.unlink()
            removed.append(fid)
        except FileNotFoundError:
            pass
    return removed
