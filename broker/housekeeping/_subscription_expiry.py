"""Subscription expiration, as Pulsar's ``subscriptionExpirationTimeMinutes`` and the namespace
policy ``subscription_expiration_time_minutes``.

Rules:

* Rule 1 (policy): a topic's expiration time is its namespace's
  ``subscription_expiration_time_minutes`` when set, else the broker's
  ``subscriptionExpirationTimeMinutes``; 0 means its subscriptions never expire.
* Rule 2 (activity): a subscription with a consumer is active. Otherwise its last activity
  (`Subscription.last_active`, Pulsar's cursor ``lastActive``) is the latest of its creation or
  loading, a consumer joining or leaving, an acknowledgement and a seek. It is not persisted:
  after a restart it counts from the topic's loading, so a subscription expires no earlier than
  in Pulsar, possibly later.
* Rule 3 (expiry): every ``subscriptionExpiryCheckIntervalInMinutes`` (read each round; 0 = no
  check) the durable subscriptions of the loaded persistent topics that have no consumer and were
  inactive for longer than their expiration time are deleted as an admin delete does
  (`Topic.unsubscribe`). The broker's own cursors (deduplication, compaction) are not
  subscriptions here. Topics that are not loaded are not checked, as in Pulsar; non-persistent
  subscriptions exist only while they have consumers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from protocols.pulsar import NamespaceName

from ..topics._compaction import COMPACTION_CURSOR
from ..topics._dedup import DEDUP_CURSOR

if TYPE_CHECKING:
    from .._service import BrokerService

__all__ = ["SubscriptionExpiry", "NAMESPACE_KEY"]

log = logging.getLogger(__name__)

NAMESPACE_KEY = "subscription_expiration_time_minutes"
"""The namespace Policies field (Pulsar's name) holding a namespace's expiration time in minutes."""

_IDLE_CHECK_S = 60.0  # how soon a check switched off by config is looked at again


class SubscriptionExpiry:
    """Rules 1 - 3 for one broker service; `run` is its loop (a task in the service's nursery)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service

    def minutes(self, ns_policies: dict[str, Any] | None) -> int:
        """The expiration time in force for a namespace with these policies (Rule 1)."""
        value = (ns_policies or {}).get(NAMESPACE_KEY)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return self.service.config.subscription_expiration_time_minutes

    async def check(self) -> list[str]:
        """One round of Rule 3; the deleted subscriptions' ``topic/subscription`` names."""
        s = self.service
        now = s.clock()
        minutes_of: dict[NamespaceName, int] = {}
        deleted: list[str] = []
        for topic in list(s.topics.values()):
            ns = topic.name.namespace_name
            if topic.closed:
                continue
            if ns not in minutes_of:
                minutes_of[ns] = self.minutes(await s.namespaces.get_policies(ns))
            if minutes_of[ns] <= 0:
                continue
            limit_s = minutes_of[ns] * 60.0
            for sub in list(topic.subscriptions.values()):
                if (
                    sub.closed
                    or not sub.durable
                    or sub.consumers
                    or sub.name in (DEDUP_CURSOR, COMPACTION_CURSOR)
                    or now - sub.last_active <= limit_s
                ):
                    continue
                try:
                    await topic.unsubscribe(sub)
                except Exception as exc:
                    log.warning("deleting expired subscription %s failed: %s", sub.full_name, exc)
                    continue
                log.info(
                    "deleted subscription %s: no consumer and no activity for %.0f minutes",
                    sub.full_name,
                    (now - sub.last_active) / 60,
                )
                deleted.append(sub.full_name)
        return deleted

    async def run(self) -> None:
        """Check every ``subscriptionExpiryCheckIntervalInMinutes`` (Rule 3), for ever."""
        while True:
            interval_min = self.service.config.subscription_expiry_check_interval_minutes
            if interval_min <= 0:
                await trio.sleep(_IDLE_CHECK_S)
                continue
            await trio.sleep(interval_min * 60.0)
            try:
                await self.check()
            except Exception as exc:
                log.warning("subscription expiry check failed: %s", exc)
