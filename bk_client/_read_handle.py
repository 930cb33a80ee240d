"""Reading entries (BookKeeper's ``PendingReadOp``) and the read-only ledger handle.

``read_entries(first, last)``: each entry is asked from the first replica of its write set (in
the ensemble of its segment; bookies whose connection is in backoff are tried last). Rules:

* Rule 1 (failover): an error answer (no entry, I/O error, bad digest, lost connection) sends the
  read to the next replica at once.
* Rule 2 (speculative read): an entry still unanswered after ``speculative_read_timeout_s`` is
  also asked from the next replica; the first good answer wins, the others are dropped.
* Rule 3 (timeout): a replica silent for ``read_entry_timeout_s`` counts as failed.
* Rule 4: an entry fails when every replica failed: ``NoSuchEntry`` if they all said so,
  ``DigestMismatch`` if one returned a corrupt copy, else ``ReadError``; the whole read fails.
* At most ``max_read_window`` entries are being fetched at once; answers are verified against
  their digest (ledger id, entry id, CRC32C) before they are returned.

Read handles learn the LAC from the bookies (``read_last_confirmed``) and follow a ledger being
written with long-poll reads (ENTRY_PIGGYBACK with the previous LAC); a ledger closed in the
metadata has its final LAC there.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from protocols.bookkeeper import (
    DecodedEntry,
    EntryDigest,
    LedgerMetadata,
    LedgerState,
    StatusCode,
    bookie_protocol_pb2,
    digest_for,
    encode_request,
    read_request,
)
from protocols.bookkeeper import (
    DigestMismatch as ProtocolDigestMismatch,
)

from ._context import ClientContext
from ._deadline import stall_slack
from ._errors import BKError, DigestMismatch, NoSuchEntry, ReadError, Timeout
from ._quorum import DistributionSchedule
from ._read_lac import read_last_confirmed
from .api import LedgerEntry

__all__ = ["LedgerReadHandle", "ReadAnswer", "ReadOutcome", "read_answer", "read_decoded", "read_entries"]

Response = bookie_protocol_pb2.Response


class ReadOutcome(enum.Enum):
    """What one replica's answer to a READ_ENTRY says about the entry."""

    FOUND = "found"  # a copy that passed its digest check
    ABSENT = "absent"  # ENOENTRY / ENOLEDGER: this replica does not have it
    DIGEST_BAD = "digest_bad"  # a copy that failed its digest check
    ERROR = "error"  # no answer, a lost connection or another status


@dataclass(frozen=True, slots=True)
class ReadAnswer:
    """One replica's answer, classified: ``entry`` when FOUND, else ``detail`` says why not."""

    outcome: ReadOutcome
    entry: DecodedEntry | None = None
    detail: str = ""


def read_answer(
    response: Response | None, error: BKError | None, ledger_id: int, entry_id: int, digest: EntryDigest
) -> ReadAnswer:
    """Classify a replica's answer to a read of ``entry_id``, its copy verified with the ledger's
    ``digest`` (pure; shared by reads and recovery)."""
    if error is not None or response is None:
        return ReadAnswer(ReadOutcome.ERROR, detail=f"{error}")
    r = response.readResponse
    status = r.status if response.HasField("readResponse") else response.status
    if status == StatusCode.EOK and r.HasField("body"):
        try:
            return ReadAnswer(ReadOutcome.FOUND, digest.decode_entry(r.body, ledger_id, entry_id))
        except ProtocolDigestMismatch as exc:
            return ReadAnswer(ReadOutcome.DIGEST_BAD, detail=f"{exc}")
    if status in (StatusCode.ENOENTRY, StatusCode.ENOLEDGER):
        return ReadAnswer(ReadOutcome.ABSENT, detail=f"status {status}")
    return ReadAnswer(ReadOutcome.ERROR, detail=f"status {status}")


class _EntryRead:
    __slots__ = (
        "entry_id",
        "replicas",
        "next",
        "sent",
        "sent_at",
        "result",
        "no_entry",
        "digest_bad",
        "errors",
        "done",
    )

    def __init__(self, entry_id: int, replicas: list[str]) -> None:
        self.entry_id = entry_id
        self.replicas = replicas
        self.next = 0  # index of the next replica to ask
        self.sent: dict[str, int] = {}  # outstanding: bookie -> txn
        self.sent_at = 0.0
        self.result: DecodedEntry | None = None
        self.no_entry = 0
        self.digest_bad = False
        self.errors: list[str] = []
        self.done = False


class _Batch:
    def __init__(self, ctx: ClientContext, ledger_id: int, digest: EntryDigest, priority: int = 0) -> None:
        self.ctx = ctx
        self.ledger_id = ledger_id
        self.digest = digest
        self.priority = priority
        self.wake = trio.Event()
        self.failure: BKError | None = None
        self.finished = 0

    def ask_next(self, er: _EntryRead) -> bool:
        """Send ``er`` to its next replica; False when none is left."""
        pool = self.ctx.pool
        while er.next < len(er.replicas):
            bookie = er.replicas[er.next]
            er.next += 1
            txn = pool.next_txn()
            frame = encode_request(read_request(txn, self.ledger_id, er.entry_id, priority=self.priority))
            try:
                pool.get(bookie).send(txn, frame, _Batch.on_response, (self, er, bookie))
            except BKError as exc:
                er.errors.append(f"{bookie}: {exc}")
                continue
            er.sent[bookie] = txn
            er.sent_at = trio.current_time()
            return True
        return False

    def replica_failed(self, er: _EntryRead) -> None:
        if er.done:
            return
        if self.ask_next(er):
            self.ctx.metrics.read_failovers.inc()
            return
        if er.sent:
            return  # a speculative request is still out
        er.done = True
        lid, eid = self.ledger_id, er.entry_id
        detail = "; ".join(er.errors)
        if er.no_entry == len(er.replicas):
            self.failure = NoSuchEntry(lid, eid, f"no such entry: {eid} in ledger {lid} ({detail})")
        elif er.digest_bad:
            self.failure = DigestMismatch(
                f"entry {eid} of ledger {lid} failed its digest check ({detail})", ledger_id=lid
            )
        else:
            self.failure = ReadError(
                f"reading entry {eid} of ledger {lid} failed on every replica ({detail})", ledger_id=lid
            )
        self.wake.set()

    def forget_rest(self, er: _EntryRead) -> None:
        pool = self.ctx.pool
        for bookie, txn in er.sent.items():
            pool.get(bookie).forget(txn)
        er.sent.clear()

    @staticmethod
    def on_response(arg: tuple[_Batch, _EntryRead, str], response: Response | None, error: BKError | None) -> None:
        batch, er, bookie = arg
        er.sent.pop(bookie, None)
        if er.done:
            return
        answer = read_answer(response, error, batch.ledger_id, er.entry_id, batch.digest)
        if answer.outcome is ReadOutcome.FOUND:
            er.result = answer.entry
            er.done = True
            batch.forget_rest(er)
            batch.finished += 1
            batch.wake.set()
            return
        if answer.outcome is ReadOutcome.ABSENT:
            er.no_entry += 1
        elif answer.outcome is ReadOutcome.DIGEST_BAD:
            er.digest_bad = True
        er.errors.append(f"{bookie}: {answer.detail}")
        batch.replica_failed(er)


def _replicas(ctx: ClientContext, metadata: LedgerMetadata, schedule: DistributionSchedule, entry_id: int) -> list[str]:
    ensemble = metadata.ensemble_for(entry_id)
    order = [ensemble[i] for i in schedule.write_set(entry_id)]
    down = [b for b in order if ctx.pool.is_down(b)]
    if down:
        order = [b for b in order if b not in down] + down
    return order


async def read_decoded(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, first: int, last: int, *, priority: int = 0
) -> list[DecodedEntry]:
    """Verified entries ``first..last`` with their digest headers (module rules 1-4).
    ``priority`` > 0 marks the reads high priority (recovery: bookies serve them apart from
    ordinary reads)."""
    if first < 0 or last < first:
        raise ValueError(f"bad entry range {first}..{last}")
    cfg = ctx.config
    schedule = DistributionSchedule(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
    batch = _Batch(ctx, ledger_id, digest_for(metadata.digest_type, metadata.password), priority)
    spec = cfg.speculative_read_timeout_s
    tick = min(spec, cfg.read_entry_timeout_s) if spec > 0 else cfg.read_entry_timeout_s
    reads: list[_EntryRead] = []
    active: list[_EntryRead] = []
    next_id = first
    try:
        while batch.failure is None and batch.finished < last - first + 1:
            active = [er for er in active if not er.done]
            while next_id <= last and len(active) < cfg.max_read_window:
                er = _EntryRead(next_id, _replicas(ctx, metadata, schedule, next_id))
                next_id += 1
                reads.append(er)
                active.append(er)
                if not batch.ask_next(er):
                    batch.replica_failed(er)
            if batch.failure is not None or batch.finished == last - first + 1:
                break
            started = trio.current_time()
            with trio.move_on_after(tick):
                await batch.wake.wait()
            batch.wake = trio.Event()
            now = trio.current_time()
            if now - started > tick + stall_slack(tick):
                # The loop stalled (process paused, loop blocked): answers that came meanwhile
                # wait unread, their readers in this same batch. Judge on the next round.
                continue
            for er in active:
                if er.done:
                    continue
                waited = now - er.sent_at
                if waited >= cfg.read_entry_timeout_s:
                    for bookie, txn in list(er.sent.items()):
                        ctx.pool.get(bookie).forget(txn)
                        er.errors.append(f"{bookie}: no answer in {cfg.read_entry_timeout_s}s")
                    er.sent.clear()
                    batch.replica_failed(er)
                    if er.done and batch.failure is not None and er.no_entry == 0 and not er.digest_bad:
                        batch.failure = Timeout(str(batch.failure), ledger_id=ledger_id)
                elif spec > 0 and waited >= spec and er.next < len(er.replicas) and batch.ask_next(er):
                    ctx.metrics.speculative_reads.inc()
    finally:
        for er in reads:
            if er.sent:
                batch.forget_rest(er)
    if batch.failure is not None:
        raise batch.failure
    return [er.result for er in reads if er.result is not None]


async def _read_measured(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, first: int, last: int
) -> list[DecodedEntry]:
    """``read_decoded`` counted in the client's read metrics (a caller's read, not recovery's)."""
    start = trio.current_time()
    try:
        decoded = await read_decoded(ctx, ledger_id, metadata, first, last)
    except BKError:
        ctx.metrics.read_failed.inc()
        raise
    ctx.metrics.read_latency.observe(trio.current_time() - start)
    ctx.metrics.read_entries.inc(len(decoded))
    return decoded


async def read_entries(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, first: int, last: int
) -> list[LedgerEntry]:
    """Entries ``first..last`` as ``LedgerEntry`` values (see ``read_decoded``), with metrics."""
    decoded = await _read_measured(ctx, ledger_id, metadata, first, last)
    return [LedgerEntry(ledger_id, d.entry_id, d.payload) for d in decoded]


class _LongPoll:
    def __init__(self, previous: int, expected: int) -> None:
        self.previous = previous
        self.expected = expected
        self.answers = 0
        self.max_lac = previous
        self.wake = trio.Event()

    @staticmethod
    def on_response(arg: _LongPoll, response: Response | None, error: BKError | None) -> None:
        poll = arg
        poll.answers += 1
        if response is not None and response.HasField("readResponse") and response.readResponse.HasField("maxLAC"):
            poll.max_lac = max(poll.max_lac, response.readResponse.maxLAC)
        if poll.max_lac > poll.previous or poll.answers >= poll.expected:
            poll.wake.set()


class LedgerReadHandle:
    """A ledger opened for reading (implements ``bk_client.api.ReadHandle``).

    For a CLOSED ledger the LAC is its last entry; for one still being written it is what the
    bookies report, refreshed by ``read_last_add_confirmed`` / ``wait_for_lac`` and by reads past it.
    """

    def __init__(self, ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, lac: int) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._metadata = metadata
        self._lac = metadata.last_entry_id if metadata.is_closed else lac
        self._length = metadata.length if metadata.is_closed else 0
        self._closed = False

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self._ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger metadata as last read."""
        return self._metadata

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry known readable (-1 when none)."""
        return self._lac

    @property
    def is_closed(self) -> bool:
        """True when the metadata (as last read) says CLOSED."""
        return self._metadata.is_closed

    @property
    def length(self) -> int:
        """Payload bytes up to the LAC (exact for a closed ledger; from the entries read otherwise)."""
        return self._length

    def _set_metadata(self, metadata: LedgerMetadata) -> None:
        self._metadata = metadata
        if metadata.state is LedgerState.CLOSED:
            self._lac = metadata.last_entry_id
            self._length = metadata.length

    async def read(self, first: int, last: int) -> Sequence[LedgerEntry]:
        """Entries ``first..last`` in order, digests verified. Past the LAC the LAC is refreshed
        once; still past it: ``NoSuchEntry``. Raises ``ReadError`` / ``DigestMismatch`` /
        ``Timeout`` when an entry cannot be read from any replica."""
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        if last > self._lac and not self.is_closed:
            await self.read_last_add_confirmed()
        if last > self._lac:
            raise NoSuchEntry(self._ledger_id, last)
        decoded = await _read_measured(self._ctx, self._ledger_id, self._metadata, first, last)
        if decoded and decoded[-1].entry_id == self._lac and not self.is_closed:
            self._length = decoded[-1].length
        return [LedgerEntry(self._ledger_id, d.entry_id, d.payload) for d in decoded]

    async def _refresh_metadata(self) -> None:
        meta, _ = await self._ctx.ledgers.read(self._ledger_id)
        self._set_metadata(meta)

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies (and the metadata, in case the ledger was closed) for the LAC."""
        if self.is_closed:
            await trio.lowlevel.checkpoint()
            return self._lac
        await self._refresh_metadata()
        if not self.is_closed:
            result = await read_last_confirmed(self._ctx, self._ledger_id, self._metadata)
            self._lac = max(self._lac, result.lac)
        return self._lac

    async def wait_for_lac(self, previous: int, timeout: float) -> int:  # noqa: ASYNC109 - the hold time the bookies get
        """Long-poll: return once the LAC is above ``previous`` (bookies hold the read until their
        LAC passes it), or after ``timeout`` seconds with the LAC then known."""
        deadline = trio.current_time() + timeout
        while self._lac <= previous and not self.is_closed:
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                break
            await self._long_poll(previous, min(remaining, self._ctx.config.long_poll_max_s))
            if self._lac <= previous:
                await self._refresh_metadata()
        await trio.lowlevel.checkpoint()
        return self._lac

    async def _long_poll(self, previous: int, wait: float) -> None:
        ctx = self._ctx
        ensemble = self._metadata.last_segment.ensemble
        poll = _LongPoll(previous, len(ensemble))
        sent: list[tuple[str, int]] = []
        for bookie in ensemble:
            txn = ctx.pool.next_txn()
            # entry -1 (LAST_ADD_CONFIRMED), as BookKeeper's long poll: its bookies refuse any other
            req = read_request(
                txn, self._ledger_id, -1, piggyback=True, previous_lac=previous, timeout_ms=max(1, int(wait * 1000))
            )
            try:
                ctx.pool.get(bookie).send(txn, encode_request(req), _LongPoll.on_response, poll)
                sent.append((bookie, txn))
            except BKError:
                poll.answers += 1
        ctx.metrics.lac_long_polls.inc()
        start = trio.current_time()

        async def watch_close() -> None:
            # a writer's close never reaches the bookies' LAC: learn it from the metadata
            async with ctx.ledgers.watch(self._ledger_id) as updates:
                async for update in updates:
                    if update.metadata is None or update.metadata.is_closed:
                        poll.wake.set()
                        return

        try:
            if sent:
                # the bookies answer at their own timeout; the slack covers the round trip
                with trio.move_on_after(wait + min(1.0, wait)):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(watch_close)
                        await poll.wake.wait()
                        nursery.cancel_scope.cancel()
            elapsed = trio.current_time() - start
            if poll.max_lac <= previous and elapsed < wait:
                # every bookie failed fast: do not spin on a dead ensemble
                await trio.sleep(min(0.1, wait - elapsed))
        finally:
            for bookie, txn in sent:
                ctx.pool.get(bookie).forget(txn)
        self._lac = max(self._lac, poll.max_lac)

    async def close(self) -> None:
        """Release the handle (the ledger is unchanged)."""
        await trio.lowlevel.checkpoint()
        self._closed = True
