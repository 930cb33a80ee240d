"""The MetadataStore contract, run against every backend (memory, embedded, real ZooKeeper)."""

from __future__ import annotations

import re

import pytest
import trio

from metadata import (
    BadVersionError,
    Check,
    Create,
    Delete,
    InvalidPathError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    SessionState,
    SetData,
    TransactionFailedError,
    WatchEvent,
    WatchKind,
    ensure_path,
    open_metadata_store,
)

QUIET_S = 0.3  # how long "no further event" is waited for


async def no_event(channel: trio.abc.ReceiveChannel[WatchEvent]) -> None:
    with trio.move_on_after(QUIET_S):
        event = await channel.receive()
        pytest.fail(f"unexpected watch event {event}")


async def next_event(channel: trio.abc.ReceiveChannel[WatchEvent]) -> WatchEvent:
    with trio.fail_after(10):
        return await channel.receive()


async def test_create_get_set_versions(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        assert await store.exists("/a") is None
        assert await store.create("/a", b"one") == "/a"
        data, stat = await store.get("/a")
        assert data == b"one"
        assert (stat.version, stat.num_children, stat.ephemeral_owner) == (0, 0, 0)
        stat = await store.set("/a", b"two", version=0)
        assert stat.version == 1
        with pytest.raises(BadVersionError, match="/a"):
            await store.set("/a", b"three", version=0)
        assert (await store.set("/a", b"any", version=-1)).version == 2
        assert (await store.get("/a"))[0] == b"any"
        with pytest.raises(NodeExistsError, match="/a"):
            await store.create("/a")
        with pytest.raises(NoNodeError, match="/missing"):
            await store.get("/missing")
        with pytest.raises(NoNodeError, match="/missing"):
            await store.set("/missing", b"", version=-1)
        with pytest.raises(NoNodeError, match="/missing"):
            await store.delete("/missing")
        with pytest.raises(BadVersionError):
            await store.delete("/a", version=0)
        await store.delete("/a", version=2)
        assert await store.exists("/a") is None


async def test_invalid_paths_are_refused(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        for bad in ("a", "/a/", "/a//b", "/a/./b", "/a/../b"):
            with pytest.raises(InvalidPathError):
                await store.create(bad)
        with pytest.raises(InvalidPathError):
            await store.delete("/", recursive=True)


async def test_parent_must_exist_unless_make_parents(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        with pytest.raises(NoNodeError, match="/x/y"):
            await store.create("/x/y/z", b"v")
        assert await store.create("/x/y/z", b"v", make_parents=True) == "/x/y/z"
        assert (await store.get("/x/y"))[0] == b""
        assert (await store.get("/x/y/z"))[0] == b"v"
        assert await store.exists("/x") is not None
        await ensure_path(store, "/x/y/z")  # exists: fine
        await ensure_path(store, "/p/q")
        assert await store.children("/p") == ["q"]


async def test_children_listing_is_sorted(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        await store.create("/c")
        for name in ("b", "a", "c10", "c2"):
            await store.create(f"/c/{name}")
        assert await store.children("/c") == ["a", "b", "c10", "c2"]
        stat = await store.exists("/c")
        assert stat is not None and stat.num_children == 4 and stat.cversion == 4
        assert await store.children("/c/a") == []
        with pytest.raises(NoNodeError):
            await store.children("/nope")


async def test_cas_conflict_between_two_clients(store_url: str) -> None:
    async with open_metadata_store(store_url) as a, open_metadata_store(store_url) as b:
        await a.create("/counter", b"0")
        _, seen_a = await a.get("/counter")
        _, seen_b = await b.get("/counter")
        await a.set("/counter", b"1", version=seen_a.version)
        with pytest.raises(BadVersionError, match="/counter"):
            await b.set("/counter", b"1", version=seen_b.version)

        async def increment(store, times: int) -> None:
            for _ in range(times):
                while True:
                    data, stat = await store.get("/counter")
                    try:
                        await store.set("/counter", b"%d" % (int(data) + 1), version=stat.version)
                        break
                    except BadVersionError:
                        continue

        async with trio.open_nursery() as nursery:
            for store in (a, b, a, b):
                nursery.start_soon(increment, store, 10)
        data, stat = await b.get("/counter")
        assert int(data) == 41  # every increment won exactly once
        assert stat.version == 41


async def test_ephemerals_go_with_their_session(store_url: str) -> None:
    async with open_metadata_store(store_url) as observer:
        await observer.create("/live")
        async with open_metadata_store(store_url) as owner:
            assert owner.session_id != observer.session_id
            await owner.create("/live/member", b"me", ephemeral=True)
            stat = await observer.exists("/live/member")
            assert stat is not None and stat.ephemeral_owner == owner.session_id
            with pytest.raises(NoChildrenForEphemeralsError):
                await owner.create("/live/member/child")
            with pytest.raises(NoChildrenForEphemeralsError):
                await owner.create("/live/member/child", make_parents=True)
        assert await observer.exists("/live/member") is None
        assert await observer.children("/live") == []


async def test_sequential_nodes_are_distinct_and_increasing(store_url: str) -> None:
    async with open_metadata_store(store_url) as a, open_metadata_store(store_url) as b:
        await a.create("/q")
        created: list[str] = []

        async def make(store, n: int) -> None:
            for _ in range(n):
                created.append(await store.create("/q/item-", b"x", sequential=True))

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(make, a if i % 2 else b, 5)
        assert len(created) == 40 and len(set(created)) == 40
        assert all(re.fullmatch(r"/q/item-\d{10}", p) for p in created)
        assert sorted(await a.children("/q")) == sorted(p.rsplit("/", 1)[1] for p in created)

        # one after the other, numbers grow; deletes never make a number come back
        first = await a.create("/q/item-", sequential=True)
        for name in await a.children("/q"):
            await a.delete(f"/q/{name}")
        second = await b.create("/q/item-", sequential=True, ephemeral=True)
        assert int(second[-10:]) > int(first[-10:]) > max(int(p[-10:]) for p in created)


async def test_transaction_is_all_or_nothing(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        await store.create("/t", b"v0")
        with pytest.raises(TransactionFailedError) as info:
            await store.transaction(
                [
                    Create("/t/new", b"n"),
                    SetData("/t", b"v1", version=0),
                    Check("/t", version=5),
                ]
            )
        assert info.value.index == 2
        assert isinstance(info.value.cause, BadVersionError)
        assert "/t" in str(info.value)
        assert await store.exists("/t/new") is None
        data, stat = await store.get("/t")
        assert (data, stat.version) == (b"v0", 0)

        with pytest.raises(TransactionFailedError) as info:
            await store.transaction([Create("/t/a"), Delete("/t/missing")])
        assert info.value.index == 1 and isinstance(info.value.cause, NoNodeError)
        assert await store.children("/t") == []

        results = await store.transaction(
            [
                Check("/t", 0),
                Create("/t/s-", b"1", sequential=True),
                Create("/t/e", ephemeral=True),
                SetData("/t", b"v1", version=0),
                Create("/t/gone"),
                Delete("/t/gone"),
            ]
        )
        assert re.fullmatch(r"/t/s-\d{10}", results[1].path)
        assert results[3].stat is not None and results[3].stat.version == 1
        assert sorted(await store.children("/t")) == sorted(["e", results[1].path.rsplit("/", 1)[1]])
        stat = await store.exists("/t/e")
        assert stat is not None and stat.ephemeral_owner == store.session_id
        assert await store.transaction([]) == []


async def test_recursive_delete(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        for path in ("/r/a/x", "/r/a/y", "/r/b", "/keep"):
            await store.create(path, make_parents=True)
        with pytest.raises(NotEmptyError, match="/r"):
            await store.delete("/r")
        with pytest.raises(BadVersionError):
            await store.delete("/r", version=3, recursive=True)
        assert await store.children("/r/a") == ["x", "y"]  # a version conflict deletes nothing
        await store.delete("/r", recursive=True)
        assert await store.exists("/r") is None
        assert await store.children("/") == ["keep"]


async def test_data_watch_fires_once_per_change(store_url: str) -> None:
    async with open_metadata_store(store_url) as store, open_metadata_store(store_url) as other:
        async with store.watch_data("/w") as events:
            await other.create("/w", b"1")
            assert await next_event(events) == WatchEvent(WatchKind.CREATED, "/w")
            await other.set("/w", b"2", version=0)
            assert await next_event(events) == WatchEvent(WatchKind.CHANGED, "/w")
            await store.set("/w", b"3", version=1)
            assert await next_event(events) == WatchEvent(WatchKind.CHANGED, "/w")
            await other.create("/w/child")  # not a data change of /w
            await no_event(events)
            await other.delete("/w/child")
            await other.delete("/w")
            assert await next_event(events) == WatchEvent(WatchKind.DELETED, "/w")
            await no_event(events)


async def test_children_watch(store_url: str) -> None:
    async with open_metadata_store(store_url) as store, open_metadata_store(store_url) as other:
        await store.create("/parent")
        async with store.watch_children("/parent") as events:
            await other.create("/parent/a")
            assert await next_event(events) == WatchEvent(WatchKind.CHILDREN_CHANGED, "/parent")
            await other.set("/parent/a", b"x", version=-1)
            await other.set("/parent", b"x", version=-1)
            await no_event(events)
            await other.create("/parent/b", ephemeral=True)
            assert await next_event(events) == WatchEvent(WatchKind.CHILDREN_CHANGED, "/parent")
            assert await store.children("/parent") == ["a", "b"]
            await other.delete("/parent/a")
            assert await next_event(events) == WatchEvent(WatchKind.CHILDREN_CHANGED, "/parent")
        # the ephemeral's removal on close is a change too
        async with store.watch_children("/parent") as events:
            await other.close()
            assert await next_event(events) == WatchEvent(WatchKind.CHILDREN_CHANGED, "/parent")
            assert await store.children("/parent") == []


async def test_slow_consumer_gets_coalesced_events(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        await store.create("/busy", b"0")
        async with store.watch_data("/busy") as events:
            for i in range(20):
                await store.set("/busy", b"%d" % i, version=-1)
            assert await next_event(events) == WatchEvent(WatchKind.CHANGED, "/busy")
            await no_event(events)
            await store.set("/busy", b"last", version=-1)
            assert await next_event(events) == WatchEvent(WatchKind.CHANGED, "/busy")


async def test_watch_a_node_that_is_recreated(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        async with store.watch_children("/later") as events:
            await store.create("/later")
            assert await next_event(events) == WatchEvent(WatchKind.CREATED, "/later")
            await store.create("/later/x")
            assert await next_event(events) == WatchEvent(WatchKind.CHILDREN_CHANGED, "/later")
            await store.delete("/later", recursive=True)
            assert await next_event(events) == WatchEvent(WatchKind.DELETED, "/later")


async def test_closed_store(store_url: str) -> None:
    async with open_metadata_store(store_url) as store:
        async with store.watch_session() as states, store.watch_data("/n") as events:
            assert store.session_state is SessionState.CONNECTED
            await store.close()
            assert store.session_state is SessionState.CLOSED
            assert await states.receive() is SessionState.CLOSED
            with pytest.raises(trio.EndOfChannel):
                await states.receive()
            with pytest.raises(trio.EndOfChannel):
                await events.receive()
        with pytest.raises(SessionExpiredError):
            await store.get("/")
        await store.close()  # idempotent
