"""The metadata store's exceptions: one class per ZooKeeper failure the callers act on.

Every error names the path it is about (``.path``) so that a log line says which node was
missing, already there, or at a different version. Both backends raise exactly these classes;
no kazoo exception escapes the package.
"""

from __future__ import annotations

from typing import Any


class MetadataError(Exception):
    """Base class of every metadata store failure. ``path`` is the node concerned, if any."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class InvalidPathError(MetadataError, ValueError):
    """A path is not absolute, has empty/``.``/``..`` components, or the operation is not
    allowed on it (for example deleting the root)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"invalid path {path!r}: {why}", path)


class NoNodeError(MetadataError):
    """The node (or, for a create, its parent) does not exist."""

    def __init__(self, path: str, doing: str = "") -> None:
        what = f"{doing}: " if doing else ""
        super().__init__(f"{what}node {path} does not exist", path)


class NodeExistsError(MetadataError):
    """A create found the node already there."""

    def __init__(self, path: str) -> None:
        super().__init__(f"node {path} already exists", path)


class BadVersionError(MetadataError):
    """A compare-and-set (set, delete or check with a version) saw another version."""

    def __init__(self, path: str, expected: int, actual: int | None = None) -> None:
        seen = f", found version {actual}" if actual is not None else ""
        super().__init__(f"version conflict on {path}: expected version {expected}{seen}", path)
        self.expected = expected
        self.actual = actual


class NotEmptyError(MetadataError):
    """A non-recursive delete of a node that has children."""

    def __init__(self, path: str) -> None:
        super().__init__(f"node {path} has children; delete them first or pass recursive=True", path)


class NoChildrenForEphemeralsError(MetadataError):
    """A create under an ephemeral node: ephemerals cannot have children."""

    def __init__(self, path: str) -> None:
        super().__init__(f"cannot create {path}: its parent is ephemeral and cannot have children", path)


class NoAuthError(MetadataError):
    """ZooKeeper refused the operation: the node's ACL does not grant it to this session's
    credentials (see ``metadata._security``)."""


class ConnectionLossError(MetadataError):
    """The connection to the metadata service dropped; the outcome of the call is unknown."""


class SessionExpiredError(MetadataError):
    """The session is gone (expired, or the store was closed): its ephemerals are deleted."""


class StoreLockedError(MetadataError):
    """The embedded store's directory is held by another process."""


class TransactionFailedError(MetadataError):
    """A transaction was rolled back: nothing of it was applied.

    ``index`` is the position of the failing op in the list, ``op`` the op itself and ``cause``
    the error that op alone would have raised (NoNodeError, BadVersionError, ...).
    """

    def __init__(self, index: int, op: Any, cause: MetadataError) -> None:
        super().__init__(f"transaction rolled back: op #{index} {op!r} failed: {cause}", cause.path)
        self.index = index
        self.op = op
        self.cause = cause
