"""The embedded store: durability across restarts and kill -9, process ownership, sessions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from metadata import SessionExpiredError, StoreLockedError, WatchEvent, WatchKind, open_metadata_store

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys, trio
from metadata import open_metadata_store

async def main(url):
    async with open_metadata_store(url) as store:
        for i in range(20):
            await store.create(f"/durable/n{i}", b"v%d" % i, make_parents=True)
        await store.set("/durable/n0", b"changed", version=0)
        await store.create("/durable/seq-", sequential=True)
        await store.create("/durable/owner", b"child", ephemeral=True)
        print("ready", flush=True)
        await trio.sleep_forever()

trio.run(main, sys.argv[1])
"""


@pytest.mark.slow
async def test_kill_9_loses_no_acknowledged_write_and_drops_ephemerals(tmp_path: Path) -> None:
    url = f"embedded://{tmp_path / 'meta'}"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        line = await trio.to_thread.run_sync(proc.stdout.readline)  # type: ignore[union-attr]
        assert line.strip() == b"ready", proc.stderr.read() if proc.stderr else line  # type: ignore[union-attr]

        # while the child holds the directory, this process is refused with a clear error
        with pytest.raises(StoreLockedError, match=f"pid {proc.pid}"):
            async with open_metadata_store(url):
                pass

        os.kill(proc.pid, signal.SIGKILL)
        await trio.to_thread.run_sync(proc.wait)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    async with open_metadata_store(url) as store:
        names = await store.children("/durable")
        assert "owner" not in names  # the dead process's ephemeral is gone
        assert [n for n in names if n.startswith("n")] == sorted(f"n{i}" for i in range(20))
        assert (await store.get("/durable/n0"))[0] == b"changed"
        assert (await store.get("/durable/n19"))[0] == b"v19"
        seq = await store.create("/durable/seq-", sequential=True)
        assert int(seq[-10:]) > max(int(n[-10:]) for n in names if n.startswith("seq-"))


async def test_data_survives_restart_but_ephemerals_do_not(tmp_path: Path) -> None:
    url = f"embedded://{tmp_path}"
    async with open_metadata_store(url) as store:
        await store.create("/p", b"persist")
        await store.create("/p/e", ephemeral=True)
        first_sid = store.session_id
        first = await store.create("/p/s-", sequential=True)
        await store.delete("/p", recursive=True)
        await store.create("/p")  # a re-created parent does not restart the sequence
        second = await store.create("/p/s-", sequential=True)
        assert int(second[-10:]) > int(first[-10:])
    async with open_metadata_store(url) as store:
        assert store.session_id > first_sid  # session ids never repeat
        assert await store.children("/p") == [second.rsplit("/", 1)[1]]
        third = await store.create("/p/s-", sequential=True)
        assert int(third[-10:]) > int(second[-10:])


async def test_stores_in_one_process_share_the_tree_with_separate_sessions(tmp_path: Path) -> None:
    url = f"embedded://{tmp_path}"
    async with open_metadata_store(url) as a:
        async with open_metadata_store(url) as b:
            assert a.session_id != b.session_id
            await a.create("/a-eph", ephemeral=True)
            await b.create("/b-eph", ephemeral=True)
            async with a.watch_data("/b-eph") as events:
                await b.close()
                with trio.fail_after(5):
                    assert await events.receive() == WatchEvent(WatchKind.DELETED, "/b-eph")
            assert sorted(await a.children("/")) == ["a-eph"]
            with pytest.raises(SessionExpiredError):
                await b.exists("/a-eph")
        # the last store closed: the directory lock is free again
    async with open_metadata_store(url) as c:
        assert await c.children("/") == []


async def test_cancelled_write_is_either_done_or_not(tmp_path: Path) -> None:
    async with open_metadata_store(f"embedded://{tmp_path}") as store:
        with trio.move_on_after(0):
            await store.create("/maybe")
        # whatever happened, the store is consistent and usable
        assert await store.children("/") in ([], ["maybe"])
        await store.create("/after")
