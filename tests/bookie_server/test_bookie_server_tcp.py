"""The protocol server over a real TCP connection, with the codec."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

from bookie import Bookie, open_bookie, serve_bookie
from protocols.bookkeeper import (
    StatusCode,
    add_request,
    encode_lac,
    force_ledger_request,
    get_bookie_info_request,
    read_lac_request,
    read_request,
    write_lac_request,
)
from tests.support.bookie_server import KEY, Client, entry, make_config
from tests.support.waiting import wait_until_async


@asynccontextmanager
async def running(tmp: Path, **cfg: Any) -> AsyncIterator[tuple[Bookie, int]]:
    async with open_bookie(make_config(tmp, **cfg)) as bookie, trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_bookie, bookie, "127.0.0.1", 0)
        yield bookie, listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def test_pipelined_adds_then_reads_round_trip(tmp_path: Path) -> None:
    async with running(tmp_path) as (_bookie, port):
        c = await Client.connect(port)
        n = 200
        adds = [add_request(i + 1, 1, i, KEY, entry(1, i, b"p%d" % i * 50)) for i in range(n)]
        await c.send(*adds)
        for i in range(n):
            resp = await c.receive(i + 1)
            assert resp.status == StatusCode.EOK
            assert (resp.addResponse.ledgerId, resp.addResponse.entryId) == (1, i)
        reads = [read_request(1000 + i, 1, i) for i in range(n)]
        await c.send(*reads)
        for i in range(n):
            resp = await c.receive(1000 + i)
            assert resp.status == StatusCode.EOK
            assert resp.readResponse.body == entry(1, i, b"p%d" % i * 50)
        last = await c.call(read_request(5000, 1, -1))
        assert last.readResponse.body == entry(1, n - 1, b"p%d" % (n - 1) * 50)
        await c.aclose()


async def test_adds_of_a_ledger_reach_the_journal_in_arrival_order(tmp_path: Path) -> None:
    seen: list[int] = []
    async with running(tmp_path) as (bookie, port):
        original = bookie.journal.submit_add_entry

        def spy(ledger_id: int, entry_id: int, data: bytes) -> Any:
            seen.append(entry_id)
            return original(ledger_id, entry_id, data)

        bookie.journal.submit_add_entry = spy  # type: ignore[method-assign]
        c = await Client.connect(port)
        await c.send(*[add_request(i + 1, 2, i, KEY, entry(2, i, b"x")) for i in range(300)])
        for i in range(300):
            assert (await c.receive(i + 1)).status == StatusCode.EOK
        await c.aclose()
    assert seen == list(range(300))


async def test_error_statuses_over_the_wire(tmp_path: Path) -> None:
    async with running(tmp_path) as (bookie, port):
        c = await Client.connect(port)
        assert (await c.call(add_request(1, 1, 0, KEY, entry(1, 0, b"a")))).status == StatusCode.EOK
        assert (await c.call(add_request(2, 1, 1, b"bad", entry(1, 1, b"b")))).status == StatusCode.EUA
        assert (await c.call(read_request(3, 1, 5))).status == StatusCode.ENOENTRY
        assert (await c.call(read_request(4, 99, 0))).status == StatusCode.ENOLEDGER
        fence = await c.call(read_request(5, 1, 0, fence=True, master_key=KEY))
        assert fence.status == StatusCode.EOK and fence.readResponse.body == entry(1, 0, b"a")
        assert (await c.call(add_request(6, 1, 1, KEY, entry(1, 1, b"b")))).status == StatusCode.EFENCED
        assert (await c.call(add_request(7, 1, 1, KEY, entry(1, 1, b"b"), recovery=True))).status == StatusCode.EOK
        bookie.set_manual_read_only(True)
        assert (await c.call(add_request(8, 2, 0, KEY, entry(2, 0, b"a")))).status == StatusCode.EREADONLY
        await c.aclose()


async def test_lac_operations_and_long_poll(tmp_path: Path) -> None:
    async with running(tmp_path) as (bookie, port):
        c = await Client.connect(port)
        for i in range(3):
            assert (await c.call(add_request(i + 1, 4, i, KEY, entry(4, i, b"x")))).status == StatusCode.EOK
        piggy = await c.call(read_request(10, 4, 2, piggyback=True))
        assert piggy.readResponse.maxLAC == 1
        assert (await c.call(write_lac_request(11, 4, 2, KEY, encode_lac(4, 2)))).status == StatusCode.EOK
        lac = await c.call(read_lac_request(12, 4))
        assert lac.readLacResponse.lacBody == encode_lac(4, 2)
        assert lac.readLacResponse.lastEntryBody == entry(4, 2, b"x")
        # a long poll that times out answers with the current LAC and no entry
        # (BookKeeper's clients ask for entry -1, LAST_ADD_CONFIRMED, and get the one after previousLAC)
        timeout = await c.call(read_request(13, 4, -1, piggyback=True, previous_lac=2, timeout_ms=50))
        assert timeout.status == StatusCode.EOK and timeout.readResponse.maxLAC == 2
        assert not timeout.readResponse.HasField("body") and timeout.readResponse.entryId == -1
        # a waiting long poll is answered once an add advances the LAC
        await c.send(read_request(14, 4, -1, piggyback=True, previous_lac=2, timeout_ms=30_000))
        await wait_until_async(lambda: bookie.statistics().long_poll_waiters == 1, "the long poll to wait")
        await c.send(add_request(15, 4, 3, KEY, entry(4, 3, b"y")), add_request(16, 4, 4, KEY, entry(4, 4, b"z")))
        with trio.fail_after(10):
            woke = await c.receive(14)
        assert woke.status == StatusCode.EOK and woke.readResponse.maxLAC == 3
        assert woke.readResponse.body == entry(4, 3, b"y") and woke.readResponse.entryId == 3
        assert (await c.call(force_ledger_request(17, 4))).status == StatusCode.EOK
        info = await c.call(get_bookie_info_request(18))
        assert info.getBookieInfoResponse.totalDiskCapacity >= info.getBookieInfoResponse.freeDiskSpace > 0
        await c.aclose()


async def test_malformed_frame_closes_only_that_connection(tmp_path: Path) -> None:
    async with running(tmp_path) as (bookie, port):
        good = await Client.connect(port)
        bad = await Client.connect(port)
        await bad.stream.send_all(struct.pack(">I", 5) + b"\xff\xff\xff\xff\xff")
        with trio.fail_after(5):
            assert await bad.stream.receive_some(100) == b""
        huge = await Client.connect(port)
        await huge.stream.send_all(struct.pack(">I", 1 << 30))
        with trio.fail_after(5):
            assert await huge.stream.receive_some(100) == b""
        assert (await good.call(add_request(1, 1, 0, KEY, entry(1, 0, b"a")))).status == StatusCode.EOK
        assert bookie.metrics.malformed_frames._value.get() == 2
        await good.aclose()


async def test_in_flight_requests_are_bounded_per_connection(tmp_path: Path) -> None:
    async with running(tmp_path, max_in_flight_requests=4) as (bookie, port):
        peak = 0
        c = await Client.connect(port)
        await bookie.add_entry(6, 0, KEY, entry(6, 0, b"x", lac=-1))
        # long polls hold their in-flight slot until they are answered
        polls = [read_request(100 + i, 6, 1, piggyback=True, previous_lac=-1, timeout_ms=30_000) for i in range(10)]
        await c.send(*polls)
        await wait_until_async(lambda: bookie.statistics().long_poll_waiters == 4, "four long polls to wait")
        await trio.testing.wait_all_tasks_blocked(0.05)  # and nothing more is read meanwhile
        peak = bookie.statistics().long_poll_waiters
        assert peak == 4  # the server stopped reading after four requests
        await bookie.add_entry(6, 1, KEY, entry(6, 1, b"y", lac=0))
        with trio.fail_after(10):
            for i in range(10):
                assert (await c.receive(100 + i)).readResponse.maxLAC == 0
        await c.aclose()


def test_fast_add_response_encoder_matches_protobuf() -> None:
    from protocols.bookkeeper import add_response, encode_add_response, encode_response

    for txn in (0, 1, 127, 128, 300, 2**63, 2**64 - 1):
        for status in (0, 402, 505):
            for ledger in (0, 5, 2**40, 2**63 - 1):
                for eid in (-1, 0, 1, 200, 2**35, 2**63 - 1):
                    assert encode_add_response(txn, status, ledger, eid) == encode_response(
                        add_response(txn, status, ledger, eid)
                    )


def test_add_request_encoder_matches_protobuf() -> None:
    from protocols.bookkeeper import AddRequestEncoder, add_request, encode_request

    for recovery in (False, True):
        for ledger in (0, 5, 2**40, 2**63 - 1, -1):
            for key in (b"", b"k" * 20, b"x" * 200):
                enc = AddRequestEncoder(ledger, key, recovery=recovery)
                for txn in (0, 1, 127, 128, 2**63, 2**64 - 1):
                    for eid in (-1, 0, 1, 200, 2**35, 2**63 - 1):
                        for body in (b"", b"b" * 100, b"z" * 20000):
                            assert enc.encode(txn, eid, body) == encode_request(
                                add_request(txn, ledger, eid, key, body, recovery=recovery)
                            )


async def test_client_vanishing_with_responses_pending_does_not_hurt_the_server(tmp_path: Path) -> None:
    async with running(tmp_path) as (bookie, port):
        for round_ in range(3):
            rude = await Client.connect(port)
            await rude.send(
                *[add_request(i + 1, 10 + round_, i, KEY, entry(10 + round_, i, b"r" * 4000)) for i in range(500)]
            )
            rude.stream.socket.setsockopt(
                __import__("socket").SOL_SOCKET, __import__("socket").SO_LINGER, struct.pack("ii", 1, 0)
            )  # close with a reset
            await rude.stream.aclose()
        await trio.testing.wait_all_tasks_blocked(0.05)  # the server has seen the resets
        good = await Client.connect(port)
        assert (await good.call(add_request(1, 1, 0, KEY, entry(1, 0, b"a")))).status == StatusCode.EOK
        await good.aclose()
        assert bookie.statistics().unfinished_adds == 0
