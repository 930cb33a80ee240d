"""A process owning a managed ledger over real bookies and ZooKeeper, driven by the tests.

    python -m tests.managed_ledger_real.mlr_worker append URL NAME --e 3 --qw 2 --qa 2 ...
    python -m tests.managed_ledger_real.mlr_worker takeover URL NAME ...
    python -m tests.managed_ledger_real.mlr_worker cursor-owner URL NAME --plan JSON ...
    python -m tests.managed_ledger_real.mlr_worker cursor-reopen URL NAME ...
    python -m tests.managed_ledger_real.mlr_worker cursor-session URL NAME --add N --plan JSON ...

Every line on stdout is one JSON object with an ``event`` key, flushed at once, so that a test
reading it knows exactly what this process was told before it was fenced or killed.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from typing import Any

import trio

from bk_client import BookKeeper
from managed_ledger import (
    InitialPosition,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    ManagedLedgerFenced,
    Position,
)
from metadata import open_metadata_store

CURSOR = "sub"


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def payload(seq: int, size: int) -> bytes:
    head = f"seq={seq};".encode()
    return head + b"x" * max(size - len(head), 0)


def pos_list(p: Position) -> list[int]:
    return [p.ledger_id, p.entry_id]


def seq_of(data: bytes) -> int:
    return int(data.split(b";", 1)[0].removeprefix(b"seq="))


def ml_config(args: argparse.Namespace) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(
        ensemble_size=args.e,
        write_quorum=args.qw,
        ack_quorum=args.qa,
        max_entries_per_ledger=args.max_entries,
        min_ledger_rollover_time_minutes=0.0,
        cursor_persist_interval_s=args.persist_interval,
        cache_size_mb=4.0,
    )


async def read_all(ml: ManagedLedger) -> list[list[int]]:
    """[ledger, entry, seq] of every entry, oldest first, through a non-durable cursor."""
    cursor = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
    out: list[list[int]] = []
    while True:
        batch = await cursor.read_entries(100)
        if not batch:
            return out
        out += [[e.position.ledger_id, e.position.entry_id, seq_of(e.data)] for e in batch]


async def append(ml: ManagedLedger, args: argparse.Namespace) -> None:
    """Append until fenced with ``--inflight`` adds in flight, printing each acknowledged one.

    Each add takes its sequence number right before calling ``add_entry`` (no schedule point in
    between), so sequence numbers follow the order the managed ledger admitted the adds."""
    rng = random.Random(args.seed)
    admitted = 0
    stop = trio.Event()
    window = trio.Semaphore(args.inflight)

    async def add_one() -> None:
        nonlocal admitted
        s = admitted
        admitted += 1
        try:
            pos = await ml.add_entry(payload(s, args.size))
        except ManagedLedgerFenced as exc:
            if not stop.is_set():
                emit("fenced", seq=s, error=str(exc))
            stop.set()
        except ManagedLedgerError as exc:
            emit("add_error", seq=s, error=repr(exc))
            stop.set()
        else:
            emit("ack", seq=s, ledger=pos.ledger_id, entry=pos.entry_id)
        finally:
            window.release()

    async with trio.open_nursery() as nursery:
        while not stop.is_set():
            await window.acquire()
            if stop.is_set():
                break
            nursery.start_soon(add_one)
            if args.delay_ms > 0:
                await trio.sleep(rng.uniform(0, args.delay_ms) / 1000)
    emit("stopped", admitted=admitted)


async def apply_acks(ml: ManagedLedger, positions: list[Position], ops: list[list[Any]]) -> None:
    cursor = ml.cursors[CURSOR]
    for op in ops:
        if op[0] == "md":
            await cursor.mark_delete(positions[op[1]])
        else:
            await cursor.delete([positions[i] for i in op[1]])
        if len(op) > 2:
            await trio.sleep(op[2])


def cursor_state(ml: ManagedLedger) -> dict[str, Any]:
    c = ml.cursors[CURSOR]
    return {
        "md": pos_list(c.mark_delete_position),
        "ranges": [[pos_list(a), pos_list(b)] for a, b in c.individually_deleted_ranges],
    }


async def cursor_owner(ml: ManagedLedger, args: argparse.Namespace) -> None:
    """Create the cursor, add ``--entries``, apply phase 1 acks, persist, apply phase 2 acks,
    then wait for ``close`` on stdin (or to be killed)."""
    plan = json.loads(args.plan)
    await ml.open_cursor(CURSOR, InitialPosition.EARLIEST)
    positions = [await ml.add_entry(payload(i, args.size)) for i in range(args.entries)]
    emit("added", positions=[pos_list(p) for p in positions])
    await apply_acks(ml, positions, plan["phase1"])
    await ml.cursors[CURSOR].persist()
    emit("persisted", **cursor_state(ml))
    await apply_acks(ml, positions, plan["phase2"])
    emit("phase2", **cursor_state(ml))
    command = await trio.to_thread.run_sync(sys.stdin.readline)
    if command.strip() == "close":
        await ml.close()
        emit("closed")


async def cursor_reopen(ml: ManagedLedger, args: argparse.Namespace) -> None:
    """Print the reopened cursor's state and the seqs it delivers from its read position."""
    cursor = ml.cursors[CURSOR]
    state = cursor_state(ml)
    delivered: list[int] = []
    while True:
        batch = await cursor.read_entries(100)
        if not batch:
            break
        delivered += [seq_of(e.data) for e in batch]
    emit("reopened", delivered=delivered, entries=await read_all(ml), **state)
    await ml.close()


async def cursor_session(ml: ManagedLedger, args: argparse.Namespace) -> None:
    """One life of a subscriber: report what the (re)opened cursor delivers, add ``--add`` entries
    (numbered after the existing ones), apply ``plan["ops"]`` (acks by entry number, "persist",
    sleeps), report "done", then close on ``close`` from stdin or wait to be killed."""
    plan = json.loads(args.plan)
    cursor = await ml.open_cursor(CURSOR, InitialPosition.EARLIEST)
    delivered: list[int] = []
    while True:
        batch = await cursor.read_entries(100)
        if not batch:
            break
        delivered += [seq_of(e.data) for e in batch]
    entries = await read_all(ml)
    emit("reopened", delivered=delivered, entries=entries, **cursor_state(ml))
    first = len(entries)
    for i in range(first, first + args.add):
        await ml.add_entry(payload(i, args.size))
    positions = {seq: Position(lid, eid) for lid, eid, seq in await read_all(ml)}
    emit("added", total=len(positions))
    for op in plan["ops"]:
        emit("applying", op=op)  # before: an ack may be persisted by the flush loop meanwhile
        if op[0] == "persist":
            await cursor.persist()
        elif op[0] == "md":
            await cursor.mark_delete(positions[op[1]])
        else:
            await cursor.delete([positions[i] for i in op[1]])
        emit("applied", op=op)
        if len(op) > 2:
            await trio.sleep(op[2])
    emit("done", **cursor_state(ml))
    command = await trio.to_thread.run_sync(sys.stdin.readline)
    if command.strip() == "close":
        await ml.close()
        emit("closed")


async def main(args: argparse.Namespace) -> None:
    async with open_metadata_store(args.url) as store, BookKeeper.open(store) as bk:
        async with ManagedLedgerFactory(bk, store, ml_config(args)) as factory:
            started = trio.current_time()
            ml = await factory.open(args.name)
            emit("opened", open_ms=(trio.current_time() - started) * 1000, ledgers=[i.ledger_id for i in ml.ledgers])
            if args.command == "append":
                await append(ml, args)
            elif args.command == "takeover":
                emit("entries", entries=await read_all(ml))
                await ml.close()
            elif args.command == "cursor-owner":
                await cursor_owner(ml, args)
            elif args.command == "cursor-session":
                await cursor_session(ml, args)
            else:
                await cursor_reopen(ml, args)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["append", "takeover", "cursor-owner", "cursor-reopen", "cursor-session"])
    p.add_argument("url")
    p.add_argument("name")
    p.add_argument("--e", type=int, default=1)
    p.add_argument("--qw", type=int, default=1)
    p.add_argument("--qa", type=int, default=1)
    p.add_argument("--max-entries", type=int, default=50000)
    p.add_argument("--persist-interval", type=float, default=3600.0)
    p.add_argument("--inflight", type=int, default=1)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--entries", type=int, default=0)
    p.add_argument("--add", type=int, default=0)
    p.add_argument("--plan", default='{"phase1": [], "phase2": []}')
    return p.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    trio.run(main, parse(sys.argv[1:]))
