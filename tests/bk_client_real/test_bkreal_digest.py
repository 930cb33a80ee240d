"""Digest types on real bookies: one ledger per type (CRC32, CRC32C, HMAC, DUMMY) written to three
``magnetar bookie`` processes on ZooKeeper, the bookies stopped, bytes of stored entries flipped in
their entry logs on disk, the bookies started again; then

* the type is the one recorded in each ledger's metadata and every intact entry reads back;
* a copy corrupted on ONE bookie fails its digest check on that bookie (``DigestMismatch`` from a
  direct read) while the ledger read returns the right bytes from another replica;
* a copy corrupted on EVERY bookie fails the read with ``DigestMismatch``;
* DUMMY has no code: a corrupted payload goes through (as in BookKeeper), a corrupted entry id in
  the header is still caught by the id check.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from bk_client import BookKeeper, ClientConfig, DigestMismatch
from metadata import open_metadata_store
from protocols.bookkeeper import DigestType, LedgerMetadata
from tests.support.bookies import RealBookie
from tests.support.ports import free_port
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

PASSWORD = b"digest-pw"
ENTRIES = 12
ONE_COPY = 5  # corrupted on the first bookie of its write set only
ALL_COPIES = 7  # corrupted on every bookie
CFG = ClientConfig(
    read_entry_timeout_s=5.0, speculative_read_timeout_s=0, reconnect_backoff_min_s=0.05, reconnect_backoff_max_s=0.5
)


def payload(dtype: DigestType, entry_id: int) -> bytes:
    """Distinct, greppable bytes per ledger and entry (the test finds them in the entry logs)."""
    return marker(dtype, entry_id) + bytes(range(256)) * 2


def marker(dtype: DigestType, entry_id: int) -> bytes:
    """The unique first bytes of an entry's payload."""
    return f"<{dtype.name}-entry-{entry_id:03d}>".encode()


@pytest.fixture
def bookies(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[list[RealBookie]]:
    url = zookeeper.url(f"/digest-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    # fixed ports: a bookie's id is its address, the ensembles name it, and it restarts
    ports = [free_port() for _ in range(3)]
    procs = [
        RealBookie(
            tmp_path / f"b{i}", url, ["--set", "flushInterval=200", "--port", str(port)], bookie_id=f"127.0.0.1:{port}"
        )
        for i, port in enumerate(ports)
    ]
    try:
        for b in procs:
            b.launch()
        for b in procs:
            b.wait_started()
        yield procs
    finally:
        for b in procs:
            b.stop()


def flip_in_logs(bookie: RealBookie, needle: bytes, offset: int) -> None:
    """Flip one byte at ``offset`` from the start of ``needle`` in the bookie's entry logs (it must
    be there exactly once: the stored copy of one entry)."""
    hits = []
    for log in sorted((bookie.base / "ledgers").glob("*.log")):
        data = log.read_bytes()
        at = data.find(needle)
        while at >= 0:
            hits.append((log, at))
            at = data.find(needle, at + 1)
    assert len(hits) == 1, f"{needle!r} found {len(hits)} times in {bookie.base}"
    log, at = hits[0]
    with open(log, "r+b") as f:
        f.seek(at + offset)
        byte = f.read(1)
        f.seek(at + offset)
        f.write(bytes([byte[0] ^ 0x5A]))


HEADER = {DigestType.CRC32C: 36, DigestType.CRC32: 40, DigestType.HMAC: 52, DigestType.DUMMY: 32}
"""Bytes of the stored body before its payload: 32 + the type's code."""


async def wait_registered(bk: BookKeeper, ids: set[str]) -> None:
    with trio.fail_after(60):
        while set(await bk.ledger_manager.list_bookies()) != ids:
            await trio.sleep(0.1)


async def test_each_digest_type_catches_corruption_on_disk_and_reads_fail_over(bookies: list[RealBookie]) -> None:
    url = bookies[0].metadata_url
    ids = {b.bookie_id for b in bookies}
    ledgers: dict[DigestType, int] = {}
    metas: dict[DigestType, LedgerMetadata] = {}
    async with open_metadata_store(url) as store, BookKeeper.open(store, config=CFG) as bk:
        await wait_registered(bk, ids)
        for dtype in DigestType:
            lh = await bk.create_ledger(3, 3, 2, password=PASSWORD, digest_type=dtype)
            for i in range(ENTRIES):
                await lh.add_entry(payload(dtype, i))
            await lh.close()
            ledgers[dtype] = lh.ledger_id
            metas[dtype], _ = await bk.ledger_manager.read(lh.ledger_id)

    for b in bookies:  # a clean stop checkpoints: every entry is in an entry log
        await trio.to_thread.run_sync(b.stop)
    by_id = {b.bookie_id: b for b in bookies}
    firsts: dict[DigestType, str] = {}
    for dtype, meta in metas.items():
        assert meta.digest_type is dtype  # recorded in the ledger's metadata
        first = meta.last_segment.ensemble[ONE_COPY % 3]  # write set of 5 with E=Qw=3 starts at index 2
        firsts[dtype] = first
        flip_in_logs(by_id[first], marker(dtype, ONE_COPY), 3)  # a payload byte
        # DUMMY protects no payload byte: corrupt the last byte of the entry id in its header
        at = 3 if dtype is not DigestType.DUMMY else -HEADER[dtype] + 15
        for b in bookies:
            flip_in_logs(b, marker(dtype, ALL_COPIES), at)
    for b in bookies:
        b.launch()
    for b in bookies:
        b.wait_started()

    async with open_metadata_store(url) as store, BookKeeper.open(store, config=CFG) as bk:
        await wait_registered(bk, ids)
        for dtype, lid in ledgers.items():
            rh = await bk.open_ledger(lid, password=PASSWORD)
            assert rh.metadata.digest_type is dtype
            intact = [i for i in range(ENTRIES) if i not in (ONE_COPY, ALL_COPIES)]
            for i in intact:
                assert (await rh.read(i, i))[0].data == payload(dtype, i)
            one = (await rh.read(ONE_COPY, ONE_COPY))[0].data
            with pytest.raises(DigestMismatch):
                await rh.read(ALL_COPIES, ALL_COPIES)
            if dtype is DigestType.DUMMY:
                assert one != payload(dtype, ONE_COPY)  # no code: the corrupt copy was returned
                continue
            assert one == payload(dtype, ONE_COPY)  # failed over past the corrupt copy
            with pytest.raises(DigestMismatch):  # the first replica does serve a corrupt copy
                await bk.bookie_client.read_entry(firsts[dtype], lid, ONE_COPY, metadata=rh.metadata)
            other = next(b for b in rh.metadata.last_segment.ensemble if b != firsts[dtype])
            body = await bk.bookie_client.read_entry(other, lid, ONE_COPY, metadata=rh.metadata)
            assert body.endswith(payload(dtype, ONE_COPY))
