"""Several ledger directories, each with its own writer, in a real ``magnetar bookie`` process:
ledgers spread over three directories are checkpointed into entry logs of all three (written in
parallel), SIGKILL, restart: every entry reads back; more adds with checkpoints after the restart,
a second SIGKILL mid-stream, and everything acknowledged still reads back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from tests.support.bookie_server import check_reads, entry, write_entries
from tests.support.bookies import RealBookie

pytestmark = pytest.mark.slow

LEDGERS = list(range(1, 10))
ENTRIES = 40


def body(lid: int, eid: int) -> bytes:
    return entry(lid, eid, b"dirs %d %d " % (lid, eid) * 40)


def log_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.glob("*.log"))


def wait_checkpointed(dirs: list[Path], at_least: int) -> None:
    deadline = time.monotonic() + 60
    while not all(log_bytes(d) >= at_least for d in dirs):
        assert time.monotonic() < deadline, [log_bytes(d) for d in dirs]
        time.sleep(0.1)


async def test_sigkill_and_restart_over_three_ledger_directories(tmp_path: Path) -> None:
    ldirs = [tmp_path / f"ledgers{i}" for i in range(3)]
    bookie = RealBookie(
        tmp_path,
        "",
        ["--ledger-dirs", ",".join(map(str, ldirs)), "--set", "flushInterval=200"],
        bookie_id="ledger-dirs-bookie",
    )
    await trio.to_thread.run_sync(bookie.start)
    try:
        await write_entries(bookie.port, LEDGERS, ENTRIES, body)
        # each directory holds its three ledgers' entries once a checkpoint ran
        per_dir = 3 * ENTRIES * len(body(1, 0))
        await trio.to_thread.run_sync(wait_checkpointed, ldirs, per_dir)
        await trio.to_thread.run_sync(bookie.kill)
        await trio.to_thread.run_sync(bookie.start)
        await check_reads(bookie.port, LEDGERS, [], ENTRIES, body)

        more = [lid + 100 for lid in LEDGERS]
        await write_entries(bookie.port, more, ENTRIES, body)
        await trio.to_thread.run_sync(bookie.kill)  # some checkpointed, the rest in the journal
        await trio.to_thread.run_sync(bookie.start)
        await check_reads(bookie.port, LEDGERS + more, [], ENTRIES, body)
    finally:
        await trio.to_thread.run_sync(bookie.stop)
