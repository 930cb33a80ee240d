"""The metadata store contract: node stats, ops, watch events, session states, the Protocol.

Both backends (ZooKeeper through kazoo, and the local embedded / in-memory tree) implement
`MetadataStore` with ZooKeeper's semantics:

* Nodes are persistent or ephemeral (deleted when the creating session ends); ephemerals cannot
  have children. A create needs the parent to exist unless ``make_parents`` is given.
* Sequential creates append a 10-digit, zero-padded counter kept per parent; it never repeats.
* Every update carries the version it expects (``-1`` = any); a mismatch raises BadVersionError,
  so two writers never both win.
* Watches are registered for the life of a context manager; each change of the watched node is
  one `WatchEvent` on the channel. Channels are bounded by coalescing (see `_channel`).

Session state rules (SessionState):

* Rule 1: a store starts CONNECTED once ``open_metadata_store`` returns.
* Rule 2: CONNECTED -> SUSPENDED when the connection drops (ZooKeeper only); calls may then fail
  with ConnectionLossError, and ephemerals still exist.
* Rule 3: SUSPENDED -> CONNECTED when the same session reconnects; nothing was lost.
* Rule 4: SUSPENDED/CONNECTED -> LOST when the session expired: its ephemerals are gone. The
  ZooKeeper store then opens a new session (new ``session_id``) and goes back to CONNECTED;
  owners of ephemerals must recreate them.
* Rule 5: any state -> CLOSED on ``close()``; CLOSED is final.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeAlias

import trio


class SessionState(enum.Enum):
    """The state of a store's session; transitions are listed in this module's header."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"
    CLOSED = "closed"


class WatchKind(enum.Enum):
    """What happened to a watched node.

    Data watches see CREATED, CHANGED and DELETED of their node; children watches see
    CHILDREN_CHANGED (a child was created or deleted) and CREATED / DELETED of their node.
    """

    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


@dataclass(frozen=True)
class WatchEvent:
    """One change of the watched node ``path``."""

    kind: WatchKind
    path: str


@dataclass(frozen=True)
class Stat:
    """A node's metadata, as ZooKeeper's Stat.

    ``version`` is the data version (0 on create, +1 per set); ``cversion`` counts child
    creates and deletes; ``ephemeral_owner`` is the owning session id, 0 for persistent nodes.
    """

    version: int
    cversion: int
    ctime_ms: int
    mtime_ms: int
    ephemeral_owner: int
    num_children: int


@dataclass(frozen=True)
class Check:
    """Transaction op: fail unless ``path`` exists at ``version`` (-1: just exists)."""

    path: str
    version: int


@dataclass(frozen=True)
class Create:
    """Transaction op: create ``path`` (parents must exist)."""

    path: str
    value: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True)
class SetData:
    """Transaction op: set ``path``'s data if it is at ``version`` (-1: any)."""

    path: str
    value: bytes
    version: int = -1


@dataclass(frozen=True)
class Delete:
    """Transaction op: delete the childless node ``path`` if it is at ``version`` (-1: any)."""

    path: str
    version: int = -1


Op: TypeAlias = Check | Create | SetData | Delete


@dataclass(frozen=True)
class OpResult:
    """The outcome of one op of a committed transaction.

    ``path`` is the actual path (with the sequential suffix for a sequential Create); ``stat`` is
    the node's new Stat for SetData and None for the other ops.
    """

    op: Op
    path: str
    stat: Stat | None = None


class MetadataStore(Protocol):
    """A session on a ZooKeeper-like hierarchical store. See the module header for semantics.

    All paths are absolute (``/a/b``); an invalid one raises InvalidPathError. Every call may
    also raise ConnectionLossError / SessionExpiredError (ZooKeeper), or SessionExpiredError
    after ``close()``.
    """

    session_id: int
    session_state: SessionState

    async def get(self, path: str) -> tuple[bytes, Stat]:
        """The node's data and stat; raises NoNodeError."""
        ...

    async def exists(self, path: str) -> Stat | None:
        """The node's stat, or None if it does not exist."""
        ...

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node and return its actual path (sequential suffix: 10 digits).

        Raises NodeExistsError, NoNodeError (parent missing and not make_parents),
        NoChildrenForEphemeralsError. Parents made by make_parents are persistent and empty.
        """
        ...

    async def set(self, path: str, value: bytes, *, version: int) -> Stat:
        """Compare-and-set the data; ``version=-1`` means any. Raises NoNodeError, BadVersionError."""
        ...

    async def delete(self, path: str, *, version: int = -1, recursive: bool = False) -> None:
        """Delete a node (and with ``recursive`` its subtree; ``version`` applies to ``path``).

        Raises NoNodeError, BadVersionError, NotEmptyError.
        """
        ...

    async def children(self, path: str) -> list[str]:
        """The names of the node's children, sorted; raises NoNodeError."""
        ...

    async def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply all ops or none; raises TransactionFailedError naming the failing op."""
        ...

    def watch_data(self, path: str) -> AbstractAsyncContextManager[trio.abc.ReceiveChannel[WatchEvent]]:
        """Watch a node (which may not exist yet) for CREATED / CHANGED / DELETED.

        Changes after ``__aenter__`` returns are reported; the channel ends when the store closes.
        """
        ...

    def watch_children(self, path: str) -> AbstractAsyncContextManager[trio.abc.ReceiveChannel[WatchEvent]]:
        """Watch a node's child list for CHILDREN_CHANGED, and the node for CREATED / DELETED."""
        ...

    def watch_session(self) -> AbstractAsyncContextManager[trio.abc.ReceiveChannel[SessionState]]:
        """Session state transitions after ``__aenter__`` returns (the latest always arrives)."""
        ...

    async def close(self) -> None:
        """End the session (its ephemerals are deleted); idempotent."""
        ...
