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

Two objects, as in BookKeeper: ``ExplicitLacFlushPolicy`` (one per write handle: the rules, the
loop and the last published LAC) and ``PendingWriteLacOp`` (one round). The policy holds an
explicit reference to its handle and reads it only through the handle's declared read-only
properties (``accepting_adds``, ``ensemble_changing``, ``piggybacked_lac``, ``last_add_sent_at``,
``ensemble``, ...; see ``bk_client._write_handle``); it never changes the handle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from protocols.bookkeeper import EntryDigest, StatusCode, bookie_protocol_pb2, encode_request, write_lac_request

from ._context import ClientContext
from ._errors import BKError
from ._transport import BookieTransport

if TYPE_CHECKING:
    from ._write_handle import LedgerWriteHandle

__all__ = ["ExplicitLacFlushPolicy", "PendingWriteLacOp"]

Response = bookie_protocol_pb2.Response
_EOK = int(StatusCode.EOK)


class PendingWriteLacOp:
    """One WRITE_LAC round of ``lac``: sent to every bookie of an ensemble; once ``ack_quorum``
    of them answered OK, ``on_published(lac)`` is called (once). Errors and lost connections are
    not counted and never raised (best effort)."""

    __slots__ = ("ledger_id", "lac", "needed", "oks", "on_published")

    def __init__(self, ledger_id: int, lac: int, ack_quorum: int, on_published: Callable[[int], None]) -> None:
        self.ledger_id = ledger_id
        self.lac = lac
        self.needed = ack_quorum
        self.oks = 0
        self.on_published = on_published

    def initiate(
        self, pool: BookieTransport, ensemble: tuple[str, ...], master_key: bytes, digest: EntryDigest
    ) -> None:
        """Send the round to every bookie of ``ensemble`` (one frame, one request id); a bookie
        whose connection refuses the request at once is skipped. ``digest`` is the ledger's."""
        txn = pool.next_txn()
        body = digest.encode_lac(self.ledger_id, self.lac)
        frame = encode_request(write_lac_request(txn, self.ledger_id, self.lac, master_key, body))
        for bookie in ensemble:
            try:
                pool.get(bookie).send(txn, frame, PendingWriteLacOp.on_response, self)
            except BKError:
                continue  # best effort: the adds notice a dead bookie, not this

    @staticmethod
    def on_response(op: PendingWriteLacOp, response: Response | None, error: BKError | None) -> None:
        """A bookie's answer (connection callback): count an OK; at Qa, publish."""
        if error is not None or response is None:
            return
        status = response.writeLacResponse.status if response.HasField("writeLacResponse") else response.status
        if status != _EOK:
            return
        op.oks += 1
        if op.oks == op.needed:
            op.on_published(op.lac)


class ExplicitLacFlushPolicy:
    """The explicit-LAC rules of one write handle (module docstring). Built by the handle, which
    calls ``stop`` when it closes or fails; ``run`` is the loop the handle spawns when
    ``explicit_lac_interval_ms > 0``."""

    __slots__ = ("_handle", "_ctx", "_master_key", "_digest", "_published_lac", "_scope")

    def __init__(self, handle: LedgerWriteHandle, ctx: ClientContext, master_key: bytes, digest: EntryDigest) -> None:
        self._handle = handle
        self._ctx = ctx
        self._master_key = master_key
        self._digest = digest
        self._published_lac = -1  # the last WRITE_LAC that reached Qa bookies
        self._scope = trio.CancelScope()

    @property
    def published_lac(self) -> int:
        """The highest LAC a WRITE_LAC round got to Qa bookies (-1 when none); never goes back."""
        return self._published_lac

    def _published(self, lac: int) -> None:
        if lac > self._published_lac:
            self._published_lac = lac

    def flush(self) -> bool:
        """Send one WRITE_LAC round of the handle's LAC to its current ensemble if rules 1 and 3
        allow (rule 2, the idle time, is the loop's); True if a round was sent."""
        handle = self._handle
        lac = handle.last_add_confirmed
        if not handle.accepting_adds or handle.ensemble_changing:
            return False
        if lac < 0 or lac <= handle.piggybacked_lac or lac <= self._published_lac:
            return False
        op = PendingWriteLacOp(handle.ledger_id, lac, handle.metadata.ack_quorum, self._published)
        op.initiate(self._ctx.pool, handle.ensemble, self._master_key, self._digest)
        self._ctx.metrics.explicit_lac_writes.inc()
        return True

    async def run(self, interval_s: float) -> None:
        """The loop (rule 2): every ``interval_s``, ``flush`` if no add was sent for that long.
        Returns once the handle stops accepting adds or ``stop`` is called."""
        handle = self._handle
        with self._scope:
            while handle.accepting_adds:
                await trio.sleep(interval_s)
                if trio.current_time() - handle.last_add_sent_at >= interval_s:
                    self.flush()

    def stop(self) -> None:
        """End the loop (now, or before it starts); later ``flush`` calls still obey rule 1."""
        self._scope.cancel()
