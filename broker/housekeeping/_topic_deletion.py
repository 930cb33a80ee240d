"""Deleting a topic's stored state: what the admin delete and inactive-topic deletion share.

`delete_stored_topic` removes, for one non-partitioned topic or one partition, the compacted
ledger and the subscriptions' delayed-delivery bucket ledgers (outside the ledger list: their
ids go with the cursors), the managed ledger (ledgers and
cursors), the deduplication snapshot, the topic-level policies and what retention remembers; a
non-partitioned topic's schema goes with it, a partition's stays (it is the partitioned topic's,
deleted with it, as in Pulsar). The caller has closed the topic first and keeps it from loading
meanwhile (`BrokerService.hold_loading`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from managed_ledger import ManagedLedgerError
from metadata import NoNodeError
from protocols.pulsar import TopicName

from ..topics._compaction import delete_compacted_ledger
from ..topics._dedup import DEDUP_ROOT
from ..topics._delayed import delete_topic_bucket_ledgers

if TYPE_CHECKING:
    from .._service import BrokerService

__all__ = ["delete_stored_topic", "partitions_stored"]


async def delete_stored_topic(s: BrokerService, topic: TopicName) -> None:
    """Delete the stored state of ``topic`` (see the module docstring). Raises `ManagedLedgerError`
    when the compacted ledger cannot be deleted (nothing else is deleted then); a managed ledger
    that was never stored is not an error."""
    await delete_compacted_ledger(s.factory, topic.managed_ledger_name)
    # so are the subscriptions' delayed-delivery buckets (failures are logged: a leak, not an error)
    await delete_topic_bucket_ledgers(s.factory, topic.managed_ledger_name)
    try:
        await s.factory.delete(topic.managed_ledger_name)
    except ManagedLedgerError:
        pass  # never stored (an auto-created partition nobody used): nothing to delete
    try:
        await s.store.delete(f"{DEDUP_ROOT}/{topic.managed_ledger_name}", recursive=True)
    except NoNodeError:
        pass
    if topic.partition < 0:
        await s.schemas.delete(topic)
    await s.topic_policies.delete_all(topic)
    s.retention.forget(str(topic))


async def partitions_stored(s: BrokerService, partitioned: TopicName) -> bool:
    """Whether any partition of ``partitioned`` is loaded or has a managed ledger (one listing of
    its namespace's managed ledgers)."""
    if any(t.name.partitioned_topic == partitioned and t.name.partition >= 0 for t in list(s.topics.values())):
        return True
    prefix = f"{partitioned.tenant}/{partitioned.namespace}/{partitioned.domain}/"
    for ml_name in await s.factory.list(prefix):
        name = TopicName.from_managed_ledger_name(ml_name)
        if name.partition >= 0 and name.partitioned_topic == partitioned:
            return True
    return False
