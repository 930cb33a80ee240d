"""BookKeeper both ways: Apache BookKeeper 4.17's own Java client on Magnetar bookies, and
Magnetar's client on BookKeeper's own bookies, each found through a real ZooKeeper in BookKeeper's
layout (LAYOUT, INSTANCEID, cookies, available/ registrations with their service info).

Every test runs on three clusters (the ``cluster`` fixture's parameters):

* ``magnetar``: three ``magnetar bookie`` processes; the first one records the ledger layout
  (hierarchical, BookKeeper's default);
* ``bookkeeper``: the cluster initialised by BookKeeper (``BookKeeperAdmin.initNewCluster``) and
  three BookKeeper bookies (``org.apache.bookkeeper.server.Main``);
* ``mixed``: the same, with one of the three bookies a Magnetar one, so every ensemble mixes them;
  its id is a name, not an address: both clients find its address in its registration.

On each, the Java client (``tests/resources/bk_interop/BkInterop.java``, one JVM for the module)
and Magnetar's client create, write, read, long-poll the LAC, fence, recover and delete ledgers
of every digest type, each reading what the other wrote. See docs/compatibility.md.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from kazoo.client import KazooClient

from bk_client import BookKeeper, ClientConfig, LedgerFenced, LedgerManager
from metadata import open_metadata_store
from protocols.bookkeeper import (
    BookieServiceInfo,
    Cookie,
    DigestType,
    LedgerLayout,
    LedgerMetadata,
    LedgerState,
    available_path,
    cookie_path,
    decode_layout,
    layout_path,
    ledgers_root,
)
from tests.support.bookies import REPO, RealBookie, RealCluster, wait_registered
from tests.support.bookkeeper_java import BkJava, JavaBookie, JavaClient, b64, start_java_bookies, unb64
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

DIGESTS = {"CRC32": DigestType.CRC32, "CRC32C": DigestType.CRC32C, "MAC": DigestType.HMAC, "DUMMY": DigestType.DUMMY}
PASSWORD = b"interop-pw"
CFG = ClientConfig(
    add_entry_timeout_s=10.0,
    read_entry_timeout_s=10.0,
    reconnect_backoff_min_s=0.05,
    reconnect_backoff_max_s=0.5,
    speculative_read_timeout_s=0,
)


def payload(ledger_tag: str, entry_id: int) -> bytes:
    """Entry ``entry_id`` of a test ledger: sizes from empty to 128 KiB, distinct bytes."""
    size = (0, 1, 100, 4096, 128 * 1024)[entry_id % 5]
    seed = f"{ledger_tag}/{entry_id}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


@dataclass
class Cluster:
    """One cluster of the module: its ZooKeeper url (Magnetar) and URI (BookKeeper), bookie ids."""

    kind: str
    url: str
    uri: str
    bookie_ids: list[str]
    java: JavaClient
    base: Path
    addresses: dict[str, tuple[str, int]]

    @asynccontextmanager
    async def client(self) -> AsyncIterator[BookKeeper]:
        """Magnetar's client on this cluster."""
        async with open_metadata_store(self.url) as store, BookKeeper.open(store, config=CFG) as bk:
            yield bk


@pytest.fixture(scope="module")
def java(bk_java: BkJava, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaClient]:
    """BookKeeper's Java client, one JVM for the module (each cluster connects it anew)."""
    client = JavaClient(bk_java, tmp_path_factory.mktemp("bkinterop-java") / "java.log")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module", params=["magnetar", "bookkeeper", "mixed"])
def cluster(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    bk_java: BkJava,
    java: JavaClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    kind = request.param
    base = tmp_path_factory.mktemp(f"bkinterop-{kind}")
    chroot = f"/bki-{kind}-{uuid.uuid4().hex[:8]}"
    url = zookeeper.url(chroot, session_timeout_ms=4000)
    uri = f"zk://{zookeeper.hosts}{chroot}/ledgers"
    magnetar = RealCluster(base, url)
    java_bookies: list[JavaBookie] = []
    named = RealBookie(base / "named", url, bookie_id="magnetar-named-bookie")
    try:
        if kind == "magnetar":
            magnetar.start(3)
        else:
            zk = KazooClient(hosts=zookeeper.hosts)
            zk.start(timeout=20)
            try:  # the chroot: BookKeeper creates the ledgers root only, not its parents
                zk.ensure_path(chroot)
            finally:
                zk.stop()
                zk.close()
            java.ok("initCluster", uri=uri)
            java_bookies = start_java_bookies(bk_java, base, uri, 3 if kind == "bookkeeper" else 2)
            if kind == "mixed":
                named.start()
        wait_registered(url, 3, timeout=60)
        java.ok("connect", uri=uri)
        addresses = {b.bookie_id: ("127.0.0.1", b.port) for b in [*magnetar.bookies, *java_bookies]}
        if named.alive:
            addresses[named.bookie_id] = ("127.0.0.1", named.port)
        yield Cluster(kind, url, uri, sorted(addresses), java, base, addresses)
    finally:
        magnetar.stop_all()
        named.stop()
        for b in java_bookies:
            b.stop()


# ---------------------------------------------------------------- discovery and cluster records


async def test_both_clients_find_every_bookie(cluster: Cluster) -> None:
    found = cluster.java.ok("bookies")
    assert sorted(found["writable"]) == cluster.bookie_ids
    for bid in cluster.bookie_ids:
        rpc = [e for e in found["serviceInfo"][bid]["endpoints"] if e["protocol"] == "bookie-rpc"]
        assert [(e["host"], e["port"]) for e in rpc] == [cluster.addresses[bid]], found["serviceInfo"][bid]
    async with open_metadata_store(cluster.url) as store:
        lm = LedgerManager(store)
        assert await lm.list_bookies() == cluster.bookie_ids
        for bid in cluster.bookie_ids:
            data, _ = await store.get(available_path("", bid))
            info = BookieServiceInfo.decode(data, bid)
            assert info.rpc_address() == cluster.addresses[bid] == await lm.bookie_address(bid)
            assert BookieServiceInfo.decode(info.encode(), bid) == info


async def test_layout_instance_id_and_cookies_read_by_both(cluster: Cluster) -> None:
    async with open_metadata_store(cluster.url) as store:
        layout, _ = await store.get(layout_path(""))
        assert decode_layout(layout) is LedgerLayout.HIERARCHICAL
        parsed = cluster.java.ok("parseLayout", data=b64(layout))
        assert (parsed["factory"], parsed["managerVersion"]) == (LedgerLayout.HIERARCHICAL.value, 1)
        instance = (
            (await store.get(f"{ledgers_root('')}/INSTANCEID"))[0].decode()
            if await store.exists(f"{ledgers_root('')}/INSTANCEID")
            else ""
        )
        for bid in cluster.bookie_ids:
            data, _ = await store.get(cookie_path("", bid))
            cookie = Cookie.decode(data)  # Magnetar reads BookKeeper's cookies ...
            assert cookie.bookie_id == bid and cookie.instance_id == instance
            # ... and BookKeeper reads Magnetar's: parsed and printed again, the same bytes
            assert unb64(b64(data)).decode() == cluster.java.ok("parseCookie", data=b64(data))["text"]


# ---------------------------------------------------------------- entries of every digest type


@pytest.mark.parametrize("digest", DIGESTS)
async def test_java_writes_magnetar_reads(cluster: Cluster, digest: str) -> None:
    java = cluster.java
    lid = java.ok("create", digest=digest, password=b64(PASSWORD), e=3, qw=3, qa=2)["ledgerId"]
    tag = f"java-{digest}"
    entries = [payload(tag, i) for i in range(12)]
    assert java.ok("append", ledgerId=lid, entries=[b64(e) for e in entries])["entryIds"] == list(range(12))
    assert [unb64(e) for e in java.ok("read", ledgerId=lid, first=0, last=10)["entries"]] == entries[:11]
    closed = java.ok("closeWriter", ledgerId=lid)
    assert closed["metadata"]["formatVersion"] == 3 and closed["metadata"]["digest"] == digest
    async with cluster.client() as bk:
        meta, _ = await bk.ledger_manager.read(lid)
        assert meta.digest_type is DIGESTS[digest] and meta.state is LedgerState.CLOSED
        assert (meta.last_entry_id, meta.length) == (11, sum(map(len, entries)))
        lh = await bk.open_ledger(lid, password=PASSWORD, recovery=False)
        assert [e.data for e in await lh.read(0, 11)] == entries
        await lh.close()
    java.ok("delete", ledgerId=lid)


@pytest.mark.parametrize("digest", DIGESTS)
async def test_magnetar_writes_java_reads(cluster: Cluster, digest: str) -> None:
    java = cluster.java
    tag = f"magnetar-{digest}"
    entries = [payload(tag, i) for i in range(12)]
    async with cluster.client() as bk:
        lh = await bk.create_ledger(
            3, 2, 2, password=PASSWORD, digest_type=DIGESTS[digest], custom_metadata={"application": b"interop"}
        )
        for data in entries:
            await lh.add_entry(data)
        await lh.close()
        lid = lh.ledger_id
        stored, _ = await bk.ledger_manager._store.get(bk.ledger_manager.ledger_path(lid))
    opened = java.ok("open", ledgerId=lid, digest=digest, password=b64(PASSWORD), recovery=False)
    md = opened["metadata"]
    assert (opened["closed"], opened["lac"], opened["length"]) == (True, 11, sum(map(len, entries)))
    assert (md["formatVersion"], md["digest"], md["state"], md["ensembleSize"], md["writeQuorum"], md["ackQuorum"]) == (
        3,
        digest,
        "CLOSED",
        3,
        2,
        2,
    )
    assert unb64(md["custom"]["application"]) == b"interop" and unb64(md["password"]) == PASSWORD
    assert [unb64(e) for e in java.ok("read", ledgerId=lid, first=0, last=11)["entries"]] == entries
    # BookKeeper's serializer writes the metadata Magnetar stored byte for byte
    assert unb64(java.ok("serializeMetadata", ledgerId=lid)["data"]) == stored
    java.ok("closeReader", ledgerId=lid)


# ---------------------------------------------------------------- LAC and long poll


async def test_java_long_polls_the_lac_of_a_magnetar_writer(cluster: Cluster) -> None:
    java = cluster.java
    async with cluster.client() as bk:
        lh = await bk.create_ledger(3, 3, 2, password=PASSWORD, digest_type=DigestType.CRC32C)
        for i in range(3):
            await lh.add_entry(payload("poll", i))
        lid = lh.ledger_id
        opened = java.ok("open", ledgerId=lid, digest="CRC32C", password=b64(PASSWORD), recovery=False)
        assert opened["closed"] is False
        assert java.ok("readLac", ledgerId=lid)["lac"] == 1  # entry 2 carries LAC 1

        answer: dict[str, object] = {}

        def poll() -> None:
            answer.update(java.ok("longPollLac", ledgerId=lid, entryId=2, timeoutMs=20_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, poll)
            await trio.sleep(0.5)  # let the poll reach the bookies first (the answer is right either way)
            await lh.add_entry(payload("poll", 3))  # carries LAC 2: the bookies answer the poll
        assert answer["lac"] == 2 and unb64(str(answer["entry"])) == payload("poll", 2)
        java.ok("closeReader", ledgerId=lid)
        await lh.close()
        follower = await bk.open_ledger(lid, password=PASSWORD, recovery=False)
        assert follower.last_add_confirmed == 3
        await follower.close()


async def test_magnetar_long_polls_the_lac_of_a_java_writer(cluster: Cluster) -> None:
    java = cluster.java
    lid = java.ok("create", digest="CRC32", password=b64(PASSWORD), e=3, qw=2, qa=2)["ledgerId"]
    java.ok("append", ledgerId=lid, entries=[b64(payload("jpoll", i)) for i in range(3)])
    async with cluster.client() as bk:
        reader = await bk.open_ledger(lid, password=PASSWORD, recovery=False)
        assert await reader.read_last_add_confirmed() == 1
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                result: list[int] = []

                async def wait() -> None:
                    result.append(await reader.wait_for_lac(1, timeout=20.0))

                nursery.start_soon(wait)
                await trio.sleep(0.5)  # the long poll reaches the bookie before the Java client appends
                await trio.to_thread.run_sync(
                    lambda: java.ok("append", ledgerId=lid, entries=[b64(payload("jpoll", 3))])
                )
        assert result == [2]
        assert [e.data for e in await reader.read(0, 2)] == [payload("jpoll", i) for i in range(3)]
        await reader.close()
    java.ok("closeWriter", ledgerId=lid)


# ---------------------------------------------------------------- fencing and recovery


async def test_fencing_stops_the_other_clients_writer(cluster: Cluster) -> None:
    java = cluster.java
    # Magnetar recovers a ledger the Java client is writing: its next add is refused
    lid = java.ok("create", digest="MAC", password=b64(PASSWORD), e=3, qw=2, qa=2)["ledgerId"]
    java.ok("append", ledgerId=lid, entries=[b64(payload("fence-j", i)) for i in range(4)])
    async with cluster.client() as bk:
        recovered = await bk.open_ledger(lid, password=PASSWORD, recovery=True)
        assert recovered.is_closed and recovered.last_add_confirmed == 3
        await recovered.close()
        refused = java.call("append", ledgerId=lid, entries=[b64(b"late")])
        assert not refused["ok"] and refused["code"] == -101, refused  # BKLedgerFencedException
        # the Java client recovers a ledger Magnetar is writing: Magnetar's next add is refused
        lh = await bk.create_ledger(3, 2, 2, password=PASSWORD, digest_type=DigestType.HMAC)
        for i in range(4):
            await lh.add_entry(payload("fence-m", i))
        opened = java.ok("open", ledgerId=lh.ledger_id, digest="MAC", password=b64(PASSWORD), recovery=True)
        assert (opened["closed"], opened["lac"]) == (True, 3)
        with pytest.raises(LedgerFenced):
            await lh.add_entry(b"late")
        java.ok("closeReader", ledgerId=lh.ledger_id)


async def test_java_recovers_after_a_killed_magnetar_writer(cluster: Cluster) -> None:
    count = 20
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.bk_client_real.bkreal_writer", cluster.url, "3", "2", "2", str(count)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        stderr=open(cluster.base / "writer.log", "ab"),  # noqa: SIM115 - closed by the child
    )
    try:
        assert writer.stdin is not None and writer.stdout is not None
        lid = int(writer.stdout.readline().split()[1])
        writer.stdin.write("go\n")
        writer.stdin.flush()
        acked = [writer.stdout.readline().strip() for _ in range(count)]
        assert acked == [f"acked {i}" for i in range(count)]
    finally:
        writer.kill()  # SIGKILL: the ledger stays open
        writer.wait()
    recovered = cluster.java.ok("open", ledgerId=lid, digest="CRC32C", password=b64(b"bkreal"), recovery=True)
    assert recovered["closed"] is True and recovered["lac"] == count - 1
    got = cluster.java.ok("read", ledgerId=lid, first=0, last=count - 1)["entries"]
    assert [unb64(e) for e in got] == [(f"entry {i:06d} ".encode()) * 20 for i in range(count)]
    cluster.java.ok("closeReader", ledgerId=lid)


async def test_magnetar_recovers_after_a_killed_java_writer(cluster: Cluster, bk_java: BkJava) -> None:
    writer = JavaClient(bk_java, cluster.base / "java-writer.log")
    try:
        writer.ok("connect", uri=cluster.uri)
        lid = writer.ok("create", digest="DUMMY", password=b64(PASSWORD), e=3, qw=2, qa=2)["ledgerId"]
        entries = [payload("killed", i) for i in range(15)]
        writer.ok("append", ledgerId=lid, entries=[b64(e) for e in entries])
    finally:
        writer.kill()  # SIGKILL: the ledger stays open
    async with cluster.client() as bk:
        lh = await bk.open_ledger(lid, password=PASSWORD, recovery=True)
        assert lh.is_closed and lh.last_add_confirmed == 14
        assert [e.data for e in await lh.read(0, 14)] == entries
        await lh.close()
        meta, _ = await bk.ledger_manager.read(lid)
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 14
    again = cluster.java.ok("open", ledgerId=lid, digest="DUMMY", password=b64(PASSWORD), recovery=False)
    assert (again["closed"], again["lac"], again["length"]) == (True, 14, sum(map(len, entries)))
    cluster.java.ok("closeReader", ledgerId=lid)


# ---------------------------------------------------------------- deletion


async def test_each_client_deletes_the_others_ledgers(cluster: Cluster) -> None:
    java = cluster.java
    jlid = java.ok("create", digest="CRC32C", password=b64(PASSWORD), e=2, qw=2, qa=2)["ledgerId"]
    java.ok("append", ledgerId=jlid, entries=[b64(b"x")])
    java.ok("closeWriter", ledgerId=jlid)
    async with cluster.client() as bk:
        mlh = await bk.create_ledger(2, 2, 2, password=PASSWORD)
        await mlh.add_entry(b"y")
        await mlh.close()
        java.ok("delete", ledgerId=mlh.ledger_id)
        assert not await bk.ledger_manager.exists(mlh.ledger_id)
        await bk.delete_ledger(jlid)
    gone = java.call("open", ledgerId=jlid, digest="CRC32C", password=b64(PASSWORD), recovery=False)
    assert not gone["ok"] and gone["code"] == -25, gone  # BKNoSuchLedgerExistsOnMetadataServerException


async def test_java_client_on_the_v2_wire_protocol(cluster: Cluster) -> None:
    # useV2WireProtocol: BookKeeper's binary pre-v3 packets, the default of Pulsar's brokers
    java = cluster.java
    java.ok("connect", uri=cluster.uri, v2WireProtocol=True)
    try:
        written = []
        for digest in ("CRC32C", "MAC"):
            lid = java.ok("create", digest=digest, password=b64(PASSWORD), e=3, qw=2, qa=2)["ledgerId"]
            entries = [payload(f"v2wire-{digest}", i) for i in range(10)]
            java.ok("append", ledgerId=lid, entries=[b64(e) for e in entries])
            assert [unb64(e) for e in java.ok("read", ledgerId=lid, first=0, last=9)["entries"]] == entries
            written.append((lid, digest, entries))
        java.ok("closeWriter", ledgerId=written[0][0])
        # the other stays open: recovery over v2 (fencing read of entry -1, recovery reads and adds)
        lid, digest, entries = written[1]
        java.ok("connect", uri=cluster.uri, v2WireProtocol=True)  # a new client: the writer is gone
        recovered = java.ok("open", ledgerId=lid, digest=digest, password=b64(PASSWORD), recovery=True)
        assert (recovered["closed"], recovered["lac"]) == (True, 9)
        assert [unb64(e) for e in java.ok("read", ledgerId=lid, first=0, last=9)["entries"]] == entries
        async with cluster.client() as bk:
            for lid, _digest, entries in written:
                lh = await bk.open_ledger(lid, password=PASSWORD, recovery=False)
                assert lh.is_closed and [e.data for e in await lh.read(0, 9)] == entries
                await lh.close()
    finally:
        java.ok("connect", uri=cluster.uri)


async def test_format_2_metadata_is_read_and_kept(cluster: Cluster) -> None:
    # a BookKeeper client configured with ledgerMetadataVersion = 2 (text), as before BookKeeper 4.9
    java = cluster.java
    java.ok("connect", uri=cluster.uri, metadataFormatVersion=2)
    try:
        lid = java.ok("create", digest="CRC32C", password=b64(PASSWORD), e=3, qw=2, qa=2)["ledgerId"]
        entries = [payload("v2", i) for i in range(6)]
        java.ok("append", ledgerId=lid, entries=[b64(e) for e in entries])
        async with cluster.client() as bk:
            stored, _ = await bk.ledger_manager._store.get(bk.ledger_manager.ledger_path(lid))
            assert stored.startswith(b"BookieMetadataFormatVersion\t2\n")
            lh = await bk.open_ledger(lid, password=PASSWORD, recovery=True)  # closes it: a metadata write
            assert lh.last_add_confirmed == 5 and [e.data for e in await lh.read(0, 5)] == entries
            await lh.close()
            meta, _ = await bk.ledger_manager.read(lid)
            assert meta.format_version == 2 and meta.state is LedgerState.CLOSED
        closed = java.ok("metadata", ledgerId=lid)
        assert (closed["formatVersion"], closed["state"], closed["lastEntryId"]) == (2, "CLOSED", 5)
    finally:
        java.ok("connect", uri=cluster.uri)


async def test_metadata_bytes_mean_the_same_to_both(cluster: Cluster) -> None:
    java = cluster.java
    lid = java.ok("create", digest="CRC32", password=b64(PASSWORD), e=3, qw=3, qa=2)["ledgerId"]
    java.ok("append", ledgerId=lid, entries=[b64(b"one")])
    java.ok("closeWriter", ledgerId=lid)
    async with open_metadata_store(cluster.url) as store:
        lm = LedgerManager(store)
        await lm.ensure_layout()
        data, _ = await store.get(lm.ledger_path(lid))
    ours = LedgerMetadata.decode(data)
    assert ours.encode() == data  # Magnetar writes back what BookKeeper wrote, byte for byte
    theirs = java.ok("parseMetadata", ledgerId=lid, data=b64(ours.encode()))
    assert (theirs["state"], theirs["lastEntryId"], theirs["length"], theirs["digest"]) == ("CLOSED", 0, 3, "CRC32")
    assert [s["ensemble"] for s in theirs["segments"]] == [list(ours.segments[0].ensemble)]
    java.ok("delete", ledgerId=lid)
