"""`BlockOffloader` over the filesystem store: a ledger offloaded, verified, read back by range
without reading the whole object, deleted; a failing store leaves nothing behind."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from tiered_storage import (
    FileSystemStore,
    OffloadError,
    OffloadPolicies,
    TieredStorage,
    TieredStorageConfig,
    TierError,
    data_key,
    index_key,
)


class Source:
    """A closed ledger held in memory."""

    def __init__(self, ledger_id: int, entries: list[bytes]) -> None:
        self.ledger_id = ledger_id
        self.entries = entries
        self.fail_at: int | None = None

    @property
    def last_entry_id(self) -> int:
        return len(self.entries) - 1

    async def read(self, first: int, last: int) -> Sequence[bytes]:
        if self.fail_at is not None and first <= self.fail_at <= last:
            raise RuntimeError("bookies unavailable")
        return self.entries[first : last + 1]


def tier_for(tmp_path: Path, **cfg: object) -> TieredStorage:
    return TieredStorage(TieredStorageConfig(driver="filesystem", file_system_uri=f"file://{tmp_path}", **cfg))  # type: ignore[arg-type]


async def test_offload_verify_and_read_ranges(tmp_path: Path) -> None:
    tier = tier_for(tmp_path, read_buffer_size=1024)
    offloader = tier.offloader_for(tier.broker_policies)
    entries = [bytes([i % 256]) * (50 + i) for i in range(200)]
    uid = uuid.uuid4()
    result = await offloader.offload(
        Source(9, entries), uid, {"ManagedLedgerName": "a/b/persistent/c"}, namespace="a/b"
    )
    assert result.entries == 200 and result.ledger_bytes == sum(map(len, entries)) and result.blocks > 10
    assert (tmp_path / data_key(uid, 9)).stat().st_size == result.data_bytes
    assert not list(tmp_path.glob("*.partial-*"))
    ledger = await offloader.open(9, uid)
    fetched_before = tier.metrics.sample("brk_ledgeroffloader_read_bytes_total", {"namespace": ""})
    got = await ledger.read(150, 152)
    assert [d for _e, d in got] == entries[150:153]
    fetched = tier.metrics.sample("brk_ledgeroffloader_read_bytes_total", {"namespace": ""}) - fetched_before
    assert 0 < fetched < result.data_bytes / 5  # the blocks of those entries, not the object
    assert [d for _e, d in await ledger.read(0, 199)] == entries
    assert await ledger.read(190, 10_000) == list(enumerate(entries))[190:]
    await offloader.delete(9, uid)
    assert not (tmp_path / data_key(uid, 9)).exists() and not (tmp_path / index_key(uid, 9)).exists()


async def test_corruption_in_the_tier_is_detected_on_read(tmp_path: Path) -> None:
    tier = tier_for(tmp_path, read_buffer_size=256, read_cache_size_mb=0)
    offloader = tier.offloader_for(tier.broker_policies)
    uid = uuid.uuid4()
    await offloader.offload(Source(3, [b"x" * 100] * 20), uid, {})
    path = tmp_path / data_key(uid, 3)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    ledger = await offloader.open(3, uid)
    assert len(await ledger.read(0, 1)) == 2  # undamaged blocks still serve
    with pytest.raises(TierError, match="checksum"):
        await ledger.read(19, 19)


async def test_a_failed_offload_leaves_nothing(tmp_path: Path) -> None:
    tier = tier_for(tmp_path, read_buffer_size=64)
    offloader = tier.offloader_for(tier.broker_policies)
    source = Source(4, [b"y" * 40] * 2000)
    source.fail_at = 1500
    with pytest.raises(OffloadError, match="ledger 4"):
        await offloader.offload(source, uuid.uuid4(), {})
    assert list(tmp_path.iterdir()) == []


async def test_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    tier = tier_for(tmp_path / "absent")
    with pytest.raises(OffloadError, match="does not exist"):
        await tier.offloader_for(tier.broker_policies).offload(Source(1, [b"a"]), uuid.uuid4(), {})


async def test_cancelled_offload_leaves_no_partial_file(tmp_path: Path) -> None:
    tier = tier_for(tmp_path, read_buffer_size=64)
    offloader = tier.offloader_for(tier.broker_policies)

    class Slow(Source):
        async def read(self, first: int, last: int) -> Sequence[bytes]:
            if first > 0:
                await trio.sleep_forever()
            return await super().read(first, last)

    with trio.move_on_after(0.5):
        await offloader.offload(Slow(5, [b"z" * 100] * 5000), uuid.uuid4(), {})
    assert list(tmp_path.iterdir()) == []


def test_policies_merge_validate_and_round_trip() -> None:
    broker = TieredStorageConfig(driver="aws-s3", s3_bucket="b", s3_region="eu").policies()
    ns = OffloadPolicies.from_json(
        {"managedLedgerOffloadThresholdInBytes": 10, "s3Driver": True, "managedLedgerOffloadDriver": None}
    )
    topic = OffloadPolicies({"managedLedgerOffloadBucket": "topic-bucket"})
    eff = OffloadPolicies.merge(topic, ns, broker)
    assert (eff.driver, eff.bucket, eff.region, eff.threshold_bytes) == ("aws-s3", "topic-bucket", "eu", 10)
    assert OffloadPolicies.from_json(eff.to_json()) == eff
    assert eff.to_json(hide_secrets=True)["s3Driver"] is True
    with pytest.raises(ValueError, match="unknown"):
        OffloadPolicies.from_json({"nope": 1})
    with pytest.raises(ValueError, match="bucket"):
        OffloadPolicies({"managedLedgerOffloadDriver": "S3"}).validate()
    with pytest.raises(ValueError, match="not supported"):
        OffloadPolicies({"managedLedgerOffloadDriver": "azureblob", "managedLedgerOffloadBucket": "x"}).validate()
    with pytest.raises(ValueError, match="fileSystemURI"):
        OffloadPolicies({"managedLedgerOffloadDriver": "filesystem"}).validate()


def test_filesystem_uri_forms(tmp_path: Path) -> None:
    assert FileSystemStore(f"file://{tmp_path}").root == tmp_path
    assert FileSystemStore(str(tmp_path)).root == tmp_path
    for bad in ("hdfs://nn:9000/offload", "relative/dir", "file://host/dir"):
        with pytest.raises(ValueError):
            FileSystemStore(bad)
