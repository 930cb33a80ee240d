"""GC inside a running bookie (`open_bookie`): config keys, the collector it starts, forgetting deleted
ledgers, the REST routes in the bookie's app, dead-log deletion while read-only for a full disk,
and the merged metrics module on one registry per bookie."""

from __future__ import annotations

import itertools
from dataclasses import fields
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from bookie import (
    BookieConfig,
    BookieError,
    BookieState,
    GarbageCollector,
    GcConfig,
    GcExplanation,
    GcStatus,
    bookie_http_app,
    open_bookie,
)
from bookie.metrics import BookieServerMetrics, GcMetrics, JournalMetrics, StorageMetrics
from magnetar.cli import main as cli
from magnetar.common.config import ConfigError, describe, load_config
from metadata import open_metadata_store
from protocols.bookkeeper import StatusCode
from tests.support.bookie_server import KEY, entry, make_config

from .gc_helpers import BOOKIE, ROOT, create_metadata, delete_metadata

_names = itertools.count()
SIZE = 900


def _config(tmp: Path, **kw: object) -> BookieConfig:
    values: dict[str, object] = dict(
        bookie_id=BOOKIE,
        metadata_root=ROOT,
        log_size_limit=4096,
        compaction_free_space_reserve_bytes=0,
        compaction_rate_by_entries=10**6,
    )
    values.update(kw)
    return make_config(tmp, **values)


async def _write(bookie, ledgers: list[int], entries: int) -> None:  # type: ignore[no-untyped-def]
    """Each ledger's entries in turn, flushed per ledger, so most entry logs hold one ledger."""
    for lid in ledgers:
        for eid in range(entries):
            await bookie.add_entry(lid, eid, KEY, entry(lid, eid, bytes([lid % 256]) * SIZE))
        await bookie.storage.flush()


# ---------------------------------------------------------------------------------------------- config


def test_bookie_config_gc_keys_match_gc_config() -> None:
    mine = {name: (alias, default) for name, alias, default, _ in describe(BookieConfig)}
    for name, alias, default, _ in describe(GcConfig):
        assert mine.get(name) == (alias, default), name
    assert BookieConfig().gc_config() == GcConfig()


def test_gc_keys_load_by_alias_and_build_the_gc_config() -> None:
    cfg = load_config(
        BookieConfig,
        {
            "gcWaitTime": 1000,
            "minorCompactionThreshold": 0.1,
            "majorCompactionInterval": 7200,
            "isThrottleByBytes": True,
            "compactionRateByBytes": 5_000_000,
        },
    )
    gc = cfg.gc_config()
    assert (gc.gc_wait_time_ms, gc.minor_compaction_threshold, gc.major_compaction_interval_s) == (1000, 0.1, 7200)
    assert gc.throttle_by_bytes and gc.compaction_rate_by_bytes == 5_000_000


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"minorCompactionThreshold": 0.8, "majorCompactionThreshold": 0.8}, "minor_compaction_threshold"),
        ({"minorCompactionThreshold": 0.9}, "minor_compaction_threshold"),
        ({"majorCompactionThreshold": 1.5}, "major_compaction_threshold"),
        ({"minorCompactionInterval": 90000}, "minor_compaction_interval_s"),
        ({"gcWaitTime": 0}, "gc_wait_time_ms"),
    ],
)
def test_gc_config_errors_name_the_key(values: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(BookieConfig, values)
    assert err.value.key == key
    if key == "minor_compaction_threshold":
        assert "majorCompactionThreshold" in str(err.value)


def test_cli_refuses_minor_threshold_above_major(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "bookie",
            "--journal-dir",
            str(tmp_path / "j"),
            "--ledger-dirs",
            str(tmp_path / "l"),
            "--set",
            "minorCompactionThreshold=0.9",
        ],
    )
    assert result.exit_code == 2
    assert "minor_compaction_threshold" in result.output and "majorCompactionThreshold" in result.output


# ---------------------------------------------------------------------------------------------- bookie


async def test_bookie_runs_gc_that_deletes_ledgers_and_forgets_them(tmp_path: Path) -> None:
    doomed, kept = [1, 2, 3], [4, 5]
    async with open_metadata_store(f"memory://gc-wiring-{next(_names)}") as store:
        async with open_bookie(_config(tmp_path), store=store) as bookie:
            assert isinstance(bookie.gc, GarbageCollector)
            await create_metadata(store, doomed + kept)
            await _write(bookie, doomed + kept, 8)
            assert await bookie.lac(1) == 6  # cached by the core
            logs_before = len(bookie.storage.entry_logger.list_logs())
            await delete_metadata(store, doomed)

            result = await bookie.gc.run_once()
            assert result.result == "ok", result.errors
            assert result.deleted_ledgers == 3 and result.deleted_logs > 0
            assert bookie.storage.ledgers() == kept
            assert len(bookie.storage.entry_logger.list_logs()) < logs_before
            # the core forgot what it cached about the deleted ledgers
            for lid in doomed:
                with pytest.raises(BookieError) as err:
                    await bookie.lac(lid)
                assert err.value.status is StatusCode.ENOLEDGER
            for lid in kept:
                for eid in range(8):
                    assert (await bookie.read_entry(lid, eid)) == entry(lid, eid, bytes([lid]) * SIZE)
            status = bookie.gc.status()
            assert isinstance(status, GcStatus) and status.reclaimed_deletion_bytes > 0
            explanation = await bookie.gc.explain()
            assert isinstance(explanation, GcExplanation) and explanation.logs


async def test_bookie_without_a_store_deletes_no_ledger(tmp_path: Path) -> None:
    async with open_bookie(_config(tmp_path)) as bookie:
        await _write(bookie, [1, 2], 6)
        result = await bookie.gc.run_once(force=True)
        assert result.result == "ok" and result.deleted_ledgers == 0 and result.deleted_logs == 0
        assert bookie.storage.ledgers() == [1, 2]


async def test_read_only_for_a_full_disk_still_deletes_dead_logs(tmp_path: Path) -> None:
    async with open_metadata_store(f"memory://gc-wiring-{next(_names)}") as store:
        async with open_bookie(_config(tmp_path), store=store) as bookie:
            await create_metadata(store, [1, 2, 3])
            await _write(bookie, [1, 2, 3], 8)
            await delete_metadata(store, [1, 2])
            bookie.set_disk_full(True, "test: disk full")
            assert bookie.state is BookieState.READ_ONLY
            result = await bookie.gc.run_once()
            assert result.deleted_ledgers == 2 and result.deleted_logs > 0 and result.reclaimed_deletion > 0
            assert bookie.state is BookieState.READ_ONLY  # GC does not change the state


async def test_bookie_http_app_serves_the_gc_routes(tmp_path: Path) -> None:
    async with open_bookie(_config(tmp_path)) as bookie:
        await _write(bookie, [7], 6)
        transport = httpx.ASGITransport(app=bookie_http_app(bookie))
        async with httpx.AsyncClient(transport=transport, base_url="http://bookie") as client:
            resp = await client.put("/api/v1/bookie/gc", content=b'{"is_force_major_gc": "false"}')
            assert resp.status_code == 200 and resp.json()["allow_major"] is False
            assert (await client.put("/api/v1/bookie/gc", content=b"{not json")).status_code == 400
            details = (await client.get("/api/v1/bookie/gc_details")).json()
            assert set(details[0]) >= {
                "forceCompacting",
                "majorCompacting",
                "minorCompacting",
                "lastMajorCompactionTime",
                "lastMinorCompactionTime",
                "majorCompactionCounter",
                "minorCompactionCounter",
            }
            explain = (await client.get("/api/v1/bookie/gc/explain")).json()
            assert explain["logs"] and all("reason" in e for e in explain["logs"])
            text = (await client.get("/metrics")).text
            assert "bookie_gc_runs_total" in text and "bookie_MAJOR_COMPACTION_COUNT_total" in text


# ---------------------------------------------------------------------------------------------- metrics


def test_all_bookie_metrics_share_one_registry_per_bookie() -> None:
    registries = [CollectorRegistry(), CollectorRegistry()]
    for r in registries:  # two bookies in one process, as in standalone: no duplicate names
        JournalMetrics(r), StorageMetrics(r), BookieServerMetrics(r), GcMetrics(r)
    GcMetrics().runs.labels("ok").inc()  # a private registry when none is given
    texts = [generate_latest(r).decode() for r in registries]
    for text in texts:
        for name in (
            "bookie_journal_JOURNAL_ADD_ENTRY",
            "bookie_write_cache_size",
            "bookie_server_ADD_ENTRY_REQUEST",
            "bookie_SERVER_STATUS",
            "bookie_RECLAIMED_DELETION_SPACE_BYTES",
            "bookie_gc_runs_total",
        ):
            assert name in text, name
    assert 'bookie_gc_runs_total{result="ok"} 0.0' in texts[0]


def test_config_fields_are_all_documented() -> None:
    for f in fields(BookieConfig):
        assert f.metadata.get("help"), f.name
