"""Topic operations behind the admin endpoints (deletion, loading an existing topic).

Rules:

* Rule 1: admin operations on a topic that exists load it (as a client would); they never
  create one, except the explicit create endpoints.
* Rule 2: deleting a topic with connected producers or consumers needs ``force`` (else 412);
  with ``force`` they are disconnected first. Deletion removes the managed ledger (ledgers,
  cursors), the compacted ledger, the dedup snapshot, the topic-level policies and what
  retention remembers (`broker.housekeeping._topic_deletion`), and a non-partitioned topic's schemas; the
  topic does not load again until it is gone.
* Rule 3: a partitioned topic is deleted partition by partition, then its schemas, policies and
  metadata.
* Rule 5: truncating a topic moves every subscription to its end (and the dedup cursor to its
  latest snapshot), closes the current ledger and deletes every closed ledger no cursor still
  needs, as Pulsar's truncate does; a partitioned topic is truncated partition by partition.
* Rule 4: work over a partitioned topic's partitions costs what exists, not what the metadata
  says could: partitions that are neither loaded nor stored (never used) are skipped where they
  can hold nothing (stats, listing and deleting subscriptions, deletion), found with one listing
  of the namespace's managed ledgers, and partitions are worked on `FANOUT_CONCURRENCY` at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from starlette.requests import Request

from managed_ledger import ManagedLedgerError
from metadata import NodeExistsError
from protocols.pulsar import TopicName

from ..housekeeping._topic_deletion import delete_stored_topic
from ..topics._topic import Topic
from ._common import RestError, check_partitions, for_each_bounded, json_body, require_namespace

if TYPE_CHECKING:
    from .._service import BrokerService
    from ..topics._subscription import Subscription

__all__ = [
    "delete_topic",
    "delete_partitioned_topic",
    "truncate_topic",
    "existing_topic",
    "existing_subscription",
    "topic_exists_any",
    "loaded_partitions",
    "present_partitions",
    "create_partitioned_topic",
]


class LoadedTopic(Protocol):
    """What `loaded_partitions` reads of a loaded topic of either kind."""

    @property
    def name(self) -> TopicName: ...

    @property
    def closed(self) -> bool: ...


L = TypeVar("L", bound=LoadedTopic)


async def topic_exists_any(s: BrokerService, topic: TopicName) -> bool:
    """Whether ``topic`` exists as a partitioned topic or as a (non-partitioned/partition) topic."""
    if topic.partition < 0 and await s.namespaces.get_partitions(topic):
        return True
    if topic.partition >= 0 and 0 < topic.partition + 1 <= await s.namespaces.get_partitions(topic.partitioned_topic):
        return True
    return await s.topic_exists(topic)


def loaded_partitions(loaded: Mapping[str, L], topic: TopicName, n: int) -> dict[int, L]:
    """The partitions of ``topic`` below ``n`` among the ``loaded`` topics (not closed), by index.
    Costs the number of loaded topics, whatever ``n`` is."""
    out: dict[int, L] = {}
    for t in list(loaded.values()):
        index = t.name.partition
        if 0 <= index < n and not t.closed and t.name.partitioned_topic == topic:
            out[index] = t
    return out


PARTITIONED_TOPIC_METADATA_TYPE = "application/vnd.partitioned-topic-metadata+json"
"""The media type of a ``PUT .../partitions`` body that is Pulsar's PartitionedTopicMetadata
(``{"partitions": N, "properties": {...}}``) rather than a bare number of partitions."""


async def create_partitioned_topic(request: Request, s: BrokerService, topic: TopicName, *, exists: bool) -> None:
    """``PUT .../partitions`` of either topic kind: stores the partitioned topic's metadata with the
    request body's number of partitions (a JSON number, or with `PARTITIONED_TOPIC_METADATA_TYPE`
    a PartitionedTopicMetadata object whose properties are stored too). 412 for a ``-partition-N``
    name, 409 when ``exists`` (a topic of that name is there) or the metadata is already stored."""
    if topic.partition >= 0:
        raise RestError(412, f"partitioned topic names may not end in -partition-N: {topic}")
    body = await json_body(request, what="number of partitions")
    properties: dict[str, str] = {}
    if request.headers.get("content-type", "").split(";")[0].strip() == PARTITIONED_TOPIC_METADATA_TYPE:
        # Pulsar's PartitionedTopicMetadata body (pulsar-admin and the Go admin client send it
        # with properties): {"partitions": N, "properties": {...} or null}
        if not isinstance(body, dict):
            raise RestError(400, "a partitioned topic metadata body must be an object with partitions")
        properties = body.get("properties") or {}
        if not isinstance(properties, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
        ):
            raise RestError(400, "properties must be an object of strings")
        body = body.get("partitions")
    n = check_partitions(request, body)
    if exists:
        raise RestError(409, f"This topic already exists: {topic}")
    try:
        await s.namespaces.create_partitioned_topic(topic, n, properties)
    except NodeExistsError:
        raise RestError(409, f"This topic already exists: {topic}") from None


async def present_partitions(s: BrokerService, topic: TopicName, n: int) -> list[TopicName]:
    """The partitions of ``topic`` below ``n`` that are loaded or have a managed ledger, in index
    order (Rule 4): one listing of the namespace's managed ledgers, never one per partition."""
    prefix = f"{topic.tenant}/{topic.namespace}/{topic.domain}/"
    found = {i: t.name for i, t in loaded_partitions(s.topics, topic, n).items()}
    for ml_name in await s.factory.list(prefix):
        name = TopicName.from_managed_ledger_name(ml_name)
        if 0 <= name.partition < n and name.partitioned_topic == topic:
            found.setdefault(name.partition, name)
    return [found[i] for i in sorted(found)]


async def existing_topic(s: BrokerService, topic: TopicName) -> Topic:
    """The loaded topic ``topic`` (Rule 1); 404 when its namespace or itself does not exist, and
    for a partitioned topic's own name (its partitions are the topics). A loaded topic is answered
    with no metadata read: it exists, so does its namespace, and a partitioned topic's own name is
    never loaded (those reads queue behind the store's writes and took seconds under load)."""
    loaded = s.topics.get(str(topic))
    if loaded is None or loaded.closed:
        await require_namespace(s, topic.namespace_name)
        if topic.partition < 0 and await s.namespaces.get_partitions(topic):
            raise RestError(
                404, f"Topic {topic} is a partitioned topic: use its partitions ({topic.partition_name(0)}, ...)"
            )
        if not await topic_exists_any(s, topic):
            raise RestError(404, f"Topic {topic} not found")
    return await s.get_topic(topic, create=False)


async def existing_subscription(s: BrokerService, topic: TopicName, name: str) -> tuple[Topic, Subscription]:
    """The topic and its subscription ``name``; 404 when either does not exist."""
    t = await existing_topic(s, topic)
    sub = t.subscriptions.get(name)
    if sub is None or sub.closed:
        raise RestError(404, f"Subscription {name} not found on topic {topic}")
    return t, sub


async def delete_topic(s: BrokerService, topic: TopicName, *, force: bool, known_present: bool = False) -> None:
    """Delete a non-partitioned topic or one partition (Rule 2); 404 when it does not exist.
    ``known_present``: the caller has just listed it (skips the namespace listing that checks)."""
    await require_namespace(s, topic.namespace_name)
    key = str(topic)
    loaded = s.topics.get(key)
    if loaded is None and not known_present and not await s.topic_exists(topic):
        raise RestError(404, f"Topic {topic} not found")
    if loaded is not None and not loaded.closed:
        active = bool(loaded.producers) or any(sub.consumers for sub in loaded.subscriptions.values())
        if active and not force:
            raise RestError(412, "Topic has active producers/subscriptions")
    async with s.hold_loading(topic):  # no client loads it again half-deleted
        loaded = s.topics.get(key)
        if loaded is not None and not loaded.closed:
            await s.unload(loaded)
        try:
            await delete_stored_topic(s, topic)
        except ManagedLedgerError as exc:
            raise RestError(500, f"cannot delete the compacted ledger of {topic}: {exc}") from None


async def delete_partitioned_topic(s: BrokerService, topic: TopicName, *, force: bool) -> None:
    """Delete every partition, then the partitioned topic's metadata (Rule 3); 404 when it is not
    a partitioned topic."""
    await require_namespace(s, topic.namespace_name)
    n = await s.namespaces.get_partitions(topic)
    if not n:
        raise RestError(404, f"Partitioned topic {topic} does not exist")
    if not force:
        for t in loaded_partitions(s.topics, topic, n).values():
            if t.producers or any(sub.consumers for sub in t.subscriptions.values()):
                raise RestError(412, "Topic has active producers/subscriptions")
    await for_each_bounded(
        await present_partitions(s, topic, n), lambda part: delete_topic(s, part, force=True, known_present=True)
    )
    await s.schemas.delete(topic)
    await s.topic_policies.delete_all(topic)
    await s.namespaces.delete_partitioned_topic(topic)


async def truncate_topic(t: Topic) -> list[int]:
    """Rule 5 on a loaded topic; returns the ids of the ledgers deleted."""
    for sub in list(t.subscriptions.values()):
        if not sub.closed and sub.durable:
            await sub.cursor.clear_backlog()
    if t.dedup is not None:
        await t.dedup.snapshot()
    try:
        await t.ml.rollover()
    except ManagedLedgerError:
        pass  # not writable (terminated, storage unavailable): its closed ledgers still go
    return await t.ml.trim([info.ledger_id for info in t.ml.trimmable_ledgers()])
