"""The bookie transport is a seam (`bk_client.BookieTransport`): a client given another transport
sends every request of the data path through it (adds, reads, recovery's fencing reads, LAC
reads, close), so an in-process transport can replace the network one below the ledger API."""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio

from bk_client import AddRequest, BookieChannel, BookKeeper, ClientConfig, ClientMetrics
from bk_client._connection import ConnectionPool
from protocols.bookkeeper import bookie_protocol_pb2 as pb
from protocols.bookkeeper import parse_request
from tests.support.fake_bookie import ROOT, fake_cluster


class _Recording:
    """A channel that notes each request's operation and hands it to the network channel."""

    def __init__(self, inner: BookieChannel, seen: Counter[str]) -> None:
        self._inner = inner
        self._seen = seen

    def _note(self, frame: bytes) -> None:
        request = parse_request(frame[4:])  # after the frame's 4-byte length
        self._seen[pb.OperationType.Name(request.header.operation)] += 1

    def send(self, txn_id: int, frame: bytes, callback: Any, arg: Any) -> None:
        self._note(frame)
        self._inner.send(txn_id, frame, callback, arg)

    def send_add(self, add: AddRequest, callback: Any, arg: Any) -> None:
        self._note(add.frame())
        self._inner.send_add(add, callback, arg)

    def forget(self, txn_id: int) -> None:
        self._inner.forget(txn_id)

    async def call(self, txn_id: int, frame: bytes) -> pb.Response:
        self._note(frame)
        return await self._inner.call(txn_id, frame)


class RecordingTransport:
    """A `BookieTransport` by delegation only: it sees what the operations need of a transport."""

    def __init__(self, nursery: trio.Nursery, config: ClientConfig, metrics: ClientMetrics) -> None:
        self._pool = ConnectionPool(nursery, config, metrics)
        self.config = config
        self.seen: Counter[str] = Counter()
        TRANSPORTS.append(self)

    def next_txn(self) -> int:
        return self._pool.next_txn()

    def get(self, bookie_id: str) -> BookieChannel:
        return _Recording(self._pool.get(bookie_id), self.seen)

    def is_down(self, bookie_id: str) -> bool:
        return self._pool.is_down(bookie_id)

    def close(self) -> None:
        self._pool.close()


TRANSPORTS: list[RecordingTransport] = []


async def test_every_request_of_the_data_path_goes_through_the_given_transport() -> None:
    async with fake_cluster(3) as c:
        async with BookKeeper.open(c.store, root=ROOT, transport=RecordingTransport) as bk:
            writer = await bk.create_ledger(3, 2, 2, password=b"pw")
            for i in range(5):
                await writer.add_entry(b"entry %d" % i)
            async with BookKeeper.open(c.store, root=ROOT, transport=RecordingTransport) as other:
                reader = await other.open_ledger(writer.ledger_id, password=b"pw", recovery=True)
                assert [e.data for e in await reader.read(0, 4)] == [b"entry %d" % i for i in range(5)]
                await reader.close()
        first, second = TRANSPORTS[-2:]
        assert first.seen["ADD_ENTRY"] == 10  # 5 entries on a write quorum of 2
        assert second.seen["READ_ENTRY"] >= 5 + 3  # the entries, and recovery's fencing reads
