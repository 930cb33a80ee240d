"""Compaction survives SIGKILL at any point: a real child process runs a throttled compaction and
is killed at hook points (after the copy is synced, after the index moved, before the old log is
removed) and at random moments; after a restart every live entry reads back, and a new GC run
finishes the job."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from bookie.gc import GarbageCollector, GcConfig
from bookie.gc._compaction import KILL_AT_GC_ENV

from .gc_helpers import check_entries, du, live_bytes, open_storage, write_interleaved

REPO = Path(__file__).resolve().parents[2]
LIMIT = 32 * 1024
SIZE = 500
LEDGERS = list(range(1, 13))
LIVE = LEDGERS[1::2]
ENTRIES = 60


async def _prepare(base: Path) -> None:
    storage = await open_storage(base, log_size_limit=LIMIT)
    await write_interleaved(storage, LEDGERS, ENTRIES, SIZE)
    for lid in LEDGERS[::2]:
        await storage.delete_ledger(lid)
    await storage.aclose()


async def _run_child(work: Path, rate: int, kill_at: str | None, delay: float | None) -> int:
    env = dict(os.environ)
    env.pop(KILL_AT_GC_ENV, None)
    if kill_at:
        env[KILL_AT_GC_ENV] = kill_at
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.bookie_gc.gc_crash_child", str(work), str(rate)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        with trio.fail_after(60):
            line = b""
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(1)
                if not chunk:
                    break
                line += chunk
            assert line.startswith(b"START"), line
            if delay is not None:
                await trio.sleep(delay)  # the crash point (a parameter): how far into its work GC gets
                proc.send_signal(signal.SIGKILL)
            return await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proc.stdout.aclose()


async def _verify(work: Path) -> None:
    storage = await open_storage(work, log_size_limit=LIMIT)
    await check_entries(storage, LIVE, ENTRIES, SIZE)
    gc = GarbageCollector(storage, GcConfig(compaction_free_space_reserve_bytes=0, compaction_rate_by_entries=10**9))
    res = await gc.run_once(force=True)
    assert res.result == "ok", res.errors
    await check_entries(storage, LIVE, ENTRIES, SIZE)
    await storage.aclose()
    storage = await open_storage(work, log_size_limit=LIMIT)
    await check_entries(storage, LIVE, ENTRIES, SIZE)
    await storage.aclose()
    # duplicates left by the crash may remain, but the deleted half is gone
    assert du(work) <= 2 * live_bytes(LIVE, ENTRIES, SIZE) + 2 * LIMIT


@pytest.mark.slow
async def test_compaction_survives_sigkill(tmp_path: Path) -> None:
    base = tmp_path / "base"
    await _prepare(base)
    rng = random.Random(20240605)
    cases: list[tuple[str | None, float | None]] = [
        ("after_sync", None),
        ("after_index", None),
        ("before_remove", None),
    ]
    cases += [(None, rng.uniform(0.05, 1.2)) for _ in range(3)]
    for i, (kill_at, delay) in enumerate(cases):
        work = tmp_path / f"run{i}"
        shutil.copytree(base, work)
        rc = await _run_child(work, 150_000, kill_at, delay)
        if kill_at:
            assert rc == -signal.SIGKILL, (kill_at, rc)
        await _verify(work)
