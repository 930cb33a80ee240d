"""The writer's ledger handle (BookKeeper's ``LedgerHandle``): pipelined adds in id order, the
writer's LAC, bounded in-flight adds, ensemble change on a bookie failure, fencing.

Handle states (``HandleState``):

* Rule 1: a handle starts OPEN: adds are accepted (``add_entry`` / ``append``).
* Rule 2: OPEN -> CLOSING when ``close`` starts: new adds raise ``LedgerClosed``; pending adds
  finish. CLOSING -> CLOSED when the metadata says CLOSED (or close gave up with an error).
* Rule 3: OPEN / CLOSING -> FAILED when a bookie answers EFENCED or an ensemble change finds the
  metadata no longer OPEN (``LedgerFenced``), or no replacement bookie exists
  (``NotEnoughBookies``): every pending add fails with that error and so does every later add.
  Entries acknowledged before stay acknowledged (the LAC does not move back).
* Rule 4: CLOSED and FAILED are final.

Ensemble change (BookKeeper's ``handleBookieFailure``): a bookie that fails an add (error,
dropped connection, no answer within ``add_entry_timeout_s``, judged only once answers that
arrived while the client's own loop was stalled have been read) is replaced in the current
ensemble. While the change is in progress, completions are held (so the LAC, and the new
segment's first entry LAC + 1, stay put) and nothing is sent to the failed index. The new
segment is compare-and-set into the metadata; then every pending add whose write set contains a
replaced index forgets that index's ack and is re-sent to the replacement. Failures reported
during a change are handled by another round. A handle opened by recovery writes with
RECOVERY_ADD and expects the metadata to stay IN_RECOVERY instead of OPEN.

With ``explicit_lac_interval_ms > 0`` an idle handle also publishes its LAC with WRITE_LAC (see
``bk_client._explicit_lac``). ``append`` yields to the scheduler only every ``_APPEND_BATCH``
adds while the window has room, so each connection writes many adds' frames per ``send_all``.

Operations on a handle hold an explicit reference to it (``LedgerCloseOp`` in ``bk_client._close``,
``ExplicitLacFlushPolicy`` in ``bk_client._explicit_lac``, recovery in ``bk_client._recovery``)
and use only its public methods (``append``, ``wait_idle``, the ``ReadHandle`` properties) and
the section "for the handle's operations" below: read-only views of its state and three
transitions (``begin_close``, ``record_closed``, ``finish_close``) whose guarantees are stated
there. Every other change of the handle's state happens inside this class.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence

import trio

from protocols.bookkeeper import (
    MAX_ENTRY_HEADER_SIZE,
    AddRequestEncoder,
    LedgerMetadata,
    LedgerState,
    StatusCode,
    digest_for,
    max_add_payload,
)

from ._add_op import AddState, PendingAdd, clone_error
from ._close import LedgerCloseOp
from ._context import ClientContext, master_key
from ._errors import (
    BKError,
    ClientClosed,
    EntryTooLarge,
    LedgerClosed,
    LedgerFenced,
    MetadataVersionConflict,
    NoSuchEntry,
    NoSuchLedger,
    NotEnoughBookies,
    Timeout,
    Unauthorized,
    error_for_bookie_status,
)
from ._explicit_lac import ExplicitLacFlushPolicy
from ._quorum import DistributionSchedule
from ._read_handle import read_entries  # the read path is shared with read handles
from ._transport import AddRequest
from .api import LedgerEntry

__all__ = ["HandleState", "LedgerWriteHandle"]

_EOK = int(StatusCode.EOK)
_EFENCED = int(StatusCode.EFENCED)
_EUA = int(StatusCode.EUA)
_APPEND_BATCH = 64  # appends between schedule points while the in-flight window has room


class HandleState(enum.Enum):
    """Lifecycle of a write handle (rules in the module docstring)."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class LedgerWriteHandle:
    """A ledger open for writing by this client (implements ``bk_client.api.WriteHandle``).

    Built by ``BookKeeper.create_ledger`` (or by recovery); its background tasks (add timeout
    monitor, ensemble changes) run in the client's nursery and end when the handle closes or fails.
    """

    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        metadata: LedgerMetadata,
        version: int,
        password: bytes,
        *,
        recovery: bool = False,
        last_add_confirmed: int = -1,
        length: int = 0,
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._metadata = metadata
        self._version = version
        self._schedule = DistributionSchedule(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
        self._ensemble: tuple[str, ...] = metadata.last_segment.ensemble
        self._master_key = master_key(password)
        self._digest = digest_for(metadata.digest_type, password)  # the ledger's, from its metadata
        self._recovery = recovery
        self._expected_state = LedgerState.IN_RECOVERY if recovery else LedgerState.OPEN
        self._state = HandleState.OPEN
        self._error: BKError | None = None
        self._lac = last_add_confirmed
        self._length = length
        self._next_entry_id = last_add_confirmed + 1
        self._submitted_length = length
        self._pending: deque[PendingAdd] = deque()  # admitted, not yet DONE, in id order
        self._waiting: deque[PendingAdd] = deque()  # not yet admitted, in id order
        self._in_flight = 0
        self._in_flight_bytes = 0
        self._failed_bookies: dict[int, str] = {}  # index -> bookie awaiting replacement
        self._ever_failed: set[str] = set()
        self._changing = False
        self._change_done = trio.Event()
        self._change_done.set()
        self._lac_event: trio.Event | None = None
        self._monitor_scope = trio.CancelScope()
        self._appends_unyielded = 0
        self._add_encoder = AddRequestEncoder(ledger_id, self._master_key, recovery=recovery)
        self._max_entry_size = max_add_payload(
            ctx.config.max_frame_size, len(self._master_key), MAX_ENTRY_HEADER_SIZE
        )  # rule 7: the client's bound, any digest
        self._add_latency = ctx.metrics.add_latency
        # what the bookies were told of the LAC by adds (the explicit-LAC policy reads both)
        self._piggybacked_lac = -1  # LAC carried by the last add sent
        self._last_sent_at = trio.current_time()
        self._lac_flush = ExplicitLacFlushPolicy(self, ctx, self._master_key, self._digest)
        ctx.spawn(self._monitor)
        interval_ms = ctx.config.explicit_lac_interval_ms
        if interval_ms > 0 and not recovery:
            ctx.spawn(self._lac_flush.run, interval_ms / 1000)

    # ---- ReadHandle ------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self._ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger metadata as this handle last wrote or read it."""
        return self._metadata

    @property
    def last_add_confirmed(self) -> int:
        """The last entry acknowledged to the caller (-1 when none)."""
        return self._lac

    @property
    def is_closed(self) -> bool:
        """True once the metadata says CLOSED (after ``close``)."""
        return self._metadata.state is LedgerState.CLOSED

    @property
    def length(self) -> int:
        """Payload bytes of the acknowledged entries."""
        return self._length

    async def read(self, first: int, last: int) -> Sequence[LedgerEntry]:
        """Entries ``first..last`` (acknowledged ones only, else ``NoSuchEntry``); verified digests."""
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        if last > self._lac:
            raise NoSuchEntry(self._ledger_id, last)
        return await read_entries(self._ctx, self._ledger_id, self._metadata, first, last)

    async def read_last_add_confirmed(self) -> int:
        """The writer knows its LAC: returns it without asking the bookies."""
        await trio.lowlevel.checkpoint()
        return self._lac

    async def wait_for_lac(self, previous: int, timeout: float) -> int:  # noqa: ASYNC109 - bk_client.api.ReadHandle's signature
        """Return once an add above ``previous`` is acknowledged, or after ``timeout`` seconds."""
        with trio.move_on_after(timeout):
            while self._lac <= previous and self._state in (HandleState.OPEN, HandleState.CLOSING):
                if self._lac_event is None:
                    self._lac_event = trio.Event()
                await self._lac_event.wait()
        await trio.lowlevel.checkpoint()
        return self._lac

    # ---- adds ------------------------------------------------------------------------------

    async def add_entry(self, data: bytes) -> int:
        """Append ``data``; return its entry id once Qa bookies have it and every earlier entry
        was acknowledged. Raises ``LedgerClosed`` after close, ``LedgerFenced`` once a new owner
        recovered the ledger, ``NotEnoughBookies`` when no replacement bookie exists, and after
        any failure the same kind of error for every later add."""
        op = self._submit(data)
        return await op.result()

    async def append(self, data: bytes) -> PendingAdd:
        """Start an add and return once it is sent (waiting while the in-flight bound is full);
        ``await pending.result()`` gives its entry id. Lets one task keep many adds in flight
        without a task per add. Raises like ``add_entry`` when the handle cannot accept adds."""
        op = self._submit(data)
        if op.state is AddState.WAITING:
            self._appends_unyielded = 0
            await op.wait_admitted()
        else:
            # A schedule point that cannot cancel (the add is already out), but only every
            # _APPEND_BATCH appends: yielding after each one let the connection writers wake
            # per frame and send one tiny frame per syscall. Batched, each connection sends
            # the frames of many adds in one send_all, and the answers (and so the LAC the next
            # adds carry) are still processed between batches.
            self._appends_unyielded += 1
            if self._appends_unyielded >= _APPEND_BATCH:
                self._appends_unyielded = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
        return op

    def _check_writable(self) -> None:
        if self._state is HandleState.OPEN:
            return
        if self._state is HandleState.FAILED and self._error is not None:
            raise clone_error(self._error)
        raise LedgerClosed(ledger_id=self._ledger_id)

    def _submit(self, data: bytes) -> PendingAdd:
        self._check_writable()
        if len(data) > self._max_entry_size:
            raise EntryTooLarge(
                f"entry of {len(data)} bytes exceeds the largest add the bookie frame "
                f"limit allows ({self._max_entry_size} bytes; nettyMaxFrameSizeBytes "
                f"{self._ctx.config.max_frame_size})",
                ledger_id=self._ledger_id,
            )
        payload = bytes(data)
        entry_id = self._next_entry_id
        self._next_entry_id += 1
        self._submitted_length += len(payload)
        op = PendingAdd(self, entry_id, payload, self._submitted_length, self._schedule.ack_set(entry_id))
        if self._waiting or not self._has_room(op.size):
            self._waiting.append(op)
        else:
            self._admit(op)
        return op

    def _has_room(self, size: int) -> bool:
        if self._in_flight == 0:
            return True  # an entry larger than the byte bound still goes, alone
        cfg = self._ctx.config
        return self._in_flight < cfg.max_in_flight_adds and self._in_flight_bytes + size <= cfg.max_in_flight_bytes

    def _admit(self, op: PendingAdd) -> None:
        self._in_flight += 1
        self._in_flight_bytes += op.size
        self._pending.append(op)
        op.state = AddState.SENT
        op.admitted()
        self._send(op, op.ack_set.write_set)

    def _admit_waiting(self) -> None:
        waiting = self._waiting
        while waiting and self._has_room(waiting[0].size):
            self._admit(waiting.popleft())

    def _send(self, op: PendingAdd, indexes: Sequence[int]) -> None:
        if op.body is None:
            op.body = self._digest.encode_entry(self._ledger_id, op.entry_id, self._lac, op.length, op.payload)
            self._piggybacked_lac = self._lac
        pool = self._ctx.pool
        # One request for the whole write set: a network channel encodes it once, by hand, never
        # through a protobuf message kept across adds (upb keeps every bytes value assigned to a
        # message until the message dies, see protocols.bookkeeper); an in-process one never does.
        add = AddRequest(
            pool.next_txn(), self._ledger_id, op.entry_id, self._master_key, op.body, self._recovery, self._add_encoder
        )
        op.sent_at = self._last_sent_at = trio.current_time()
        failed = self._failed_bookies
        on_answer = LedgerWriteHandle._on_add_answer
        for index in indexes:
            if index in failed:
                continue  # re-sent to the replacement once the ensemble change is written
            bookie = self._ensemble[index]
            try:
                pool.get(bookie).send_add(add, on_answer, (op, index, bookie))
            except BKError as exc:
                self._bookie_failed(index, bookie, exc, "unavailable")

    def _complete_ready(self) -> None:
        """Rule 4 of the add states: complete the acknowledged prefix of the pending adds."""
        if self._changing or self._state is HandleState.FAILED:
            return
        pending = self._pending
        if not pending or pending[0].state is not AddState.ACKED:
            return
        now = trio.current_time()
        latencies: list[float] = []
        while pending and pending[0].state is AddState.ACKED:
            op = pending.popleft()
            self._lac = op.entry_id
            self._length = op.length
            self._in_flight -= 1
            self._in_flight_bytes -= op.size
            latencies.append(now - op.started)
            op.completed_at = now
            op.complete()
        self._add_latency.observe_many(latencies)
        if self._lac_event is not None:
            self._lac_event.set()
            self._lac_event = None
        if self._waiting:
            self._admit_waiting()

    # ---- bookie answers ----------------------------------------------------------------------

    @staticmethod
    def _on_add_answer(arg: tuple[PendingAdd, int, str], status: int | None, error: BKError | None) -> None:
        """A bookie's answer to an add (``arg``: the add, the ensemble index, the bookie; ``status``
        the answer's status code), called on its channel's task: ack (rules 3, 4 of
        ``bk_client._add_op``), fail the handle (fenced, unauthorized, client closed) or replace
        the bookie. An answer from a bookie that was (or is being) replaced, or to an add already
        finished, is ignored."""
        op, index, bookie = arg
        if op.state is AddState.DONE or op.state is AddState.FAILED:
            return
        handle = op.handle
        if handle._ensemble[index] != bookie or index in handle._failed_bookies:
            return  # an answer from a bookie that was (or is being) replaced
        if error is not None:
            if isinstance(error, ClientClosed):
                handle._fail(error)
            else:
                handle._bookie_failed(index, bookie, error, "connection")
            return
        assert status is not None
        if status == _EOK:
            if op.ack_set.ack(index) and op.state is AddState.SENT:
                op.state = AddState.ACKED
                if handle._pending and handle._pending[0] is op:
                    handle._complete_ready()
        elif status == _EFENCED:
            handle._fail(
                LedgerFenced(
                    f"ledger {handle.ledger_id} is fenced (bookie {bookie} refused entry "
                    f"{op.entry_id}): a new owner is recovering it",
                    ledger_id=handle.ledger_id,
                )
            )
        elif status == _EUA:
            handle._fail(
                Unauthorized(
                    f"bookie {bookie} refused the master key of ledger {handle.ledger_id}", ledger_id=handle.ledger_id
                )
            )
        else:
            err = error_for_bookie_status(status, ledger_id=handle.ledger_id, entry_id=op.entry_id, bookie_id=bookie)
            handle._bookie_failed(index, bookie, err or BKError("unexpected add answer"), f"status_{status}")

    # ---- failures --------------------------------------------------------------------------

    def _fail(self, error: BKError) -> None:
        """Rule 3: fail the handle and every add not yet acknowledged."""
        if self._state is HandleState.FAILED or self._state is HandleState.CLOSED:
            return
        self._state = HandleState.FAILED
        self._error = error
        ops = list(self._pending) + list(self._waiting)
        self._pending.clear()
        self._waiting.clear()
        self._in_flight = self._in_flight_bytes = 0
        for op in ops:
            op.fail(error)
        if ops:
            self._ctx.metrics.add_failed.inc(len(ops))
        self._monitor_scope.cancel()
        self._lac_flush.stop()
        if self._lac_event is not None:
            self._lac_event.set()
            self._lac_event = None

    def _bookie_failed(self, index: int, bookie: str, error: BKError, reason: str) -> None:
        if self._state is HandleState.FAILED or self._state is HandleState.CLOSED:
            return
        if self._ensemble[index] != bookie or index in self._failed_bookies:
            return
        self._failed_bookies[index] = bookie
        self._ever_failed.add(bookie)
        self._ctx.quarantine.add(bookie)
        self._ctx.metrics.bookie_failures.labels(reason=reason).inc()
        if not self._changing:
            try:
                self._ctx.spawn(self._ensemble_change_loop)
            except ClientClosed as exc:
                self._fail(exc)
                return
            self._changing = True
            self._change_done = trio.Event()

    async def _monitor(self) -> None:
        """Treat bookies that leave an add unanswered for ``add_entry_timeout_s`` as failed.

        A tick that wakes more than a tick late (the process was paused or the loop blocked)
        judges nothing; the next one does, after the connection readers had their turn, so an
        answer that arrived during the stall counts instead of failing its bookie."""
        timeout = self._ctx.config.add_entry_timeout_s
        tick = min(1.0, timeout / 4)
        with self._monitor_scope:
            due = trio.current_time() + tick
            while self._state is HandleState.OPEN or self._state is HandleState.CLOSING:
                await trio.sleep_until(due)
                now = trio.current_time()
                stalled = now - due > tick
                due = now + tick
                if stalled:
                    # The loop did not run for a while (process paused, loop blocked): answers
                    # that arrived meanwhile wait unread in the sockets, and the readers are in
                    # this same scheduler batch, maybe after us. Judging now would fail bookies
                    # that answered; judge on the next tick, once the readers have run.
                    continue
                deadline = now - timeout
                for op in list(self._pending):
                    if op.state is not AddState.SENT or op.sent_at > deadline:
                        continue
                    answered = set(op.ack_set.acked) | set(op.ack_set.failed)
                    for index in op.ack_set.write_set:
                        if index not in answered:
                            self._bookie_failed(
                                index,
                                self._ensemble[index],
                                Timeout(
                                    f"bookie {self._ensemble[index]} did not answer add "
                                    f"{op.entry_id} of ledger {self._ledger_id} in {timeout}s"
                                ),
                                "timeout",
                            )

    # ---- ensemble change -------------------------------------------------------------------

    async def _ensemble_change_loop(self) -> None:
        try:
            while self._failed_bookies and self._state in (HandleState.OPEN, HandleState.CLOSING):
                failed = dict(self._failed_bookies)
                try:
                    await self._write_new_ensemble(failed)
                except BKError as exc:
                    self._fail(exc)
                    return
                if self._state is HandleState.FAILED:
                    return
                for index in failed:
                    del self._failed_bookies[index]
                for op in list(self._pending):
                    replaced = [i for i in op.ack_set.write_set if i in failed]
                    if not replaced:
                        continue
                    for i in replaced:
                        op.ack_set.remove(i)
                    if op.state is AddState.ACKED and not op.ack_set.complete:
                        op.state = AddState.SENT
                    self._send(op, replaced)
        finally:
            self._changing = False
            self._change_done.set()
            self._complete_ready()

    async def _write_new_ensemble(self, failed: dict[int, str]) -> None:
        """Compare-and-set a segment replacing ``failed`` from entry LAC + 1 (BookKeeper's rule:
        the first entry not yet acknowledged). Raises ``LedgerFenced`` when the metadata left the
        expected state, ``NotEnoughBookies``, ``MetadataStoreError``."""
        ctx = self._ctx
        ledgers = ctx.ledgers
        for _ in range(ctx.config.ensemble_change_retries):
            available = await ledgers.list_bookies()
            ensemble = list(self._ensemble)
            try:
                for index in failed:
                    ensemble[index] = ctx.placement.replace_bookie(
                        ensemble, index, available, exclude=self._ever_failed | ctx.quarantine.active()
                    )
            except NotEnoughBookies:
                # a fenced writer should hear that it is fenced, not that bookies are missing
                meta, _ = await ledgers.read(self._ledger_id)
                self._check_metadata(meta)
                raise
            new_meta = self._metadata.with_segment(self._lac + 1, tuple(ensemble))
            try:
                version = await ledgers.write(self._ledger_id, new_meta, self._version)
            except MetadataVersionConflict:
                meta, version = await ledgers.read(self._ledger_id)
                self._check_metadata(meta)
                self._metadata, self._version = meta, version
                continue
            except NoSuchLedger as exc:
                raise LedgerFenced(
                    f"ledger {self._ledger_id} was deleted while being written", ledger_id=self._ledger_id
                ) from exc
            if self._state is HandleState.FAILED:
                return
            self._metadata, self._version = new_meta, version
            self._ensemble = tuple(ensemble)
            ctx.metrics.ensemble_changes.inc()
            return
        raise BKError(
            f"ensemble change of ledger {self._ledger_id} lost {ctx.config.ensemble_change_retries} "
            f"metadata races in a row",
            ledger_id=self._ledger_id,
        )

    def _check_metadata(self, meta: LedgerMetadata) -> None:
        """The re-read metadata must still be ours to change, else ``LedgerFenced``."""
        if meta.state is not self._expected_state:
            raise LedgerFenced(
                f"ledger {self._ledger_id} is {meta.state.name} in the metadata: another client recovered or closed it",
                ledger_id=self._ledger_id,
            )
        if meta.last_segment.ensemble != self._ensemble:
            raise LedgerFenced(
                f"ledger {self._ledger_id}'s last ensemble was changed by another client", ledger_id=self._ledger_id
            )

    # ---- close -----------------------------------------------------------------------------

    async def wait_idle(self) -> None:
        """Return once every add submitted so far finished (acknowledged or failed) and no
        ensemble change is running."""
        while True:
            last = self._waiting[-1] if self._waiting else (self._pending[-1] if self._pending else None)
            if last is not None:
                await last.wait_finished()
                continue
            if self._changing:
                await self._change_done.wait()
                continue
            await trio.lowlevel.checkpoint()
            if not self._pending and not self._waiting and not self._changing:
                return

    async def close(self) -> None:
        """Wait for pending adds, then mark the ledger CLOSED at its last acknowledged entry
        (``LedgerCloseOp``; see ``bk_client._close`` for the conflict rules). A handle already
        fenced is released without touching the metadata (the new owner closes it). Idempotent
        once CLOSED. Raises ``LedgerFenced``, ``NoSuchLedger``, ``MetadataStoreError``."""
        await LedgerCloseOp(self, self._ctx.ledgers).run()

    # ---- for the handle's operations (close, explicit LAC, recovery) ------------------------
    # Not part of ``bk_client.api.WriteHandle``: the operation objects of this package drive the
    # handle through these, and nothing else of it.

    @property
    def state(self) -> HandleState:
        """Where the handle is in its lifecycle (rules 1-4 of the module docstring)."""
        return self._state

    @property
    def accepting_adds(self) -> bool:
        """True while OPEN (rule 1): adds are accepted. False from the moment close starts."""
        return self._state is HandleState.OPEN

    @property
    def error(self) -> BKError | None:
        """The error that failed the handle (rule 3); None unless the handle is FAILED."""
        return self._error

    @property
    def metadata_version(self) -> int:
        """The store version of ``metadata``: the next metadata change this handle's ledger gets
        (ensemble change, close) is compared-and-set against it."""
        return self._version

    @property
    def ensemble(self) -> tuple[str, ...]:
        """The bookies adds are written to now: the last segment's ensemble as this handle last
        wrote it (replacements included once their ensemble change is in the metadata)."""
        return self._ensemble

    @property
    def ensemble_changing(self) -> bool:
        """True while an ensemble change runs or a failed bookie awaits its replacement; adds
        are not completed (the LAC stays put) and nothing is sent to a failed index meanwhile."""
        return self._changing or bool(self._failed_bookies)

    @property
    def piggybacked_lac(self) -> int:
        """The LAC carried by the last add sent (-1 before the first): what the bookies of its
        write set learnt of the LAC without an explicit WRITE_LAC."""
        return self._piggybacked_lac

    @property
    def last_add_sent_at(self) -> float:
        """Trio clock time of the last add sent or re-sent (the handle's creation before any)."""
        return self._last_sent_at

    @property
    def explicit_lac(self) -> ExplicitLacFlushPolicy:
        """This handle's explicit-LAC policy (``bk_client._explicit_lac``). Its loop runs only with
        ``explicit_lac_interval_ms > 0`` and never for a recovery handle; ``flush()`` sends a round
        by hand under the same rules."""
        return self._lac_flush

    def begin_close(self) -> bool:
        """Rule 2: OPEN -> CLOSING; new adds now raise ``LedgerClosed``, pending adds finish.

        Returns False when the handle is already CLOSED (a close has nothing left to do), True
        otherwise (CLOSING and FAILED handles are left as they are)."""
        if self._state is HandleState.CLOSED:
            return False
        if self._state is HandleState.OPEN:
            self._state = HandleState.CLOSING
        return True

    def record_closed(self, metadata: LedgerMetadata, version: int) -> None:
        """Adopt ``metadata`` at ``version``, which a close wrote (or found) in the store: it
        must say CLOSED (else ``ValueError``), so ``is_closed`` becomes True. The caller
        guarantees that the store held exactly this metadata at this version."""
        if metadata.state is not LedgerState.CLOSED:
            raise ValueError(
                f"ledger {self._ledger_id}: record_closed needs CLOSED metadata, got {metadata.state.name}"
            )
        self._metadata, self._version = metadata, version

    def finish_close(self) -> None:
        """Rule 4 bookkeeping once a close (or recovery) ended, whatever its outcome: the handle
        is CLOSED (a FAILED one stays FAILED), its add-timeout monitor and explicit-LAC loop stop
        and ``wait_for_lac`` callers wake. Idempotent."""
        if self._state is not HandleState.FAILED:
            self._state = HandleState.CLOSED
        self._monitor_scope.cancel()
        self._lac_flush.stop()
        if self._lac_event is not None:
            self._lac_event.set()
            self._lac_event = None

    # ---- snapshot ----------------------------------------------------------------------------

    def statistics(self) -> dict[str, float]:
        """A snapshot for logs and tests."""
        return {
            "lac": self._lac,
            "length": self._length,
            "in_flight": self._in_flight,
            "in_flight_bytes": self._in_flight_bytes,
            "waiting": len(self._waiting),
            "segments": len(self._metadata.segments),
            "changing": 1.0 if self._changing else 0.0,
            "next_entry_id": self._next_entry_id,
        }
