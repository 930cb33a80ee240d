"""Cursor persistence over real bookies and ZooKeeper, across processes.

An owner process adds entries over several ledgers, acknowledges a random pattern (cumulative and
individual acks), persists the cursor, acknowledges more, and is then closed or SIGKILLed. A new
process reopens the managed ledger (recovering the last ledger when the owner was killed) and
reports the cursor's state and every entry it delivers from its read position:

* after a close, exactly the state at close is restored and exactly the unacknowledged entries
  are delivered;
* after SIGKILL, exactly the last persisted state is restored: what was acknowledged after that
  persist is redelivered, nothing else, and nothing unacknowledged is skipped.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.managed_ledger_real.mlr_cluster import BookieCluster, Worker

pytestmark = pytest.mark.slow

ENTRIES = 90
PER_LEDGER = 25


def random_plan(rng: random.Random) -> tuple[dict[str, list[list[Any]]], set[int], set[int]]:
    """Two phases of ack operations over entry indexes, and the acked sets after each."""
    acked: set[int] = set()
    phases: dict[str, list[list[Any]]] = {}
    after: list[set[int]] = []
    md = -1
    for phase in ("phase1", "phase2"):
        ops: list[list[Any]] = []
        for _ in range(rng.randint(2, 6)):
            if rng.random() < 0.3:
                md = min(ENTRIES - 1, md + rng.randint(1, 20))
                ops.append(["md", md])
                acked |= set(range(md + 1))
            else:
                picks = sorted(rng.sample(range(md + 1, ENTRIES), rng.randint(1, 15)))
                ops.append(["ack", picks])
                acked |= set(picks)
        phases[phase] = ops
        after.append(set(acked))
    return phases, after[0], after[1]


async def run_owner(
    url: str, name: str, tmp_path: Path, plan: dict[str, Any], quorum: list[str], *extra: str
) -> tuple[Worker, dict[str, Any]]:
    owner = Worker(
        tmp_path / "owner.log",
        "cursor-owner",
        url,
        name,
        *quorum,
        "--entries",
        str(ENTRIES),
        "--max-entries",
        str(PER_LEDGER),
        "--plan",
        json.dumps(plan),
        *extra,
    )
    persisted = (await trio.to_thread.run_sync(owner.read_until, "persisted"))[-1]
    return owner, persisted


async def reopen(url: str, name: str, tmp_path: Path, quorum: list[str]) -> dict[str, Any]:
    w = Worker(tmp_path / "reopen.log", "cursor-reopen", url, name, *quorum)
    try:
        msg = (await trio.to_thread.run_sync(w.read_until, "reopened"))[-1]
        assert await trio.to_thread.run_sync(w.wait) == 0, w.stderr_tail()
    finally:
        w.stop()
    return msg


@pytest.mark.parametrize("how", ["close", "kill"])
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_cursor_restored_after_close_or_kill(
    cluster3: BookieCluster, tmp_path: Path, how: str, seed: int
) -> None:
    quorum = ["--e", "3", "--qw", "2", "--qa", "2"]
    plan, acked1, acked2 = random_plan(random.Random(seed))
    name = f"t/ns/persistent/cursor-{uuid.uuid4().hex[:8]}"
    owner, persisted = await run_owner(cluster3.url, name, tmp_path, plan, quorum)
    try:
        final = (await trio.to_thread.run_sync(owner.read_until, "phase2"))[-1]
        if how == "close":
            owner.send("close")
            await trio.to_thread.run_sync(owner.read_until, "closed")
            assert await trio.to_thread.run_sync(owner.wait) == 0, owner.stderr_tail()
        else:
            await trio.to_thread.run_sync(owner.kill)
    finally:
        owner.stop()
    got = await reopen(cluster3.url, name, tmp_path, quorum)

    expect_state, expect_acked = (final, acked2) if how == "close" else (persisted, acked1)
    assert (got["md"], got["ranges"]) == (expect_state["md"], expect_state["ranges"])
    assert got["delivered"] == sorted(set(range(ENTRIES)) - expect_acked)
    # the log itself survived the owner (recovered after the kill)
    assert [seq for _, _, seq in got["entries"]] == list(range(ENTRIES))


async def test_kill_during_throttled_persists_redelivers_at_most_recent_acks(
    cluster1: BookieCluster, tmp_path: Path
) -> None:
    """Acks keep coming while the cursor is flushed every 50 ms; a SIGKILL at an arbitrary moment
    delivers every unacknowledged entry plus at most what was acknowledged since phase 1."""
    quorum = ["--e", "1", "--qw", "1", "--qa", "1"]
    rng = random.Random(7)
    acked1 = set(range(10))
    order = list(range(10, ENTRIES))
    rng.shuffle(order)
    never = set(order[60:])
    phase2 = [["ack", [i], 0.01] for i in order[:60]]
    plan = {"phase1": [["md", 9]], "phase2": phase2}
    name = f"t/ns/persistent/cursor-kill-{uuid.uuid4().hex[:8]}"
    owner, _ = await run_owner(cluster1.url, name, tmp_path, plan, quorum, "--persist-interval", "0.05")
    try:
        await trio.sleep(0.1 + rng.random() * 0.5)  # somewhere in the middle of phase 2
        started = time.monotonic()
        await trio.to_thread.run_sync(owner.kill)
        assert time.monotonic() - started < 20
    finally:
        owner.stop()
    got = await reopen(cluster1.url, name, tmp_path, quorum)
    delivered = set(got["delivered"])
    assert delivered <= set(range(ENTRIES)) - acked1  # acked and persisted: never again
    assert never <= delivered  # never acked: always delivered
    assert len(got["delivered"]) == len(delivered)
    assert got["delivered"] == sorted(delivered)
    assert len(delivered) < ENTRIES - len(acked1)  # some phase-2 acks were persisted
