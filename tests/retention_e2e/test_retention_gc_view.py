"""The broker's bookie-GC view: the pure join, the trim history, and the view over a memory
metadata store with bookies answered by an in-process HTTP transport (one of them unreachable)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio

from bk_client import LedgerManager
from broker.admin import BookieAnswer, BookieGcView, TrimHistory, TrimmedLedger, join_gc_explain
from broker.housekeeping._gc_join import awaiting_gc_bytes
from managed_ledger import LedgerPlacement, ledger_placements
from metadata import open_metadata_store
from protocols.bookkeeper import LedgerMetadata, LedgerState, Segment
from retention import RetentionDecision, RetentionPolicies, TopicReport

TOPIC = "persistent://public/default/t"


def log_row(
    log_id: int,
    pins: list[tuple[int, int, str]],
    total: int,
    reason: str = "usage_above_threshold",
) -> dict[str, Any]:
    live = sum(b for _, b, _ in pins)
    return {
        "log_id": log_id,
        "log_file": f"{log_id:x}.log",
        "directory": "/d",
        "size_bytes": total + 1024,
        "total_bytes": total,
        "live_bytes": live,
        "usage": live / total,
        "reason": reason,
        "detail": f"because {reason}",
        "next_attempt_ms": None,
        "other_ledgers": 0,
        "ledgers": [
            {"ledger_id": lid, "bytes": b, "metadata": md, "belongs_to": None, "state": None} for lid, b, md in pins
        ],
    }


def doc(*logs: dict[str, Any]) -> dict[str, Any]:
    return {"schedule": {}, "last_run_ms": 5, "last_result": "ok", "logs": list(logs)}


def test_join_tells_each_step_of_a_deleted_ledger() -> None:
    placements = {1: LedgerPlacement(1, "CLOSED", ("b1",), 100, 9), 5: LedgerPlacement(5, "OPEN", ("b1",))}
    trimmed = [TrimmedLedger(2, 1000, 300), TrimmedLedger(3, 1000, 400), TrimmedLedger(4, 2000, 50)]
    answers = {
        "b1": BookieAnswer(
            "b1",
            "http://b1",
            doc(
                log_row(10, [(1, 100, "present"), (2, 300, "absent")], 1000),  # 2: index still has it
                log_row(11, [(9, 10, "present")], 500, "next_compaction_due"),  # 3 left garbage here
            ),
        )
    }
    seen = {3: {"b1": {11: 400}}, 4: {"b1": {12: 50}}}  # log 12 is gone: 4 is reclaimed
    out = join_gc_explain(TOPIC, [1, 5], placements, trimmed, answers, seen, 3000)
    rows = {r["ledgerId"]: r for r in out["ledgers"]}
    assert [r["ledgerId"] for r in out["ledgers"]] == [1, 2, 3, 4, 5]
    assert rows[1]["state"] == "live" and rows[1]["bookies"]["b1"]["bytes"] == 100
    assert rows[2]["state"] == "awaiting_ledger_gc" and rows[2]["bytesOnDisk"] == 300
    assert rows[2]["bookies"]["b1"]["entryLogs"][0]["logFile"] == "a.log"
    assert "still holds 300 bytes in a.log" in rows[2]["summary"] and rows[2]["deletedAtMs"] == 1000
    assert rows[3]["state"] == "awaiting_compaction" and rows[3]["bytesOnDisk"] == 400
    assert "next_compaction_due" in rows[3]["summary"]
    assert rows[4]["state"] == "reclaimed" and rows[4]["bytesOnDisk"] == 0 and "reclaimed it" in rows[4]["summary"]
    assert rows[5]["state"] == "live" and rows[5]["bookies"]["b1"]["status"] == "not_flushed"
    assert out["topicBytesAwaitingGc"] == 700
    # log 10: 1000 total - 400 live + 300 absent pinned; log 11: 500 - 10
    assert out["bookies"]["b1"]["bytesAwaitingGc"] == awaiting_gc_bytes(answers["b1"].doc or {}) == 600 + 300 + 490


def test_join_with_an_unreachable_bookie_says_so() -> None:
    answers = {
        "b1": BookieAnswer("b1", "http://b1", doc()),
        "b2": BookieAnswer("b2", "http://b2", error="bookie unreachable: timed out"),
    }
    placements = {1: LedgerPlacement(1, "CLOSED", ("b2",), 10, 0)}
    out = join_gc_explain(TOPIC, [1], placements, [TrimmedLedger(7, 1, None)], answers, {}, 2)
    rows = {r["ledgerId"]: r for r in out["ledgers"]}
    assert out["unreachableBookies"] == ["b2"] and out["bookies"]["b2"]["reachable"] is False
    assert rows[1]["bookies"]["b2"]["status"] == "unreachable"
    assert rows[7]["state"] == "unknown" and "bookie b2 unreachable" in rows[7]["summary"]
    assert "b1" not in rows[7]["bookies"]  # a bookie that never held it is not listed


def test_trim_history_is_bounded_and_reads_each_report_once() -> None:
    h = TrimHistory(max_per_topic=3, max_topics=2)
    h.record(TOPIC, [1, 2, 3, 4], 10)
    assert [t.ledger_id for t in h.of("public/default/persistent/t")] == [2, 3, 4]
    h.record("persistent://public/default/u", [1], 10)
    h.record("persistent://public/default/v", [1], 10)
    assert h.of(TOPIC) == []  # least recently trimmed topic forgotten
    decision = RetentionDecision(
        ledgers=(), now_ms=0, retention=RetentionPolicies(0, 0), total_size=0, slowest_cursor=None
    )
    report = TopicReport("persistent://public/default/w", 50, True, decision=decision, trimmed=[8])
    assert h.observe({report.topic: report}) == 1
    assert h.observe({report.topic: report}) == 0
    assert h.of(report.topic) == [TrimmedLedger(8, 50, None)]


async def test_view_joins_registered_bookies_and_ledger_metadata() -> None:
    async with open_metadata_store("memory://gc-view") as store:
        lm = LedgerManager(store, "/m")
        await lm.create(
            1, LedgerMetadata(1, 1, 1, (Segment(0, ("b1",)),), state=LedgerState.CLOSED, last_entry_id=9, length=100)
        )
        for bid, read_only, urls in (("b1", False, ["http://0.0.0.0:81"]), ("b2", True, ["http://h2:82"])):
            path = f"/m/ledgers/available/{'readonly/' if read_only else ''}{bid}"
            await store.create(path, json.dumps({"host": bid, "httpUrls": urls}).encode(), make_parents=True)
        asked = []

        def handler(request: httpx.Request) -> httpx.Response:
            asked.append(str(request.url))
            if request.url.host == "h2":
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(200, json=doc(log_row(10, [(1, 100, "present"), (2, 30, "absent")], 200)))

        view = BookieGcView(
            store,
            metadata_root="/m",
            timeout_s=2,
            client_factory=lambda t: httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        )
        assert view.bytes_awaiting_gc() is None
        view.history.record(TOPIC, [2], 1234, {2: 30})
        placements = await ledger_placements(store, [1, 2], root="/m")
        assert placements[1].bookies == ("b1",) and placements[2].state == "ABSENT"
        out = await view.explain(TOPIC, [1])
        assert any(u.startswith("http://b1:81/api/v1/bookie/gc/explain") for u in asked)  # wildcard -> host
        rows = {r["ledgerId"]: r for r in out["ledgers"]}
        assert rows[1]["state"] == "live" and rows[2]["state"] == "awaiting_ledger_gc"
        assert out["bookies"]["b2"]["readOnly"] is True and "ConnectError" in out["bookies"]["b2"]["error"]
        assert view.bytes_awaiting_gc() == (200 - 130) + 30  # out of the index + absent from metadata
        assert await view.refresh() == 100


async def test_view_times_out_a_silent_bookie() -> None:
    async with open_metadata_store("memory://gc-view-2") as store:
        await store.create(
            "/ledgers/available/b1", json.dumps({"httpUrls": ["http://b1:1"]}).encode(), make_parents=True
        )

        class Hang(httpx.AsyncBaseTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                await trio.sleep_forever()
                raise AssertionError

        view = BookieGcView(store, timeout_s=0.2, client_factory=lambda t: httpx.AsyncClient(transport=Hang()))
        out = await view.explain(TOPIC, [])
        assert out["bookies"]["b1"] == {
            "httpUrl": "http://b1:1",
            "reachable": False,
            "readOnly": False,
            "error": "bookie unreachable: timed out",
        }
