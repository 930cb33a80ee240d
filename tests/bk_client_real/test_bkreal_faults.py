"""The BookKeeper client against REAL bookie processes and a real ZooKeeper: a bookie SIGKILLed
mid-write (ensemble change, nothing acknowledged lost), two writers racing (the old owner keeps
writing while a new one recovers), recovery after the writer died with entries on only Qa of Qw
bookies, a tailing reader on long-poll (with explicit LAC), and delete.

One set of bookies serves the whole module; tests that kill a bookie leave it to the next test's
``ready`` to start a replacement and wait for the dead one's registration to expire.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
import trio

from bk_client import BookKeeper, ClientConfig, LedgerFenced, NoSuchLedger, PendingAdd
from metadata import open_metadata_store
from tests.support.bookies import REPO, RealCluster
from tests.support.zookeeper import ZooKeeperServer

from .bkreal_writer import PASSWORD, payload

pytestmark = pytest.mark.slow

N_BOOKIES = 4
CFG = ClientConfig(
    add_entry_timeout_s=5.0,
    reconnect_backoff_min_s=0.05,
    reconnect_backoff_max_s=0.5,
    speculative_read_timeout_s=0.3,
    read_entry_timeout_s=3.0,
)


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    # the bookies' ZK session (and so a killed bookie's registration) expires after 4 s
    url = zookeeper.url(f"/bkreal-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    c = RealCluster(tmp_path_factory.mktemp("bkreal"), url)
    try:
        c.start(N_BOOKIES)
        yield c
    finally:
        c.stop_all()


@asynccontextmanager
async def client(cluster: RealCluster, config: ClientConfig = CFG) -> AsyncIterator[BookKeeper]:
    async with open_metadata_store(cluster.metadata_url) as store, BookKeeper.open(store, config=config) as bk:
        yield bk


async def ready(cluster: RealCluster, bk: BookKeeper) -> None:
    """Top the cluster up to ``N_BOOKIES`` live bookies and wait until exactly those are registered."""
    missing = N_BOOKIES - len(cluster.live_ids)
    if missing > 0:
        await trio.to_thread.run_sync(cluster.start, missing)
    with trio.fail_after(30):
        while set(await bk.ledger_manager.list_bookies()) != set(cluster.live_ids):
            await trio.sleep(0.1)


async def read_all(bk: BookKeeper, ledger_id: int, last: int) -> list[bytes]:
    rh = await bk.open_ledger(ledger_id, password=PASSWORD, recovery=False)
    out: list[bytes] = []
    for first in range(0, last + 1, 200):
        out += [e.data for e in await rh.read(first, min(last, first + 199))]
    return out


async def test_kill_a_bookie_mid_write_ensemble_change_loses_nothing(cluster: RealCluster) -> None:
    async with client(cluster) as bk:
        await ready(cluster, bk)
        lh = await bk.create_ledger(3, 2, 2, password=PASSWORD)
        first = lh.metadata.last_segment.ensemble
        victim = first[1]
        ops: list[PendingAdd] = []
        for i in range(600):
            ops.append(await lh.append(payload(i)))
            if i == 200:
                # some adds acknowledged (else the change would rewrite segment 0 in place),
                # later ones in flight to the victim right now
                await ops[100].result()
                await trio.to_thread.run_sync(cluster.kill, victim)
        assert [await op.result() for op in ops] == list(range(600))
        meta, _ = await bk.ledger_manager.read(lh.ledger_id)
        assert len(meta.segments) >= 2
        assert victim not in meta.last_segment.ensemble
        assert meta.segments[0].ensemble == first
        assert 0 < meta.segments[1].first_entry_id <= 600
        assert bk.metrics.statistics()["bookkeeper_client_NUM_ENSEMBLE_CHANGE_total"] >= 1
        await lh.close()
        async with client(cluster) as other:
            assert await read_all(other, lh.ledger_id, 599) == [payload(i) for i in range(600)]
            rh = await other.open_ledger(lh.ledger_id, password=PASSWORD)  # recovery: already closed
            assert rh.metadata.last_entry_id == 599


@pytest.mark.parametrize(
    ("delay", "window"),
    [(0.05, 50), (0.3, 50), (0.8, 200), (0.3, 1)],
    ids=["early", "mid", "late-wide", "mid-sequential"],
)
async def test_racing_writers_recovery_keeps_every_acknowledged_entry(
    cluster: RealCluster, delay: float, window: int
) -> None:
    old_cfg = ClientConfig(add_entry_timeout_s=5.0, max_in_flight_adds=window)
    async with client(cluster, old_cfg) as old_bk, client(cluster) as new_bk:
        await ready(cluster, new_bk)
        lh = await old_bk.create_ledger(3, 2, 2, password=PASSWORD)
        acked: list[int] = []
        errors: list[BaseException] = []

        async def old_owner() -> None:
            ops: list[PendingAdd] = []
            try:
                for i in range(100_000):
                    ops.append(await lh.append(payload(i)))
                    while ops and ops[0].finished:
                        acked.append(await ops.pop(0).result())
            except LedgerFenced as exc:
                errors.append(exc)
            for op in ops:
                try:
                    acked.append(await op.result())
                except LedgerFenced as exc:
                    errors.append(exc)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(old_owner)
                await trio.sleep(delay)  # the race's offset (a parameter): recovery starts this late
                rh = await new_bk.open_ledger(lh.ledger_id, password=PASSWORD, recovery=True)
        assert errors and all(isinstance(e, LedgerFenced) for e in errors)  # the old owner was fenced
        last = rh.metadata.last_entry_id
        assert rh.is_closed
        assert acked and acked == list(range(len(acked)))
        assert len(acked) - 1 <= last  # every entry the old writer was told succeeded is in the ledger
        data = await read_all(new_bk, lh.ledger_id, last) if last >= 0 else []
        assert data == [payload(i) for i in range(last + 1)]
        with pytest.raises(LedgerFenced):
            await lh.add_entry(b"late")
        await lh.close()  # a fenced writer lets go without touching the metadata
        meta, _ = await new_bk.ledger_manager.read(lh.ledger_id)
        assert meta.last_entry_id == last


async def test_recovery_after_the_writer_died_with_entries_on_only_qa_bookies(cluster: RealCluster) -> None:
    count = 40
    async with client(cluster) as bk:
        await ready(cluster, bk)
        writer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.bk_client_real.bkreal_writer",
                cluster.metadata_url,
                "3",
                "3",
                "2",
                str(count),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        stopped = None
        try:
            assert writer.stdout is not None and writer.stdin is not None
            line = await trio.to_thread.run_sync(writer.stdout.readline)
            ledger_id = int(line.split()[1])
            meta, _ = await bk.ledger_manager.read(ledger_id)
            stopped = cluster.by_id(meta.last_segment.ensemble[2])
            stopped.signal(signal.SIGSTOP)  # every add reaches Qa = 2 of Qw = 3 bookies, no more
            writer.stdin.write("go\n")
            writer.stdin.flush()
            acked = []
            with trio.fail_after(30):
                while (line := await trio.to_thread.run_sync(writer.stdout.readline)).startswith("acked"):
                    acked.append(int(line.split()[1]))
            assert line.strip() == "done"
            assert acked == list(range(count))
            writer.send_signal(signal.SIGKILL)  # the writer dies without closing
            writer.wait(10)
            rh = await bk.open_ledger(ledger_id, password=PASSWORD, recovery=True)
            assert rh.is_closed
            # the last entry's LAC was never piggybacked: recovery found it on the Qa bookies
            assert rh.metadata.last_entry_id == count - 1
            assert [e.data for e in await rh.read(0, count - 1)] == [payload(i) for i in range(count)]
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait(10)
            if stopped is not None:
                stopped.signal(signal.SIGCONT)
        with trio.fail_after(20):  # the resumed bookie answers again and holds the whole ledger
            async with client(cluster) as other:
                rh2 = await other.open_ledger(ledger_id, password=PASSWORD, recovery=False)
                assert [e.data for e in await rh2.read(0, count - 1)] == [payload(i) for i in range(count)]


async def test_tailing_reader_long_polls_new_entries_with_explicit_lac(cluster: RealCluster) -> None:
    writer_cfg = ClientConfig(explicit_lac_interval_ms=50)
    async with client(cluster, writer_cfg) as bk, client(cluster) as reader_bk:
        await ready(cluster, bk)
        lh = await bk.create_ledger(3, 2, 2, password=PASSWORD)
        rh = await reader_bk.open_ledger(lh.ledger_id, password=PASSWORD, recovery=False)
        assert rh.last_add_confirmed == -1
        seen: list[bytes] = []

        async def tail() -> None:
            lac = -1
            while len(seen) < 20:
                new = await rh.wait_for_lac(lac, 10)
                if new > lac:
                    seen.extend(e.data for e in await rh.read(lac + 1, new))
                    lac = new

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tail)
                for i in range(20):
                    await lh.add_entry(payload(i))
                    await trio.sleep(0.02)
        # the 20th entry arrived without a 21st add: the idle writer's explicit LAC woke the poll
        assert seen == [payload(i) for i in range(20)]
        assert lh.last_add_confirmed == 19
        assert reader_bk.metrics.statistics()["bookkeeper_client_READ_LAST_CONFIRMED_AND_ENTRY_total"] >= 1
        assert bk.metrics.statistics()["bookkeeper_client_WRITE_LAC_total"] >= 1
        await lh.close()


async def test_delete_ledger_removes_its_metadata(cluster: RealCluster) -> None:
    async with client(cluster) as bk:
        await ready(cluster, bk)
        lh = await bk.create_ledger(3, 2, 2, password=PASSWORD)
        for i in range(5):
            await lh.add_entry(payload(i))
        await lh.close()
        assert await bk.ledger_manager.exists(lh.ledger_id)
        await bk.delete_ledger(lh.ledger_id)
        assert not await bk.ledger_manager.exists(lh.ledger_id)
        with pytest.raises(NoSuchLedger):
            await bk.open_ledger(lh.ledger_id, password=PASSWORD)
        with pytest.raises(NoSuchLedger):
            await bk.delete_ledger(lh.ledger_id)
        assert lh.ledger_id not in [lid async for lid in bk.ledger_manager.iterate_ledger_ids()]
