"""Pending acknowledgements of one subscription: acks made inside transactions, held until the
transaction ends, as Pulsar's ``PendingAckHandleImpl`` keeps them.

Rules:

* Rule 1 (holding): an individual ack in transaction T holds its message (a whole entry, or some
  indexes of a batch) for T: it is not acknowledged in the cursor, not delivered again to anyone
  (not even on a redelivery request or its consumer leaving), and counted unacked by no consumer.
  A cumulative ack in T holds every message up to its position the same way. The subscription's
  dispatcher asks `holds` before delivering an entry.
* Rule 2 (conflicts, TransactionConflict as in Pulsar): an individual ack in a transaction fails
  when its message is acknowledged already (in the cursor, or for a batch any of the same
  indexes), or is held by a transaction (any, the same one included; for a batch, any of the same
  indexes). A cumulative ack fails at or before the mark-delete position, or while another
  transaction holds a cumulative ack, or at or before the position its own transaction already
  holds. A request with one conflicting message changes nothing.
* Rule 3 (commit): committing T acknowledges what it holds in the cursor (individual entries,
  batch indexes, or the mark-delete position for a cumulative ack); aborting T releases it: the
  entries go back to the dispatcher for redelivery (a cumulative ack: everything unacknowledged
  is delivered again). Ending a transaction this subscription holds nothing for succeeds and
  changes nothing, so a coordinator may repeat an end.
* Rule 4 (persistence): what T holds is the cursor property ``#pulsar.internal.txn.pa.{most}:{least}``
  (JSON), written before the ack is answered; the end removes it in the same metadata write that
  persists the cursor's new acknowledgements, so a crash keeps either the held acks or their
  outcome, never neither. A subscription loaded again reads them back (`load`). Pulsar keeps the
  same record in a managed ledger of its own per subscription; here the cursor's node holds it.
* Rule 5 (bounded): the held acks of a subscription take at most `MAX_PENDING_BYTES` of property
  text; an ack past that is refused (NotAllowed) until transactions end.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from managed_ledger import ManagedCursor, Position
from protocols.pulsar import pulsar_api_pb2 as pb

from ..._errors import BrokerServiceError
from .. import TxnAction, TxnID

log = logging.getLogger(__name__)

__all__ = ["PendingAcks", "PendingAckHost", "PROPERTY_PREFIX", "MAX_PENDING_BYTES"]

PROPERTY_PREFIX = "#pulsar.internal.txn.pa."
MAX_PENDING_BYTES = 256 * 1024


class PendingAckHost(Protocol):
    """What pending acks use of their subscription."""

    @property
    def cursor(self) -> ManagedCursor:
        """The subscription's cursor."""
        ...

    def forget_delivered(self, positions: list[Position], up_to: Position | None) -> None:
        """The dispatcher stops tracking these entries (and every one at or before ``up_to``):
        they are acknowledged or held, neither unacknowledged at a consumer nor to redeliver."""
        ...

    def redeliver(self, positions: list[Position] | None) -> None:
        """Deliver these entries again (None: everything not acknowledged in the cursor)."""
        ...


@dataclass
class _Held:
    """What one transaction holds on the subscription."""

    individual: dict[Position, tuple[frozenset[int] | None, int]] = field(default_factory=dict)
    cumulative: Position | None = None

    def encode(self) -> str:
        return json.dumps(
            {
                "i": [
                    [p.ledger_id, p.entry_id, None if idx is None else sorted(idx), size]
                    for p, (idx, size) in self.individual.items()
                ],
                "c": None if self.cumulative is None else [self.cumulative.ledger_id, self.cumulative.entry_id],
            },
            separators=(",", ":"),
        )

    @staticmethod
    def decode(text: str) -> _Held:
        raw = json.loads(text)
        held = _Held()
        for ledger, entry, idx, size in raw.get("i", []):
            held.individual[Position(ledger, entry)] = (None if idx is None else frozenset(idx), size)
        c = raw.get("c")
        if c is not None:
            held.cumulative = Position(c[0], c[1])
        return held


def _key(txn: TxnID) -> str:
    return f"{PROPERTY_PREFIX}{txn.most_bits}:{txn.least_bits}"


def _conflict(message: str) -> BrokerServiceError:
    return BrokerServiceError(message, pb.TransactionConflict)


class PendingAcks:
    """See the module rules. Owned by its subscription."""

    def __init__(self, host: PendingAckHost, name: str) -> None:
        self._host = host
        self._name = name
        self._held: dict[TxnID, _Held] = {}
        self._by_position: dict[Position, dict[TxnID, frozenset[int] | None]] = {}
        self._cumulative: tuple[TxnID, Position] | None = None
        self._sizes: dict[TxnID, int] = {}
        self._lock = trio.Lock()

    # ------------------------------------------------------------------ state

    def load(self, properties: dict[str, str]) -> None:
        """Rule 4: take back the held acks persisted in the cursor's properties."""
        for key, value in properties.items():
            if not key.startswith(PROPERTY_PREFIX):
                continue
            try:
                most, least = (int(x) for x in key[len(PROPERTY_PREFIX) :].split(":"))
                held = _Held.decode(value)
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("%s: ignoring a malformed pending-ack record %s: %s", self._name, key, exc)
                continue
            self._install(TxnID(most, least), held, len(value))

    def _install(self, txn: TxnID, held: _Held, size: int) -> None:
        self._held[txn] = held
        self._sizes[txn] = size
        for pos, (idx, _) in held.individual.items():
            self._by_position.setdefault(pos, {})[txn] = idx
        if held.cumulative is not None:
            self._cumulative = (txn, held.cumulative)

    def _uninstall(self, txn: TxnID) -> _Held | None:
        held = self._held.pop(txn, None)
        self._sizes.pop(txn, None)
        if held is None:
            return None
        for pos in held.individual:
            owners = self._by_position.get(pos)
            if owners is not None:
                owners.pop(txn, None)
                if not owners:
                    del self._by_position[pos]
        if self._cumulative is not None and self._cumulative[0] == txn:
            self._cumulative = None
        return held

    @property
    def transactions(self) -> list[TxnID]:
        """The transactions holding acks here."""
        return list(self._held)

    def holds(self, pos: Position) -> bool:
        """Rule 1: whether a transaction holds the whole entry at ``pos``."""
        owners = self._by_position.get(pos)
        if owners is not None and any(idx is None for idx in owners.values()):
            return True
        return self._cumulative is not None and pos <= self._cumulative[1]

    def held_indexes(self, pos: Position) -> set[int]:
        """Batch indexes of the entry at ``pos`` that transactions hold."""
        out: set[int] = set()
        for idx in self._by_position.get(pos, {}).values():
            if idx is not None:
                out |= idx
        return out

    # ------------------------------------------------------------------ acks (Rules 1, 2, 5)

    async def ack_individual(self, txn: TxnID, items: Iterable[tuple[Position, frozenset[int] | None, int]]) -> None:
        """Hold ``(position, batch indexes or None for the whole entry, batch size)`` for ``txn``;
        raises `BrokerServiceError` (TransactionConflict, NotAllowed) and then holds nothing new."""
        async with self._lock:
            cursor = self._host.cursor
            new = list(items)
            for pos, idx, _size in new:
                where = f"[{self._name}] transaction {txn} cannot acknowledge {pos}"
                if cursor.is_acked(pos):
                    raise _conflict(f"{where}: it was acknowledged before")
                if idx is not None and idx & set(cursor.batch_acked_indexes(pos) or ()):
                    raise _conflict(f"{where}: some of its messages were acknowledged before")
                owners = self._by_position.get(pos, {})
                if any(other is None or idx is None or other & idx for other in owners.values()):
                    raise _conflict(f"{where}: it is in pending ack status")
                if self._cumulative is not None and pos <= self._cumulative[1]:
                    raise _conflict(f"{where}: it is in pending ack status (cumulative)")
            held = self._copy(txn)
            for pos, idx, size in new:
                before, _ = held.individual.get(pos, (frozenset(), size))
                held.individual[pos] = (idx if idx is None or before is None else idx | before, size)
            await self._persist(txn, held)

    async def ack_cumulative(self, txn: TxnID, pos: Position) -> None:
        """Hold every message up to ``pos`` for ``txn`` (Rule 2's checks first)."""
        async with self._lock:
            where = f"[{self._name}] transaction {txn} cannot acknowledge cumulatively up to {pos}"
            if pos <= self._host.cursor.mark_delete_position:
                raise _conflict(f"{where}: within the mark-delete position {self._host.cursor.mark_delete_position}")
            if self._cumulative is not None:
                other, at = self._cumulative
                if other != txn or pos <= at:
                    raise _conflict(f"{where}: transaction {other} holds a cumulative ack up to {at}")
            held = self._copy(txn)
            held.cumulative = pos
            await self._persist(txn, held)

    def _copy(self, txn: TxnID) -> _Held:
        current = self._held.get(txn)
        if current is None:
            return _Held()
        return _Held(dict(current.individual), current.cumulative)

    async def _persist(self, txn: TxnID, held: _Held) -> None:
        text = held.encode()
        total = sum(self._sizes.values()) - self._sizes.get(txn, 0) + len(text)
        if total > MAX_PENDING_BYTES:
            raise BrokerServiceError(
                f"[{self._name}] too many acknowledgements pending in open transactions "
                f"({total} bytes of records, at most {MAX_PENDING_BYTES})",
                pb.NotAllowedError,
            )
        await self._host.cursor.update_cursor_properties({_key(txn): text})
        self._uninstall(txn)
        self._install(txn, held, len(text))
        self._host.forget_delivered([p for p, (idx, _) in held.individual.items() if idx is None], held.cumulative)

    # ------------------------------------------------------------------ ends (Rule 3)

    async def end(self, txn: TxnID, action: TxnAction) -> None:
        """Commit or abort what ``txn`` holds here (nothing held: nothing to do)."""
        async with self._lock:
            held = self._held.get(txn)
            if held is None:
                return
            cursor = self._host.cursor
            whole = [p for p, (idx, _) in held.individual.items() if idx is None]
            if action is TxnAction.COMMIT:
                await cursor.delete(whole)
                for pos, (idx, size) in held.individual.items():
                    if idx is not None:
                        await cursor.delete_batch_indexes(pos, size, idx)
                if held.cumulative is not None and held.cumulative > cursor.mark_delete_position:
                    await cursor.mark_delete(held.cumulative)
            await cursor.update_cursor_properties({}, [_key(txn)])
            self._uninstall(txn)
            if action is TxnAction.COMMIT:
                acked = whole + [p for p in held.individual if cursor.is_acked(p) and p not in whole]
                self._host.forget_delivered(acked, held.cumulative)
            elif held.cumulative is not None:
                self._host.redeliver(None)
            else:
                self._host.redeliver(list(held.individual))

    def cumulative_position(self, txn: TxnID) -> Position | None:
        """The position up to which ``txn`` holds a cumulative ack here (None: it holds none)."""
        held = self._held.get(txn)
        return None if held is None else held.cumulative

    def stats(self) -> dict[str, object]:
        """Pulsar's ``TransactionPendingAckStats`` fields."""
        return {"state": "Ready", "lowWaterMarks": {}, "ongoingTxnSize": len(self._held)}
