"""What the retention service needs from the broker: policies from the metadata store, publish times.

* Namespace policies are the namespace's Pulsar ``Policies`` JSON (``retention_policies``,
  ``message_ttl_in_seconds``, ``backlog_quota_map``), read through `NamespaceResources`.
* Topic-level policies live at ``/admin/topic-policies/{tenant}/{ns}/persistent/{encoded-topic}``
  in the same JSON shape (Pulsar keeps them in a system topic; a metadata node is simpler and is
  read by every broker at once). A partition without its own policies uses its partitioned topic's.
* Resolution is topic > namespace > broker defaults (`retention.TopicPolicies.resolve`).
* The backlog-quota decisions that hold or reject producers live on the loaded `Topic` they
  concern (`TopicQuotaStates`): never evicted while it is loaded, gone when it unloads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from managed_ledger import Entry
from metadata import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from protocols.pulsar import TopicName
from retention import PolicyOverrides, QuotaDecision, RetentionConfig, TopicPolicies

from ..resources._namespaces import NamespaceResources
from ..topics._entries import entry_metadata

__all__ = ["StorePoliciesProvider", "TopicPolicyStore", "TopicQuotaStates", "publish_time_of", "TOPIC_POLICIES_ROOT"]

TOPIC_POLICIES_ROOT = "/admin/topic-policies"


def publish_time_of(entry: Entry) -> int | None:
    """The ``publish_time`` (ms) of a stored entry ``[metadataSize u32][MessageMetadata][payload]``,
    None when the entry is not a Pulsar message (never raises)."""
    try:
        t = entry_metadata(entry.data).publish_time
    except Exception:
        return None
    return t or None


class TopicQuotaStates:
    """`retention.QuotaStates` kept on the broker's loaded topics (``topics``: the service's map of
    loaded `Topic` by ``persistent://`` name; each has a ``quota_decisions`` tuple). A decision for a
    topic that is not loaded (or no longer) is dropped: the broker evaluates a topic's quota again
    when a producer attaches, and the topic's state goes with the topic when it unloads."""

    def __init__(self, topics: Mapping[str, Any]) -> None:
        self._topics = topics

    def _loaded(self, topic: str) -> Any:
        t = self._topics.get(topic)
        return None if t is None or t.closed else t

    def put(self, topic: str, decisions: Sequence[QuotaDecision]) -> None:
        """Record the decisions on the loaded topic (dropped when it is not loaded)."""
        t = self._loaded(topic)
        if t is not None:
            t.quota_decisions = tuple(decisions)

    def get(self, topic: str) -> Sequence[QuotaDecision]:
        """The decisions recorded on the loaded topic (none when it is not loaded)."""
        t = self._loaded(topic)
        return () if t is None else t.quota_decisions

    def discard(self, topic: str) -> None:
        """Clear the loaded topic's decisions."""
        t = self._loaded(topic)
        if t is not None:
            t.quota_decisions = ()

    def prune(self) -> None:
        """Nothing to do: an unloaded topic takes its decisions with it."""


class TopicPolicyStore:
    """Topic-level policy overrides in the metadata store (JSON in the namespace Policies shape).

    Writes are compare-and-set with retry, so two admins changing different policies of one topic
    never lose each other's change.
    """

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @staticmethod
    def _path(topic: TopicName) -> str:
        return f"{TOPIC_POLICIES_ROOT}/{topic.rest_path}"

    async def get(self, topic: TopicName) -> dict[str, Any]:
        """The raw overrides of ``topic`` itself (empty when none are set)."""
        try:
            data, _ = await self.store.get(self._path(topic))
        except NoNodeError:
            return {}
        return json.loads(data) if data else {}

    async def update(self, topic: TopicName, key: str, value: Any) -> dict[str, Any]:
        """Set (or with ``value=None`` remove) one key of the overrides; returns the new overrides."""
        path = self._path(topic)
        while True:
            try:
                data, stat = await self.store.get(path)
            except NoNodeError:
                if value is None:
                    return {}
                try:
                    await self.store.create(path, json.dumps({key: value}).encode(), make_parents=True)
                    return {key: value}
                except NodeExistsError:
                    continue
            current = json.loads(data) if data else {}
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
            try:
                await self.store.set(path, json.dumps(current).encode(), version=stat.version)
                return current
            except BadVersionError:
                continue

    async def delete_all(self, topic: TopicName) -> None:
        """Forget every override of ``topic`` (on topic deletion)."""
        try:
            await self.store.delete(self._path(topic))
        except NoNodeError:
            pass


class StorePoliciesProvider:
    """`retention.PoliciesProvider` over the metadata store: topic > namespace > ``config`` defaults.

    Raises `ValueError` when stored policies do not parse (the service records it and skips the
    topic for that pass).
    """

    def __init__(
        self, namespaces: NamespaceResources, topic_policies: TopicPolicyStore, config: RetentionConfig
    ) -> None:
        self.namespaces = namespaces
        self.topic_policies_store = topic_policies
        self.config = config

    async def overrides(self, topic: TopicName) -> tuple[PolicyOverrides | None, PolicyOverrides | None]:
        """(namespace overrides, topic overrides) of ``topic``; None where nothing is stored."""
        ns = await self.namespaces.get_policies(topic.namespace_name)
        raw = await self.topic_policies_store.get(topic)
        if not raw and topic.partition >= 0:
            raw = await self.topic_policies_store.get(topic.partitioned_topic)
        return (None if ns is None else PolicyOverrides.from_json(ns), PolicyOverrides.from_json(raw) if raw else None)

    async def topic_policies(self, topic: str) -> TopicPolicies:
        """The effective policies of ``topic`` (``persistent://...``)."""
        ns, t = await self.overrides(TopicName.parse(topic))
        return TopicPolicies.resolve(self.config, ns, t)
