"""ZooKeeper-only behaviour: session expiry, chroot creation, unreachable servers."""

from __future__ import annotations

import uuid

import pytest
import trio
from kazoo.client import KazooClient

from metadata import (
    ConnectionLossError,
    SessionState,
    WatchEvent,
    WatchKind,
    open_metadata_store,
)
from tests.support.ports import free_port
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow


def expire_session(hosts: str, client: KazooClient) -> None:
    """Kazoo's testing trick: attach a second client to the session, then close it.

    The server moves the session to the new connection and deletes it (and its ephemerals) when
    that client closes; the original client then learns its session expired.
    """
    session_id, password = client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=2.0)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


async def test_session_expiry_drops_ephemerals_and_reconnects(zookeeper: ZooKeeperServer, zk_url: str) -> None:
    async with open_metadata_store(zk_url) as owner, open_metadata_store(zk_url) as observer:
        chroot = zk_url.split("/", 3)[3].split("?")[0]
        await owner.create("/members/m1", b"me", ephemeral=True, make_parents=True)
        await owner.create("/kept", b"persistent")
        old_session = owner.session_id
        async with (
            owner.watch_session() as states,
            observer.watch_data("/members/m1") as events,
            owner.watch_data("/kept") as own_kept,
            owner.watch_children("/members") as own_members,
        ):
            client = owner._client  # type: ignore[attr-defined]  # the test reaches into the backend
            await trio.to_thread.run_sync(expire_session, f"{zookeeper.hosts}/{chroot}", client)
            with trio.fail_after(30):
                seen = []
                while not seen or seen[-1] is not SessionState.CONNECTED or len(seen) < 2:
                    seen.append(await states.receive())
            assert SessionState.LOST in seen
            assert owner.session_state is SessionState.CONNECTED
            assert owner.session_id != old_session
            with trio.fail_after(30):
                assert await events.receive() == WatchEvent(WatchKind.DELETED, "/members/m1")
                # the expired session's own watches were re-armed on the new session
                assert await own_members.receive() == WatchEvent(WatchKind.CHILDREN_CHANGED, "/members")
                await observer.set("/kept", b"touched", version=0)
                assert await own_kept.receive() == WatchEvent(WatchKind.CHANGED, "/kept")
                await observer.set("/kept", b"persistent", version=1)
                assert await own_kept.receive() == WatchEvent(WatchKind.CHANGED, "/kept")
        assert await observer.exists("/members/m1") is None
        # the store works on its new session; persistent data is untouched
        assert (await owner.get("/kept"))[0] == b"persistent"
        await owner.create("/members/m1", b"again", ephemeral=True)
        stat = await observer.exists("/members/m1")
        assert stat is not None and stat.ephemeral_owner == owner.session_id


async def test_nested_chroot_is_created(zookeeper: ZooKeeperServer) -> None:
    base = f"/nest-{uuid.uuid4().hex[:8]}"
    async with open_metadata_store(zookeeper.url(f"{base}/inner")) as store:
        await store.create("/x", b"1")
        assert await store.children("/") == ["x"]
    async with open_metadata_store(zookeeper.url(base)) as outer:
        assert await outer.children("/inner") == ["x"]
        await outer.delete("/inner", recursive=True)


async def test_unreachable_zookeeper_is_a_clear_error() -> None:
    url = f"zk://127.0.0.1:{free_port()}?connect_timeout_ms=500"
    with pytest.raises(ConnectionLossError, match=r"127\.0\.0\.1"):
        async with open_metadata_store(url):
            pass
