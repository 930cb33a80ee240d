"""Offload policies of topics as the broker resolves them, and the broker's hook into tiered storage.

Where each level lives (Pulsar's names and JSON):

* namespace: the namespace ``Policies`` fields ``offload_policies`` (an ``OffloadPolicies`` object),
  ``offload_threshold`` (bytes, -1 = unset), ``offload_threshold_in_seconds`` (-1 = unset) and
  ``offload_deletion_lag_ms`` (null = unset); the three older fields fill what ``offload_policies``
  leaves unset (Pulsar's ``oldPoliciesCompatible``);
* topic: the ``offloadPolicies`` key of the topic's overrides (`TopicPolicyStore`), a partition
  falling back to its partitioned topic's;
* broker: the ``[offload]`` config (`tiered_storage.TieredStorageConfig`).

`resolve_offload_policies` merges them field by field, topic first. `install_offload` gives the
managed-ledger factory that resolver (so every managed ledger offloads by its topic's policies) and
exports the tier's metrics on ``/metrics``; it does nothing when the factory has no tier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocols.pulsar import TopicName
from tiered_storage import OffloadPolicies

if TYPE_CHECKING:
    from .._service import BrokerService

__all__ = ["TOPIC_OFFLOAD_KEY", "install_offload", "namespace_offload_policies", "resolve_offload_policies"]

TOPIC_OFFLOAD_KEY = "offloadPolicies"
"""The key of a topic's offload policies among its overrides (Pulsar's TopicPolicies field)."""


def namespace_offload_policies(policies: dict[str, Any] | None) -> OffloadPolicies | None:
    """The namespace level of the offload policies from its Policies JSON (None when it sets none)."""
    if not policies:
        return None
    raw = policies.get("offload_policies")
    level = OffloadPolicies.from_json(raw) if isinstance(raw, dict) else OffloadPolicies()
    older: dict[str, Any] = {}
    threshold = policies.get("offload_threshold")
    if isinstance(threshold, int) and threshold != -1:
        older["managedLedgerOffloadThresholdInBytes"] = threshold
    seconds = policies.get("offload_threshold_in_seconds")
    if isinstance(seconds, int) and seconds != -1:
        older["managedLedgerOffloadThresholdInSeconds"] = seconds
    lag = policies.get("offload_deletion_lag_ms")
    if isinstance(lag, int):
        older["managedLedgerOffloadDeletionLagInMillis"] = lag
    merged = OffloadPolicies.merge(level, OffloadPolicies(older))
    return merged if merged.values else None


async def topic_offload_policies(service: BrokerService, topic: TopicName) -> OffloadPolicies | None:
    """The topic level (its own, else its partitioned topic's), None when not set."""
    names = [topic] if topic.partition < 0 else [topic, topic.partitioned_topic]
    for name in names:
        raw = (await service.topic_policies.get(name)).get(TOPIC_OFFLOAD_KEY)
        if isinstance(raw, dict):
            return OffloadPolicies.from_json(raw)
    return None


async def resolve_offload_policies(service: BrokerService, topic: TopicName) -> OffloadPolicies:
    """The offload policies in force for ``topic`` (topic > namespace > broker, field by field)."""
    tier = getattr(service.factory, "tier", None)
    broker_level = tier.broker_policies if tier is not None else None
    ns_level = namespace_offload_policies(await service.namespaces.get_policies(topic.namespace_name))
    return OffloadPolicies.merge(await topic_offload_policies(service, topic), ns_level, broker_level)


def install_offload(service: BrokerService) -> None:
    """Give the factory the broker's offload-policies resolver and export the tier's metrics."""
    factory = service.factory
    tier = getattr(factory, "tier", None)
    if tier is None:
        return

    async def resolver(ml_name: str) -> OffloadPolicies:
        return await resolve_offload_policies(service, TopicName.from_managed_ledger_name(ml_name))

    factory.offload_policies = resolver
    service.metrics.extra_registries.append(tier.metrics.registry)
