"""`TopicParticipant`: the `TxnParticipant` of the topics this broker serves.

It loads the topic when needed (only its bundle's owner serves it: elsewhere the call fails with
ServiceNotReady and the coordinator retries, looking the topic up again), then ends the
transaction in its transaction buffer (`_buffer`) or in one subscription's pending acks
(`broker.transactions.pending_ack`). Both are idempotent, so the coordinator may repeat a call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from managed_ledger import ManagedLedgerError
from protocols.pulsar import TopicName

from ..._errors import NotAllowedError, ServiceNotReadyError
from .. import TxnAction, TxnID

if TYPE_CHECKING:
    from ..._service import BrokerService

__all__ = ["TopicParticipant"]


class TopicParticipant:
    """Ends transactions on the persistent topics of one `BrokerService` (a `TxnParticipant`)."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    async def end_txn_on_partition(self, topic: str, txn: TxnID, action: TxnAction) -> None:
        """Store ``txn``'s commit or abort marker on ``topic`` and release or drop its messages."""
        name = TopicName.parse(topic)
        if not name.persistent:
            raise NotAllowedError(f"transactions need a persistent topic, not {topic}")
        loaded = await self._service.get_topic(name, create=False)
        try:
            await loaded.txn_buffer.end(txn, action)
        except ManagedLedgerError as exc:  # closing, fenced or storage down: the coordinator retries
            raise ServiceNotReadyError(f"could not end transaction {txn} on {topic}: {exc}") from exc

    async def end_txn_on_subscription(self, topic: str, subscription: str, txn: TxnID, action: TxnAction) -> None:
        """Commit or abort what ``txn`` acknowledged on ``subscription`` of ``topic`` (a subscription
        that does not exist holds nothing: the call succeeds)."""
        name = TopicName.parse(topic)
        if not name.persistent:
            raise NotAllowedError(f"transactions need a persistent topic, not {topic}")
        loaded = await self._service.get_topic(name, create=False)
        sub = loaded.subscriptions.get(subscription)
        if sub is None:
            return
        try:
            await sub.pending_acks.end(txn, action)
        except ManagedLedgerError as exc:
            raise ServiceNotReadyError(f"could not end transaction {txn} on {topic}/{subscription}: {exc}") from exc
