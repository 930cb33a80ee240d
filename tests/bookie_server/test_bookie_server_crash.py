"""Crash tests with real ``magnetar bookie`` processes (embedded metadata store).

A writer thread adds entries over TCP and records which were acknowledged; the bookie is
SIGKILLed at random points (during journal writes; between the storage flush and the LastLogMark
update through the KILL_AT hook; during entry log rolls with a tiny logSizeLimit); after a restart
every acknowledged entry must read back byte for byte and no unacknowledged entry may be partly
visible. Plus torn / corrupted journal tails and a full disk (a 16 MiB tmpfs).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from bookie import KILL_AT_ENV
from protocols.bookkeeper import StatusCode
from tests.support.tmpfs import mounted_tmpfs

from .crash_support import BookieProcess, Writer, check_round, read_back

pytestmark = pytest.mark.slow


def _rounds(
    bk: BookieProcess, rounds: int, rnd: random.Random, *, first_ledger: int, self_kill: bool = False
) -> list[Writer]:
    """Start, write, crash, restart and check ``rounds`` times; return the writers."""
    writers: list[Writer] = []
    bk.start()
    for r in range(rounds):
        ledger = first_ledger + r
        writer = Writer(bk.port, ledger).start()
        if self_kill:
            rc = bk.wait_exit(15)  # the KILL_AT hook fires at a checkpoint
            assert rc is not None, "the bookie did not kill itself at the checkpoint"
            writer.join()
        else:
            time.sleep(rnd.uniform(0.05, 0.4))
            bk.kill()
            writer.join()
        writers.append(writer)
        bk.start(env={KILL_AT_ENV: ""})  # restart without the hook to check
        check_round(bk.port, ledger, writer)
        if self_kill and r + 1 < rounds:
            bk.kill()
            bk.start()
    return writers


def test_sigkill_during_journal_writes(tmp_path: Path) -> None:
    rnd = random.Random(1)
    bk = BookieProcess(tmp_path)
    try:
        writers = _rounds(bk, 8, rnd, first_ledger=100)
        assert sum(len(w.acked) for w in writers) > 0
        for i, w in enumerate(writers):  # earlier rounds survived the later crashes too
            check_round(bk.port, 100 + i, w)
    finally:
        bk.kill()


def test_sigkill_between_flush_and_last_log_mark(tmp_path: Path) -> None:
    rnd = random.Random(2)
    bk = BookieProcess(tmp_path, "--set", "flush_interval_ms=100", env={KILL_AT_ENV: "before_last_mark:3"})
    try:
        writers = _rounds(bk, 6, rnd, first_ledger=200, self_kill=True)
        for i, w in enumerate(writers):
            check_round(bk.port, 200 + i, w)
    finally:
        bk.kill()


def test_sigkill_during_entry_log_rolls(tmp_path: Path) -> None:
    rnd = random.Random(3)
    bk = BookieProcess(
        tmp_path, "--set", "log_size_limit=65536", "--set", "write_cache_max_mb=1", "--set", "flush_interval_ms=20"
    )
    try:
        writers = _rounds(bk, 6, rnd, first_ledger=300)
        for i, w in enumerate(writers):
            check_round(bk.port, 300 + i, w)
        assert len(list((tmp_path / "ledgers").glob("*.log"))) > 3  # logs did roll
    finally:
        bk.kill()


def _last_journal(base: Path) -> tuple[Path, int]:
    files = sorted((base / "journal").glob("*.txn"), key=lambda p: int(p.stem, 16))
    for path in reversed(files):
        data = path.read_bytes()
        end = len(data.rstrip(b"\0"))
        if end > 64:
            return path, end
    raise AssertionError("no journal file with records")


@pytest.mark.parametrize("damage", ["torn", "garbage", "flipped-length"])
def test_torn_or_corrupted_journal_tail(tmp_path: Path, damage: str) -> None:
    bk = BookieProcess(tmp_path)
    try:
        bk.start()
        writer = Writer(bk.port, 7)
        writer.start()
        time.sleep(0.3)  # let the writer get entries into the journal before the crash
        bk.kill()
        writer.join()
        path, end = _last_journal(tmp_path)
        with open(path, "r+b") as f:
            f.seek(end)
            if damage == "torn":  # a record header promising more bytes than were written
                f.write((0x12345678).to_bytes(4, "big") + (4000).to_bytes(4, "big") + b"\x01" + os.urandom(100))
            elif damage == "garbage":
                f.write(os.urandom(4096))
            else:  # a plausible length, then a checksum that cannot match
                f.write(b"\0\0\0\0" + (20).to_bytes(4, "big") + os.urandom(20))
        bk.start()
        check_round(bk.port, 7, writer)
        writer2 = Writer(bk.port, 8).start()  # the journal continues cleanly after the tail
        time.sleep(0.2)  # a short run of adds after the restart
        writer2.stop()
        assert writer2.acked
        assert bk.stop(timeout=30) == 0  # SIGTERM: a clean shutdown
        bk.start()
        check_round(bk.port, 7, writer)
        check_round(bk.port, 8, writer2)
        assert "stopped early" in bk.log.read_text() or "torn" in bk.log.read_text().lower()
    finally:
        bk.kill()


def test_full_disk_turns_read_only_without_losing_data(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", "16m") as disk:
        bk = BookieProcess(
            disk,
            "--set",
            "disk_check_interval_ms=100",
            "--set",
            "write_cache_max_mb=2",
            "--set",
            "flush_interval_ms=200",
            "--set",
            "journal_max_size_mb=4",
            "--set",
            "journal_max_backups=0",
        )
        bk.log = tmp_path / "bookie.log"
        try:
            bk.start()
            writer = Writer(bk.port, 9, window=32).start()
            deadline = time.monotonic() + 60
            while not writer.errors and time.monotonic() < deadline and writer.thread.is_alive():
                time.sleep(0.05)
            writer.stop()
            assert writer.errors, "the disk never filled"
            assert set(writer.errors.values()) <= {StatusCode.EREADONLY, StatusCode.EIO, StatusCode.ETOOMANYREQUESTS}, (
                writer.errors
            )
            got = read_back(bk.port, 9, range(writer.sent))  # reads are still served
            for e in writer.acked:
                assert got[e][0] == StatusCode.EOK and got[e][1]
            bk.stop(timeout=30)
            subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
            bk.start()
            check_round(bk.port, 9, writer)
        finally:
            bk.kill()
