"""Reading the last add confirmed from the bookies of a ledger's last ensemble (BookKeeper's
``ReadLastConfirmedOp``), optionally fencing the ledger on the way (recovery).

Each bookie of the last ensemble is asked once:

* fencing (``fence=True``): a READ_ENTRY of entry -1 with FENCE_LEDGER; the bookie records the
  fence, then answers with its last stored entry, whose digest header carries the LAC the
  writer had when it sent that entry (or ENOENTRY: fenced, nothing stored);
* plain: a READ_LAC, answered with the explicit LAC (WRITE_LAC) and the last stored entry.

The answers are counted with the coverage rule (``QuorumCoverageSet``): the round succeeds once
every write set has Qw - Qa + 1 covering answers, after a short grace for stragglers (a higher
LAC is better but never needed for safety); it fails with ``LedgerRecoveryError`` (fencing) or
``ReadError`` (plain) when coverage becomes impossible or the time runs out. The result is the
largest LAC reported, never below the last segment's first entry - 1 (a new segment starts right
after the writer's LAC, so every entry before it was acknowledged).
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from protocols.bookkeeper import (
    DigestMismatch,
    EntryDigest,
    LedgerMetadata,
    StatusCode,
    bookie_protocol_pb2,
    digest_for,
    encode_request,
    read_lac_request,
    read_request,
)

from ._context import ClientContext
from ._deadline import wait_within
from ._errors import BKError, LedgerRecoveryError, ReadError
from ._quorum import BookieResponse, CoverageRule, DistributionSchedule, QuorumCoverageSet

__all__ = ["LacResult", "read_last_confirmed"]

_GRACE_S = 0.2  # how long a covered round still waits for the remaining bookies' (higher) LACs
Response = bookie_protocol_pb2.Response


@dataclass(frozen=True, slots=True)
class LacResult:
    """Outcome of one round: the LAC, and the bookies whose answer counted."""

    lac: int
    covered_bookies: frozenset[str]


class _Round:
    def __init__(
        self, ledger_id: int, ensemble: tuple[str, ...], coverage: QuorumCoverageSet, fence: bool, digest: EntryDigest
    ) -> None:
        self.ledger_id = ledger_id
        self.digest = digest
        self.ensemble = ensemble
        self.coverage = coverage
        self.fence = fence
        self.lac = -1
        self.wake = trio.Event()

    def record(self, index: int, kind: BookieResponse, lac: int = -1) -> None:
        self.lac = max(self.lac, lac)
        self.coverage.add(index, kind)
        if self.coverage.covered or self.coverage.all_answered or self.coverage.impossible:
            self.wake.set()

    @staticmethod
    def on_response(arg: tuple[_Round, int], response: Response | None, error: BKError | None) -> None:
        rnd, index = arg
        if error is not None or response is None:
            rnd.record(index, BookieResponse.ERROR)
            return
        if rnd.fence:
            status = response.readResponse.status if response.HasField("readResponse") else response.status
        else:
            status = response.readLacResponse.status if response.HasField("readLacResponse") else response.status
        if status == StatusCode.ENOENTRY:
            rnd.record(index, BookieResponse.NO_ENTRY)
            return
        if status == StatusCode.ENOLEDGER:
            rnd.record(index, BookieResponse.NO_LEDGER)
            return
        if status != StatusCode.EOK:
            rnd.record(index, BookieResponse.ERROR)
            return
        try:
            lac = -1
            if rnd.fence:
                if response.readResponse.HasField("body"):
                    lac = rnd.digest.decode_entry(response.readResponse.body, rnd.ledger_id).last_add_confirmed
            else:
                r = response.readLacResponse
                if r.HasField("lacBody") and r.lacBody:
                    lac = max(lac, rnd.digest.decode_lac(r.lacBody, rnd.ledger_id))
                if r.HasField("lastEntryBody") and r.lastEntryBody:
                    lac = max(lac, rnd.digest.decode_entry(r.lastEntryBody, rnd.ledger_id).last_add_confirmed)
        except DigestMismatch:
            rnd.record(index, BookieResponse.ERROR)
            return
        rnd.record(index, BookieResponse.OK, lac)


async def read_last_confirmed(
    ctx: ClientContext,
    ledger_id: int,
    metadata: LedgerMetadata,
    *,
    fence: bool = False,
    master_key: bytes | None = None,
) -> LacResult:
    """One LAC round over the last ensemble of ``metadata`` (see the module docstring).

    ``fence=True`` needs ``master_key``. Raises ``LedgerRecoveryError`` (fence) or ``ReadError``
    (plain) when the answers cannot cover the ensemble within the client config's
    ``recovery_timeout_s`` (fencing) or ``read_entry_timeout_s`` (plain). The round's deadline is
    its own: when it passes, the answers so far decide (a domain error, not a cancellation).
    """
    timeout = ctx.config.recovery_timeout_s if fence else ctx.config.read_entry_timeout_s
    segment = metadata.last_segment
    schedule = DistributionSchedule(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
    rule = CoverageRule.FENCE if fence else CoverageRule.READ_LAC
    rnd = _Round(
        ledger_id,
        segment.ensemble,
        schedule.coverage_set(rule),
        fence,
        digest_for(metadata.digest_type, metadata.password),
    )
    pool = ctx.pool
    sent: list[tuple[str, int]] = []
    for index, bookie in enumerate(segment.ensemble):
        txn = pool.next_txn()
        if fence:
            req = read_request(txn, ledger_id, -1, fence=True, master_key=master_key)
        else:
            req = read_lac_request(txn, ledger_id)
        try:
            pool.get(bookie).send(txn, encode_request(req), _Round.on_response, (rnd, index))
            sent.append((bookie, txn))
        except BKError:
            rnd.record(index, BookieResponse.ERROR)
    try:
        if await wait_within(rnd.wake, timeout) and rnd.coverage.covered and not rnd.coverage.all_answered:
            with trio.move_on_after(_GRACE_S):
                while not rnd.coverage.all_answered:
                    rnd.wake = trio.Event()
                    await rnd.wake.wait()
    finally:
        for bookie, txn in sent:
            pool.get(bookie).forget(txn)
    if not rnd.coverage.covered:
        what = "fence" if fence else "read the LAC of"
        msg = (
            f"could not {what} ledger {ledger_id}: answers from "
            f"{sorted(segment.ensemble[i] for i in rnd.coverage.covered_bookies)} do not cover "
            f"every write set of {list(segment.ensemble)}"
        )
        raise LedgerRecoveryError(msg, ledger_id=ledger_id) if fence else ReadError(msg, ledger_id=ledger_id)
    lac = max(rnd.lac, segment.first_entry_id - 1)
    return LacResult(lac, frozenset(segment.ensemble[i] for i in rnd.coverage.covered_bookies))
