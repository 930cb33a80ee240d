"""The BookKeeper client against REAL bookies when its own event loop stalls (the process was
SIGSTOPped, or a step blocked the loop) longer than the add timeout while adds are in flight.

The bookies answer during the stall; the answers wait unread in the sockets. When the loop runs
again, the add-timeout monitor and the connection readers are ready in the same scheduler batch,
in random order: a monitor that judged the stall as the bookies' silence would fail bookies whose
answers it has not read yet, and the writer would report failed adds that are durable (a broker
paused past its session then has its client resend them to the next owner: stored twice).

Two bookies and ensemble 2, so a bookie wrongly failed has no replacement and the adds fail.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from bk_client import BookKeeper, ClientConfig, PendingAdd
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
