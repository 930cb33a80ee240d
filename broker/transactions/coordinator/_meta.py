"""One transaction as its coordinator holds it, and the rules of its status (Pulsar's ``TxnStatus``).

Rules (Pulsar's coordinator follows the same ones):

* Rule 1 (status): OPEN -> COMMITTING or ABORTING; COMMITTING -> COMMITTED; ABORTING -> ABORTED.
  A change names the status it expects, and fails with `InvalidTxnStatusError` when the
  transaction has another one or the change is not one of these.
* Rule 2 (participants): produced partitions and acknowledged subscriptions are added only while
  the transaction is OPEN (`InvalidTxnStatusError` after); adding one twice keeps one.
* Rule 3 (end): COMMITTED and ABORTED are final. The coordinator then forgets the transaction,
  so that a later END_TXN for it fails with TransactionNotFound, as in Pulsar.
* Rule 4 (log): every change is a `TransactionMetadataEntry` appended to the coordinator's log
  before it is applied; `apply_entry` applies one, so that replaying the log in order rebuilds
  the same transactions (a record of a transaction no longer held is ignored: its end was logged).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

import trio

from managed_ledger import Position
from protocols.pulsar import transaction_metadata_pb2 as tpb

from .._txnid import TxnID
from ._errors import InvalidTxnStatusError

__all__ = ["TxnStatus", "TxnMeta", "FINAL", "new_entry", "Op"]


class TxnStatus(enum.IntEnum):
    """Pulsar's TxnStatus, with its values (they are stored in the log)."""

    OPEN = 0
    COMMITTING = 1
    COMMITTED = 2
    ABORTING = 3
    ABORTED = 4


FINAL = frozenset({TxnStatus.COMMITTED, TxnStatus.ABORTED})
"""Rule 3: the statuses after which a transaction is forgotten."""

_NEXT: dict[TxnStatus, frozenset[TxnStatus]] = {
    TxnStatus.OPEN: frozenset({TxnStatus.COMMITTING, TxnStatus.ABORTING}),
    TxnStatus.COMMITTING: frozenset({TxnStatus.COMMITTED}),
    TxnStatus.ABORTING: frozenset({TxnStatus.ABORTED}),
}

Op = tpb.TransactionMetadataEntry.TransactionMetadataOp


@dataclasses.dataclass(eq=False)
class TxnMeta:
    """A transaction the coordinator holds: its status, participants, times (ms since the epoch),
    owner role, and the log positions that record it (acknowledged in the log once it ends)."""

    txn_id: TxnID
    open_ms: int
    timeout_ms: int
    owner: str = ""
    status: TxnStatus = TxnStatus.OPEN
    partitions: list[str] = dataclasses.field(default_factory=list)
    subscriptions: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    positions: list[Position] = dataclasses.field(default_factory=list)
    last_modified_ms: int = 0
    lock: trio.Lock = dataclasses.field(default_factory=trio.Lock, repr=False)

    @property
    def timeout_at_ms(self) -> int:
        """When an OPEN transaction is aborted by its coordinator (ms since the epoch)."""
        return self.open_ms + self.timeout_ms

    def check_status(self, expected: TxnStatus, new: TxnStatus) -> None:
        """Rule 1: raise `InvalidTxnStatusError` unless ``expected`` -> ``new`` may happen now."""
        if self.status != expected or new not in _NEXT.get(self.status, frozenset()):
            raise InvalidTxnStatusError(
                f"Expect Txn `{self.txn_id}` to be in {expected.name} status but it is in {self.status.name} status"
                f" (wanted {new.name})"
            )

    def check_open(self) -> None:
        """Rule 2: raise `InvalidTxnStatusError` unless the transaction is OPEN."""
        if self.status != TxnStatus.OPEN:
            raise InvalidTxnStatusError(
                f"Expect Txn `{self.txn_id}` to be in OPEN status but it is in {self.status.name} status"
            )

    def add_partitions(self, partitions: Iterable[str]) -> None:
        """Rule 2 (the status is checked by the caller before the change is logged)."""
        for p in partitions:
            if p not in self.partitions:
                self.partitions.append(p)

    def add_subscriptions(self, subscriptions: Iterable[tuple[str, str]]) -> None:
        """Rule 2 (the status is checked by the caller before the change is logged)."""
        for s in subscriptions:
            if s not in self.subscriptions:
                self.subscriptions.append(s)

    def apply_entry(self, entry: tpb.TransactionMetadataEntry, position: Position) -> None:
        """Rule 4: apply a logged change (not NEW, which creates the meta) recorded at ``position``."""
        op = entry.metadata_op
        if op == Op.ADD_PARTITION:
            self.add_partitions(entry.partitions)
        elif op == Op.ADD_SUBSCRIPTION:
            self.add_subscriptions((s.topic, s.subscription) for s in entry.subscriptions)
        elif op == Op.UPDATE:
            self.status = TxnStatus(entry.new_status)
        self.positions.append(position)
        if entry.HasField("last_modification_time"):
            self.last_modified_ms = entry.last_modification_time


def new_entry(op: int, txn: TxnID, now_ms: int, **fields: object) -> tpb.TransactionMetadataEntry:
    """A log record of ``op`` for ``txn`` (``fields`` as the record names them)."""
    return tpb.TransactionMetadataEntry(
        metadata_op=op,  # type: ignore[arg-type]
        txnid_most_bits=txn.most_bits,
        txnid_least_bits=txn.least_bits,
        last_modification_time=now_ms,
        **fields,  # type: ignore[arg-type]
    )
