"""LedgerManager against the metadata store: memory and embedded backends, and a real ZooKeeper
(marked slow)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from bk_client import (
    BookKeeper,
    ClientConfig,
    LedgerExists,
    LedgerManager,
    LedgerMetadataUpdate,
    MetadataStoreError,
    MetadataVersionConflict,
    NoSuchLedger,
)
from magnetar.common.config import ConfigError
from metadata import open_metadata_store
from protocols.bookkeeper import MAX_LEDGER_ID, LedgerLayout, LedgerMetadata, Segment, encode_layout, ledger_path

ROOT = "/magnetar"


def _meta(ensemble: tuple[str, ...] = ("b1", "b2", "b3"), **kw: object) -> LedgerMetadata:
    return LedgerMetadata(ensemble_size=3, write_quorum=2, ack_quorum=2, segments=(Segment(0, ensemble),), **kw)  # type: ignore[arg-type]


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("embedded", id="embedded"),
        pytest.param("zk", id="zk", marks=pytest.mark.slow),
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://bkcore-{uuid.uuid4().hex}"
    if request.param == "embedded":
        return f"embedded://{tmp_path / 'meta'}"
    return str(request.getfixturevalue("zk_url"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[object]:
    async with open_metadata_store(store_url) as s:
        yield s


async def test_create_read_write_delete(store: object) -> None:
    lm = LedgerManager(store, ROOT)
    meta = _meta()
    assert await lm.create(7, meta) == 0
    assert await lm.exists(7)
    got, version = await lm.read(7)
    assert got == meta and version == 0
    closed = meta.closed(41, 4200)
    v1 = await lm.write(7, closed, 0)
    assert v1 == 1
    assert (await lm.read(7)) == (closed, 1)
    with pytest.raises(LedgerExists, match="ledger already exists: 7"):
        await lm.create(7, meta)
    await lm.delete(7, version=1)
    assert not await lm.exists(7)
    with pytest.raises(NoSuchLedger, match="no such ledger: 7"):
        await lm.read(7)
    with pytest.raises(NoSuchLedger):
        await lm.write(7, meta, 1)
    with pytest.raises(NoSuchLedger):
        await lm.delete(7)
    with pytest.raises(ValueError, match="expected version"):
        await lm.write(7, meta, -1)


async def test_metadata_lands_at_the_layout_path(store: object) -> None:
    lm = LedgerManager(store, ROOT)
    await lm.create(12345, _meta())
    data, _ = await store.get(ledger_path(ROOT, 12345))  # type: ignore[attr-defined]
    assert LedgerMetadata.decode(data) == _meta()


async def test_cas_conflict_between_two_writers(store: object) -> None:
    a, b = LedgerManager(store, ROOT), LedgerManager(store, ROOT)
    await a.create(1, _meta())
    meta_a, va = await a.read(1)
    meta_b, vb = await b.read(1)
    recovering = meta_b.in_recovery()
    assert await b.write(1, recovering, vb) == vb + 1
    with pytest.raises(MetadataVersionConflict) as info:
        await a.write(1, meta_a.with_segment(0, ("b1", "b2", "b4")), va)
    assert info.value.ledger_id == 1 and info.value.expected == va
    assert "expected version 0 is stale" in str(info.value)
    assert (await a.read(1)) == (recovering, vb + 1)
    with pytest.raises(MetadataVersionConflict):
        await a.delete(1, version=0)


async def test_concurrent_writers_exactly_one_wins(store: object) -> None:
    managers = [LedgerManager(store, ROOT) for _ in range(8)]
    await managers[0].create(2, _meta())
    wins: list[int] = []
    losses: list[int] = []

    async def writer(i: int, lm: LedgerManager) -> None:
        meta, version = await lm.read(2)
        await trio.lowlevel.checkpoint()
        try:
            await lm.write(2, meta.with_segment(0, ("b1", "b2", f"x{i}")), version)
            wins.append(i)
        except MetadataVersionConflict:
            losses.append(i)

    async with trio.open_nursery() as n:
        for i, lm in enumerate(managers):
            n.start_soon(writer, i, lm)
    assert len(wins) == 1 and len(losses) == 7
    meta, version = await managers[0].read(2)
    assert meta.last_segment.ensemble == ("b1", "b2", f"x{wins[0]}") and version == 1


async def test_unique_ids_under_concurrency_and_restart(store: object) -> None:
    ids: list[int] = []
    clients = [LedgerManager(store, ROOT) for _ in range(4)]

    async def draw(lm: LedgerManager) -> None:
        for _ in range(25):
            ids.append(await lm.generate_ledger_id())

    async with trio.open_nursery() as n:
        for lm in clients:
            n.start_soon(draw, lm)
    assert len(ids) == len(set(ids)) == 100
    assert all(0 <= i <= MAX_LEDGER_ID for i in ids)
    # A "restarted" client (no cached state) never repeats an id.
    again = [await LedgerManager(store, ROOT).generate_ledger_id() for _ in range(10)]
    assert not set(again) & set(ids)
    assert again == sorted(again)


async def test_id_high_order_buckets_roll_over(store: object) -> None:
    # a sequence limit of 3: each HOB bucket serves ids hob << 32 | 0..2, then a new bucket is opened
    await store.create(f"{ROOT}/ledgers/idgen-long", make_parents=True)  # type: ignore[attr-defined]
    clients = [LedgerManager(store, ROOT, id_seq_limit=3) for _ in range(3)]
    ids: list[int] = []

    async def draw(lm: LedgerManager) -> None:
        mine = [await lm.generate_ledger_id() for _ in range(10)]
        assert mine == sorted(mine)
        ids.extend(mine)

    async with trio.open_nursery() as n:
        for lm in clients:
            n.start_soon(draw, lm)
    assert len(set(ids)) == 30
    assert all(i & 0xFFFFFFFF < 3 for i in ids)
    assert max(ids) >> 32 >= 10  # at least ten buckets were used, the first HOB-0000000001
    assert min(ids) >> 32 == 1
    with pytest.raises(ValueError):
        LedgerManager(store, ROOT, id_seq_limit=2**31)


async def test_ids_as_bookkeeper_draws_them(store: object) -> None:
    # short ids from {ledgers}/idgen/ID- (flat: {ledgers}/ID-) until exhausted, then idgen-long
    # with hob << 32 | seq, as BookKeeper's LongZkLedgerIdGenerator
    # (a store's counter may also count the deleted ID- nodes: ids are unique, not consecutive)
    short = LedgerManager(store, ROOT, id_seq_limit=4)
    ids = [await short.generate_ledger_id() for _ in range(6)]
    first_long = next(i for i, lid in enumerate(ids) if lid >= 1 << 32)
    assert ids[0] == 0 and ids[:first_long] == sorted(set(ids[:first_long])) and max(ids[:first_long]) < 4
    assert ids[first_long] == 1 << 32 and all(lid & 0xFFFFFFFF < 4 for lid in ids[first_long:])
    assert ids[first_long:] == sorted(set(ids[first_long:]))
    assert await store.exists(f"{ROOT}/ledgers/idgen-long/HOB-0000000001") is not None  # type: ignore[attr-defined]
    # a client that never saw the short ids joins the long ones
    assert await LedgerManager(store, ROOT).generate_ledger_id() >> 32 >= 1
    flat = LedgerManager(store, "/flat", layout=LedgerLayout.FLAT)
    flat_ids = [await flat.generate_ledger_id() for _ in range(2)]
    assert flat_ids[0] == 0 < flat_ids[1] < 3
    assert await store.children("/flat/ledgers") == []  # type: ignore[attr-defined]


class CountingStore:
    """Delegates to a real store, recording every children() call (to check the walk prunes)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.listed: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def children(self, path: str) -> list[str]:
        self.listed.append(path)
        return await self.inner.children(path)  # type: ignore[attr-defined]


SPREAD = [
    0,
    1,
    9_999,
    10_000,
    10**8 + 5,
    10**12,
    10**12 + 1,
    5 * 10**15,
    10**16 + 3,
    123_456_789_012_345_678,
    MAX_LEDGER_ID,
]


async def test_iterate_ids_in_order_across_hierarchy_nodes(store: object) -> None:
    counting = CountingStore(store)
    lm = LedgerManager(counting, ROOT)
    for ledger_id in reversed(SPREAD):
        await lm.create(ledger_id, _meta())
    await lm.generate_ledger_id()  # idgen nodes live under the ledgers root: must be skipped
    await store.create(
        f"{ROOT}/ledgers/available/bookie-1:3181",
        make_parents=True,  # type: ignore[attr-defined]
        ephemeral=True,
    )
    assert [i async for i in lm.iterate_ledger_ids()] == SPREAD
    assert [i async for i in lm.iterate_ledger_ids(10_000, 10**12 + 1)] == [10_000, 10**8 + 5, 10**12]
    assert [i async for i in lm.iterate_ledger_ids(start=10**16)] == SPREAD[-3:]
    assert [i async for i in lm.iterate_ledger_ids(2, 3)] == []
    assert [i async for i in lm.iterate_ledger_ids(5, 5)] == []
    # A narrow range lists only the nodes on its own path: the root plus one node per level.
    counting.listed.clear()
    assert [i async for i in lm.iterate_ledger_ids(10**16, 10**16 + 10)] == [10**16 + 3]
    assert len(counting.listed) == 5
    await lm.delete(10**12)
    assert [i async for i in lm.iterate_ledger_ids(10**11, 10**13)] == [10**12 + 1]


async def test_iterate_empty_store(store: object) -> None:
    assert [i async for i in LedgerManager(store, ROOT).iterate_ledger_ids()] == []


async def test_watch_ledger_metadata(store: object) -> None:
    lm = LedgerManager(store, ROOT)
    with trio.fail_after(10):
        async with lm.watch(9) as updates:
            assert await updates.receive() == LedgerMetadataUpdate(9, None, -1)
            await lm.create(9, _meta())
            assert await updates.receive() == LedgerMetadataUpdate(9, _meta(), 0)
            changed = _meta().with_segment(0, ("b1", "b2", "b9"))
            await lm.write(9, changed, 0)
            assert await updates.receive() == LedgerMetadataUpdate(9, changed, 1)
            await lm.delete(9)
            assert await updates.receive() == LedgerMetadataUpdate(9, None, -1)


async def test_list_and_watch_bookies(store: object) -> None:
    lm = LedgerManager(store, ROOT)
    assert await lm.list_bookies() == [] and await lm.list_bookies(writable=False) == []
    avail = f"{ROOT}/ledgers/available"
    await store.create(f"{avail}/b2:3181", ephemeral=True, make_parents=True)  # type: ignore[attr-defined]
    await store.create(f"{avail}/b1:3181", ephemeral=True)  # type: ignore[attr-defined]
    await store.create(f"{avail}/readonly/b3:3181", ephemeral=True, make_parents=True)  # type: ignore[attr-defined]
    assert await lm.list_bookies() == ["b1:3181", "b2:3181"]
    assert await lm.list_bookies(writable=False) == ["b3:3181"]
    with trio.fail_after(10):
        async with lm.watch_bookies() as sets:
            assert await sets.receive() == {"b1:3181", "b2:3181"}
            await store.create(f"{avail}/b4:3181", ephemeral=True)  # type: ignore[attr-defined]
            assert await sets.receive() == {"b1:3181", "b2:3181", "b4:3181"}
            await store.delete(f"{avail}/b1:3181")  # type: ignore[attr-defined]
            assert await sets.receive() == {"b2:3181", "b4:3181"}
        async with lm.watch_bookies(writable=False) as sets:
            assert await sets.receive() == {"b3:3181"}


async def test_ids_never_repeat_across_store_restarts(store_url: str) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("the memory backend does not outlive its process")
    seen: set[int] = set()
    for _ in range(3):
        async with open_metadata_store(store_url) as s:
            lm = LedgerManager(s, ROOT, id_seq_limit=3)
            ids = [await lm.generate_ledger_id() for _ in range(10)]
            assert not seen & set(ids)
            seen |= set(ids)
    assert len(seen) == 30


# ------------------------------------------------------------ flat layout


async def test_flat_layout_create_read_iterate_delete(store: object) -> None:
    lm = LedgerManager(store, ROOT, layout=LedgerLayout.FLAT)
    await lm.ensure_layout()
    ids = [await lm.generate_ledger_id() for _ in range(3)] + [12345678901]
    for lid in ids:
        await lm.create(lid, _meta())
        data, _ = await store.get(ledger_path(ROOT, lid, LedgerLayout.FLAT))  # type: ignore[attr-defined]
        assert LedgerMetadata.decode(data) == _meta()
        assert not await store.exists(ledger_path(ROOT, lid))  # type: ignore[attr-defined]
    assert [i async for i in lm.iterate_ledger_ids()] == sorted(ids)
    assert [i async for i in lm.iterate_ledger_ids(ids[1], 12345678901)] == sorted(ids)[1:3]
    closed = _meta().closed(3, 30)
    assert await lm.write(ids[0], closed, 0) == 1
    assert await lm.read(ids[0]) == (closed, 1)
    await lm.delete(ids[0])
    assert not await lm.exists(ids[0])
    assert [i async for i in lm.iterate_ledger_ids()] == sorted(ids[1:])


async def test_the_layout_node_is_written_once_and_enforced(store: object) -> None:
    flat = LedgerManager(store, ROOT, layout=LedgerLayout.FLAT)
    await flat.ensure_layout()
    await flat.ensure_layout()  # idempotent for the same layout
    data, _ = await store.get(f"{ROOT}/ledgers/LAYOUT")  # type: ignore[attr-defined]
    assert data == encode_layout(LedgerLayout.FLAT)
    with pytest.raises(MetadataStoreError, match="ledgerManagerFactoryClass"):
        await LedgerManager(store, ROOT, layout=LedgerLayout.HIERARCHICAL).ensure_layout()
    follower = LedgerManager(store, ROOT)  # none configured: the recorded layout, as BookKeeper's zk:// URIs
    assert await follower.ensure_layout() is LedgerLayout.FLAT and follower.layout is LedgerLayout.FLAT
    assert await LedgerManager(store, "/other").ensure_layout() is LedgerLayout.HIERARCHICAL  # its own


async def test_a_client_of_the_other_layout_refuses_to_open(store: object) -> None:
    async with BookKeeper.open(
        store,
        root=ROOT,  # type: ignore[arg-type]
        config=ClientConfig(ledger_manager_factory_class="flat"),
    ) as bk:
        assert bk.ledger_manager.layout is LedgerLayout.FLAT
    with pytest.raises(MetadataStoreError, match="flat"):
        async with BookKeeper.open(
            store,
            root=ROOT,  # type: ignore[arg-type]
            config=ClientConfig(ledger_manager_factory_class="longhierarchical"),
        ):
            pass
    async with BookKeeper.open(store, root=ROOT) as bk:  # type: ignore[arg-type]
        assert bk.ledger_manager.layout is LedgerLayout.FLAT


def test_bad_layout_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ledger_manager_factory_class"):
        ClientConfig(ledger_manager_factory_class="zk-ish")


async def test_discover_follows_the_layout_node(store: object) -> None:
    assert (await LedgerManager.discover(store, ROOT)).layout is LedgerLayout.HIERARCHICAL  # type: ignore[arg-type]
    flat = LedgerManager(store, ROOT, layout=LedgerLayout.FLAT)  # type: ignore[arg-type]
    await flat.ensure_layout()
    await flat.create(77, _meta())
    found = await LedgerManager.discover(store, ROOT)  # type: ignore[arg-type]
    assert found.layout is LedgerLayout.FLAT and (await found.read(77))[0] == _meta()
