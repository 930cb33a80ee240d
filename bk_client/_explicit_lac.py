"""Explicit LAC (BookKeeper's ``explicitLacInterval``): an idle writer tells the bookies its LAC.

A writer's LAC reaches the bookies piggybacked on its next add, so after the last add of a burst
tailing readers stay one entry behind until the writer adds again. With
``explicit_lac_interval_ms > 0`` a write handle runs one loop (in the client's nursery) that,
every interval, sends WRITE_LAC of the handle's LAC to every bookie of the current ensemble when:

* Rule 1: the handle is OPEN and no ensemble change is running (the ensemble is settled);
* Rule 2: no add was sent for at least one interval (a busy writer piggybacks instead);
* Rule 3: the LAC is above both the LAC carried by the last add sent and the last explicit LAC
  that reached Qa bookies (nothing new to say otherwise).

WRITE_LAC is best effort, as in BookKeeper: an error answer or a lost connection never fails the
handle nor starts an ensemble change (the adds do that); the round simply is not counted, and
the next interval tries again. The loop ends when the handle closes or fails. Readers see the
explicit LAC through READ_LAC and long-poll reads (the bookie wakes held polls on WRITE_LAC).
Recovery handles never run it (they close the ledger at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from protocols.bookkeeper import StatusCode, bookie_protocol_pb2, encode_lac, encode_request, write_lac_request

from ._errors import BKError

if TYPE_CHECKING:
    from ._write_handle import LedgerWriteHandle

__all__ = ["run_explicit_lac", "send_explicit_lac"]

Response = bookie_protocol_pb2.Response
_EOK = int(StatusCode.EOK)


class _LacRound:
    """One WRITE_LAC round: counts OK answers; at Qa the LAC counts as published (rule 3)."""

    __slots__ = ("handle", "lac", "oks", "needed")

    def __init__(self, handle: LedgerWriteHandle, lac: int, needed: int) -> None:
        self.handle = handle
        self.lac = lac
        self.oks = 0
        self.needed = needed

    @staticmethod
    def on_response(rnd: _LacRound, response: Response | None, error: BKError | None) -> None:
        if error is not None or response is None:
            return
        status = response.writeLacResponse.status if response.HasField("writeLacResponse") else response.status
        if status != _EOK:
            return
        rnd.oks += 1
        if rnd.oks == rnd.needed and rnd.lac > rnd.handle._explicit_lac:
            rnd.handle._explicit_lac = rnd.lac


def send_explicit_lac(handle: LedgerWriteHandle) -> bool:
    """Send one WRITE_LAC round of the handle's LAC to its current ensemble if the module's
    rules 1 and 3 allow (rule 2, the idle time, is the loop's); True if a round was sent."""
    from ._write_handle import HandleState

    lac = handle._lac
    if handle.state is not HandleState.OPEN or handle._changing or handle._failed_bookies:
        return False
    if lac < 0 or lac <= handle._piggybacked_lac or lac <= handle._explicit_lac:
        return False
    ctx = handle._ctx
    pool = ctx.pool
    txn = pool.next_txn()
    body = encode_lac(handle.ledger_id, lac)
    frame = encode_request(write_lac_request(txn, handle.ledger_id, lac, handle._master_key, body))
    rnd = _LacRound(handle, lac, handle.metadata.ack_quorum)
    for bookie in handle._ensemble:
        try:
            pool.get(bookie).send(txn, frame, _LacRound.on_response, rnd)
        except BKError:
            continue  # best effort: the adds notice a dead bookie, not this
    ctx.metrics.explicit_lac_writes.inc()
    return True


async def run_explicit_lac(handle: LedgerWriteHandle, interval_s: float) -> None:
    """The handle's explicit-LAC loop (module rules); returns when the handle stops."""
    from ._write_handle import HandleState

    with handle._explicit_lac_scope:
        while handle.state is HandleState.OPEN:
            await trio.sleep(interval_s)
            if trio.current_time() - handle._last_sent_at >= interval_s:
                send_explicit_lac(handle)
