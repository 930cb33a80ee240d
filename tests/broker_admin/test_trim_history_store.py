"""The trim history kept in the metadata store: written compare-and-set and merged, loaded into a
new history (a restarted broker), bounded per topic, in topics and in age; a broken node is
skipped, not fatal."""

from __future__ import annotations

import json
import time

import pytest

from broker.admin import (
    TRIM_HISTORY_PATH,
    BookieAnswer,
    BookieGcView,
    TrimHistory,
    TrimHistoryStore,
    TrimmedLedger,
    join_gc_explain,
)
from broker.housekeeping._trim_store import decode_trims, encode_trims
from metadata import open_metadata_store

T1 = "persistent://public/default/t1"
T2 = "persistent://public/default/t2"
DAY_MS = 86_400_000


def test_record_round_trips_and_rejects_garbage() -> None:
    trims = [TrimmedLedger(3, 10, 100), TrimmedLedger(4, 11, None)]
    assert decode_trims(encode_trims(T1, trims)) == (T1, trims)
    for bad in (b"", b"{}", b'{"topic": 1, "trims": []}', b'{"topic": "x", "trims": [{"ledgerId": "a"}]}'):
        with pytest.raises(ValueError, match="trim-history"):
            decode_trims(bad)


async def test_trims_survive_into_a_new_history_and_merge_across_writers() -> None:
    now = 100 * DAY_MS / 1000
    async with open_metadata_store("memory://trim-store-1") as store:
        h1 = TrimHistory()
        s1 = TrimHistoryStore(store, h1, clock=lambda: now)
        h1.record(T1, [1, 2], int(now * 1000) - 5, {1: 10, 2: 20})
        h1.record("public/default/persistent/t2", [7], int(now * 1000) - 3)  # managed-ledger name form
        assert await s1.persist() == 2
        assert await s1.persist() == 0  # nothing new
        # another broker (owning t1 later) trims more of it: its write merges with the stored one
        h2 = TrimHistory()
        s2 = TrimHistoryStore(store, h2, clock=lambda: now)
        h2.record(T1, [5], int(now * 1000) - 1)
        assert await s2.persist() == 1
        # a restarted broker loads everything
        h3 = TrimHistory()
        assert await TrimHistoryStore(store, h3, clock=lambda: now).load() == 4
        assert [(t.ledger_id, t.size) for t in h3.of(T1)] == [(1, 10), (2, 20), (5, None)]
        assert [t.ledger_id for t in h3.of(T2)] == [7]
        assert h3.take_dirty() == {}  # loaded trims are not written back
        names = await store.children(TRIM_HISTORY_PATH)
        topics = [json.loads((await store.get(f"{TRIM_HISTORY_PATH}/{n}"))[0])["topic"] for n in names]
        assert sorted(topics) == [T1, T2]


async def test_stored_history_is_bounded_and_expired_nodes_go() -> None:
    now_ms = 100 * DAY_MS
    async with open_metadata_store("memory://trim-store-2") as store:
        h = TrimHistory(max_per_topic=3, max_topics=2)
        s = TrimHistoryStore(store, h, max_age_ms=DAY_MS, clock=lambda: now_ms / 1000)
        h.record(T1, [1, 2, 3, 4, 5], now_ms - 10)
        h.record(T2, [9], now_ms - 2 * DAY_MS)  # older than max_age: not worth keeping
        await s.persist()
        _, stored = decode_trims((await store.get(f"{TRIM_HISTORY_PATH}/persistent%3A%2F%2Fpublic%2Fdefault%2Ft1"))[0])
        assert [t.ledger_id for t in stored] == [3, 4, 5]
        # three topics stored by brokers with larger bounds; the loader keeps the newest two
        other = TrimHistory()
        other.record("persistent://public/default/a", [20], now_ms - 100)
        other.record("persistent://public/default/b", [21], now_ms - 50)
        await TrimHistoryStore(store, other, clock=lambda: now_ms / 1000).persist()
        fresh = TrimHistory(max_per_topic=3, max_topics=2)
        await TrimHistoryStore(store, fresh, max_age_ms=DAY_MS, clock=lambda: now_ms / 1000).load()
        assert [t.ledger_id for t in fresh.of(T1)] == [3, 4, 5]
        assert [t.ledger_id for t in fresh.of("persistent://public/default/b")] == [21]
        assert fresh.of("persistent://public/default/a") == [] and fresh.of(T2) == []
        left = sorted(await store.children(TRIM_HISTORY_PATH))
        assert len(left) == 2, left  # t2 (expired) and a (beyond max_topics) were deleted


async def test_a_broken_node_is_skipped_and_rewritten() -> None:
    async with open_metadata_store("memory://trim-store-3") as store:
        node = f"{TRIM_HISTORY_PATH}/persistent%3A%2F%2Fpublic%2Fdefault%2Ft1"
        await store.create(node, b"not json", make_parents=True)
        h = TrimHistory()
        s = TrimHistoryStore(store, h)
        assert await s.load() == 0
        h.record(T1, [4], int(time.time() * 1000))
        await s.persist()
        assert [t.ledger_id for t in decode_trims((await store.get(node))[0])[1]] == [4]


async def test_view_loads_the_history_before_explaining() -> None:
    async with open_metadata_store("memory://trim-store-4") as store:
        first = BookieGcView(store)
        at = int(time.time() * 1000)
        first.history.record(T1, [11, 12], at)
        assert await first.persist_trims() == 1
        restarted = BookieGcView(store)
        out = await restarted.explain(T1, [])
        rows = {r["ledgerId"]: r for r in out["ledgers"]}
        assert sorted(rows) == [11, 12] and rows[11]["metadata"] == "deleted" and rows[11]["deletedAtMs"] == at
        memory_only = BookieGcView(store, trim_history_path=None)
        assert (await memory_only.explain(T1, []))["ledgers"] == []


def test_join_shows_the_bookies_placement_and_logs_rolled_for_gc() -> None:
    log = {
        "log_id": 10,
        "directory": "/d",
        "total_bytes": 100,
        "live_bytes": 0,
        "reason": "dead",
        "detail": "no live data",
        "rolled_for_gc": "dead: none of its data is live any more",
        "ledgers": [{"ledger_id": 3, "bytes": 100, "metadata": "absent"}],
    }
    doc = {"last_run_ms": 1, "last_result": "ok", "placement": "per-ledger", "logs": [log]}
    out = join_gc_explain(T1, [], {}, [TrimmedLedger(3, 5, 100)], {"b1": BookieAnswer("b1", "http://b1", doc)}, {}, 9)
    assert out["bookies"]["b1"]["placement"] == "per-ledger"
    (held,) = out["ledgers"][0]["bookies"]["b1"]["entryLogs"]
    assert held["rolledForGc"] == "dead: none of its data is live any more"
