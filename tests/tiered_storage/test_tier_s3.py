"""`BlockOffloader` over a real S3-compatible server (multipart parts with Content-MD5, ranged reads,
verification), and a server that is down: a clear error within seconds and nothing left behind."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
import trio

from tests.support.s3server import ACCESS_KEY, SECRET_KEY, S3Server
from tiered_storage import OffloadError, TieredStorage, TieredStorageConfig, TierError, data_key

pytestmark = pytest.mark.slow


class Source:
    def __init__(self, ledger_id: int, entries: list[bytes]) -> None:
        self.ledger_id = ledger_id
        self.entries = entries

    @property
    def last_entry_id(self) -> int:
        return len(self.entries) - 1

    async def read(self, first: int, last: int) -> Sequence[bytes]:
        return self.entries[first : last + 1]


def s3_tier(server: S3Server, bucket: str) -> TieredStorage:
    cfg = TieredStorageConfig(
        driver="S3",
        s3_bucket=bucket,
        s3_service_endpoint=server.endpoint,
        s3_credential_id=ACCESS_KEY,
        s3_credential_secret=SECRET_KEY,
        s3_max_block_size=5 * 1024 * 1024,
        s3_read_buffer_size=64 * 1024,
    )
    return TieredStorage(cfg, connect_timeout_s=1.0, read_timeout_s=5.0)


async def test_multipart_offload_reads_back_by_range(s3_server: S3Server) -> None:
    s3_server.create_bucket("unit")
    tier = s3_tier(s3_server, "unit")
    offloader = tier.offloader_for(tier.broker_policies)
    entries = [bytes([i % 251]) * 20_000 for i in range(700)]  # 14 MB: three 5 MiB parts
    uid = uuid.uuid4()
    result = await offloader.offload(Source(11, entries), uid, {"ManagedLedgerName": "a/b/persistent/c"})
    assert result.entries == 700 and result.data_bytes > 10 * 1024 * 1024
    assert data_key(uid, 11) in s3_server.keys("unit")
    ledger = await offloader.open(11, uid)
    before = tier.metrics.sample("brk_ledgeroffloader_read_bytes_total", {"namespace": ""})
    got = await ledger.read(400, 401)
    assert [d for _e, d in got] == entries[400:402]
    fetched = tier.metrics.sample("brk_ledgeroffloader_read_bytes_total", {"namespace": ""}) - before
    assert fetched < 200_000  # a block or two, not the 14 MB object
    assert [d for _e, d in await ledger.read(0, 699)] == entries
    await offloader.delete(11, uid)
    assert not [k for k in s3_server.keys("unit") if str(uid) in k]


async def test_missing_bucket_and_server_down_are_clear_errors(s3_server: S3Server) -> None:
    tier = s3_tier(s3_server, "no-such-bucket")
    with pytest.raises(OffloadError, match="NoSuchBucket"):
        await tier.offloader_for(tier.broker_policies).offload(Source(1, [b"x"]), uuid.uuid4(), {})
    s3_server.create_bucket("down")
    tier = s3_tier(s3_server, "down")
    offloader = tier.offloader_for(tier.broker_policies)
    s3_server.stop()
    try:
        with trio.fail_after(60):
            with pytest.raises(OffloadError, match="unreachable") as info:
                await offloader.offload(Source(2, [b"y" * 100] * 10), uuid.uuid4(), {})
        assert s3_server.endpoint in str(info.value)
        with pytest.raises(TierError, match="unreachable"):
            await offloader.open(2, uuid.uuid4())
    finally:
        s3_server.start()
    assert s3_server.keys("down") == []
