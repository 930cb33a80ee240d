"""Open with recovery (BookKeeper's ``LedgerRecoveryOp``): what a new owner does to take a ledger
over. Steps, each safe to repeat and to run concurrently with another recovery:

1. Compare-and-set the metadata OPEN -> IN_RECOVERY (an old writer's next ensemble change then
   fails with ``LedgerFenced``). Already IN_RECOVERY (a recovery that died, or one running now):
   go on. CLOSED: nothing to do.
2. Fence the last ensemble and read its LAC (``read_last_confirmed(fence=True)``): once the fence
   covers every write set, the old writer can never again collect Qa acks for an add.
3. Read forward from LAC + 1. An entry is *found* when one replica returns a verified copy; it is
   *absent* when Qw - Qa + 1 replicas say they do not have it (then at most Qa - 1 have it, so it
   was never acknowledged). Neither (too many errors): the recovery fails and can be retried.
4. Re-replicate each found entry to its write quorum with RECOVERY_ADD (a recovery write handle:
   Qa acks, ensemble change if a bookie is dead), stop at the first absent entry.
5. Compare-and-set CLOSED at the last found entry. If another recovery closed it first, its
   result stands (both openers then see the same closed ledger); that recovery re-replicated
   every entry it kept, and any acknowledged entry is kept by every recovery.
"""

from __future__ import annotations

import trio

from protocols.bookkeeper import (
    DecodedEntry,
    EntryDigest,
    LedgerMetadata,
    LedgerState,
    bookie_protocol_pb2,
    digest_for,
    encode_request,
    read_request,
)

from ._context import ClientContext, master_key
from ._deadline import wait_within
from ._errors import BKError, LedgerRecoveryError, MetadataVersionConflict, Unauthorized
from ._quorum import DistributionSchedule
from ._read_handle import ReadOutcome, read_answer, read_decoded
from ._read_lac import read_last_confirmed
from ._write_handle import LedgerWriteHandle

__all__ = ["recover_ledger", "check_password"]

Response = bookie_protocol_pb2.Response
_MAX_CAS_ATTEMPTS = 100
HIGH_PRIORITY = 1
"""``BKPacketHeader.priority`` of recovery's reads: bookies serve them on their high-priority path."""


def check_password(ledger_id: int, metadata: LedgerMetadata, password: bytes) -> None:
    """``Unauthorized`` unless ``password`` is the ledger's (as BookKeeper checks on open)."""
    if metadata.password != password:
        raise Unauthorized(f"wrong password for ledger {ledger_id}", ledger_id=ledger_id)


class _EntryProbe:
    """Step 3 for one entry: ask every replica of its write set at once."""

    def __init__(
        self, ledger_id: int, entry_id: int, replicas: list[str], absent_needed: int, digest: EntryDigest
    ) -> None:
        self.ledger_id = ledger_id
        self.digest = digest
        self.entry_id = entry_id
        self.replicas = replicas
        self.absent_needed = absent_needed
        self.found: DecodedEntry | None = None
        self.absent = 0
        self.answers = 0
        self.errors: list[str] = []
        self.wake = trio.Event()

    @property
    def decided(self) -> bool:
        return self.found is not None or self.absent >= self.absent_needed or self.answers >= len(self.replicas)

    @staticmethod
    def on_response(arg: tuple[_EntryProbe, str], response: Response | None, error: BKError | None) -> None:
        probe, bookie = arg
        probe.answers += 1
        answer = read_answer(response, error, probe.ledger_id, probe.entry_id, probe.digest)
        if answer.outcome is ReadOutcome.FOUND:
            probe.found = answer.entry
        elif answer.outcome is ReadOutcome.ABSENT:
            probe.absent += 1
        else:  # an error, or a copy failing its digest: neither found nor absent
            probe.errors.append(f"{bookie}: {answer.detail}")
        if probe.decided:
            probe.wake.set()


async def _probe_entry(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, schedule: DistributionSchedule, entry_id: int
) -> DecodedEntry | None:
    """The entry if found, None if absent; ``LedgerRecoveryError`` when undecidable."""
    ensemble = metadata.ensemble_for(entry_id)
    replicas = [ensemble[i] for i in schedule.write_set(entry_id)]
    probe = _EntryProbe(
        ledger_id,
        entry_id,
        replicas,
        schedule.write_quorum - schedule.ack_quorum + 1,
        digest_for(metadata.digest_type, metadata.password),
    )
    pool = ctx.pool
    sent: list[tuple[str, int]] = []
    for bookie in replicas:
        txn = pool.next_txn()
        try:
            req = read_request(txn, ledger_id, entry_id, priority=HIGH_PRIORITY)  # not behind catch-up reads
            pool.get(bookie).send(txn, encode_request(req), _EntryProbe.on_response, (probe, bookie))
            sent.append((bookie, txn))
        except BKError as exc:
            probe.on_response((probe, bookie), None, exc)
    try:
        await wait_within(probe.wake, ctx.config.read_entry_timeout_s)
    finally:
        for bookie, txn in sent:
            pool.get(bookie).forget(txn)
    if probe.found is not None:
        return probe.found
    if probe.absent >= probe.absent_needed:
        return None
    raise LedgerRecoveryError(
        f"recovery of ledger {ledger_id} cannot tell whether entry {entry_id} exists: "
        f"{probe.absent} replicas lack it, errors: {'; '.join(probe.errors) or 'no answer'}",
        ledger_id=ledger_id,
    )


async def _mark_in_recovery(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, version: int
) -> tuple[LedgerMetadata, int]:
    for _ in range(_MAX_CAS_ATTEMPTS):
        if metadata.state is not LedgerState.OPEN:
            return metadata, version
        new = metadata.in_recovery()
        try:
            return new, await ctx.ledgers.write(ledger_id, new, version)
        except MetadataVersionConflict:
            metadata, version = await ctx.ledgers.read(ledger_id)
    raise LedgerRecoveryError(
        f"ledger {ledger_id}'s metadata kept changing while starting recovery", ledger_id=ledger_id
    )


async def _close_recovered(ctx: ClientContext, handle: LedgerWriteHandle) -> tuple[LedgerMetadata, int]:
    lid = handle.ledger_id
    last, length = handle.last_add_confirmed, handle.length
    meta, version = handle.metadata, handle.metadata_version
    for _ in range(_MAX_CAS_ATTEMPTS):
        if meta.state is LedgerState.CLOSED:
            return meta, version  # step 5: another recovery's close stands
        closed = meta.closed(last, length)
        try:
            return closed, await ctx.ledgers.write(lid, closed, version)
        except MetadataVersionConflict:
            meta, version = await ctx.ledgers.read(lid)
    raise LedgerRecoveryError(f"ledger {lid}'s metadata kept changing while closing it", ledger_id=lid)


async def recover_ledger(ctx: ClientContext, ledger_id: int, password: bytes) -> tuple[LedgerMetadata, int]:
    """Recover and close ``ledger_id`` (module steps 1-5); return its CLOSED metadata and version.

    Raises ``NoSuchLedger``, ``Unauthorized`` (wrong password), ``LedgerRecoveryError`` when
    fencing or reading cannot reach enough bookies (the ledger stays IN_RECOVERY; retry later),
    ``NotEnoughBookies`` when re-replication finds no replacement for a dead bookie.
    """
    meta, version = await ctx.ledgers.read(ledger_id)
    check_password(ledger_id, meta, password)
    if meta.is_closed:
        return meta, version
    start = trio.current_time()
    meta, version = await _mark_in_recovery(ctx, ledger_id, meta, version)
    if meta.is_closed:
        return meta, version
    lac = (await read_last_confirmed(ctx, ledger_id, meta, fence=True, master_key=master_key(password))).lac
    length = 0
    if lac >= 0:
        length = (await read_decoded(ctx, ledger_id, meta, lac, lac, priority=HIGH_PRIORITY))[0].length
    schedule = DistributionSchedule(meta.ensemble_size, meta.write_quorum, meta.ack_quorum)
    handle = LedgerWriteHandle(
        ctx, ledger_id, meta, version, password, recovery=True, last_add_confirmed=lac, length=length
    )
    try:
        pending = []
        entry_id = lac + 1
        while (found := await _probe_entry(ctx, ledger_id, meta, schedule, entry_id)) is not None:
            op = await handle.append(found.payload)
            if op.entry_id != entry_id:  # cannot happen: the handle numbers from lac + 1
                raise LedgerRecoveryError(
                    f"recovery of ledger {ledger_id} lost its place at entry {entry_id}", ledger_id=ledger_id
                )
            pending.append(op)
            entry_id += 1
        for op in pending:
            await op.result()
        ctx.metrics.recovered_entries.inc(len(pending))
        await handle.wait_idle()
        result = await _close_recovered(ctx, handle)
    finally:
        handle.finish_close()
    ctx.metrics.recoveries.observe(trio.current_time() - start)
    return result
