"""`BlobStore`: the few operations an offloader needs of an object store, and the contract its
implementations (`FileSystemStore`, `S3Store`) keep.

Rules every implementation follows:

* Rule 1: an object is written once, by one `Upload`; it becomes visible under its key only when
  ``complete`` returns, whole (never a prefix). ``abort`` leaves nothing behind.
* Rule 2: reads never see a partly written object; ``get_range`` returns exactly ``length`` bytes
  or raises (a short read is an error, not a shorter answer).
* Rule 3: a missing object raises `ObjectNotFound`; a store that cannot be reached or refuses the
  request raises `TierUnavailable` with a message naming the store; nothing else escapes but
  `TierError` and cancellation.
* Rule 4: blocking I/O (files, HTTP) runs on worker threads, never on the trio loop.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["BlobStore", "Upload"]


class Upload(Protocol):
    """One object being written (Rule 1)."""

    async def write(self, data: bytes) -> None:
        """Append ``data``; may upload what is buffered so far."""
        ...

    async def complete(self) -> None:
        """Make the object visible, whole."""
        ...

    async def abort(self) -> None:
        """Drop everything written (never raises)."""
        ...


class BlobStore(Protocol):
    """An object store: a flat namespace of immutable objects (see the module rules)."""

    @property
    def location(self) -> str:
        """Where the objects go, for messages (``s3://bucket at http://host:port``, ``file:///dir``)."""
        ...

    async def begin_upload(self, key: str) -> Upload:
        """Start writing the object ``key``."""
        ...

    async def put(self, key: str, data: bytes) -> None:
        """Write a small object in one request."""
        ...

    async def get(self, key: str) -> bytes:
        """A whole object."""
        ...

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from ``start`` (Rule 2)."""
        ...

    async def size(self, key: str) -> int:
        """The object's size in bytes."""
        ...

    async def delete(self, key: str) -> bool:
        """Delete ``key``; False when it did not exist."""
        ...
