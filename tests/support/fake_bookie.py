"""An in-process fake bookie for client tests: a trio TCP server speaking ``protocols.bookkeeper`` over
an in-memory dict, registered under ``{root}/ledgers/available/{host:port}``, that fails on cue.

Knobs (change them at any time; they apply to requests that arrive afterwards):

* ``add_delay`` / ``read_delay``: seconds before answering.
* ``silent_adds`` / ``silent_reads``: never answer (the request is swallowed).
* ``add_status``: answer every add with this status (e.g. ``StatusCode.EIO``) without storing.
* ``drop_on_add``: close the connection when an add arrives (nothing stored).
* ``kill()``: stop listening, drop every connection and unregister (a crashed bookie).

Semantics follow BookKeeper's bookie: adds to a fenced ledger get EFENCED unless RECOVERY_ADD;
a fencing read records the fence (creating the ledger if needed) before reading; entry -1 reads
the last stored entry; the bookie's LAC is the largest LAC seen in stored entries' headers (or a
WRITE_LAC); a piggyback read with ``previousLAC`` waits until the LAC passes it or its timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from bk_client import BookKeeper, ClientConfig
from metadata import MetadataStore, open_metadata_store
from protocols.bookkeeper import (
    FrameDecoder,
    OperationType,
    StatusCode,
    add_response,
    available_path,
    decode_lac,
    encode_response,
    error_response,
    peek_entry_header,
    read_lac_response,
    read_response,
    write_lac_response,
)
from protocols.bookkeeper import (
    bookie_protocol_pb2 as pb,
)

ROOT = "/magnetar"


def _flag(msg: pb.ReadRequest | pb.AddRequest) -> int | None:
    # proto2 enums default to their first value: an unset flag must not read as FENCE / RECOVERY
    return msg.flag if msg.HasField("flag") else None


@dataclass
class _Ledger:
    master_key: bytes
    entries: dict[int, bytes] = field(default_factory=dict)
    fenced: bool = False
    lac: int = -1
    explicit_lac: bytes | None = None  # body of the last WRITE_LAC
    changed: trio.Event = field(default_factory=trio.Event)

    def bump(self, lac: int) -> None:
        if lac > self.lac:
            self.lac = lac
            self.changed.set()
            self.changed = trio.Event()


class FakeBookie:
    """One fake bookie (see the module docstring)."""

    def __init__(self, store: MetadataStore, root: str = ROOT) -> None:
        self.store = store
        self.root = root
        self.ledgers: dict[int, _Ledger] = {}
        self.bookie_id = ""
        self.add_delay = 0.0
        self.read_delay = 0.0
        self.silent_adds = False
        self.silent_reads = False
        self.add_status: StatusCode | None = None
        self.drop_on_add = False
        self.adds_received = 0
        self.requests_seen = 0  # every request read off the wire, answered or not
        self.reads_received = 0
        self.write_lacs_received = 0
        self._scope: trio.CancelScope | None = None
        self._streams: set[trio.SocketStream] = set()
        self.alive = False

    # ---- lifecycle -------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on a free loopback port, register, serve until ``kill``."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        self.bookie_id = f"127.0.0.1:{port}"
        await self.store.create(f"{available_path(self.root)}/{self.bookie_id}", ephemeral=True, make_parents=True)
        self.alive = True
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, self._handle, listeners)
                task_status.started()
        for listener in listeners:
            await listener.aclose()

    async def kill(self) -> None:
        """Crash: stop serving, drop connections, unregister."""
        self.alive = False
        if self._scope is not None:
            self._scope.cancel()
        for s in list(self._streams):
            await s.aclose()
        try:
            await self.store.delete(f"{available_path(self.root)}/{self.bookie_id}")
        except Exception:
            pass

    async def drop_connections(self) -> None:
        """Close every client connection (the server keeps listening)."""
        for s in list(self._streams):
            await s.aclose()

    # ---- inspection ------------------------------------------------------------------------

    def entry_ids(self, ledger_id: int) -> list[int]:
        """Ids of the entries this bookie stores for the ledger."""
        led = self.ledgers.get(ledger_id)
        return sorted(led.entries) if led else []

    def is_fenced(self, ledger_id: int) -> bool:
        """True once a fencing read reached this bookie."""
        led = self.ledgers.get(ledger_id)
        return bool(led and led.fenced)

    # ---- serving ---------------------------------------------------------------------------

    async def _handle(self, stream: trio.SocketStream) -> None:
        self._streams.add(stream)
        lock = trio.Lock()
        try:
            async with trio.open_nursery() as nursery:
                await self._serve_stream(stream, lock, nursery)
                nursery.cancel_scope.cancel()
        finally:
            self._streams.discard(stream)
            await stream.aclose()

    async def _serve_stream(self, stream: trio.SocketStream, lock: trio.Lock, nursery: trio.Nursery) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                decoder.feed(data)
                out: list[bytes] = []
                while (req := decoder.next_request()) is not None:
                    self.requests_seen += 1
                    if req.header.operation == OperationType.ADD_ENTRY and self.drop_on_add:
                        await stream.aclose()
                        return
                    resp = self._answer_now(req)
                    if resp is not None:
                        out.append(encode_response(resp))
                    elif not self._swallowed(req):
                        nursery.start_soon(self._answer_later, req, stream, lock)
                if out:
                    async with lock:
                        await stream.send_all(b"".join(out))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return

    def _swallowed(self, req: pb.Request) -> bool:
        op = req.header.operation
        return (op == OperationType.ADD_ENTRY and self.silent_adds) or (
            op in (OperationType.READ_ENTRY, OperationType.READ_LAC) and self.silent_reads
        )

    def _needs_wait(self, req: pb.Request) -> bool:
        op = req.header.operation
        if op == OperationType.ADD_ENTRY:
            return self.add_delay > 0
        if op == OperationType.READ_ENTRY:
            r = req.readRequest
            return self.read_delay > 0 or (_flag(r) == pb.ReadRequest.ENTRY_PIGGYBACK and r.HasField("previousLAC"))
        return False

    def _answer_now(self, req: pb.Request) -> pb.Response | None:
        if self._swallowed(req) or self._needs_wait(req):
            return None
        return self._process(req)

    async def _answer_later(self, req: pb.Request, stream: trio.SocketStream, lock: trio.Lock) -> None:
        op = req.header.operation
        if op == OperationType.ADD_ENTRY:
            await trio.sleep(self.add_delay)
        else:
            await trio.sleep(self.read_delay)
            r = req.readRequest
            if _flag(r) == pb.ReadRequest.ENTRY_PIGGYBACK and r.HasField("previousLAC"):
                with trio.move_on_after((r.timeOut or 10_000) / 1000):
                    while True:
                        led = self.ledgers.get(r.ledgerId)
                        if led is not None and led.lac > r.previousLAC:
                            break
                        if led is None:
                            await trio.sleep(0.01)
                        else:
                            await led.changed.wait()
        resp = self._process(req)
        try:
            async with lock:
                await stream.send_all(encode_response(resp))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _process(self, req: pb.Request) -> pb.Response:
        op = req.header.operation
        txn = req.header.txnId
        if op == OperationType.ADD_ENTRY:
            self.adds_received += 1
            a = req.addRequest
            if self.add_status is not None:
                return add_response(txn, self.add_status, a.ledgerId, a.entryId)
            led = self.ledgers.get(a.ledgerId)
            if led is None:
                led = self.ledgers[a.ledgerId] = _Ledger(a.masterKey)
            if led.master_key != a.masterKey:
                return add_response(txn, StatusCode.EUA, a.ledgerId, a.entryId)
            if led.fenced and _flag(a) != pb.AddRequest.RECOVERY_ADD:
                return add_response(txn, StatusCode.EFENCED, a.ledgerId, a.entryId)
            led.entries[a.entryId] = bytes(a.body)
            led.bump(peek_entry_header(a.body).last_add_confirmed)
            return add_response(txn, StatusCode.EOK, a.ledgerId, a.entryId)
        if op == OperationType.READ_ENTRY:
            self.reads_received += 1
            r = req.readRequest
            led = self.ledgers.get(r.ledgerId)
            if _flag(r) == pb.ReadRequest.FENCE_LEDGER:
                if led is None:
                    led = self.ledgers[r.ledgerId] = _Ledger(r.masterKey)
                if led.master_key != r.masterKey:
                    return read_response(txn, StatusCode.EUA, r.ledgerId, r.entryId)
                led.fenced = True
            if led is None:
                return read_response(txn, StatusCode.ENOLEDGER, r.ledgerId, r.entryId)
            entry_id = r.entryId
            if entry_id == -1:
                entry_id = max(led.entries) if led.entries else -2
            body = led.entries.get(entry_id)
            max_lac = led.lac if _flag(r) == pb.ReadRequest.ENTRY_PIGGYBACK else None
            if body is None:
                return read_response(txn, StatusCode.ENOENTRY, r.ledgerId, r.entryId, max_lac=max_lac)
            return read_response(txn, StatusCode.EOK, r.ledgerId, entry_id, body=body, max_lac=max_lac)
        if op == OperationType.READ_LAC:
            lid = req.readLacRequest.ledgerId
            led = self.ledgers.get(lid)
            if led is None:
                return read_lac_response(txn, StatusCode.ENOLEDGER, lid)
            if not led.entries and led.explicit_lac is None:
                return read_lac_response(txn, StatusCode.ENOENTRY, lid)
            last = led.entries[max(led.entries)] if led.entries else None
            return read_lac_response(txn, StatusCode.EOK, lid, lac_body=led.explicit_lac, last_entry_body=last)
        if op == OperationType.WRITE_LAC:
            w = req.writeLacRequest
            self.write_lacs_received += 1
            led = self.ledgers.setdefault(w.ledgerId, _Ledger(w.masterKey))
            led.explicit_lac = bytes(w.body)
            led.bump(decode_lac(w.body, w.ledgerId))
            return write_lac_response(txn, StatusCode.EOK, w.ledgerId)
        return error_response(req, StatusCode.EBADREQ)


@dataclass
class Cluster:
    """A memory metadata store, fake bookies and a client (``bk``), for one test."""

    store: MetadataStore
    bookies: list[FakeBookie]
    bk: BookKeeper
    nursery: trio.Nursery

    def bookie(self, bookie_id: str) -> FakeBookie:
        """The fake bookie registered as ``bookie_id``."""
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    async def add_bookie(self) -> FakeBookie:
        """Start one more fake bookie."""
        b = FakeBookie(self.store)
        await self.nursery.start(b.serve)
        self.bookies.append(b)
        return b

    @asynccontextmanager
    async def client(self, config: ClientConfig | None = None) -> AsyncIterator[BookKeeper]:
        """A second client on the same cluster (a new owner, a reader)."""
        async with BookKeeper.open(self.store, root=ROOT, config=config or self.bk.config) as bk:
            yield bk


@asynccontextmanager
async def fake_cluster(n: int = 3, config: ClientConfig | None = None) -> AsyncIterator[Cluster]:
    """Start ``n`` fake bookies and a client over a fresh in-memory metadata store."""
    async with open_metadata_store(f"memory://bkops-{uuid.uuid4().hex}") as store:
        async with trio.open_nursery() as nursery:
            bookies = []
            for _ in range(n):
                b = FakeBookie(store)
                await nursery.start(b.serve)
                bookies.append(b)
            async with BookKeeper.open(store, root=ROOT, config=config) as bk:
                yield Cluster(store, bookies, bk, nursery)
            nursery.cancel_scope.cancel()
