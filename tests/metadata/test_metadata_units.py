"""Pure pieces of the metadata package: URLs, paths, the coalescing channel, the tree engine."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata import (
    InvalidPathError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionState,
    parse_store_url,
)
from metadata._channel import CoalescingChannel
from metadata._paths import ancestors, parent, validate
from metadata._tree import MemoryStorage, Tree


def test_parse_store_urls() -> None:
    zk = parse_store_url("zk://h1:2181,h2:2182/magnetar/c1?session_timeout_ms=4000")
    assert (zk.scheme, zk.location, zk.chroot, zk.session_timeout_s) == ("zk", "h1:2181,h2:2182", "/magnetar/c1", 4.0)
    assert parse_store_url("zk://h:1").chroot == ""
    emb = parse_store_url("embedded:///var/lib/magnetar/meta")
    assert (emb.scheme, emb.location) == ("embedded", "/var/lib/magnetar/meta")
    assert parse_store_url("memory://unit").location == "unit"
    for bad in (
        "embedded://relative/dir",
        "http://x",
        "zk:///only-chroot",
        "zk://h:1?bogus=1",
        "memory://",
        "zk://h:1?session_timeout_ms=soon",
    ):
        with pytest.raises(ValueError):
            parse_store_url(bad)


def test_parse_store_urls_in_pulsars_and_bookkeepers_spellings() -> None:
    # Pulsar's metadataStoreUrl: zk:hosts/chroot, or bare hosts (ZooKeeper by default)
    pulsar = parse_store_url("zk:zk1:2181,zk2:2181/pulsar")
    assert (pulsar.scheme, pulsar.location, pulsar.chroot) == ("zk", "zk1:2181,zk2:2181", "/pulsar")
    bare = parse_store_url("zk1:2181,zk2:2181")
    assert (bare.scheme, bare.location, bare.chroot) == ("zk", "zk1:2181,zk2:2181", "")
    # BookKeeper's metadataServiceUri: the path is the ledgers node, hosts separated by ';'
    bk = parse_store_url("zk+hierarchical://localhost:2181/ledgers")
    assert (bk.scheme, bk.location, bk.chroot) == ("zk", "localhost:2181", "")
    nested = parse_store_url("zk+longhierarchical://a:1;b:2/cluster-a/ledgers")
    assert (nested.location, nested.chroot) == ("a:1,b:2", "/cluster-a")
    for bad in ("zk+flat://h:1/not-ledgers", "rocksdb:///data/metadata", "zk:no-port"):
        with pytest.raises(ValueError):
            parse_store_url(bad)


def test_paths() -> None:
    assert validate("/") == "/"
    assert validate("/a/b") == "/a/b"
    assert parent("/a/b") == "/a" and parent("/a") == "/"
    assert ancestors("/a/b/c") == ["/a", "/a/b"]
    for bad in ("", "a", "/a/", "//", "/a/../b", "/a\x00"):
        with pytest.raises(InvalidPathError):
            validate(bad)


async def test_channel_coalesces_and_keeps_the_latest_last() -> None:
    ch: CoalescingChannel[SessionState] = CoalescingChannel()
    for state in (
        SessionState.SUSPENDED,
        SessionState.CONNECTED,
        SessionState.SUSPENDED,
        SessionState.CONNECTED,
        SessionState.SUSPENDED,
    ):
        ch.push(state)
    assert ch.pending() == 2  # bounded by the number of distinct items
    assert await ch.receive() is SessionState.CONNECTED
    assert await ch.receive() is SessionState.SUSPENDED  # the current state arrives last
    ch.push(SessionState.LOST)
    ch.finish()
    ch.push(SessionState.CONNECTED)  # ignored after finish
    assert await ch.receive() is SessionState.LOST
    with pytest.raises(trio.EndOfChannel):
        await ch.receive()


async def test_channel_receive_waits_for_a_push() -> None:
    ch: CoalescingChannel[int] = CoalescingChannel()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep, 0.01)
        await trio.lowlevel.checkpoint()
        ch.push(7)
        assert await ch.receive() == 7
    with trio.move_on_after(0.05) as scope:
        await ch.receive()
    assert scope.cancelled_caught
    ch.push(8)  # a cancelled receive lost nothing
    assert await ch.receive() == 8


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["create", "delete", "set"]), st.sampled_from(["/a", "/a/b", "/a/c", "/d", "/a/b/e"])
        ),
        max_size=30,
    )
)
def test_tree_counters_stay_consistent(ops: list[tuple[str, str]]) -> None:
    """Whatever sequence of ops, each succeeds or fails as a model of the tree says (with the
    error that says why), the tree holds the model's nodes, and num_children matches the child
    list."""
    tree = Tree(MemoryStorage())
    model = {"/"}
    for op, path in ops:
        parent_path = path.rsplit("/", 1)[0] or "/"
        has_children = any(p.startswith(path + "/") for p in model)
        expected: type[Exception] | None
        if op == "create":
            expected = NodeExistsError if path in model else NoNodeError if parent_path not in model else None
            call = lambda t, p=path: t.create(p, b"", 0)  # noqa: E731
        elif op == "delete":
            expected = NoNodeError if path not in model else NotEmptyError if has_children else None
            call = lambda t, p=path: t.delete(p)  # noqa: E731
        else:
            expected = NoNodeError if path not in model else None
            call = lambda t, p=path: t.set(p, b"x", -1)  # noqa: E731
        if expected is None:
            tree.apply(call)
            if op == "create":
                model.add(path)
            elif op == "delete":
                model.discard(path)
        else:
            with pytest.raises(expected):
                tree.apply(call)
    for path in ("/", "/a", "/a/b", "/a/c", "/d", "/a/b/e"):
        node = tree.storage.load(path)
        assert (node is not None) == (path in model), path
        if node is not None:
            assert node.num_children == len(tree.storage.child_names(path))
