"""The BookKeeper client against REAL bookies when its own event loop stalls (the process was
SIGSTOPped, or a step blocked the loop) longer than the add timeout while adds are in flight.

The bookies answer during the stall; the answers wait unread in the sockets. When the loop runs
again, the add-timeout monitor and the connection readers are ready in the same scheduler batch,
in random order: a monitor that judged the stall as the bookies' silence would fail bookies whose
answers it has not read yet, and the writer would report failed adds that are durable (a broker
paused past its session then has its client resend them to the next owner: stored twice).

Two bookies and ensemble 2, so a bookie wrongly failed has no replacement and the adds fail.

Reads and the single-bookie requests of repair tools (``BookieClient``) meet the same stall: their
deadlines expire in the batch that also delivers the answers, so the answers must still count.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence

import pytest
import trio
import trio.testing

from bk_client import BookKeeper, ClientConfig, PendingAdd, master_key
from metadata import open_metadata_store
from tests.support.bookies import RealCluster
from tests.support.zookeeper import ZooKeeperServer

from .bkreal_writer import PASSWORD, payload

pytestmark = pytest.mark.slow

TIMEOUT_S = 1.0
STALL_S = 1.6  # longer than the add timeout
ROUNDS = 6  # the batch order is random: a stall lost to the monitor fails some round in all but ~0.2 % of runs


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    url = zookeeper.url(f"/bkstall-{uuid.uuid4().hex[:10]}", session_timeout_ms=10000)
    c = RealCluster(tmp_path_factory.mktemp("bkstall"), url)
    try:
        c.start(2)
        yield c
    finally:
        c.stop_all()


async def test_answers_that_arrived_during_a_loop_stall_acknowledge_the_adds(cluster: RealCluster) -> None:
    cfg = ClientConfig(add_entry_timeout_s=TIMEOUT_S)
    async with open_metadata_store(cluster.metadata_url) as store, BookKeeper.open(store, config=cfg) as bk:
        with trio.fail_after(30):
            while len(await bk.ledger_manager.list_bookies()) < 2:
                await trio.sleep(0.1)
        lh = await bk.create_ledger(2, 2, 2, password=PASSWORD)
        n = 0
        for _ in range(ROUNDS):
            ops: list[PendingAdd] = [await lh.append(payload(n + i)) for i in range(50)]
            # let the frames go out; the answers come back while the loop is stalled
            await trio.testing.wait_all_tasks_blocked()
            time.sleep(STALL_S)  # noqa: ASYNC251 - the stall under test blocks the event loop on purpose
            assert [await op.result() for op in ops] == list(range(n, n + 50))
            n += 50
        assert bk.metrics.statistics()["bookkeeper_client_NUM_ENSEMBLE_CHANGE_total"] == 0
        meta, _ = await bk.ledger_manager.read(lh.ledger_id)
        assert len(meta.segments) == 1
        await lh.close()


async def _stalled(*calls: Callable[[], Awaitable[object]]) -> list[object]:
    """Run ``calls`` concurrently, block the loop past the timeout once all of them wait on their
    bookies, and return their results (or the errors they raised)."""
    results: list[object] = [None] * len(calls)

    async def run(i: int) -> None:
        try:
            results[i] = await calls[i]()
        except Exception as exc:  # the assertion names the error, not the traceback
            results[i] = exc

    async with trio.open_nursery() as nursery:
        for i in range(len(calls)):
            nursery.start_soon(run, i)
        await trio.testing.wait_all_tasks_blocked()
        time.sleep(STALL_S)  # noqa: ASYNC251 - the stall under test blocks the event loop on purpose
    return results


async def test_reads_and_bookie_requests_answered_during_a_loop_stall_succeed(cluster: RealCluster) -> None:
    cfg = ClientConfig(read_entry_timeout_s=TIMEOUT_S, add_entry_timeout_s=TIMEOUT_S, speculative_read_timeout_s=0)
    async with open_metadata_store(cluster.metadata_url) as store, BookKeeper.open(store, config=cfg) as bk:
        with trio.fail_after(30):
            while len(await bk.ledger_manager.list_bookies()) < 2:
                await trio.sleep(0.1)
        lh = await bk.create_ledger(2, 2, 2, password=PASSWORD)
        for i in range(20):
            await lh.add_entry(payload(i))
        meta, _ = await bk.ledger_manager.read(lh.ledger_id)
        bookies = list(meta.segments[0].ensemble)
        reader = await bk.open_ledger(lh.ledger_id, password=PASSWORD, recovery=False)
        client = bk.bookie_client
        key = master_key(PASSWORD)
        stored = {e: await client.read_entry(bookies[0], lh.ledger_id, e, metadata=meta) for e in range(20)}
        for _ in range(3):
            results = await _stalled(
                lambda: reader.read(0, 18),
                *(
                    (lambda b=b, e=e: client.read_entry(b, lh.ledger_id, e, metadata=meta))
                    for b in bookies
                    for e in range(0, 20, 4)
                ),
                *(
                    (lambda b=b, e=e: client.recovery_add(b, lh.ledger_id, e, key, stored[e]))
                    for b in bookies
                    for e in (1, 2)
                ),
            )
            errors = [r for r in results if isinstance(r, Exception)]
            assert not errors, errors
            entries = results[0]
            assert isinstance(entries, Sequence)
            assert [e.data for e in entries] == [payload(i) for i in range(19)]
            assert results[1:11] == [stored[e] for _ in bookies for e in range(0, 20, 4)]
        await lh.close()
