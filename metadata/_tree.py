"""ZooKeeper semantics over a pluggable node storage: the engine of the local backends.

Sans-IO in the sense that matters here: the engine is synchronous and knows nothing about trio
or threads. A `TreeStorage` (a dict in `MemoryStorage`, sqlite in `_sqlite`) holds the nodes;
`Tree.apply` runs one operation against a write overlay (`Txn`) and hands the overlay to the
storage in one atomic commit, or drops it if the operation raised. So a transaction of many ops
is all or nothing for free, and the events it produced are returned only on success.

Rules kept here (ZooKeeper's):

* The root ``/`` always exists and cannot be deleted.
* A node's parent must exist; an ephemeral parent cannot have children.
* ``version`` starts at 0 and grows by one per set; ``cversion`` grows by one per child created
  or deleted.
* A sequential suffix is the parent's cversion, as in ZooKeeper, but never below a counter per
  parent path that is stored apart from the parent and never reset, so a suffix is never handed
  out twice, even after the parent is deleted and re-created.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from . import _paths
from ._errors import (
    BadVersionError,
    InvalidPathError,
    MetadataError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    TransactionFailedError,
)
from ._types import Check, Create, Delete, Op, OpResult, SetData, Stat, WatchKind

R = TypeVar("R")
Event = tuple[WatchKind, str]


@dataclass(frozen=True)
class Node:
    """A stored node: data plus the counters Stat reports."""

    data: bytes
    version: int
    cversion: int
    ctime_ms: int
    mtime_ms: int
    owner: int
    num_children: int

    def stat(self) -> Stat:
        return Stat(self.version, self.cversion, self.ctime_ms, self.mtime_ms, self.owner, self.num_children)


class TreeStorage(Protocol):
    """Where nodes live. Reads see committed state; ``commit`` applies a batch atomically."""

    def load(self, path: str) -> Node | None: ...
    def child_names(self, path: str) -> list[str]: ...
    def owned_by(self, owner: int) -> list[str]: ...
    def all_ephemerals(self) -> list[str]: ...
    def counter(self, key: str) -> int: ...
    def begin(self) -> None: ...
    def commit(self, writes: dict[str, Node | None], counters: dict[str, int]) -> None: ...
    def rollback(self) -> None: ...


def now_ms() -> int:
    return int(time.time() * 1000)


SESSION_COUNTER = "\x00session"  # a counter key no path can collide with (paths start with '/')


class Txn:
    """One operation's view of the tree: committed state plus this operation's writes."""

    def __init__(self, storage: TreeStorage, now: int) -> None:
        self.storage = storage
        self.now = now
        self.writes: dict[str, Node | None] = {}
        self.counters: dict[str, int] = {}
        self.events: list[Event] = []

    # -- reads through the overlay -------------------------------------------------------------
    def node(self, path: str) -> Node | None:
        if path in self.writes:
            return self.writes[path]
        return self.storage.load(path)

    def child_names(self, path: str) -> list[str]:
        names = set(self.storage.child_names(path))
        for p, n in self.writes.items():
            if p != _paths.ROOT and _paths.parent(p) == path:
                if n is None:
                    names.discard(_paths.name(p))
                else:
                    names.add(_paths.name(p))
        return sorted(names)

    def next_counter(self, key: str, at_least: int = 0) -> int:
        value = self.counters.get(key)
        if value is None:
            value = self.storage.counter(key)
        value = max(value, at_least)
        self.counters[key] = value + 1
        return value

    def _must(self, path: str, doing: str) -> Node:
        node = self.node(path)
        if node is None:
            raise NoNodeError(path, doing)
        return node

    # -- operations ------------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, Stat]:
        node = self._must(_paths.validate(path), "get")
        return node.data, node.stat()

    def exists(self, path: str) -> Stat | None:
        node = self.node(_paths.validate(path))
        return None if node is None else node.stat()

    def children(self, path: str) -> list[str]:
        self._must(_paths.validate(path), "children")
        return self.child_names(path)

    def create(
        self, path: str, value: bytes, owner: int, *, sequential: bool = False, make_parents: bool = False
    ) -> str:
        # ZooKeeper lets a sequential path end in '/': the suffix then is the whole name
        _paths.validate(path + "0" if sequential else path)
        if path == _paths.ROOT:
            raise NodeExistsError(path)
        parent = _paths.parent(path if not path.endswith("/") else path + "0")
        pnode = self.node(parent)
        if pnode is None and make_parents:
            for p in [*_paths.ancestors(parent), parent]:
                if self.node(p) is None:
                    self._insert(p, b"", 0)
            pnode = self.node(parent)
        if pnode is None:
            raise NoNodeError(parent, f"create {path}")
        if pnode.owner:
            raise NoChildrenForEphemeralsError(path)
        if sequential:
            # ZooKeeper numbers by the parent's cversion; the stored counter keeps numbers unique
            # when the parent is deleted and re-created (its cversion restarts at 0)
            path = _paths.sequential_name(path, self.next_counter(parent, pnode.cversion))
        if self.node(path) is not None:
            raise NodeExistsError(path)
        self._insert(path, bytes(value), owner)
        return path

    def _insert(self, path: str, value: bytes, owner: int) -> None:
        parent = _paths.parent(path)
        pnode = self.node(parent)
        assert pnode is not None
        self.writes[path] = Node(value, 0, 0, self.now, self.now, owner, 0)
        self.writes[parent] = replace(pnode, cversion=pnode.cversion + 1, num_children=pnode.num_children + 1)
        self.events.append((WatchKind.CREATED, path))
        self.events.append((WatchKind.CHILDREN_CHANGED, parent))

    def set(self, path: str, value: bytes, version: int) -> Stat:
        node = self._must(_paths.validate(path), "set")
        if version != -1 and version != node.version:
            raise BadVersionError(path, version, node.version)
        new = replace(node, data=bytes(value), version=node.version + 1, mtime_ms=self.now)
        self.writes[path] = new
        self.events.append((WatchKind.CHANGED, path))
        return new.stat()

    def check(self, path: str, version: int) -> None:
        node = self._must(_paths.validate(path), "check")
        if version != -1 and version != node.version:
            raise BadVersionError(path, version, node.version)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        _paths.validate(path)
        if path == _paths.ROOT:
            raise InvalidPathError(path, "the root cannot be deleted")
        node = self._must(path, "delete")
        if version != -1 and version != node.version:
            raise BadVersionError(path, version, node.version)
        kids = self.child_names(path)
        if kids and not recursive:
            raise NotEmptyError(path)
        for kid in kids:
            self._delete_subtree(_paths.join(path, kid))
        self._remove(path, notify_parent=True)

    def _delete_subtree(self, path: str) -> None:
        for kid in self.child_names(path):
            self._delete_subtree(_paths.join(path, kid))
        # the parent is about to go as well: its watchers get DELETED, not CHILDREN_CHANGED
        self._remove(path, notify_parent=False)

    def _remove(self, path: str, notify_parent: bool) -> None:
        parent = _paths.parent(path)
        pnode = self.node(parent)
        assert pnode is not None
        self.writes[path] = None
        self.writes[parent] = replace(pnode, cversion=pnode.cversion + 1, num_children=pnode.num_children - 1)
        self.events.append((WatchKind.DELETED, path))
        if notify_parent:
            self.events.append((WatchKind.CHILDREN_CHANGED, parent))

    def transaction(self, ops: Sequence[Op], owner: int) -> list[OpResult]:
        results = []
        for index, op in enumerate(ops):
            try:
                results.append(self._apply_op(op, owner))
            except MetadataError as exc:
                raise TransactionFailedError(index, op, exc) from exc
        return results

    def _apply_op(self, op: Op, owner: int) -> OpResult:
        if isinstance(op, Create):
            actual = self.create(op.path, op.value, owner if op.ephemeral else 0, sequential=op.sequential)
            return OpResult(op, actual)
        if isinstance(op, SetData):
            return OpResult(op, op.path, self.set(op.path, op.value, op.version))
        if isinstance(op, Delete):
            self.delete(op.path, op.version)
            return OpResult(op, op.path)
        if isinstance(op, Check):
            self.check(op.path, op.version)
            return OpResult(op, op.path)
        raise TypeError(f"not a metadata op: {op!r}")

    def drop_ephemerals(self, paths: Iterable[str]) -> None:
        """Delete the given ephemerals (a session ended); ones already gone are skipped."""
        for path in paths:
            if self.node(path) is not None:
                self._remove(path, notify_parent=True)


class Tree:
    """Runs operations atomically against a storage; not thread-safe (callers serialise)."""

    def __init__(self, storage: TreeStorage, clock: Callable[[], int] = now_ms) -> None:
        self.storage = storage
        self._clock = clock

    def apply(self, fn: Callable[[Txn], R]) -> tuple[R, list[Event]]:
        """Run ``fn`` on a fresh Txn; commit its writes if it returns, discard them if it raises."""
        txn = Txn(self.storage, self._clock())
        self.storage.begin()
        try:
            result = fn(txn)
        except BaseException:
            self.storage.rollback()
            raise
        if txn.writes or txn.counters:
            self.storage.commit(txn.writes, txn.counters)
        else:
            self.storage.rollback()
        return result, txn.events


ROOT_NODE = Node(b"", 0, 0, 0, 0, 0, 0)


class MemoryStorage:
    """Nodes in dicts, for the ``memory://`` backend and for tests of the engine."""

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {_paths.ROOT: ROOT_NODE}
        self._children: dict[str, set[str]] = {_paths.ROOT: set()}
        self._counters: dict[str, int] = {}

    def load(self, path: str) -> Node | None:
        return self._nodes.get(path)

    def child_names(self, path: str) -> list[str]:
        return sorted(self._children.get(path, ()))

    def owned_by(self, owner: int) -> list[str]:
        return sorted(p for p, n in self._nodes.items() if n.owner == owner)

    def all_ephemerals(self) -> list[str]:
        return sorted(p for p, n in self._nodes.items() if n.owner)

    def counter(self, key: str) -> int:
        return self._counters.get(key, 0)

    def begin(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def commit(self, writes: dict[str, Node | None], counters: dict[str, int]) -> None:
        for path, node in writes.items():
            if node is None:
                self._nodes.pop(path, None)
                self._children.pop(path, None)
                # the parent may already be gone in this batch: the order of writes is not depth order
                self._children.get(_paths.parent(path), set()).discard(_paths.name(path))
            else:
                if path not in self._nodes and path != _paths.ROOT:
                    self._children.setdefault(_paths.parent(path), set()).add(_paths.name(path))
                    self._children.setdefault(path, set())
                self._nodes[path] = node
        self._counters.update(counters)
