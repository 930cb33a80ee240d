"""Several journal directories in a real ``magnetar bookie`` process: acknowledged adds of ledgers
spread over three journals (no checkpoint yet: they live only in the journals), SIGKILL, restart:
every journal is replayed and every entry reads back; more adds after the restart, a second
SIGKILL, a second replay (from each journal's own lastMark once a checkpoint ran)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.support.bookie_server import check_reads, entry, write_entries
from tests.support.bookies import RealBookie

pytestmark = pytest.mark.slow

LEDGERS = list(range(1, 10))
ENTRIES = 30


def body(lid: int, eid: int) -> bytes:
    return entry(lid, eid, b"spread %d %d " % (lid, eid) * 30)


def txn_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.glob("*.txn"))


async def test_sigkill_and_replay_over_three_journals(tmp_path: Path) -> None:
    jdirs = [tmp_path / f"journal{i}" for i in range(3)]
    # no metadata store (the bookie protocol alone); a fixed id: the cookies name it
    bookie = RealBookie(
        tmp_path,
        "",
        ["--set", "journalDirectories=" + ",".join(map(str, jdirs)), "--set", "flushInterval=600000"],
        bookie_id="journal-dirs-bookie",
    )
    await trio.to_thread.run_sync(bookie.start)
    try:
        await write_entries(bookie.port, LEDGERS, ENTRIES, body)
        sizes = [txn_bytes(d) for d in jdirs]
        assert all(s > 0 for s in sizes), sizes  # every journal holds some ledgers' entries
        await trio.to_thread.run_sync(bookie.kill)  # SIGKILL: nothing was checkpointed
        await trio.to_thread.run_sync(bookie.start)
        await check_reads(bookie.port, LEDGERS, [], ENTRIES, body)

        more = [lid + 100 for lid in LEDGERS]
        await write_entries(bookie.port, more, ENTRIES, body)
        await trio.to_thread.run_sync(bookie.kill)
        await trio.to_thread.run_sync(bookie.start)
        await check_reads(bookie.port, LEDGERS + more, [], ENTRIES, body)
        ledgers = tmp_path / "ledgers"
        assert {p.name for p in ledgers.glob("lastMark*")} >= {"lastMark", "lastMark.1", "lastMark.2"}
    finally:
        await trio.to_thread.run_sync(bookie.stop)
