"""Separate read paths: while every ordinary read thread is stuck on a slow disk read (a catch-up
read), a read the client marks high priority (recovery) and a fencing read on the SAME connection
are still dispatched and served from the high-priority threads; the queued ordinary reads complete
in order once the disk answers; a long poll waits without holding a read thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import trio

from bookie import open_bookie, serve_bookie
from protocols.bookkeeper import StatusCode, add_request, read_request
from tests.support.bookie_server import KEY, Client, entry, make_config


async def test_high_priority_reads_pass_a_stuck_ordinary_read(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_read_worker_threads=1, num_high_priority_worker_threads=2)
    gate = threading.Event()
    async with open_bookie(cfg) as bookie, trio.open_nursery() as nursery:
        port = (await nursery.start(serve_bookie, bookie, "127.0.0.1", 0))[0].socket.getsockname()[1]
        c = await Client.connect(port)
        txn = iter(range(1, 10_000))
        for lid in (1, 2, 3):
            adds = [add_request(next(txn), lid, i, KEY, entry(lid, i, b"L%d-%d" % (lid, i) * 100)) for i in range(5)]
            await c.send(*adds)
            for a in adds:
                assert (await c.receive(a.header.txnId)).status == StatusCode.EOK
        storage = bookie._storage
        await storage.flush()  # entries now only on disk: every read below is a disk read
        original = storage._read_from_disk
        stuck = threading.Event()

        def slow_for_ledger_1(ledger_id: int, entry_id: int) -> Any:
            if ledger_id == 1:
                stuck.set()
                gate.wait(60)  # a slow catch-up read holding the only ordinary read thread
            return original(ledger_id, entry_id)

        storage._read_from_disk = slow_for_ledger_1  # type: ignore[method-assign]
        try:
            ordinary = [read_request(next(txn), 1, i) for i in range(3)]
            await c.send(*ordinary)
            with trio.fail_after(30):
                while not stuck.is_set():
                    await trio.sleep(0.01)
            # the same connection: recovery's high-priority read and a fencing read are not
            # queued behind the stuck ordinary reads, and use their own threads
            urgent = read_request(next(txn), 2, 3, priority=1)
            fence = read_request(next(txn), 3, -1, fence=True, master_key=KEY)
            await c.send(urgent, fence)
            with trio.fail_after(30):
                got = await c.receive(urgent.header.txnId)
                fenced = await c.receive(fence.header.txnId)
            assert got.status == StatusCode.EOK and got.readResponse.body == entry(2, 3, b"L2-3" * 100)
            assert fenced.status == StatusCode.EOK and fenced.readResponse.body == entry(3, 4, b"L3-4" * 100)
            assert not gate.is_set() and all(o.header.txnId not in c.pending for o in ordinary)
        finally:
            gate.set()
        with trio.fail_after(30):
            for i, o in enumerate(ordinary):
                resp = await c.receive(o.header.txnId)
                assert resp.status == StatusCode.EOK and resp.readResponse.body == entry(1, i, b"L1-%d" % i * 100)
        await c.aclose()
        nursery.cancel_scope.cancel()


async def test_a_long_poll_holds_no_read_thread(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_read_worker_threads=1)
    async with open_bookie(cfg) as bookie, trio.open_nursery() as nursery:
        port = (await nursery.start(serve_bookie, bookie, "127.0.0.1", 0))[0].socket.getsockname()[1]
        c = await Client.connect(port)
        assert (await c.call(add_request(1, 7, 0, KEY, entry(7, 0, b"zero")))).status == StatusCode.EOK
        polls = [read_request(10 + i, 7, 1, piggyback=True, previous_lac=0, timeout_ms=30_000) for i in range(3)]
        await c.send(*polls)
        with trio.fail_after(30):  # the waiting polls leave the single ordinary thread free
            assert (await c.call(read_request(2, 7, 0))).readResponse.body == entry(7, 0, b"zero")
            await c.send(
                add_request(3, 7, 1, KEY, entry(7, 1, b"one")), add_request(4, 7, 2, KEY, entry(7, 2, b"two"))
            )  # LAC of entry 2 is 1
            for p in polls:
                resp = await c.receive(p.header.txnId)
                assert resp.status == StatusCode.EOK and resp.readResponse.body == entry(7, 1, b"one")
        await c.aclose()
        nursery.cancel_scope.cancel()
