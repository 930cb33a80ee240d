"""The embedded store on a full disk: it opens and keeps taking small writes (its space reserve),
so that standalone can restart on a full disk and serve reads; the reserve comes back with room.

Before: opening failed with "database or disk is full" (dropping a dead process's ephemerals is a
write), so standalone could not start at all.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata import _sqlite, open_metadata_store
from tests.support.tmpfs import mounted_tmpfs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "24m") as disk:
        yield disk


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


async def test_writes_and_reopening_go_on_while_the_disk_is_full(small_disk: Path, monkeypatch) -> None:
    monkeypatch.setattr(_sqlite, "_RESERVE_RETRY_S", 0.0)
    url = f"embedded://{small_disk / 'meta'}"
    reserve = small_disk / "meta" / _sqlite.RESERVE_FILE
    async with open_metadata_store(url) as store:
        await store.create("/ml/topic", b"x" * 100, make_parents=True)
        await store.create("/bookies/b1", b"", ephemeral=True, make_parents=True)
        assert reserve.stat().st_size == _sqlite.RESERVE_BYTES
        fill(small_disk / "filler")
        # a claim of a ledger list and a cursor persist: the writes a restart needs
        stat = await store.set("/ml/topic", b"y" * 2000, version=0)
        await store.create("/ml/topic/cursor", b"z" * 2000)
        assert stat.version == 1 and not reserve.exists()
    # reopening on the still-full disk drops the old session's ephemerals (a write) and works
    async with open_metadata_store(url) as store:
        assert await store.exists("/bookies/b1") is None
        assert (await store.get("/ml/topic/cursor"))[0] == b"z" * 2000
        os.unlink(small_disk / "filler")
        await store.set("/ml/topic", b"room again", version=1)
        assert reserve.stat().st_size == _sqlite.RESERVE_BYTES  # taken back once there is room
