"""`FileSystemStore`: offloaded ledgers as files under one directory (the ``filesystem`` driver).

``fileSystemURI`` names the directory: ``file:///data/offload`` or a plain absolute path. An
object ``key`` is the file ``{root}/{key}``. An upload writes ``{key}.partial-{random}`` beside
it, syncs it and renames it into place (then syncs the directory), so an object exists whole or
not at all (`BlobStore` Rule 1), even across a crash. Every file operation runs on a worker thread
bounded by the store's limiter (Rule 4). The directory may be a network mount shared by the
brokers (and the Spark executors that read it in ``readMode=bookies``).
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

import trio

from ._errors import ObjectNotFound, TierError, TierUnavailable

__all__ = ["FileSystemStore", "filesystem_root"]


def filesystem_root(uri: str) -> Path:
    """The directory a ``fileSystemURI`` names; ValueError for a scheme other than ``file`` (HDFS
    and the like are not supported) or a relative path."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme else uri
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise ValueError(f"fileSystemURI {uri!r}: a file:// URI names a local path (file:///dir)")
        if not path or not os.path.isabs(path):
            raise ValueError(f"fileSystemURI {uri!r} must be an absolute path or a file:/// URI")
        return Path(path)
    raise ValueError(f"fileSystemURI {uri!r}: only file:// URIs (local or mounted directories) are supported")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _FileUpload:
    def __init__(self, store: FileSystemStore, target: Path, tmp: Path, f: BinaryIO) -> None:
        self._store = store
        self._target = target
        self._tmp = tmp
        self._file: BinaryIO | None = f

    async def write(self, data: bytes) -> None:
        f = self._file
        if f is None:
            raise TierError(f"{self._target}: write after the upload ended")
        await self._store._run(f.write, data)

    async def complete(self) -> None:
        f = self._file
        if f is None:
            raise TierError(f"{self._target}: the upload already ended")
        self._file = None

        def finish() -> None:
            try:
                f.flush()
                os.fsync(f.fileno())
            finally:
                f.close()
            os.replace(self._tmp, self._target)
            _fsync_dir(self._target.parent)

        try:
            await self._store._run(finish)
        except BaseException:
            await self.abort()
            raise

    async def abort(self) -> None:
        f, self._file = self._file, None

        def drop() -> None:
            if f is not None:
                f.close()
            self._tmp.unlink(missing_ok=True)

        try:
            await self._store._run(drop)
        except TierError:
            pass  # a leftover .partial file holds no object (Rule 1)


class FileSystemStore:
    """Objects as files under ``root`` (see the module docstring)."""

    def __init__(self, uri: str, limiter: trio.CapacityLimiter | None = None) -> None:
        self.root = filesystem_root(uri)
        self._uri = uri
        self._limiter = limiter if limiter is not None else trio.CapacityLimiter(4)

    @property
    def location(self) -> str:
        """The directory, as ``file://`` URI."""
        return f"file://{self.root}"

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise TierError(f"invalid object key {key!r}")
        return self.root / key

    async def _run(self, fn: Any, *args: Any) -> Any:
        try:
            return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"{self.location}: {exc.filename or exc} does not exist") from exc
        except OSError as exc:
            if exc.errno in (
                errno.ENOSPC,
                errno.EDQUOT,
                errno.EROFS,
                errno.EACCES,
                errno.EIO,
                errno.ENOTCONN,
                errno.ESTALE,
            ):
                raise TierUnavailable(f"offload directory {self.location} unusable: {exc}") from exc
            raise TierError(f"offload directory {self.location}: {exc}") from exc

    async def begin_upload(self, key: str) -> _FileUpload:
        """Start writing ``key`` (a temporary file until ``complete``)."""
        target = self._path(key)
        tmp = target.with_name(f"{target.name}.partial-{secrets.token_hex(6)}")

        def start() -> BinaryIO:
            if not self.root.is_dir():
                raise TierUnavailable(f"offload directory {self.location} does not exist")
            target.parent.mkdir(parents=True, exist_ok=True)
            return open(tmp, "xb")

        f = await self._run(start)
        return _FileUpload(self, target, tmp, f)

    async def put(self, key: str, data: bytes) -> None:
        """Write a small object (through an upload, so it appears whole)."""
        upload = await self.begin_upload(key)
        try:
            await upload.write(data)
        except BaseException:
            await upload.abort()
            raise
        await upload.complete()

    async def get(self, key: str) -> bytes:
        """The whole file."""
        path = self._path(key)
        data: bytes = await self._run(path.read_bytes)
        return data

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start``; `TierError` when the file is shorter."""
        path = self._path(key)

        def read() -> bytes:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read(length)

        data: bytes = await self._run(read)
        if len(data) != length:
            raise TierError(f"{self.location}/{key}: wanted {length} bytes at {start}, the file has {len(data)}")
        return data

    async def size(self, key: str) -> int:
        """The file's size."""
        path = self._path(key)
        st = await self._run(os.stat, path)
        return int(st.st_size)

    async def delete(self, key: str) -> bool:
        """Remove the file; False when it was not there."""
        path = self._path(key)
        try:
            await self._run(path.unlink)
        except ObjectNotFound:
            return False
        return True
