"""The BookKeeper client's contract over real bookies, once per transport: the network
(`bk_client.ConnectionPool`, loopback TCP) and the in-process one standalone uses
(`magnetar._inprocess.InProcessTransport`, the bookie's `LocalConnection`). The bookies are whole
bookie processes' worth (`serve_bookie_process`: journal with fsync, storage, registration in an
embedded metadata store) running in the test's process, so both transports reach the same bookies.

Each test runs for both transports and asserts the same behaviour: adds and reads, fencing of
an old writer by recovery, long-poll tailing with explicit LAC, the bookie's error statuses as
the client's errors, the bookie's in-flight bound holding requests back without losing any, and a
bookie that stops mid-write replaced by an ensemble change; and, at the transport itself, the
pending bound, answers never delivered from inside ``send``, and close.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from bk_client import (
    AddRequest,
    BKError,
    BookieTransport,
    BookKeeper,
    ClientClosed,
    ClientConfig,
    ClientMetrics,
    ConnectionPool,
    LedgerFenced,
    NoSuchEntry,
    NoSuchLedger,
    PendingAdd,
    TooManyRequests,
    Unauthorized,
    master_key,
)
from bookie import BookieEndpoints, serve_bookie_process
from magnetar._inprocess import InProcessTransport, in_process_transport
from metadata import open_metadata_store
from protocols.bookkeeper import AddRequestEncoder, StatusCode, encode_entry, encode_request, read_request
from protocols.bookkeeper import bookie_protocol_pb2 as pb
from tests.support.bookie_server import make_config

PASSWORD = b"transport-pw"
CFG = ClientConfig(
    add_entry_timeout_s=5.0,
    read_entry_timeout_s=3.0,
    reconnect_backoff_min_s=0.05,
    reconnect_backoff_max_s=0.5,
    speculative_read_timeout_s=0.3,
)

pytestmark = pytest.mark.parametrize("kind", ["network", "in-process"])


def payload(i: int) -> bytes:
    return b"entry-%06d-" % i + bytes(i % 251 for _ in range(40))


class Bookies:
    """Real bookies in this process; ``stop(i)`` stops bookie ``i`` (unregistered, journal closed)."""

    def __init__(self, url: str, nursery: trio.Nursery) -> None:
        self.url = url
        self._nursery = nursery
        self.endpoints: list[BookieEndpoints] = []
        self._scopes: list[trio.CancelScope] = []

    async def start(self, tmp: Path, **overrides: object) -> None:
        scope = trio.CancelScope()
        cfg = make_config(tmp / f"bookie-{len(self.endpoints)}", metadata_url=self.url, **overrides)

        async def run(task_status: trio.TaskStatus[BookieEndpoints]) -> None:
            with scope:
                await serve_bookie_process(cfg, task_status=task_status)

        self.endpoints.append(await self._nursery.start(run))
        self._scopes.append(scope)

    def stop(self, bookie_id: str) -> None:
        index = [e.bookie_id for e in self.endpoints].index(bookie_id)
        self._scopes[index].cancel()

    def transport(self, kind: str) -> object:
        if kind == "network":
            return None
        return in_process_transport({e.bookie_id: e.core for e in self.endpoints if e.core is not None})


@asynccontextmanager
async def bookies(tmp: Path, n: int, **overrides: object) -> AsyncIterator[Bookies]:
    url = f"embedded://{tmp}/metadata"
    async with trio.open_nursery() as nursery:
        b = Bookies(url, nursery)
        for _ in range(n):
            await b.start(tmp, **overrides)
        yield b
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def client(b: Bookies, kind: str, config: ClientConfig = CFG) -> AsyncIterator[BookKeeper]:
    async with (
        open_metadata_store(b.url) as store,
        BookKeeper.open(store, config=config, transport=b.transport(kind)) as bk,
    ):  # type: ignore[arg-type]
        with trio.fail_after(20):
            while len(await bk.ledger_manager.list_bookies()) < len(b.endpoints):
                await trio.sleep(0.05)
        yield bk
    # the transport chosen is the one used: the network path connects, the in-process one never
    if kind == "network":
        assert bk.metrics.statistics()["bookkeeper_client_CHANNEL_CONNECT_total"] >= 1
    else:
        assert bk.metrics.statistics()["bookkeeper_client_CHANNEL_CONNECT_total"] == 0


async def test_adds_and_reads(kind: str, tmp_path: Path) -> None:
    async with bookies(tmp_path, 3) as b, client(b, kind) as bk:
        lh = await bk.create_ledger(3, 2, 2, password=PASSWORD)
        ops: list[PendingAdd] = [await lh.append(payload(i)) for i in range(200)]
        assert [await op.result() for op in ops] == list(range(200))
        assert lh.last_add_confirmed == 199
        await lh.close()
        rh = await bk.open_ledger(lh.ledger_id, password=PASSWORD)
        assert [e.data for e in await rh.read(0, 199)] == [payload(i) for i in range(200)]


async def test_recovery_fences_the_old_writer(kind: str, tmp_path: Path) -> None:
    async with bookies(tmp_path, 3) as b, client(b, kind) as old, client(b, kind) as new:
        lh = await old.create_ledger(3, 3, 2, password=PASSWORD)
        for i in range(10):
            await lh.add_entry(payload(i))
        rh = await new.open_ledger(lh.ledger_id, password=PASSWORD, recovery=True)
        assert rh.is_closed and rh.metadata.last_entry_id == 9
        with pytest.raises(LedgerFenced):
            await lh.add_entry(b"after the fence")
        assert [e.data for e in await rh.read(0, 9)] == [payload(i) for i in range(10)]


async def test_tailing_reader_long_polls_with_explicit_lac(kind: str, tmp_path: Path) -> None:
    async with (
        bookies(tmp_path, 3) as b,
        client(b, kind, ClientConfig(explicit_lac_interval_ms=50)) as bk,
        client(b, kind) as reader_bk,
    ):
        lh = await bk.create_ledger(3, 2, 2, password=PASSWORD)
        rh = await reader_bk.open_ledger(lh.ledger_id, password=PASSWORD, recovery=False)
        seen: list[bytes] = []

        async def tail() -> None:
            lac = -1
            while len(seen) < 10:
                new = await rh.wait_for_lac(lac, 10)
                if new > lac:
                    seen.extend(e.data for e in await rh.read(lac + 1, new))
                    lac = new

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tail)
                for i in range(10):
                    await lh.add_entry(payload(i))
                    await trio.sleep(0.02)  # paces the writer so the reader polls between adds
        assert seen == [payload(i) for i in range(10)]
        assert reader_bk.metrics.statistics()["bookkeeper_client_READ_LAST_CONFIRMED_AND_ENTRY_total"] >= 1
        assert bk.metrics.statistics()["bookkeeper_client_WRITE_LAC_total"] >= 1


async def test_bookie_errors_surface_as_client_errors(kind: str, tmp_path: Path) -> None:
    async with bookies(tmp_path, 1) as b, client(b, kind) as bk:
        bookie_id = b.endpoints[0].bookie_id
        lh = await bk.create_ledger(1, 1, 1, password=PASSWORD)
        await lh.add_entry(payload(0))
        direct = bk.bookie_client
        assert await direct.read_entry(bookie_id, lh.ledger_id, 0) != b""
        with pytest.raises(NoSuchEntry):
            await direct.read_entry(bookie_id, lh.ledger_id, 5)
        with pytest.raises(NoSuchLedger):
            await direct.read_entry(bookie_id, lh.ledger_id + 1000, 0)
        body = await direct.read_entry(bookie_id, lh.ledger_id, 0)
        with pytest.raises(Unauthorized):  # the bookie refuses another master key for the ledger
            await direct.recovery_add(bookie_id, lh.ledger_id, 1, master_key(b"not the password"), body)
        rh = await bk.open_ledger(lh.ledger_id, password=PASSWORD, recovery=True)  # fences it
        assert rh.metadata.last_entry_id == 0
        with pytest.raises(LedgerFenced):
            await lh.add_entry(payload(1))


async def test_the_bookies_in_flight_bound_holds_requests_back_without_losing_any(kind: str, tmp_path: Path) -> None:
    config = ClientConfig(max_in_flight_adds=500, max_pending_requests_per_bookie=1000)
    async with bookies(tmp_path, 1, max_in_flight_requests=4) as b, client(b, kind, config) as bk:
        lh = await bk.create_ledger(1, 1, 1, password=PASSWORD)
        ops = [await lh.append(payload(i)) for i in range(400)]
        with trio.fail_after(30):
            assert [await op.result() for op in ops] == list(range(400))
        assert bk.metrics.statistics()["bookkeeper_client_NUM_ENSEMBLE_CHANGE_total"] == 0
        rh = await bk.open_ledger(lh.ledger_id, password=PASSWORD, recovery=True)
        assert [e.data for e in await rh.read(0, 399)] == [payload(i) for i in range(400)]


async def test_a_bookie_stopping_mid_write_is_replaced(kind: str, tmp_path: Path) -> None:
    async with bookies(tmp_path, 3) as b, client(b, kind) as bk:
        lh = await bk.create_ledger(2, 2, 2, password=PASSWORD)
        for i in range(20):
            await lh.add_entry(payload(i))
        b.stop(lh.ensemble[0])
        with trio.fail_after(30):
            for i in range(20, 40):
                await lh.add_entry(payload(i))
        assert bk.metrics.statistics()["bookkeeper_client_NUM_ENSEMBLE_CHANGE_total"] >= 1
        await lh.close()
        rh = await bk.open_ledger(lh.ledger_id, password=PASSWORD)
        assert [e.data for e in await rh.read(0, 39)] == [payload(i) for i in range(40)]


async def test_the_pending_bound_answers_and_close_follow_the_transport_contract(kind: str, tmp_path: Path) -> None:
    config = ClientConfig(max_pending_requests_per_bookie=3)
    async with bookies(tmp_path, 1) as b, trio.open_nursery() as nursery:
        bookie_id = b.endpoints[0].bookie_id
        metrics = ClientMetrics()
        transport: BookieTransport = (
            ConnectionPool(nursery, config, metrics)
            if kind == "network"
            else InProcessTransport(nursery, config, metrics, local={bookie_id: b.endpoints[0].core})
        )  # type: ignore[dict-item]
        answers: list[tuple[int, int]] = []

        def on_answer(txn: int, response: pb.Response | None, error: BKError | None) -> None:
            assert response is not None and error is None
            answers.append((txn, response.readResponse.status))

        channel = transport.get(bookie_id)
        txns = [transport.next_txn() for _ in range(3)]
        for txn in txns:
            channel.send(txn, encode_request(read_request(txn, 424242, 0)), on_answer, txn)
        assert answers == []  # rule 2: never called back from inside send
        with pytest.raises(TooManyRequests):
            extra = transport.next_txn()
            channel.send(extra, encode_request(read_request(extra, 424242, 0)), on_answer, extra)
        with trio.fail_after(10):
            while len(answers) < 3:
                await trio.sleep(0.01)
        assert sorted(answers) == [(txn, StatusCode.ENOLEDGER) for txn in txns]
        txn = transport.next_txn()  # room again once answered
        response = await channel.call(txn, encode_request(read_request(txn, 424242, 0)))
        assert response.readResponse.status == StatusCode.ENOLEDGER
        transport.close()
        with pytest.raises(ClientClosed):
            transport.get(bookie_id).send(txn, encode_request(read_request(txn, 424242, 0)), on_answer, txn)
        nursery.cancel_scope.cancel()


async def test_adds_by_their_fields_are_answered_with_a_status_and_adds_as_frames_with_a_response(
    kind: str, tmp_path: Path
) -> None:
    """Contract rule 6: ``send_add`` calls back with the answer's status (the in-process channel
    hands the add's fields to the bookie; the network one sends its frame); an add sent as a frame
    through ``send`` still gets the response message, on either transport."""
    async with bookies(tmp_path, 1) as b, trio.open_nursery() as nursery:
        bookie_id = b.endpoints[0].bookie_id
        metrics = ClientMetrics()
        transport: BookieTransport = (
            ConnectionPool(nursery, CFG, metrics)
            if kind == "network"
            else InProcessTransport(nursery, CFG, metrics, local={bookie_id: b.endpoints[0].core})
        )  # type: ignore[dict-item]
        ledger, key = 777, master_key(PASSWORD)
        encoder = AddRequestEncoder(ledger, key)
        bodies = [encode_entry(ledger, i, i - 1, 10 * (i + 1), payload(i)) for i in range(3)]
        statuses: list[tuple[str, int | None, BKError | None]] = []
        responses: list[pb.Response] = []

        def on_status(tag: str, status: int | None, error: BKError | None) -> None:
            statuses.append((tag, status, error))

        def on_response(_arg: None, response: pb.Response | None, error: BKError | None) -> None:
            assert response is not None and error is None
            responses.append(response)

        channel = transport.get(bookie_id)
        add = AddRequest(transport.next_txn(), ledger, 0, key, bodies[0], False, encoder)
        channel.send_add(add, on_status, "by fields")
        txn = transport.next_txn()
        channel.send(txn, encoder.encode(txn, 1, bodies[1]), on_response, None)
        other_key = master_key(b"not the password")
        refused = AddRequest(
            transport.next_txn(), ledger, 2, other_key, bodies[2], False, AddRequestEncoder(ledger, other_key)
        )
        channel.send_add(refused, on_status, "wrong key")
        assert statuses == [] and responses == []  # rule 2: never called back from inside a send
        with trio.fail_after(10):
            while len(statuses) < 2 or not responses:
                await trio.sleep(0.01)
        assert sorted(statuses, key=lambda s: s[0]) == [
            ("by fields", StatusCode.EOK, None),
            ("wrong key", StatusCode.EUA, None),
        ]
        (response,) = responses
        assert (response.header.txnId, response.status) == (txn, StatusCode.EOK)
        assert (response.addResponse.status, response.addResponse.ledgerId, response.addResponse.entryId) == (
            StatusCode.EOK,
            ledger,
            1,
        )
        for entry_id in (0, 1):
            txn = transport.next_txn()
            read = await channel.call(txn, encode_request(read_request(txn, ledger, entry_id)))
            assert read.readResponse.status == StatusCode.EOK and read.readResponse.body == bodies[entry_id]
        transport.close()
        with pytest.raises(ClientClosed):
            transport.get(bookie_id).send_add(add, on_status, "after close")
        nursery.cancel_scope.cancel()
