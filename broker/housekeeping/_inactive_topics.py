"""Inactive-topic deletion, as Pulsar's ``brokerDeleteInactiveTopics*`` keys and ``inactiveTopicPolicies``.

Rules:

* Rule 1 (policies): a topic's `InactiveTopicPolicies` are taken whole from the first level that
  sets them: the topic's own (``inactiveTopicPolicies`` of its topic policies; a partition without
  its own uses its partitioned topic's), its namespace's (``inactive_topic_policies``), else the
  broker's keys (``brokerDeleteInactiveTopicsEnabled``, ``...Mode``,
  ``...MaxInactiveDurationSeconds``, which defaults to ``...FrequencySeconds``).
* Rule 2 (activity): a topic with a producer (or one waiting) or a consumer, being compacted,
  with open transactions (their coordinator ends them on it), or with a replication backlog, is
  active. With ``delete_when_no_subscriptions`` so is one with any subscription; with
  ``delete_when_subscriptions_caught_up`` one whose subscriptions have a backlog. The compaction
  cursor counts as a subscription (it is one in Pulsar); deduplication's cursor does not.
* Rule 3 (inactive since): the later of the last check that found the topic active and the
  topic's own last activity (loaded, looked up, a producer gone). A topic inactive for
  ``maxInactiveDurationSeconds`` is deleted at the next check, unless its retention keeps it:
  it holds entries and its retention time is infinite (-1), or has not run out since it was last
  active.
* Rule 4 (deletion): the topic is closed and its stored state deleted as an admin delete does
  (`broker.housekeeping._topic_deletion`); nothing loads it meanwhile (`BrokerService.hold_loading`), and it
  is checked again right before: a topic that became active is left alone. With
  ``delete_when_subscriptions_caught_up`` its (caught-up) subscriptions go with it. When the last
  stored partition of a partitioned topic goes and ``brokerDeleteInactivePartitionedTopicMetadataEnabled``
  is on, the partitioned topic goes too (metadata, schemas, policies).
* Rule 5 (scope and pace): loaded persistent topics are checked every
  ``brokerDeleteInactiveTopicsFrequencySeconds`` (read each round: the keys are dynamic).
  Non-persistent topics exist only while loaded and go with idle unloading. Topics that are not
  loaded are not checked (as in Pulsar; they are checked again once loaded).
* Rule 6 (unloading): a topic waiting to be deleted (deletion on, inactive, not kept for ever by
  retention) is not unloaded for idleness (`awaiting_deletion`, asked by the idle-unload loop), so
  idle unloading does not spare it; Pulsar keeps such topics loaded too.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from managed_ledger import ManagedLedgerError
from protocols.pulsar import NamespaceName, TopicName

from .._config import INACTIVE_TOPIC_DELETE_MODES, BrokerConfig
from ..topics._compaction import COMPACTION_CURSOR
from ..topics._topic_limits import topic_overrides
from ._topic_deletion import delete_stored_topic, partitions_stored

if TYPE_CHECKING:
    from .._service import BrokerService
    from ..topics._topic import Topic

__all__ = ["InactiveTopicPolicies", "InactiveTopics", "NAMESPACE_KEY", "TOPIC_KEY"]

log = logging.getLogger(__name__)

NAMESPACE_KEY = "inactive_topic_policies"
"""The namespace Policies field (Pulsar's name) holding a namespace's `InactiveTopicPolicies`."""
TOPIC_KEY = "inactiveTopicPolicies"
"""The TopicPolicies field (Pulsar's name) holding a topic's `InactiveTopicPolicies`."""

NO_SUBSCRIPTIONS, CAUGHT_UP = INACTIVE_TOPIC_DELETE_MODES


@dataclass(frozen=True)
class InactiveTopicPolicies:
    """Pulsar's InactiveTopicPolicies: whether, when and how an inactive topic is deleted."""

    delete_mode: str = NO_SUBSCRIPTIONS
    max_inactive_duration_s: int = 0
    delete_while_inactive: bool = False

    @classmethod
    def from_config(cls, config: BrokerConfig) -> InactiveTopicPolicies:
        """The broker level (Rule 1)."""
        return cls(
            config.broker_delete_inactive_topics_mode,
            config.inactive_topic_max_duration_s,
            config.broker_delete_inactive_topics_enabled,
        )

    @classmethod
    def from_json(cls, data: Any) -> InactiveTopicPolicies:
        """Parse Pulsar's JSON (``inactiveTopicDeleteMode``, ``maxInactiveDurationSeconds``,
        ``deleteWhileInactive``; a missing field takes the Java default). Raises `ValueError`."""
        if not isinstance(data, Mapping):
            raise ValueError(f"inactive topic policies must be a JSON object, not {data!r}")
        unknown = set(data) - {"inactiveTopicDeleteMode", "maxInactiveDurationSeconds", "deleteWhileInactive"}
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        mode = data.get("inactiveTopicDeleteMode")
        mode = NO_SUBSCRIPTIONS if mode is None else mode
        if mode not in INACTIVE_TOPIC_DELETE_MODES:
            raise ValueError(
                f"inactiveTopicDeleteMode must be one of {', '.join(INACTIVE_TOPIC_DELETE_MODES)}, not {mode!r}"
            )
        duration = data.get("maxInactiveDurationSeconds", 0)
        if isinstance(duration, bool) or not isinstance(duration, int) or not -(2**31) <= duration < 2**31:
            raise ValueError(f"maxInactiveDurationSeconds must be an integer, not {duration!r}")
        enabled = data.get("deleteWhileInactive", False)
        if not isinstance(enabled, bool):
            raise ValueError(f"deleteWhileInactive must be true or false, not {enabled!r}")
        return cls(mode, duration, enabled)

    def to_json(self) -> dict[str, Any]:
        """Pulsar's JSON of these policies."""
        return {
            "inactiveTopicDeleteMode": self.delete_mode,
            "maxInactiveDurationSeconds": self.max_inactive_duration_s,
            "deleteWhileInactive": self.delete_while_inactive,
        }


def _active(topic: Topic, mode: str) -> bool:
    """Rule 2."""
    if topic.producers or topic.waiting_producers or topic.consumer_count or topic.compactor.running:
        return True
    if topic.txn_buffer.ongoing:  # open transactions: their coordinator will end them here
        return True
    if any(r.backlog for r in topic.replicators.values()):
        return True  # as Pulsar, never while a replicator has something left to send
    compaction = dict(getattr(topic.ml, "cursors", {})).get(COMPACTION_CURSOR)
    subs = [sub.cursor for sub in topic.subscriptions.values() if not sub.closed]
    if compaction is not None:
        subs.append(compaction)
    if mode == NO_SUBSCRIPTIONS:
        return bool(subs)
    return any(cursor.backlog > 0 for cursor in subs)


class InactiveTopics:
    """Rules 1 - 6 for one broker service; `run` is its loop (a task in the service's nursery)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._active_at: weakref.WeakKeyDictionary[Topic, float] = weakref.WeakKeyDictionary()  # Rule 3

    async def policies(
        self, topic: TopicName, ns_policies: Mapping[str, Any] | None = None, own: Mapping[str, Any] | None = None
    ) -> InactiveTopicPolicies:
        """The policies in force for ``topic`` (Rule 1); ``ns_policies`` / ``own``: the namespace's
        policies / the topic's overrides when the caller has read them. A stored value that does
        not parse is skipped (logged) for the next level."""
        s = self.service
        if own is None:
            own = await topic_overrides(s, topic)
        if ns_policies is None:
            ns_policies = await s.namespaces.get_policies(topic.namespace_name) or {}
        for level, raw in (("topic", own.get(TOPIC_KEY)), ("namespace", ns_policies.get(NAMESPACE_KEY))):
            if raw is None:
                continue
            try:
                return InactiveTopicPolicies.from_json(raw)
            except ValueError as exc:
                log.warning("ignoring the %s inactiveTopicPolicies of %s: %s", level, topic, exc)
        return InactiveTopicPolicies.from_config(s.config)

    async def awaiting_deletion(self, topic: Topic) -> bool:
        """Whether ``topic`` waits to be deleted for inactivity: its policies delete inactive topics,
        it is inactive, and retention does not keep it for ever (Rule 6: not to be unloaded for
        idleness). Reads its policies from the metadata store."""
        policies = await self.policies(topic.name)
        return (
            policies.delete_while_inactive
            and not _active(topic, policies.delete_mode)
            and not await self._kept_for_ever(topic)
        )

    async def _kept_for_ever(self, t: Topic) -> bool:
        """Rule 3: the topic holds entries and its retention time is infinite."""
        if not int(getattr(t.ml, "number_of_entries", 0)):
            return False
        return await self._retention_minutes(t) < 0

    async def _retention_minutes(self, t: Topic) -> int:
        return (await self.service.policies.topic_policies(str(t.name))).retention.retention_time_minutes

    async def run(self) -> None:
        """Check the loaded topics every ``brokerDeleteInactiveTopicsFrequencySeconds`` until cancelled."""
        while True:
            await trio.sleep(self.service.config.broker_delete_inactive_topics_frequency_s)
            try:
                await self.check()
            except Exception as exc:  # a metadata hiccup: the next round tries again
                log.warning("inactive-topic check failed: %s", exc)

    async def check(self) -> list[TopicName]:
        """One round over the loaded persistent topics (Rules 2 - 4); the topics it deleted."""
        s = self.service
        loaded = [t for t in list(s.topics.values()) if not t.closed]
        ns_cache: dict[NamespaceName, Mapping[str, Any]] = {}
        deleted = []
        for t in loaded:
            ns = t.name.namespace_name
            try:
                if ns not in ns_cache:
                    ns_cache[ns] = await s.namespaces.get_policies(ns) or {}
                policies = await self.policies(t.name, ns_cache[ns])
                if not policies.delete_while_inactive:
                    self._active_at.pop(t, None)
                elif await self._due(t, policies) and await self._delete(t, policies):
                    deleted.append(t.name)
            except Exception as exc:  # this topic only: the others are still checked
                log.warning("inactive-topic check of %s failed: %s", t.name, exc)
        return deleted

    async def _due(self, t: Topic, policies: InactiveTopicPolicies) -> bool:
        """Rule 3: whether ``t`` is to be deleted now."""
        now = self.service.clock()
        if _active(t, policies.delete_mode):
            self._active_at[t] = now
            return False
        entries = int(getattr(t.ml, "number_of_entries", 0))
        retention_min = await self._retention_minutes(t) if entries else 0
        if entries and retention_min < 0:
            return False  # retained for ever: never deleted (and it may unload)
        since = max(self._active_at.get(t, t.last_active), t.last_active)
        if now - since < policies.max_inactive_duration_s:
            return False
        return not (entries and now - since < retention_min * 60)

    async def _delete(self, t: Topic, policies: InactiveTopicPolicies) -> bool:
        """Rule 4; True when ``t`` was deleted."""
        s = self.service
        async with s.hold_loading(t.name):
            if t.closed or s.topics.get(str(t.name)) is not t or _active(t, policies.delete_mode):
                return False  # became active, or was unloaded or deleted meanwhile
            await s.unload(t)
            try:
                await delete_stored_topic(s, t.name)
            except ManagedLedgerError as exc:
                log.warning("deleting inactive topic %s failed: %s", t.name, exc)
                return False
        log.info(
            "deleted topic %s: inactive for %d s (%s)", t.name, policies.max_inactive_duration_s, policies.delete_mode
        )
        if t.name.partition >= 0 and s.config.broker_delete_inactive_partitioned_topic_metadata_enabled:
            await self._delete_partitioned_if_empty(t.name.partitioned_topic)
        return True

    async def _delete_partitioned_if_empty(self, partitioned: TopicName) -> None:
        s = self.service
        if not await s.namespaces.get_partitions(partitioned) or await partitions_stored(s, partitioned):
            return
        await s.schemas.delete(partitioned)
        await s.topic_policies.delete_all(partitioned)
        await s.namespaces.delete_partitioned_topic(partitioned)
        log.info("deleted partitioned topic %s: its last partition was deleted for inactivity", partitioned)
