"""What the coordinator needs from the topics a transaction touched: the narrow interface between
the two sides of transactions."""

from __future__ import annotations

from typing import Protocol

from ._txnid import TxnAction, TxnID


class TxnParticipant(Protocol):
    """The topic side of a transaction's end, as the coordinator drives it (Pulsar's
    ``END_TXN_ON_PARTITION`` and ``END_TXN_ON_SUBSCRIPTION``).

    Each call returns once the outcome is durable on the topic (its marker or its acknowledgements
    stored), and raises a `broker._errors` error otherwise, so the coordinator retries it. Each is
    idempotent: ending a transaction the way it already ended succeeds again."""

    async def end_txn_on_partition(self, topic: str, txn: TxnID, action: TxnAction) -> None:
        """End ``txn`` on ``topic`` (a partition or a non-partitioned topic): commit makes its
        messages dispatchable, abort makes them invisible for good."""
        ...

    async def end_txn_on_subscription(self, topic: str, subscription: str, txn: TxnID, action: TxnAction) -> None:
        """End ``txn`` on one subscription of ``topic``: commit makes its pending acknowledgements
        real, abort releases their messages for redelivery."""
        ...
