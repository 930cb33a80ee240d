"""Talking to a bookie server in tests: configs in a temp dir, a small protocol client, and writing
entries to a running bookie and reading them back (by port, so it may be another process)."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import trio

from bookie import BookieConfig
from magnetar.common.config import load_config
from protocols.bookkeeper import FrameDecoder, StatusCode, add_request, encode_entry, encode_request, read_request
from protocols.bookkeeper import bookie_protocol_pb2 as pb

KEY = b"master-key"


def make_config(tmp: Path, **overrides: Any) -> BookieConfig:
    """A small, fast config in ``tmp`` (tiny preallocation, caches and checks); ``overrides`` win."""
    values: dict[str, Any] = dict(
        journal_dir=str(tmp / "journal"),
        ledger_dirs=(str(tmp / "ledgers"),),
        port=0,
        http_port=0,
        listen_address="127.0.0.1",
        http_address="127.0.0.1",
        journal_prealloc_size_mb=1,
        write_cache_max_mb=4,
        read_cache_max_mb=4,
        flush_interval_ms=60_000,
        disk_check_interval_ms=60_000,
    )
    values.update(overrides)
    return load_config(BookieConfig, values)


def entry(ledger_id: int, entry_id: int, payload: bytes, lac: int | None = None) -> bytes:
    """A digest-framed entry whose piggybacked LAC is ``entry_id - 1`` unless given."""
    return encode_entry(ledger_id, entry_id, entry_id - 1 if lac is None else lac, 0, payload)


class Client:
    """A trio protocol client: send requests, then collect responses by txn id (any order)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.txn = itertools.count(1)
        self.pending: dict[int, pb.Response] = {}

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, *requests: pb.Request) -> None:
        await self.stream.send_all(b"".join(encode_request(r) for r in requests))

    async def receive(self, txn: int) -> pb.Response:
        while txn not in self.pending:
            data = await self.stream.receive_some(1 << 20)
            if not data:
                raise EOFError("server closed the connection")
            self.decoder.feed(data)
            while (resp := self.decoder.next_response()) is not None:
                self.pending[resp.header.txnId] = resp
        return self.pending.pop(txn)

    async def call(self, request: pb.Request) -> pb.Response:
        await self.send(request)
        return await self.receive(request.header.txnId)

    async def aclose(self) -> None:
        await self.stream.aclose()


class SyncClient:
    """A blocking socket client for crash tests in plain threads / processes."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.decoder = FrameDecoder()

    def send(self, *requests: pb.Request) -> None:
        self.sock.sendall(b"".join(encode_request(r) for r in requests))

    def next_response(self) -> pb.Response | None:
        """The next response, or None when the server closed the connection."""
        while True:
            resp = self.decoder.next_response()
            if resp is not None:
                return resp
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                return None
            if not data:
                return None
            self.decoder.feed(data)

    def close(self) -> None:
        self.sock.close()


async def write_entries(port: int, ledgers: Iterable[int], entries: int, body: Callable[[int, int], bytes]) -> None:
    """Add entries ``0..entries-1`` of each ledger over the bookie protocol (pipelined), all EOK."""
    client = await Client.connect(port)
    try:
        txn = 0
        for lid in ledgers:
            for eid in range(entries):
                txn += 1
                await client.send(add_request(txn, lid, eid, KEY, body(lid, eid)))
        for t in range(1, txn + 1):
            assert (await client.receive(t)).status == StatusCode.EOK
    finally:
        await client.aclose()


async def check_reads(
    port: int, live: Iterable[int], deleted: Iterable[int], entries: int, body: Callable[[int, int], bytes]
) -> None:
    """Every entry of ``live`` reads back as written; ``deleted`` ledgers answer ENOLEDGER."""
    client = await Client.connect(port)
    try:
        txn = 0
        for lid in live:
            for eid in range(entries):
                txn += 1
                resp = await client.call(read_request(txn, lid, eid))
                assert resp.status == StatusCode.EOK, (lid, eid, resp.status)
                assert resp.readResponse.body == body(lid, eid)
        for lid in deleted:
            txn += 1
            assert (await client.call(read_request(txn, lid, 0))).status == StatusCode.ENOLEDGER
    finally:
        await client.aclose()
