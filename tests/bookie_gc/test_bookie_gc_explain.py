"""Explain's reason for each case, the REST endpoints, the CLI rendering and config validation."""

from __future__ import annotations

import io
import itertools
import json
import os
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
from click.testing import CliRunner
from rich.console import Console
from starlette.applications import Starlette

from bookie.gc import GarbageCollector, GcConfig, gc_routes
from bookie.gc._compaction import RateLimiter
from bookie.gc._explain import Reason
from bookie.gc._http import parse_gc_request
from magnetar.cli._gc_cli import gc_explain, render_explain
from magnetar.common.config import ConfigError, load_config
from metadata import open_metadata_store

from .gc_helpers import ROOT, create_metadata, delete_metadata, open_storage, write_interleaved

LIMIT = 32 * 1024
SIZE = 500
_names = itertools.count()


def _reasons(doc) -> dict[str, int]:  # type: ignore[no-untyped-def]
    out: dict[str, int] = {}
    for e in doc.logs:
        out[e.reason.value] = out.get(e.reason.value, 0) + 1
    return out


async def test_explain_reasons(tmp_path: Path) -> None:
    now = [5_000_000.0]
    async with open_metadata_store(f"memory://gc-explain-{next(_names)}") as store:
        storage = await open_storage(tmp_path, log_size_limit=LIMIT)
        ml = {
            "application": b"magnetar",
            "component": b"managed-ledger",
            "pulsar/managed-ledger": b"public/default/persistent/orders",
        }
        await create_metadata(store, [1, 2, 3, 4, 5], custom=ml)
        await write_interleaved(storage, [1], 80, SIZE)  # logs of ledger 1 only
        await write_interleaved(storage, [2, 3], 60, SIZE)  # mixed logs of 2 and 3
        await write_interleaved(storage, [4], 150, SIZE)  # logs of ledger 4 only (usage 1.0)
        await write_interleaved(storage, [5], 2, SIZE)  # a current log
        free = [10**12]
        gc = GarbageCollector(
            storage,
            GcConfig(compaction_free_space_reserve_bytes=0),
            store=store,
            metadata_root=ROOT,
            clock=lambda: now[0],
            free_space=lambda d: free[0],
        )
        await gc.run_once()
        await storage.delete_ledger(1)  # dead, not yet collected
        await delete_metadata(store, [3])  # mixed logs drop to ~50%
        await storage.delete_ledger(3)
        doc = await gc.explain()
        by_reason = _reasons(doc)
        assert by_reason[Reason.STILL_BEING_WRITTEN.value] == 1
        assert by_reason[Reason.DEAD.value] >= 1
        assert by_reason[Reason.USAGE_ABOVE_THRESHOLD.value] >= 1
        assert by_reason[Reason.NEXT_COMPACTION_DUE.value] >= 1
        due = [e for e in doc.logs if e.reason is Reason.NEXT_COMPACTION_DUE]
        assert all(e.next_attempt_ms == int(now[0]) + 86400 * 1000 for e in due)
        assert all("major" in e.detail for e in due)
        pins = [p for e in due for p in e.ledgers]
        assert {p.ledger_id for p in pins} == {2}
        assert all(p.belongs_to == "managed-ledger public/default/persistent/orders" for p in pins)
        assert all(p.metadata == "present" and p.state == "CLOSED" for p in pins)
        full = [e for e in doc.logs if e.reason is Reason.USAGE_ABOVE_THRESHOLD]
        assert all(e.usage >= 0.8 for e in full)
        assert any(e.usage == 1.0 and [p.ledger_id for p in e.ledgers] == [4] for e in full)

        # no headroom for compaction output: dead logs still go, mixed ones wait for space
        free[0] = 1000
        res = await gc.run_once(force=True)
        assert res.deleted_logs >= 1 and res.compacted_logs == 0
        doc = await gc.explain()
        waiting = [e for e in doc.logs if e.reason is Reason.WAITING_FOR_HEADROOM]
        assert len(waiting) == len(due)
        assert "free" in waiting[0].detail
        assert Reason.DEAD.value not in _reasons(doc)
        assert gc.metrics.logs_skipped.labels("no_headroom")._value.get() == len(due)

        # an unreadable log is skipped (with its error) and GC goes on with the others
        bad = full[0].log_id
        with open(storage.entry_logger.log_path(bad), "r+b") as f:
            f.write(b"XXXX")  # break the header magic
        storage.entry_logger._usage_cache.clear()  # the bookie would have restarted
        free[0] = 10**12
        res = await gc.run_once(force=True)
        assert res.result == "partial" and res.compacted_logs == len(due)
        doc = await gc.explain()
        skipped = [e for e in doc.logs if e.reason is Reason.SKIPPED_AFTER_ERROR]
        assert [e.log_id for e in skipped] == [bad]
        assert f"{bad:x}" in res.errors[0]
        assert skipped[0].next_attempt_ms == int(now[0]) + GcConfig().error_skip_period_ms
        now[0] += GcConfig().error_skip_period_ms + 1
        doc = await gc.explain()  # the skip period is over but the log is still unreadable
        again = [e for e in doc.logs if e.log_id == bad]
        assert again[0].reason is Reason.SKIPPED_AFTER_ERROR and "cannot be read" in again[0].detail

        js = doc.to_json()
        json.dumps(js)
        out = io.StringIO()
        render_explain(js, Console(file=out, width=200))
        assert "still_being_written" in out.getvalue()
        await storage.aclose()


async def _client_for(gc: GarbageCollector) -> httpx.AsyncClient:
    app = Starlette(routes=gc_routes(gc))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bookie")


async def test_rest_trigger_details_and_explain(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_size_limit=LIMIT)
    await write_interleaved(storage, [1, 2], 40, SIZE)
    await storage.delete_ledger(1)
    gc = GarbageCollector(
        storage,
        GcConfig(compaction_free_space_reserve_bytes=0, compaction_rate_by_entries=10**9, gc_wait_time_ms=3_600_000),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(gc.run)
        async with await _client_for(gc) as client:
            details = (await client.get("/api/v1/bookie/gc_details")).json()
            assert isinstance(details, list) and len(details) == 1
            for key in (
                "forceCompacting",
                "majorCompacting",
                "minorCompacting",
                "lastMajorCompactionTime",
                "lastMinorCompactionTime",
                "majorCompactionCounter",
                "minorCompactionCounter",
                "reclaimedSpaceViaDeletion",
                "reclaimedSpaceViaCompaction",
            ):
                assert key in details[0], key
            assert details[0]["majorCompactionCounter"] == 0

            bad = await client.put("/api/v1/bookie/gc", content=b"{not json")
            assert bad.status_code == 400 and "JSON" in bad.json()["error"]
            bad = await client.put("/api/v1/bookie/gc", json={"is_force_major_gc": "maybe"})
            assert bad.status_code == 400 and "is_force_major_gc" in bad.json()["error"]
            bad = await client.put("/api/v1/bookie/gc", json={"surprise": True})
            assert bad.status_code == 400 and "surprise" in bad.json()["error"]

            ok = await client.put(
                "/api/v1/bookie/gc",
                json={"is_in_force_gc": "true", "is_force_major_gc": False, "is_force_minor_gc": "true"},
            )
            assert ok.status_code == 200
            while (await client.get("/api/v1/bookie/gc_details")).json()[0]["minorCompactionCounter"] < 1:
                await trio.sleep(0.01)
            ok = await client.put("/api/v1/bookie/gc")  # no body: forced, major allowed
            assert ok.status_code == 200
            while (d := (await client.get("/api/v1/bookie/gc_details")).json()[0])["majorCompactionCounter"] < 1:
                await trio.sleep(0.01)
            assert d["reclaimedSpaceViaCompaction"] > 0
            # the counter moves while the forced run is still finishing; the flag drops when it ends
            while (await client.get("/api/v1/bookie/gc")).json() != {"is_in_force_gc": "false"}:
                await trio.sleep(0.01)
            assert (await client.get("/api/v1/bookie/gc_details")).json()[0]["lastResult"] == "ok"

            explain = (await client.get("/api/v1/bookie/gc/explain")).json()
            assert explain["logs"] and all("reason" in e and "usage" in e for e in explain["logs"])
            assert (await client.get("/api/v1/bookie/gc/explain?max_ledgers=x")).status_code == 400
        nursery.cancel_scope.cancel()
    await storage.aclose()


def test_parse_gc_request() -> None:
    assert parse_gc_request(b"") == {"force": True, "allow_major": True, "allow_minor": True}
    assert parse_gc_request(b'{"forceMajor": false, "forceMinor": true}') == {
        "force": True,
        "allow_major": False,
        "allow_minor": True,
    }
    assert parse_gc_request(b'{"is_in_force_gc": "false"}')["force"] is False
    for body in (b"[1]", b'{"is_in_force_gc": 1}', b"\xff"):
        with pytest.raises(ValueError):
            parse_gc_request(body)


def test_cli_json(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {
        "schedule": {"minor_threshold": 0.2, "major_threshold": 0.8},
        "last_result": "ok",
        "logs": [
            {
                "log_id": 10,
                "log_file": "a.log",
                "size_bytes": 2048,
                "usage": 0.5,
                "reason": "dead",
                "detail": "d",
                "ledgers": [{"ledger_id": 7, "bytes": 100, "belongs_to": None, "metadata": "absent"}],
                "other_ledgers": 2,
            }
        ],
    }
    seen = {}

    def fake_get(url, params=None, timeout=None):  # type: ignore[no-untyped-def]
        seen["url"] = url
        return httpx.Response(200, json=doc)

    monkeypatch.setattr(httpx, "get", fake_get)
    res = CliRunner().invoke(gc_explain, ["--http-url", "http://b:8000/", "--json"])
    assert res.exit_code == 0 and json.loads(res.output) == doc
    assert seen["url"] == "http://b:8000/api/v1/bookie/gc/explain"
    res = CliRunner().invoke(gc_explain, ["--http-url", "http://b:8000"])
    assert res.exit_code == 0 and "a.log" in res.output and "metadata deleted" in res.output


def test_config_validation() -> None:
    cfg = load_config(
        GcConfig,
        {
            "gcWaitTime": 1000,
            "minorCompactionThreshold": 0.1,
            "majorCompactionThreshold": 0.5,
            "isThrottleByBytes": True,
        },
    )
    assert cfg.gc_wait_time_ms == 1000 and cfg.throttle_by_bytes
    d = GcConfig()
    assert (d.minor_compaction_interval_s, d.minor_compaction_threshold) == (3600, 0.2)
    assert (d.major_compaction_interval_s, d.major_compaction_threshold) == (86400, 0.8)
    with pytest.raises(ConfigError) as err:
        load_config(GcConfig, {"minorCompactionThreshold": 0.9, "majorCompactionThreshold": 0.8})
    assert err.value.key == "minor_compaction_threshold" and "majorCompactionThreshold" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(GcConfig, {"majorCompactionThreshold": 1.5})
    assert err.value.key == "major_compaction_threshold"
    with pytest.raises(ConfigError) as err:
        load_config(GcConfig, {"minorCompactionInterval": 90000})
    assert err.value.key == "minor_compaction_interval_s"
    with pytest.raises(ConfigError):
        load_config(GcConfig, {"compactionRateByBytes": 0})
    # minor disabled: no ordering rule between the two
    load_config(GcConfig, {"minorCompactionThreshold": 0.0, "majorCompactionThreshold": 0.5})


async def test_rate_limiter_paces_in_virtual_time(autojump_clock: trio.abc.Clock) -> None:
    limiter = RateLimiter(1000)
    start = trio.current_time()
    for _ in range(10):
        await limiter.acquire(500)  # 5000 units at 1000/s: the first 1000 are the burst
    assert trio.current_time() - start == pytest.approx(4.0, abs=0.01)
    await limiter.acquire(5000)  # a large request is paid for after the fact
    assert trio.current_time() - start == pytest.approx(9.0, abs=0.01)


@pytest.fixture
def autojump_clock() -> trio.abc.Clock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_time_bound_stops_compaction(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_size_limit=LIMIT)
    await write_interleaved(storage, [1, 2], 200, SIZE)
    await storage.delete_ledger(1)
    gc = GarbageCollector(
        storage,
        GcConfig(
            compaction_free_space_reserve_bytes=0,
            major_compaction_max_time_ms=1,
            throttle_by_bytes=True,
            compaction_rate_by_bytes=100_000,
        ),
    )
    candidates = len(storage.entry_logger.list_logs()) - 1
    assert candidates >= 5
    res = await gc.run_once(force=True)
    assert res.compacted_logs < candidates
    assert gc.metrics.logs_skipped.labels("time_bound")._value.get() >= 1
    assert os.path.exists(tmp_path / "ledgers0")
    from .gc_helpers import check_entries

    await check_entries(storage, [2], 200, SIZE)
    await storage.aclose()
