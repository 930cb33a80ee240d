"""A subscriber's lives over real bookies: the cursor may redeliver after a crash, never skip.

Each scenario (a seed) runs several sessions of a worker process on one managed ledger. A
session reopens the cursor and reports every entry it delivers, adds entries (rolling ledgers
every few entries), acknowledges a random pattern with holes - individual acks across ledger
boundaries, cumulative acks, explicit persists, with the cursor also flushed every 50 ms - and
then is closed, or SIGKILLed at a random moment. At every reopen:

* nothing unacknowledged is skipped: every entry the test never asked to acknowledge is
  delivered (an acknowledgement announced but maybe lost in a crash may be redelivered);
* nothing acknowledged before a completed persist (or a close) is delivered again;
* every entry is delivered at most once per session, in order.

This is the invariant behind the reported skip (ack holes lost after restart, crash, restart).
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.managed_ledger_real.mlr_cluster import BookieCluster, Worker

pytestmark = pytest.mark.slow

PER_LEDGER = 7


def session_plan(rng: random.Random, first: int, total: int) -> list[list[Any]]:
    """Random ack ops over entries ``0..total-1`` (holes, ranges, cumulative acks, persists)."""
    ops: list[list[Any]] = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        pause = round(rng.choice([0, 0, 0.01, 0.03, 0.06]), 3)
        if kind < 0.15:
            ops.append(["persist", None, pause])
        elif kind < 0.3 and total:
            ops.append(["md", rng.randrange(total), pause])
        elif total:
            lo = rng.randrange(total)
            hi = min(total, lo + rng.randint(1, 25))
            step = rng.choice([1, 1, 2, 3])
            ops.append(["ack", list(range(lo, hi, step)), pause])
    return ops


def acked_by(op: list[Any]) -> set[int]:
    if op[0] == "md":
        return set(range(op[1] + 1))
    if op[0] == "ack":
        return set(op[1])
    return set()


async def run_scenario(cluster: BookieCluster, tmp_path: Path, seed: int, quorum: list[str]) -> None:
    rng = random.Random(seed)
    name = f"t/ns/persistent/sessions-{seed}-{uuid.uuid4().hex[:8]}"
    announced: set[int] = set()  # every ack the test asked for (maybe lost in a crash)
    durable: set[int] = set()  # acks announced in a life before its completed persist or close
    total = 0
    for life in range(rng.randint(3, 5)):
        adds = rng.choice([0, 5, 12, 30])
        plan = session_plan(rng, total, total + adds)
        end = rng.choice(["close", "kill", "kill"])
        w = Worker(
            tmp_path / f"life{life}.log",
            "cursor-session",
            cluster.url,
            name,
            *quorum,
            "--max-entries",
            str(PER_LEDGER),
            "--persist-interval",
            "0.05",
            "--add",
            str(adds),
            "--plan",
            json.dumps({"ops": plan}),
        )
        try:
            reopened = (await trio.to_thread.run_sync(w.read_until, "reopened"))[-1]
            delivered = reopened["delivered"]
            context = f"seed {seed}, life {life}: md {reopened['md']} ranges {reopened['ranges']}"
            assert [seq for _, _, seq in reopened["entries"]] == list(range(total)), context
            assert delivered == sorted(set(delivered)), f"delivered twice or out of order; {context}"
            missing = set(range(total)) - announced - set(delivered)
            assert not missing, f"unacknowledged entries skipped: {sorted(missing)}; {context}"
            again = durable & set(delivered)
            assert not again, f"durably acknowledged entries delivered again: {sorted(again)}; {context}"
            await trio.to_thread.run_sync(w.read_until, "added")
            total += adds
            lines: list[dict[str, Any]] = []
            if end == "kill":
                await trio.sleep(rng.random() * 0.25)
                await trio.to_thread.run_sync(w.kill)
            else:
                lines += await trio.to_thread.run_sync(w.read_until, "done")
                w.send("close")
            while (msg := await trio.to_thread.run_sync(w.read)) is not None:
                lines.append(msg)
            # every op announced (and every persist completed) before the end, in output order;
            # an ack lost in an earlier crash is not in this life's cursor, so only this life's
            # acks become durable here
            this_life: set[int] = set()
            for msg in lines:
                if msg["event"] == "applying":
                    this_life |= acked_by(msg["op"])
                elif (msg["event"] == "applied" and msg["op"][0] == "persist") or msg["event"] == "closed":
                    durable |= this_life
            announced |= this_life
        finally:
            w.stop()


@pytest.mark.parametrize("seed", range(8))
async def test_no_unacknowledged_entry_is_ever_skipped_e1(cluster1: BookieCluster, tmp_path: Path, seed: int) -> None:
    await run_scenario(cluster1, tmp_path, seed, ["--e", "1", "--qw", "1", "--qa", "1"])


@pytest.mark.parametrize("seed", range(100, 103))
async def test_no_unacknowledged_entry_is_ever_skipped_e3(cluster3: BookieCluster, tmp_path: Path, seed: int) -> None:
    await run_scenario(cluster3, tmp_path, seed, ["--e", "3", "--qw", "2", "--qa", "2"])
