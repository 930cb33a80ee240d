"""The under-replication manager: layout, record codec, marks, locks, the enable switch."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from autorecovery import UnderReplicationManager
from autorecovery._underreplication import decode_ur_record, encode_ur_record, ur_ledger_path, ur_lock_path
from metadata import open_metadata_store
from tests.autorecovery.ar_helpers import BACKENDS, ROOT, store_url_for


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> str:
    return store_url_for(request)


def test_layout_matches_bookkeeper() -> None:
    assert ur_ledger_path(ROOT, 0xCAFEBEEF0000FEED & (2**63 - 1)) == (
        f"{ROOT}/ledgers/underreplication/ledgers/4afe/beef/0000/feed/urL{0x4AFEBEEF0000FEED:010d}"
    )
    assert ur_ledger_path("", 7) == "/ledgers/underreplication/ledgers/0000/0000/0000/0007/urL0000000007"
    assert ur_lock_path(ROOT, 7) == f"{ROOT}/ledgers/underreplication/locks/urL0000000007"
    with pytest.raises(ValueError):
        ur_ledger_path(ROOT, -1)


def test_record_is_protobuf_text() -> None:
    data = encode_ur_record(["b:2", "a:1", "a:1"], 1234)
    assert data == b'replica: "a:1"\nreplica: "b:2"\nctime: 1234\n'
    assert decode_ur_record(data) == (("a:1", "b:2"), 1234)
    assert decode_ur_record(b'replica: "x"\nunknownField: 3\n') == (("x",), None)
    with pytest.raises(ValueError):
        decode_ur_record(b"garbage without colon")


@given(
    st.sets(st.text(min_size=1).filter(lambda s: "\n" not in s and "\r" not in s and s.strip() == s)),
    st.none() | st.integers(0, 2**62),
)
def test_record_round_trip(missing: set[str], ctime: int | None) -> None:
    assert decode_ur_record(encode_ur_record(missing, ctime)) == (tuple(sorted(missing)), ctime)


async def test_mark_merge_list_and_clear(url: str) -> None:
    async with open_metadata_store(url) as store:
        urm = UnderReplicationManager(store, ROOT, identity="w1")
        assert await urm.list() == []
        await urm.mark(5, ["b1"])
        await urm.mark(5, ["b2"])  # merged (rule 1)
        await urm.mark(5, ["b1"])  # already there: no change
        await urm.mark(2**40 + 3, ["b3"])
        await urm.mark(1, ["b1"])
        assert await urm.list() == [1, 5, 2**40 + 3]
        rec = await urm.get(5)
        assert rec is not None and rec.missing == ("b1", "b2") and rec.ctime_ms is not None
        with pytest.raises(ValueError):
            await urm.mark(6, [])

        locked = await urm.try_lock(5)
        assert locked == rec
        assert await urm.is_locked(5)
        assert await urm.mark_replicated(5, locked.version)
        assert not await urm.is_locked(5)
        assert await urm.get(5) is None
        assert await urm.list() == [1, 2**40 + 3]
        # the emptied hex levels are pruned (rule 4), the shared ones stay
        assert await store.exists(ur_ledger_path(ROOT, 5).rsplit("/", 1)[0]) is None
        assert await store.exists(ur_ledger_path(ROOT, 1).rsplit("/", 1)[0]) is not None


async def test_mark_replicated_keeps_a_record_marked_again_meanwhile(url: str) -> None:
    async with open_metadata_store(url) as store:
        urm = UnderReplicationManager(store, ROOT, identity="w1")
        await urm.mark(9, ["b1"])
        rec = await urm.try_lock(9)
        assert rec is not None
        await urm.mark(9, ["b2"])  # the auditor found another lost bookie while we repaired
        assert not await urm.mark_replicated(9, rec.version)  # rule 3
        again = await urm.get(9)
        assert again is not None and again.missing == ("b1", "b2")
        assert not await urm.is_locked(9)


async def test_locks_are_exclusive_and_die_with_the_session(url: str) -> None:
    async with open_metadata_store(url) as store:
        urm = UnderReplicationManager(store, ROOT, identity="survivor")
        await urm.mark(1, ["b1"])
        await urm.mark(2, ["b1"])
        async with open_metadata_store(url) as other_store:
            other = UnderReplicationManager(other_store, ROOT, identity="doomed")
            got = await other.acquire_next()
            assert got is not None and got.ledger_id == 1
            assert await urm.try_lock(1) is None  # held elsewhere
            mine = await urm.acquire_next()
            assert mine is not None and mine.ledger_id == 2  # skips the locked one
            assert await other.acquire_next() is None  # nothing free left
        # the other session ended: its ephemeral lock went with it
        assert await urm.try_lock(1) is not None
        assert urm.held_locks == {1, 2}
        await urm.release_all()
        assert urm.held_locks == frozenset()
        assert await urm.acquire_next(skip=[1]) is not None


async def test_try_lock_of_an_unmarked_ledger_keeps_no_lock(url: str) -> None:
    async with open_metadata_store(url) as store:
        urm = UnderReplicationManager(store, ROOT)
        assert await urm.try_lock(42) is None
        assert not await urm.is_locked(42)


async def test_disable_enable_and_wait(url: str) -> None:
    async with open_metadata_store(url) as store:
        urm = UnderReplicationManager(store, ROOT)
        assert await urm.is_enabled()
        await urm.wait_until_enabled()  # returns at once
        await urm.disable()
        await urm.disable()
        assert not await urm.is_enabled()
        woke = trio.Event()

        async def waiter() -> None:
            await urm.wait_until_enabled()
            woke.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            # nothing should wake it while disabled (the store may answer from another thread, so a
            # bounded wait rather than trio's all-tasks-blocked)
            await trio.sleep(0.1)
            assert not woke.is_set()
            await urm.enable()
            with trio.fail_after(5):
                await woke.wait()
        assert await urm.is_enabled()


async def test_lost_bookie_recovery_delay_override(url: str) -> None:
    async with open_metadata_store(url) as store:
        urm = UnderReplicationManager(store, ROOT)
        assert await urm.get_lost_bookie_recovery_delay() is None
        await urm.set_lost_bookie_recovery_delay(30)
        assert await urm.get_lost_bookie_recovery_delay() == 30
        await urm.set_lost_bookie_recovery_delay(0)
        assert await urm.get_lost_bookie_recovery_delay() == 0
        await urm.set_lost_bookie_recovery_delay(None)
        assert await urm.get_lost_bookie_recovery_delay() is None
