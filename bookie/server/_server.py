"""The bookie protocol server: a thin trio loop per connection around the sans-IO frame codec.

Per connection, four tasks share one nursery:

* the reader decodes frames and dispatches them in arrival order. Adds are *submitted* right
  there (`Bookie.submit_add` enqueues the journal record synchronously), so the journal holds a
  connection's adds in the order they arrived; ordinary reads are queued for the read worker;
  fencing reads, reads the client marks high priority (``BKPacketHeader.priority > 0``: ledger
  recovery), long polls and the rare other operations run as tasks;
* the read worker serves the connection's ordinary reads one at a time in arrival order (cache
  hits never block). Read paths are separate (BookKeeper's read / high-priority / long-poll
  pools): a high-priority read is dispatched at once whatever the backlog of ordinary reads and
  reads the disk on the bookie's high-priority threads (``numHighPriorityWorkerThreads``), not
  the ordinary ones (``numReadWorkerThreads``), so recovery is never queued behind catch-up
  reads; a long poll holds no read thread while it waits for the LAC;
* the acker completes submitted adds in order (they are acknowledged by the journal in order
  anyway) and queues their responses;
* the writer sends every queued response with one ``send_all`` per wake-up (many per call under
  load) and releases their in-flight budget.

Protocols: every frame is BookKeeper's v3 protobuf ``Request`` or, told apart by its first byte
(``is_v2_payload``), a packet of its v2 protocol (ADD and READ; BookKeeper clients with
``useV2WireProtocol``, as Pulsar's brokers). A v2 packet is served as the v3 request it means
under a txn id the connection gives it, and answered in v2 (``_from_v2`` / ``_encode_v2``).

The request handling (`_RequestCore`: budget, adds, acker, read paths, the other operations)
does not depend on the stream: `LocalConnection` serves a client in the bookie's own process
(standalone's broker) with it, taking encoded requests from a queue and handing back
``Response`` messages, with no socket, frame decoder, writer task or response encoding.

Bounds: a connection may have at most ``max_in_flight_requests`` requests and
``max_in_flight_bytes`` bytes (requests read plus responses not yet sent) in progress; past that
the reader stops reading, which pushes back on the client through TCP. A malformed or oversized
frame is logged and closes that connection only. Handlers close their stream in ``finally``.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections import deque
from collections.abc import Callable

import trio

from magnetar.common.tls import wrap_server_stream
from protocols.bookkeeper import (
    BookieInfoFlag,
    FrameDecoder,
    FrameError,
    MalformedFrame,
    OperationType,
    StatusCode,
    V2Flag,
    V2Op,
    add_request,
    add_response,
    encode_add_response,
    encode_response,
    encode_v2_response,
    error_response,
    force_ledger_response,
    get_bookie_info_response,
    is_v2_payload,
    parse_request,
    parse_v2_request,
    read_lac_response,
    read_request,
    read_response,
    v2_status,
    write_lac_response,
)
from protocols.bookkeeper import (
    bookie_protocol_pb2 as pb,
)

from .._errors import BookieError
from ..journal import JournalError
from ._authz import CertificateRoleAuthorizer
from ._bookie import AddTicket, Bookie

__all__ = ["LocalConnection", "serve_bookie"]

log = logging.getLogger(__name__)

_RECEIVE_SIZE = 256 * 1024
_FENCE = pb.ReadRequest.FENCE_LEDGER
_PIGGYBACK = pb.ReadRequest.ENTRY_PIGGYBACK
_RECOVERY = pb.AddRequest.RECOVERY_ADD
_ADD = int(OperationType.ADD_ENTRY)
# What an ADD_ENTRY frame holds besides its body and master key, at most (length prefix, header
# with a 10-byte txn id, ledger and entry ids, field tags and lengths, the recovery flag): an add
# handed over by its fields counts this against the in-flight byte budget, as its frame would.
_ADD_FRAME_FIELDS = 64
_EOK = int(StatusCode.EOK)


async def serve_bookie(
    bookie: Bookie,
    host: str | None = "127.0.0.1",
    port: int = 3181,
    *,
    listeners: list[trio.SocketListener] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    authorizer: CertificateRoleAuthorizer | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the bookie protocol on ``host:port`` (or on already bound ``listeners``) until cancelled.

    ``task_status.started`` receives the listeners (``listeners[0].socket.getsockname()[1]`` is
    the bound port when ``port`` is 0). With ``ssl_context`` (`magnetar.common.tls.server_context` of
    the bookie's TLS keys) every connection is TLS: a client that fails the handshake (no trusted
    certificate under tlsClientAuthentication, or no TLS at all) is closed before any request is
    read. With ``authorizer`` (``bookieAuthProviderFactoryClass``, see ``_authz``) a client whose
    verified certificate carries no authorized role is closed likewise, before any request is
    read. Connection handlers never raise into this task: protocol, TLS and I/O errors close
    their connection only. Raises OSError if the port cannot be bound.
    """
    if listeners is None:
        listeners = await trio.open_tcp_listeners(port, host=host)
    task_status.started(listeners)

    async def handle(stream: trio.SocketStream) -> None:
        if ssl_context is None:
            await _Connection(bookie, stream).run()
            return
        tls = wrap_server_stream(stream, ssl_context)
        try:
            with trio.fail_after(_HANDSHAKE_TIMEOUT_S):
                await tls.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError) as exc:
            log.warning("TLS handshake with %s failed: %r", _peer_of(stream), exc.__cause__ or exc)
            await trio.aclose_forcefully(tls)
            return
        if authorizer is not None and (refused := authorizer.authorize(tls.getpeercert())) is not None:
            log.warning("refusing %s: %s", _peer_of(stream), refused)
            await trio.aclose_forcefully(tls)
            return
        await _Connection(bookie, tls).run()

    await trio.serve_listeners(handle, listeners)


_HANDSHAKE_TIMEOUT_S = 10.0
"""A client that has not completed its TLS handshake this long after connecting is closed."""


def _peer_of(stream: trio.SocketStream) -> str:
    try:
        peer = stream.socket.getpeername()
        return f"{peer[0]}:{peer[1]}"
    except OSError:
        return "?"


class _RequestCore:
    """What a client's requests get, whatever carries them (module docstring): the in-flight
    budget, adds submitted in arrival order and answered in order once durable, the read paths and
    the rare operations. Subclasses say how answers leave (`_respond`, `_answer_adds`) and feed
    requests through `_serve_request` from their reader loop."""

    def __init__(self, bookie: Bookie) -> None:
        cfg = bookie.config
        self.bookie = bookie
        self.metrics = bookie.metrics
        self.max_n = cfg.max_in_flight_requests
        self.max_bytes = cfg.max_in_flight_bytes
        self.n = 0
        self.nbytes = 0
        self.room = trio.Event()
        self.acks: deque[tuple[int, AddTicket, float, int]] = deque()
        self.reads: deque[tuple[pb.Request, int, float]] = deque()  # ordinary reads, arrival order
        self.has_reads = trio.Event()
        self.has_acks = trio.Event()
        self.acker_waiting = False
        self.add_lat: list[float] = []
        self.read_lat: list[float] = []
        self.counts: dict[tuple[int, int], int] = {}
        self.acked_bytes = 0
        self.peer = "?"

    def _respond(self, response: pb.Response, request_size: int) -> None:
        """Count one answer and send it (`_emit`)."""
        key = (response.header.operation, response.status)
        self.counts[key] = self.counts.get(key, 0) + 1
        self._emit(response, request_size)

    def _emit(self, response: pb.Response, request_size: int) -> None:
        """Send one answer; the request's ``request_size`` budget is released once it left."""
        raise NotImplementedError

    def _answer_adds(self, answers: list[tuple[int, int, int, int]], request_bytes: int) -> None:
        """Send the answers ``(txn, status, ledger id, entry id)`` of completed adds, in order;
        their requests' ``request_bytes`` budget is released once they left."""
        raise NotImplementedError

    def _idle(self) -> None:
        """Called by the acker and the read worker before they wait for work."""

    def _abandon(self) -> None:
        """The connection ended: give back what its unanswered requests hold."""
        for _txn, ticket, _t0, _size in self.acks:
            self.bookie.abandon_add(ticket)
        self.acks.clear()
        self.bookie.requests_in_flight -= self.n

    async def _serve_request(self, request: pb.Request, size: int, nursery: trio.Nursery, t0: float) -> None:
        """Admit one request into the budget (waiting for room, which pushes back on the client)
        and hand it to its path; adds are submitted before this returns (arrival order)."""
        if request.header.operation == _ADD and request.HasField("addRequest"):
            add = request.addRequest
            recovery = add.HasField("flag") and add.flag == _RECOVERY
            await self._serve_add(
                request.header.txnId, add.ledgerId, add.entryId, add.masterKey, add.body, recovery, size, t0
            )
            return
        while self.n >= self.max_n or self.nbytes >= self.max_bytes:
            self.room = trio.Event()
            await self.room.wait()
        self.n += 1
        self.nbytes += size
        self.bookie.requests_in_flight += 1
        await self._dispatch(request, size, nursery, t0)

    async def _serve_add(
        self,
        txn: int,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        recovery: bool,
        size: int,
        t0: float,
    ) -> None:
        """`_serve_request` for an add, given by its fields (``size``: what it counts against the
        byte budget): admitted into the budget (waiting for room), then submitted to the journal
        before this returns, so adds enter it in arrival order."""
        while self.n >= self.max_n or self.nbytes >= self.max_bytes:
            self.room = trio.Event()
            await self.room.wait()
        self.n += 1
        self.nbytes += size
        self.bookie.requests_in_flight += 1
        if not self._submit_add(txn, ledger_id, entry_id, master_key, body, recovery, size, t0):
            # the journal queue is full (the hot path above needs no coroutine of its own)
            await self._submit_add_waiting(txn, ledger_id, entry_id, master_key, body, recovery, size, t0)

    # ------------------------------------------------------------------ budget

    def _release(self, n: int, size: int) -> None:
        self.n -= n
        self.nbytes -= size
        self.bookie.requests_in_flight -= n
        if self.n < self.max_n and self.nbytes < self.max_bytes:
            self.room.set()

    async def _dispatch(self, req: pb.Request, size: int, nursery: trio.Nursery, t0: float) -> None:
        """Every request but an add: ordinary reads to the read worker, high-priority reads and
        the rest as tasks, unknown ones EBADREQ."""
        op = req.header.operation
        if op == OperationType.READ_ENTRY and req.HasField("readRequest"):
            r = req.readRequest
            if r.HasField("flag"):
                nursery.start_soon(self._special_read, req, size, t0)
            elif req.header.priority > 0:
                nursery.start_soon(self._plain_read, req, size, t0, True)
            else:
                self.reads.append((req, size, t0))
                self.has_reads.set()
        elif op in _OTHER and req.HasField(_OTHER[op]):
            nursery.start_soon(self._other, req, size)
        else:
            self._respond(error_response(req, StatusCode.EBADREQ), size)

    # ------------------------------------------------------------------ adds

    def _submit_add(
        self,
        txn: int,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        recovery: bool,
        size: int,
        t0: float,
    ) -> bool:
        """Submit an add without waiting: queue it for the acker, or answer its error. False when
        the journal queue is full (nothing was queued or answered: wait for room with
        `_submit_add_waiting`)."""
        try:
            ticket = self.bookie.submit_add(ledger_id, entry_id, master_key, body, recovery=recovery)
        except trio.WouldBlock:
            return False
        except BookieError as exc:
            self._respond_add(txn, exc.status, ledger_id, entry_id, size)
            return True
        self.acks.append((txn, ticket, t0, size))
        if self.acker_waiting:
            self.acker_waiting = False
            self.has_acks.set()
        return True

    async def _submit_add_waiting(
        self,
        txn: int,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        recovery: bool,
        size: int,
        t0: float,
    ) -> None:
        """`_submit_add` once the journal queue has room (the reader reads nothing meanwhile, which
        pushes back on the client); answers the journal's error if it fails while waiting."""
        while True:
            try:
                await self.bookie.wait_for_journal_space()
            except BookieError as exc:
                self._respond_add(txn, exc.status, ledger_id, entry_id, size)
                return
            if self._submit_add(txn, ledger_id, entry_id, master_key, body, recovery, size, t0):
                return

    def _respond_add(self, txn: int, status: int, ledger_id: int, entry_id: int, size: int) -> None:
        """Answer an add that failed before reaching the journal (counted as one answer)."""
        self._respond(add_response(txn, status, ledger_id, entry_id), size)

    async def _acker(self) -> None:
        acks, bookie = self.acks, self.bookie
        while True:
            if not acks:
                self._idle()
                self.has_acks = trio.Event()
                self.acker_waiting = True
                await self.has_acks.wait()
                continue
            jt = acks[0][1].journal_ticket
            if not jt.done:
                try:
                    await jt.wait()
                except JournalError:
                    pass  # finish_add turns it into the status to answer
            # Answer every add at the head whose record is durable, without a coroutine per add;
            # one journal batch acknowledges many at once. Responses and budget are handed to
            # the writer once per round (and before any wait, since the writer swaps its lists).
            now = time.perf_counter()
            out: list[tuple[int, int, int, int]] = []
            lat = self.add_lat
            freed = ok = ok_bytes = 0
            while acks:
                txn, ticket, t0, size = acks[0]
                if not ticket.journal_ticket.done:
                    break
                try:
                    if not bookie.finish_add(ticket):  # the write cache is full: wait for room
                        self._queue_responses(out, freed, ok, ok_bytes)
                        out, freed, ok, ok_bytes = [], 0, 0, 0
                        await bookie.complete_add(ticket)
                        now = time.perf_counter()
                    status = _EOK
                    ok += 1
                    ok_bytes += len(ticket.body)
                except BookieError as exc:
                    status = exc.status
                    key = (_ADD, status)
                    self.counts[key] = self.counts.get(key, 0) + 1
                acks.popleft()
                out.append((txn, status, ticket.ledger_id, ticket.entry_id))
                freed += size
                lat.append((now - t0) * 1000.0)
            self._queue_responses(out, freed, ok, ok_bytes)

    def _queue_responses(self, out: list[tuple[int, int, int, int]], freed: int, ok: int, ok_bytes: int) -> None:
        """Send add answers (`_answer_adds`): `freed` request bytes; `ok` adds succeeded."""
        if not out:
            return
        if ok:
            key = (_ADD, _EOK)
            self.counts[key] = self.counts.get(key, 0) + ok
            self.acked_bytes += ok_bytes
        self._answer_adds(out, freed)

    # ------------------------------------------------------------------ reads

    async def _read_worker(self) -> None:
        """The connection's ordinary reads, one at a time in arrival order (module docstring)."""
        reads = self.reads
        while True:
            while not reads:
                self._idle()
                self.has_reads = trio.Event()
                await self.has_reads.wait()
            req, size, t0 = reads.popleft()
            await self._plain_read(req, size, t0)

    async def _plain_read(self, req: pb.Request, size: int, t0: float, high_priority: bool = False) -> None:
        r = req.readRequest
        try:
            body = await self.bookie.read_entry(r.ledgerId, r.entryId, high_priority=high_priority)
        except BookieError as exc:
            self._respond(read_response(req.header.txnId, exc.status, r.ledgerId, r.entryId), size)
            return
        self.metrics.read_bytes.inc(len(body))
        self._respond(read_response(req.header.txnId, StatusCode.EOK, r.ledgerId, r.entryId, body=body), size)
        self.read_lat.append((time.perf_counter() - t0) * 1000.0)

    async def _special_read(self, req: pb.Request, size: int, t0: float) -> None:
        """Fencing reads and piggyback / long-poll reads (they may wait, so they are tasks)."""
        r, bookie, txn = req.readRequest, self.bookie, req.header.txnId
        ledger, entry = r.ledgerId, r.entryId
        try:
            if r.flag == _FENCE:
                if not r.HasField("masterKey"):
                    raise BookieError(StatusCode.EBADREQ, "a fencing read needs the master key")
                await bookie.fence(ledger, r.masterKey)
            elif r.HasField("previousLAC"):
                timeout_s = r.timeOut / 1000.0 if r.HasField("timeOut") else 0.0
                lac = await bookie.wait_lac(ledger, r.previousLAC, timeout_s)
                if lac <= r.previousLAC:  # timed out: the current LAC, no entry
                    self._respond(read_response(txn, StatusCode.EOK, ledger, entry, max_lac=lac), size)
                    return
                # BookKeeper's long poll asks for entry -1 and gets the one after previousLAC
                entry = r.previousLAC + 1
            try:
                high = r.flag == _FENCE or req.header.priority > 0
                body = await bookie.read_entry(ledger, entry, high_priority=high)
                status = StatusCode.EOK
            except BookieError as exc:
                body, status = None, exc.status
                if r.HasField("previousLAC") and status == StatusCode.ENOENTRY:
                    status = StatusCode.EOK  # the entry is best effort (striping): the LAC is the answer
            max_lac: int | None
            try:
                max_lac = await bookie.lac(ledger)
            except BookieError:
                max_lac = None
            if body is not None:
                self.metrics.read_bytes.inc(len(body))
            else:
                entry = r.entryId  # no entry read: the id asked for, as BookKeeper answers
            self._respond(read_response(txn, status, ledger, entry, body=body, max_lac=max_lac), size)
            self.read_lat.append((time.perf_counter() - t0) * 1000.0)
        except BookieError as exc:
            self._respond(read_response(txn, exc.status, ledger, entry), size)

    # ------------------------------------------------------------------ other operations

    async def _other(self, req: pb.Request, size: int) -> None:
        bookie, txn, op = self.bookie, req.header.txnId, req.header.operation
        try:
            if op == OperationType.READ_LAC:
                ledger = req.readLacRequest.ledgerId
                lac_body, last = await bookie.read_lac(ledger)
                resp = read_lac_response(txn, StatusCode.EOK, ledger, lac_body=lac_body, last_entry_body=last)
            elif op == OperationType.WRITE_LAC:
                w = req.writeLacRequest
                await bookie.write_lac(w.ledgerId, w.lac, w.masterKey, w.body)
                resp = write_lac_response(txn, StatusCode.EOK, w.ledgerId)
            elif op == OperationType.FORCE_LEDGER:
                ledger = req.forceLedgerRequest.ledgerId
                await bookie.force_ledger(ledger)
                resp = force_ledger_response(txn, StatusCode.EOK, ledger)
            else:  # GET_BOOKIE_INFO
                wanted = req.getBookieInfoRequest.requested
                total, free = await trio.to_thread.run_sync(bookie.disk_space)
                resp = get_bookie_info_response(
                    txn,
                    StatusCode.EOK,
                    total_disk_capacity=total if wanted & BookieInfoFlag.TOTAL_DISK_CAPACITY else None,
                    free_disk_space=free if wanted & BookieInfoFlag.FREE_DISK_SPACE else None,
                )
        except BookieError as exc:
            resp = error_response(req, exc.status)
        except OSError as exc:
            log.warning("request %s failed: %s", OperationType(op).name, exc)
            resp = error_response(req, StatusCode.EIO)
        self._respond(resp, size)

    def _flush_metrics(self) -> None:
        m = self.metrics
        if self.add_lat:
            m.add_request.observe_many(self.add_lat)
            self.add_lat = []
        if self.read_lat:
            m.read_request.observe_many(self.read_lat)
            self.read_lat = []
        if self.acked_bytes:
            m.add_bytes.inc(self.acked_bytes)
            self.acked_bytes = 0
        if self.counts:
            for (op, status), count in self.counts.items():
                m.requests.labels(_op_name(op), _status_name(status)).inc(count)
            self.counts = {}


class _Connection(_RequestCore):
    """One client connection over a stream; see the module docstring."""

    def __init__(self, bookie: Bookie, stream: trio.abc.Stream) -> None:
        super().__init__(bookie)
        self.stream = stream
        self.decoder = FrameDecoder(bookie.config.max_frame_size)
        self.out: list[bytes] = []
        self.out_release: list[tuple[int, int]] = []  # (requests, bytes) freed once sent
        self.has_out = trio.Event()
        inner = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
        self.peer = _peer_of(inner) if isinstance(inner, trio.SocketStream) else "?"
        # requests that came in BookKeeper's v2 protocol, by the txn id given them here:
        # (version, v2 op, ledger id, entry id) to answer them in v2 (at most max_n in flight)
        self.v2: dict[int, tuple[int, int, int, int]] = {}
        self.v2_txn = 2**64 - 1  # counts down: far from the ids v3 clients count up from

    async def run(self) -> None:
        self.metrics.connections.inc()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                nursery.start_soon(self._acker)
                nursery.start_soon(self._read_worker)
                await self._reader(nursery)
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            log.debug("connection %s ended: %s", self.peer, group.exceptions[0])
        except* Exception:  # a bug must not take the whole server down: log it, drop the connection
            log.exception("connection %s failed", self.peer)
        finally:
            self._abandon()
            self.metrics.connections.dec()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    def _emit(self, response: pb.Response, request_size: int) -> None:
        data = self._encode_v2(response) if self.v2 and response.header.txnId in self.v2 else encode_response(response)
        self.nbytes += len(data)
        self.out.append(data)
        self.out_release.append((1, request_size + len(data)))
        self.has_out.set()

    def _answer_adds(self, answers: list[tuple[int, int, int, int]], request_bytes: int) -> None:
        encode = self._encode_add
        out = [encode(txn, status, ledger_id, entry_id) for txn, status, ledger_id, entry_id in answers]
        sent = sum(map(len, out))
        self.nbytes += sent
        self.out.extend(out)
        self.out_release.append((len(out), request_bytes + sent))
        self.has_out.set()

    # ------------------------------------------------------------------ BookKeeper's v2 protocol

    def _from_v2(self, payload: bytes) -> pb.Request:
        """A v2 packet as the v3 request the handlers serve, under a txn id of its own; its
        response goes back in v2 (`_encode_v2`). MalformedFrame for what v2 cannot carry."""
        v2 = parse_v2_request(payload)
        txn = self.v2_txn
        self.v2_txn -= 1
        priority = 1 if v2.flags & V2Flag.HIGH_PRIORITY else 0
        if v2.op == V2Op.ADD_ENTRY:
            request = add_request(
                txn,
                v2.ledger_id,
                v2.entry_id,
                v2.master_key,
                v2.body,
                recovery=bool(v2.flags & V2Flag.RECOVERY_ADD),
                priority=priority,
            )
        else:
            fence = bool(v2.flags & V2Flag.DO_FENCING)
            if fence and not v2.master_key:
                raise MalformedFrame("a v2 fencing read of version < 2 carries no master key")
            request = read_request(
                txn,
                v2.ledger_id,
                v2.entry_id,
                fence=fence,
                master_key=v2.master_key if fence else None,
                priority=priority,
            )
        self.v2[txn] = (v2.version, int(v2.op), v2.ledger_id, v2.entry_id)
        return request

    def _encode_v2(self, response: pb.Response) -> bytes:
        version, op, ledger_id, entry_id = self.v2.pop(response.header.txnId)
        status, body = response.status, b""
        if response.HasField("readResponse"):
            status = response.readResponse.status
            if status == StatusCode.EOK:
                body = response.readResponse.body
        elif response.HasField("addResponse"):
            status = response.addResponse.status
        return encode_v2_response(version, op, v2_status(status), ledger_id, entry_id, body)

    def _encode_add(self, txn: int, status: int, ledger_id: int, entry_id: int) -> bytes:
        if self.v2 and txn in self.v2:
            version, op, _, _ = self.v2.pop(txn)
            return encode_v2_response(version, op, v2_status(status), ledger_id, entry_id)
        return encode_add_response(txn, status, ledger_id, entry_id)

    # ------------------------------------------------------------------ reader

    async def _reader(self, nursery: trio.Nursery) -> None:
        decoder = self.decoder
        while True:
            data = await self.stream.receive_some(_RECEIVE_SIZE)
            if not data:
                return
            t0 = time.perf_counter()  # one clock read per receive: requests of a chunk share it
            try:
                decoder.feed(data)
                while (payload := decoder.next_frame()) is not None:
                    # v3 protobuf, or BookKeeper's v2 packets (its clients with useV2WireProtocol)
                    request = self._from_v2(payload) if is_v2_payload(payload) else parse_request(payload)
                    await self._serve_request(request, size=len(payload) + 4, nursery=nursery, t0=t0)
            except FrameError as exc:
                self.metrics.malformed_frames.inc()
                log.warning("closing connection %s: %s", self.peer, exc)
                return

    # ------------------------------------------------------------------ writer

    async def _writer(self) -> None:
        stream = self.stream
        while True:
            if not self.out:
                self.has_out = trio.Event()
                await self.has_out.wait()
                continue
            data = b"".join(self.out) if len(self.out) > 1 else self.out[0]
            released = self.out_release
            self.out, self.out_release = [], []
            self._flush_metrics()
            await stream.send_all(data)
            self._release(sum(n for n, _ in released), sum(b for _, b in released))


class LocalConnection(_RequestCore):
    """A client in the bookie's own process, served without a socket: the same request handling
    as a network connection (`serve_bookie`: arrival order, adds acknowledged only once their
    journal record is synced, fencing, LAC, long polls, recovery reads on the high-priority path,
    the in-flight budget, the same metrics), but requests come as unframed ``Request`` payloads
    through `submit`, or as an add's fields through `submit_add`, and answers leave as calls: an
    add's as ``deliver_add(txn, status, ledger_id, entry_id)`` whichever way it came, every other
    answer as a ``Response`` message through ``deliver``. No response is encoded, no frame is
    decoded, and an add given by its fields is never encoded nor parsed either.

    Guarantees: `submit` and `submit_add` never block and never call back; they queue the
    request, and `run` takes requests in the order submitted (both kinds in one queue), at most
    ``max_in_flight_requests`` / ``max_in_flight_bytes`` of them in progress (a request past the
    budget waits in the queue: the submitter bounds how many it has outstanding, as a network
    client bounds its pending table). Each submitted request gets exactly one answer, or one
    ``refuse(txn, reason)`` when its payload is not a ``Request``, called from `run`'s tasks,
    unless `run` ends first (cancelled, or the bookie stopped): requests then left unanswered get
    neither, and the client treats them as a lost connection. A callback must not block; it may
    call `submit`. There is no TLS and no certificate-role check: the client is the process.
    """

    def __init__(
        self,
        bookie: Bookie,
        deliver: Callable[[pb.Response], None],
        refuse: Callable[[int, str], None],
        deliver_add: Callable[[int, int, int, int], None],
    ) -> None:
        super().__init__(bookie)
        self.peer = "in-process"
        self._deliver = deliver
        self._deliver_add = deliver_add
        self._refuse = refuse
        self._inbox: deque[tuple[int, bytes | memoryview] | tuple[int, int, int, bytes, bytes, bool]] = deque()
        self._has_inbox = trio.Event()
        self._running = False

    def submit(self, txn_id: int, payload: bytes | memoryview) -> None:
        """Queue a request (``payload``: an encoded ``Request`` whose txnId is ``txn_id``, without
        the frame's length prefix)."""
        self._inbox.append((txn_id, payload))
        if not self._has_inbox.is_set():
            self._has_inbox.set()

    def submit_add(
        self, txn_id: int, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool
    ) -> None:
        """Queue an add given by the fields of its ADD_ENTRY request (``body``: the digest-framed
        entry; ``recovery``: the RECOVERY_ADD flag), served as that request would be. It counts
        against the byte budget as the frame it stands for would."""
        self._inbox.append((txn_id, ledger_id, entry_id, master_key, body, recovery))
        if not self._has_inbox.is_set():
            self._has_inbox.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve submitted requests until cancelled; on the way out, adds not yet answered are
        abandoned and the budget is given back."""
        self.metrics.connections.inc()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._acker)
                nursery.start_soon(self._read_worker)
                task_status.started()
                await self._take(nursery)
        finally:
            self._abandon()
            self._inbox.clear()
            self.metrics.connections.dec()

    async def _take(self, nursery: trio.Nursery) -> None:
        inbox = self._inbox
        while True:
            if not inbox:
                self._idle()
                self._has_inbox = trio.Event()
                await self._has_inbox.wait()
                continue
            t0 = time.perf_counter()  # one clock read per wake-up, as a network read shares one
            while inbox:
                item = inbox.popleft()
                if len(item) == 6:
                    txn, ledger_id, entry_id, key, body, recovery = item
                    size = len(body) + len(key) + _ADD_FRAME_FIELDS
                    await self._serve_add(txn, ledger_id, entry_id, key, body, recovery, size, t0)
                    continue
                txn, payload = item
                try:
                    request = parse_request(payload)
                except FrameError as exc:
                    self.metrics.malformed_frames.inc()
                    self._refuse(txn, str(exc))
                    continue
                await self._serve_request(request, len(payload) + 4, nursery, t0)

    def _emit(self, response: pb.Response, request_size: int) -> None:
        self._release(1, request_size)
        self._call(response)

    def _answer_adds(self, answers: list[tuple[int, int, int, int]], request_bytes: int) -> None:
        self._release(len(answers), request_bytes)
        deliver_add = self._deliver_add
        for txn, status, ledger_id, entry_id in answers:
            try:
                deliver_add(txn, status, ledger_id, entry_id)
            except Exception:  # a client callback bug must not stop the bookie's side
                log.exception("in-process client: add answer callback failed")

    def _respond_add(self, txn: int, status: int, ledger_id: int, entry_id: int, size: int) -> None:
        key = (_ADD, status)  # counted as `_respond` counts every other answer
        self.counts[key] = self.counts.get(key, 0) + 1
        self._answer_adds([(txn, status, ledger_id, entry_id)], size)

    def _call(self, response: pb.Response) -> None:
        try:
            self._deliver(response)
        except Exception:  # a client callback bug must not stop the bookie's side
            log.exception("in-process client: response callback failed")

    def _idle(self) -> None:
        self._flush_metrics()


_OTHER: dict[int, str] = {
    OperationType.READ_LAC: "readLacRequest",
    OperationType.WRITE_LAC: "writeLacRequest",
    OperationType.FORCE_LEDGER: "forceLedgerRequest",
    OperationType.GET_BOOKIE_INFO: "getBookieInfoRequest",
}


def _name_of(enum_type: type, value: int) -> str:
    try:
        return enum_type(value).name
    except ValueError:
        return str(value)


_op_name: Callable[[int], str] = lambda op: _name_of(OperationType, op)  # noqa: E731
_status_name: Callable[[int], str] = lambda status: _name_of(StatusCode, status)  # noqa: E731
