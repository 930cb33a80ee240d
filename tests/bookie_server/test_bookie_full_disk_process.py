"""Real ``magnetar bookie`` processes on a small tmpfs (issue 12, defect 4, the bookie's side).

* The disk checker runs once at start only, so nothing but the allocations themselves can see the
  disk filling: the bookie must still turn read-only (DISK_FULL) before any ENOSPC.
* Filled by adds until refused, then filled to the last byte by a filler file and SIGKILLed, the
  bookie restarts on the full disk: read-only, registered under ``readonly/``, serving reads,
  LAC reads and fences; stopped cleanly and started again on the full disk, the same; once space
  is freed it turns writable and re-registers by itself, and takes adds again. Every
  acknowledged entry reads back after every step.

Skipped when a tmpfs cannot be mounted here (mounting needs root).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from metadata import open_metadata_store
from protocols.bookkeeper import StatusCode, available_path, read_lac_request, read_request, readonly_path
from tests.support.bookie_server import KEY, SyncClient
from tests.support.bookies import RealBookie
from tests.support.tmpfs import mounted_tmpfs

from .crash_support import Writer, check_round

pytestmark = pytest.mark.slow

BOOKIE_ID = "full-disk-bookie"
ENTRY = 16 * 1024


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "48m") as disk:
        yield disk


def _bookie(disk: Path, tmp_path: Path, metadata_url: str, *extra: str) -> RealBookie:
    bk = RealBookie(
        disk,
        metadata_url,
        ["--set", "write_cache_max_mb=4", "--set", "flush_interval_ms=500", *extra],
        bookie_id=BOOKIE_ID,
        http=True,
        log_level="INFO",
    )
    bk.log = tmp_path / "bookie.log"  # not on the full disk
    return bk


def _state(bk: RealBookie) -> dict:
    with urllib.request.urlopen(f"{bk.http_url}/api/v1/bookie/state", timeout=10) as resp:
        return json.loads(resp.read())


def _wait(what: str, predicate, timeout: float = 60.0) -> None:
    """Poll ``predicate`` until true; the deadline is only a hang guard."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.1)


def _fill_until_refused(bk: RealBookie, ledger: int) -> Writer:
    writer = Writer(bk.port, ledger, window=32, size=ENTRY).start()
    _wait("the bookie to refuse adds", lambda: writer.errors or not writer.thread.is_alive(), 120)
    writer.stop()
    assert writer.errors and writer.acked, "the disk never filled"
    return writer


def _fill_the_rest(path: Path) -> None:
    """Write ``path`` until the file system has not one byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 20, 4096, 1):
            data = bytes(chunk)
            while True:
                try:
                    if os.write(fd, data) < chunk:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)


def _registered(metadata_url: str) -> str:
    async def look() -> str:
        async with open_metadata_store(metadata_url) as store:
            if await store.exists(readonly_path("", BOOKIE_ID)) is not None:
                return "readonly"
            if await store.exists(available_path("", BOOKIE_ID)) is not None:
                return "writable"
            return ""

    return trio.run(look)


def test_turns_read_only_before_the_disk_is_full(tmpfs: Path, tmp_path: Path) -> None:
    # whole 16 MiB journal chunks on a 48 MiB disk, and no disk check after the first one
    bk = _bookie(
        tmpfs,
        tmp_path,
        f"embedded://{tmp_path / 'meta'}",
        "--set",
        "journal_prealloc_size_mb=16",
        "--set",
        "disk_check_interval_ms=600000",
    )
    try:
        bk.start()
        writer = _fill_until_refused(bk, 1)
        assert set(writer.errors.values()) == {StatusCode.EREADONLY}, writer.errors
        state = _state(bk)
        assert state["readOnly"] and "disk_full" in state["reasons"], state
        assert not {"journal_failed", "journal_no_space"} & set(state["reasons"]), state
        check_round(bk.port, 1, writer)
        log = bk.log.read_text()
        assert "No space left on device" not in log and "OUT OF SPACE" not in log
        bk.kill()
        bk.start()
        check_round(bk.port, 1, writer)
    finally:
        bk.kill()


def test_restart_on_a_full_disk_then_writable_once_space_is_freed(tmpfs: Path, tmp_path: Path, zk_url: str) -> None:
    bk = _bookie(tmpfs, tmp_path, zk_url, "--set", "disk_check_interval_ms=200", "--set", "journal_prealloc_size_mb=4")
    try:
        bk.start()
        writer = _fill_until_refused(bk, 1)
        check_round(bk.port, 1, writer)
        _fill_the_rest(tmpfs / "filler")  # full while it runs,
        bk.kill()
        _fill_the_rest(tmpfs / "filler")  # and not one byte left for the restart
        assert os.statvfs(tmpfs).f_bavail == 0

        bk.start()  # must come up on the still-full disk
        state = _state(bk)
        assert state["readOnly"], state
        _wait("registration under readonly/", lambda: _registered(zk_url) == "readonly")
        check_round(bk.port, 1, writer)
        client = SyncClient(bk.port, timeout=30)
        try:
            client.send(read_lac_request(1, 1))
            resp = client.next_response()
            assert resp is not None and resp.status == StatusCode.EOK
            client.send(read_request(2, 1, 0, fence=True, master_key=KEY))  # a new owner fences
            resp = client.next_response()
            assert resp is not None and resp.status == StatusCode.EOK, resp
        finally:
            client.close()
        assert bk.stop(timeout=60) == 0  # a clean stop while full: the final checkpoint cannot be written
        _fill_the_rest(tmpfs / "filler")  # (the journal spent its reserve for the fence)
        assert os.statvfs(tmpfs).f_bavail == 0
        bk.start()  # a cleanly closed index (no WAL files left) opens on a full disk too
        assert _state(bk)["readOnly"]
        check_round(bk.port, 1, writer)

        (tmpfs / "filler").unlink()
        subprocess.run(["mount", "-o", "remount,size=96m", str(tmpfs)], check=True)
        _wait("writable again", lambda: not _state(bk)["readOnly"])
        _wait("registration as writable", lambda: _registered(zk_url) == "writable")
        writer2 = Writer(bk.port, 2, window=32, size=ENTRY).start()
        _wait("adds acknowledged again", lambda: len(writer2.acked) >= 50 or not writer2.thread.is_alive())
        writer2.stop()
        assert len(writer2.acked) >= 50 and not writer2.errors, writer2.errors
        fenced = Writer(bk.port, 1, window=1)  # the fence survived the restarts
        fenced.sent = max(writer.acked) + 1
        fenced.start()
        _wait("the fenced ledger to answer", lambda: fenced.errors or not fenced.thread.is_alive())
        fenced.stop()
        assert set(fenced.errors.values()) == {StatusCode.EFENCED}, fenced.errors
        bk.kill()
        bk.start()
        check_round(bk.port, 1, writer)
        check_round(bk.port, 2, writer2)
        assert not _state(bk)["readOnly"]
    finally:
        bk.kill()
