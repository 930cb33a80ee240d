"""Explicit LAC (``explicit_lac_interval_ms`` / ``explicitLacInterval``) against fake bookies: an
idle writer publishes the LAC its last add could not piggyback; readers (READ_LAC and long-poll)
see the last entry without another add; the writer's own handle (what the managed ledger reads
through) is unchanged; the loop is best effort and stops with the handle."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from bk_client import ClientConfig, HandleState, LedgerFenced
from magnetar.common.config import ConfigError, load_config
from tests.support.fake_bookie import fake_cluster

FAST = ClientConfig(
    read_entry_timeout_s=1.0,
    speculative_read_timeout_s=0.05,
    reconnect_backoff_min_s=0.05,
    reconnect_backoff_max_s=0.2,
    add_entry_timeout_s=1.0,
)
EXPLICIT = ClientConfig(
    read_entry_timeout_s=1.0,
    speculative_read_timeout_s=0.05,
    reconnect_backoff_min_s=0.05,
    reconnect_backoff_max_s=0.2,
    add_entry_timeout_s=1.0,
    explicit_lac_interval_ms=20,
)


async def _wait(pred: Callable[[], bool], timeout: float = 5.0) -> None:  # noqa: ASYNC109 - a test poller's limit
    with trio.fail_after(timeout):
        while not pred():
            await trio.sleep(0.01)


def _write_lacs(c) -> int:  # type: ignore[no-untyped-def]
    return sum(b.write_lacs_received for b in c.bookies)


def test_config_key_alias_and_validation() -> None:
    assert ClientConfig().explicit_lac_interval_ms == 0  # off by default, as in BookKeeper
    assert load_config(ClientConfig, {"explicitLacInterval": 250}).explicit_lac_interval_ms == 250
    assert load_config(ClientConfig, {"explicit_lac_interval_ms": 5}).explicit_lac_interval_ms == 5
    with pytest.raises(ConfigError) as info:
        ClientConfig(explicit_lac_interval_ms=-1)
    assert info.value.key == "explicit_lac_interval_ms"


async def test_without_explicit_lac_a_reader_stays_one_entry_behind() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        for i in range(3):
            await lh.add_entry(b"e%d" % i)
        # FAST has no explicit-LAC interval: in this time nothing would move a reader's LAC further
        await trio.sleep(0.1)
        async with c.client() as other:
            rh = await other.open_ledger(lh.ledger_id, recovery=False)
            assert rh.last_add_confirmed == 1
            assert await rh.wait_for_lac(1, 0.2) == 1
        assert _write_lacs(c) == 0


async def test_idle_writer_publishes_its_lac_to_readers() -> None:
    async with fake_cluster(3, EXPLICIT) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        async with c.client(FAST) as other:
            for i in range(3):
                await lh.add_entry(b"e%d" % i)
            # the last ensemble's bookies got WRITE_LAC 2 once the writer was idle
            await _wait(lambda: lh.explicit_lac.published_lac == 2)
            assert all(b.write_lacs_received >= 1 for b in c.bookies)
            rh = await other.open_ledger(lh.ledger_id, recovery=False)
            assert rh.last_add_confirmed == 2  # READ_LAC carries the explicit LAC
            assert [e.data for e in await rh.read(2, 2)] == [b"e2"]
            assert c.bk.metrics.statistics()["bookkeeper_client_WRITE_LAC_total"] >= 1

            # a tailing reader's long poll wakes on the explicit LAC, with no further add
            got: list[int] = []

            async def tail() -> None:
                got.append(await rh.wait_for_lac(2, 30))

            async with trio.open_nursery() as n:
                n.start_soon(tail)
                await lh.add_entry(b"e3")
            assert got == [3]
            assert [e.data for e in await rh.read(3, 3)] == [b"e3"]


async def test_nothing_new_means_no_write_lac() -> None:
    async with fake_cluster(3, EXPLICIT) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await trio.sleep(0.1)  # five explicit-LAC intervals (20 ms) in which nothing may be sent
        assert _write_lacs(c) == 0  # no entry yet: nothing to publish
        await lh.add_entry(b"a")
        await _wait(lambda: lh.explicit_lac.published_lac == 0)
        await _wait(lambda: _write_lacs(c) == 3)  # one round, to every bookie of the ensemble
        sent = c.bk.metrics.statistics()["bookkeeper_client_WRITE_LAC_total"]
        await trio.sleep(0.15)  # several 20 ms intervals: nothing new, so no second round
        assert c.bk.metrics.statistics()["bookkeeper_client_WRITE_LAC_total"] == sent
        assert not lh.explicit_lac.flush()  # rule 3: already published


async def test_a_piggybacked_lac_is_not_sent_again() -> None:
    async with fake_cluster(3, FAST) as c:  # loop off: drive the rules by hand
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"a")
        await lh.add_entry(b"b")  # carried LAC 0
        assert lh.piggybacked_lac == 0
        assert lh.explicit_lac.flush()  # LAC 1 was never piggybacked
        await _wait(lambda: lh.explicit_lac.published_lac == 1)
        await lh.add_entry(b"c")  # carries LAC 1
        assert lh.piggybacked_lac == 1
        assert lh.explicit_lac.flush()  # LAC 2 is news again
        await _wait(lambda: lh.explicit_lac.published_lac == 2)
        await lh.close()
        assert not lh.explicit_lac.flush()  # rule 1: closed handles say nothing


async def test_writer_handle_reads_are_unchanged() -> None:
    # the managed ledger reads the ledger it writes through its write handle: same answers on or off
    for cfg in (FAST, EXPLICIT):
        async with fake_cluster(3, cfg) as c:
            lh = await c.bk.create_ledger(3, 2, 2)
            for i in range(5):
                await lh.add_entry(b"m%d" % i)
            await trio.sleep(0.06)
            assert lh.last_add_confirmed == 4
            assert await lh.read_last_add_confirmed() == 4
            assert [e.data for e in await lh.read(0, 4)] == [b"m%d" % i for i in range(5)]
            assert await lh.wait_for_lac(4, 0.05) == 4
            await lh.close()
            assert lh.metadata.last_entry_id == 4


async def test_a_dead_bookie_does_not_fail_the_idle_writer() -> None:
    async with fake_cluster(4, EXPLICIT) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"a")
        await _wait(lambda: lh.explicit_lac.published_lac == 0)
        await lh.add_entry(b"b")
        await c.bookie(lh.metadata.last_segment.ensemble[0]).kill()
        await trio.sleep(0.2)  # WRITE_LAC rounds fail on the dead bookie: best effort only
        assert lh.state is HandleState.OPEN
        await lh.add_entry(b"c")  # the next add replaces the bookie
        await _wait(lambda: lh.explicit_lac.published_lac == 2)
        assert len(lh.metadata.segments) == 2
        await lh.close()


async def test_the_loop_stops_when_the_writer_is_fenced() -> None:
    async with fake_cluster(3, EXPLICIT) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"a")
        await lh.add_entry(b"b")
        async with c.client(FAST) as other:
            rh = await other.open_ledger(lh.ledger_id)  # recovery fences the writer
            assert rh.last_add_confirmed == 1
        with pytest.raises(LedgerFenced):
            await lh.add_entry(b"c")
        assert lh.state is HandleState.FAILED
        before = _write_lacs(c)
        await trio.sleep(0.1)  # five 20 ms intervals in which a failed handle must send nothing
        assert _write_lacs(c) == before
