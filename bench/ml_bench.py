"""Managed ledger over real bookies and ZooKeeper: add throughput and latency through the managed
ledger next to the BookKeeper client's own, tailing and catch-up reads through a cursor, and the
time to open a managed ledger with 1,000 ledgers and 10 cursors.

One benchmark process (client, managed ledger; trio) and ``magnetar bookie`` subprocesses on
loopback (default bookie config: journal fsync on), one ZooKeeper (Debian's) on a free port.
Two clusters: 1 bookie (E=Qw=Qa=1) and 3 bookies (E=3 Qw=2 Qa=2). Asserts nothing.

    .venv/bin/python bench/ml_bench.py [--small 20000] [--large 1500] [--tasks 512]
        [--only e1|e3] [--profile out.prof] [--task-per-add]
    # --profile: cProfile of the managed-ledger 1 KiB phase; --task-per-add: the managed ledger
    # without the client's append (one task per add), for comparison
"""

from __future__ import annotations

import argparse
import cProfile
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bk_client import BookKeeper, ClientConfig, LedgerManager  # noqa: E402
from managed_ledger import (  # noqa: E402
    InitialPosition,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
)
from metadata import open_metadata_store  # noqa: E402
from protocols.bookkeeper import LedgerMetadata, Segment  # noqa: E402
from protocols.managed_ledger import CursorInfo, LedgerInfo, ManagedLedgerInfo, Position, PositionRange  # noqa: E402
from tests.support.zookeeper import start_zookeeper  # noqa: E402

KIB = 1024


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def start_bookies(base: Path, url: str, n: int) -> list[subprocess.Popen[str]]:
    procs = []
    for i in range(n):
        d = base / f"bookie{i}"
        d.mkdir(parents=True)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "magnetar",
                    "bookie",
                    "--journal-dir",
                    str(d / "journal"),
                    "--ledger-dirs",
                    str(d / "ledgers"),
                    "--port",
                    "0",
                    "--metadata-url",
                    url,
                    "--log-level",
                    "WARNING",
                    "--set",
                    "http_enabled=false",
                    "--set",
                    "listen_address=127.0.0.1",
                ],
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
        )
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"bookie did not start: {line!r}")
    return procs


async def wait_bookies(store: object, n: int) -> None:
    lm = LedgerManager(store)  # type: ignore[arg-type]
    while len(await lm.list_bookies()) < n:
        await trio.sleep(0.05)


async def drive(add: object, n: int, size: int, tasks: int) -> tuple[float, list[float]]:
    """``tasks`` tasks each calling ``await add(payload)`` in a loop, ``n`` adds in all.
    Returns (seconds, per-add latencies in ms); ``LAST_CPU[0]`` gets this process's CPU seconds."""
    payload = b"x" * size
    lat: list[float] = []
    left = [n]

    async def worker() -> None:
        clock = time.perf_counter
        while left[0] > 0:
            left[0] -= 1
            t0 = clock()
            await add(payload)  # type: ignore[operator]
            lat.append((clock() - t0) * 1000)

    start, cpu = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(worker)
    LAST_CPU[0] = time.process_time() - cpu
    return time.perf_counter() - start, lat


LAST_CPU = [0.0]


def report(label: str, n: int, size: int, secs: float, lat: list[float]) -> None:
    print(
        f"  {label:<44} {n / secs:>9,.0f} adds/s {n * size / secs / 1e6:>7.1f} MB/s   "
        f"p50 {pct(lat, 50):7.2f}  p99 {pct(lat, 99):7.2f}  p999 {pct(lat, 99.9):7.2f} ms  "
        f"cpu {LAST_CPU[0] / n * 1e6:5.1f} us/add",
        flush=True,
    )


async def add_phases(
    bk: BookKeeper, factory: ManagedLedgerFactory, quorum: tuple[int, int, int], args: argparse.Namespace, tag: str
) -> None:
    e, qw, qa = quorum
    loads = [(1 * KIB, args.small, args.tasks), (64 * KIB, args.large, 64)]
    for size, n, tasks in loads:
        lh = await bk.create_ledger(e, qw, qa)
        await drive(lh.add_entry, min(n // 10, 1000), size, tasks)  # warm-up
        secs, lat = await drive(lh.add_entry, n, size, tasks)
        report(f"client add_entry {size // KIB} KiB, {tasks} tasks", n, size, secs, lat)
        await lh.close()
        ml = await factory.open(f"bench/ns/persistent/{tag}-{size}-{uuid.uuid4().hex[:6]}")
        await drive(ml.add_entry, min(n // 10, 1000), size, tasks)
        prof = cProfile.Profile() if args.profile and size == KIB else None
        if prof is not None:
            prof.enable()
        secs, lat = await drive(ml.add_entry, n, size, tasks)
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.profile)
        report(f"managed ledger add_entry {size // KIB} KiB, {tasks} tasks", n, size, secs, lat)
        await ml.close()
    ml = await factory.open(f"bench/ns/persistent/{tag}-seq-{uuid.uuid4().hex[:6]}")
    lh = await bk.create_ledger(e, qw, qa)
    for label, add in (("client", lh.add_entry), ("managed ledger", ml.add_entry)):
        await drive(add, 100, KIB, 1)
        secs, lat = await drive(add, 1000, KIB, 1)
        report(f"{label} add_entry 1 KiB, sequential", 1000, KIB, secs, lat)
    await lh.close()
    await ml.close()


async def read_phases(factory: ManagedLedgerFactory, args: argparse.Namespace, tag: str) -> None:
    size, n = 64 * KIB, args.large
    ml = await factory.open(f"bench/ns/persistent/{tag}-read-{uuid.uuid4().hex[:6]}")
    cursor = await ml.open_cursor("tail", InitialPosition.LATEST)
    got = [0]

    async def tail() -> None:
        while got[0] < n:
            got[0] += len(await cursor.read_entries_or_wait(100))

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tail)
        await drive(ml.add_entry, n, size, 64)
    secs = time.perf_counter() - start
    print(
        f"  tailing cursor while writing 64 KiB at full rate: {n / secs:,.0f} entries/s "
        f"{n * size / secs / 1e6:.1f} MB/s (writer and reader finish together)",
        flush=True,
    )
    # catch-up: a cursor from the start, the entry cache emptied first (reads go to the bookies)
    factory.cache.invalidate(ml.name)
    cursor = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
    start, count = time.perf_counter(), 0
    while batch := await cursor.read_entries(100):
        count += len(batch)
    secs = time.perf_counter() - start
    print(
        f"  catch-up cursor, cache emptied (bookies):       {count / secs:,.0f} entries/s "
        f"{count * size / secs / 1e6:.1f} MB/s",
        flush=True,
    )
    cached = min(n, int(factory.config.cache_size_bytes // size) - 10)
    cursor = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
    await cursor.seek(Position(ml.last_confirmed_entry.ledger_id, ml.last_confirmed_entry.entry_id - cached + 1))
    await cursor.read_entries(cached)  # loads the cache from the bookies
    cursor = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
    await cursor.seek(Position(ml.last_confirmed_entry.ledger_id, ml.last_confirmed_entry.entry_id - cached + 1))
    start, count = time.perf_counter(), 0
    while batch := await cursor.read_entries(100):
        count += len(batch)
    secs = time.perf_counter() - start
    print(
        f"  cursor over cached entries ({cached} x 64 KiB):     {count / secs:,.0f} entries/s "
        f"{count * size / secs / 1e6:.1f} MB/s",
        flush=True,
    )
    await ml.close()


async def open_phase(bk: BookKeeper, store: object, cfg: ManagedLedgerConfig, quorum: tuple[int, int, int]) -> None:
    """Write the metadata of a managed ledger with 1,000 ledgers (the last one with real, closed
    ledger metadata; the others only listed) and 10 cursors with 100 acked ranges each, then time opens."""
    name = f"bench/ns/persistent/open-{uuid.uuid4().hex[:6]}"
    path = f"/managed-ledgers/{name}"
    # the last ledger: closed metadata written directly (opening reads it, never its entries)
    # ledger ids must increase along the list and stay below the ones created later: draw them
    ids: list[int] = []

    async def draw(k: int) -> None:
        for _ in range(k):
            ids.append(await bk.ledger_manager.generate_ledger_id())

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(draw, 25)
    ids.sort()
    last_id = ids[-1]
    bookies = sorted(await bk.ledger_manager.list_bookies())[: quorum[0]]
    meta = LedgerMetadata(
        ensemble_size=quorum[0],
        write_quorum=quorum[1],
        ack_quorum=quorum[2],
        segments=(Segment(0, tuple(bookies)),),
        ctime_ms=int(time.time() * 1000),
    )
    await bk.ledger_manager.create(last_id, meta.closed(9, 20))
    infos = tuple(LedgerInfo(lid, 1000, 1_000_000, 1_700_000_000_000 + i) for i, lid in enumerate(ids[:-1]))
    infos += (LedgerInfo(last_id, 10, 20, 1_800_000_000_000),)
    await store.create(path, ManagedLedgerInfo(infos).encode(), make_parents=True)  # type: ignore[attr-defined]
    for c in range(10):
        lid, nxt = ids[c * 50], ids[c * 50 + 1]
        ranges = tuple(PositionRange(Position(nxt, 2 * r), Position(nxt, 2 * r + 1)) for r in range(100))
        info = CursorInfo(Position(lid, 499), ranges)
        await store.create(f"{path}/cursor-{c}", info.encode())  # type: ignore[attr-defined]
    times = []
    for _ in range(5):
        async with ManagedLedgerFactory(bk, store, cfg) as factory:  # type: ignore[arg-type]
            start = time.perf_counter()
            ml = await factory.open(name)
            times.append((time.perf_counter() - start) * 1000)
            assert len(ml.cursors) == 10 and len(ml.ledgers) >= 1000
    print(
        f"  open with 1,000 ledgers and 10 cursors (100 ranges each): "
        f"{', '.join(f'{t:.0f}' for t in times)} ms (5 opens, each a takeover)",
        flush=True,
    )


class _WithoutAppend:
    """A write handle showing only the ``WriteHandle`` protocol (no ``append``), so that the
    managed ledger takes its task-per-add path (``--task-per-add``, for comparison)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name == "append":
            raise AttributeError(name)
        return getattr(self._inner, name)


class _TaskPerAddClient:
    def __init__(self, bk: BookKeeper) -> None:
        self._bk = bk

    def __getattr__(self, name: str) -> object:
        return getattr(self._bk, name)

    async def create_ledger(self, *args: object, **kwargs: object) -> object:
        return _WithoutAppend(await self._bk.create_ledger(*args, **kwargs))  # type: ignore[arg-type]


async def run_cluster(url: str, n_bookies: int, quorum: tuple[int, int, int], args: argparse.Namespace) -> None:
    e, qw, qa = quorum
    cfg = ManagedLedgerConfig(ensemble_size=e, write_quorum=qw, ack_quorum=qa, cache_size_mb=64.0)
    async with open_metadata_store(url) as store:
        await wait_bookies(store, n_bookies)
        async with BookKeeper.open(store, config=ClientConfig()) as bk:
            print(f"\nE={e} Qw={qw} Qa={qa} over {n_bookies} bookie(s)", flush=True)
            ml_bk = _TaskPerAddClient(bk) if args.task_per_add else bk
            async with ManagedLedgerFactory(ml_bk, store, cfg) as factory:  # type: ignore[arg-type]
                await add_phases(bk, factory, quorum, args, f"e{e}")
                await read_phases(factory, args, f"e{e}")
            await open_phase(bk, store, cfg, quorum)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--small", type=int, default=20000, help="1 KiB adds per phase")
    p.add_argument("--large", type=int, default=1500, help="64 KiB adds per phase")
    p.add_argument("--tasks", type=int, default=512, help="concurrent adding tasks for 1 KiB")
    p.add_argument("--only", choices=["e1", "e3"], default=None)
    p.add_argument("--profile", default=None)
    p.add_argument(
        "--task-per-add",
        action="store_true",
        help="hide the client's append from the managed ledger (its task-per-add path)",
    )
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="ml-bench-"))
    zk = start_zookeeper(base / "zk")
    procs: list[subprocess.Popen[str]] = []
    try:
        for n, quorum in ((1, (1, 1, 1)), (3, (3, 2, 2))):
            if args.only and args.only != f"e{quorum[0]}":
                continue
            url = zk.url(f"/bench{n}-{uuid.uuid4().hex[:6]}")
            cluster = start_bookies(base / f"cluster{n}", url, n)
            procs += cluster
            try:
                trio.run(run_cluster, url, n, quorum, args)
            finally:
                for proc in cluster:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        zk.stop()
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
