"""Tenants, namespaces, their policies and partitioned-topic metadata in the metadata store.

Layout (JSON values, as Pulsar's admin resources):

* ``/admin/policies/{tenant}``: TenantInfo ``{"adminRoles": [...], "allowedClusters": [...]}``
* ``/admin/policies/{tenant}/{namespace}``: Policies (``deduplicationEnabled``,
  ``schema_compatibility_strategy``, ``is_allow_auto_update_schema``, ``autoTopicCreationOverride``,
  ... any extra keys are kept as given)
* ``/admin/partitioned-topics/{tenant}/{namespace}/persistent/{encoded-topic}``: ``{"partitions": N}``

Every write is compare-and-set or create (two brokers never both win); reads go to the store each
time so that a change made through another broker or the admin API is seen at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from metadata import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from protocols.pulsar import NamespaceName, TopicName

from ._bundles import policies_bundles

__all__ = ["NamespaceResources", "default_policies"]

POLICIES_ROOT = "/admin/policies"
DEFAULT_NUM_BUNDLES = 4
PARTITIONED_ROOT = "/admin/partitioned-topics"


def default_policies(cluster: str, num_bundles: int = DEFAULT_NUM_BUNDLES) -> dict[str, Any]:
    """The Policies a namespace gets when created without any: ``num_bundles`` equal bundles
    (Pulsar's ``defaultNumberOfNamespaceBundles``, 4)."""
    return {
        "replication_clusters": [cluster],
        "bundles": policies_bundles(num_bundles),
        "deleted": False,
    }


class NamespaceResources:
    """Reads and writes tenant, namespace and partitioned-topic metadata.

    Methods raise the metadata store's errors (``NodeExistsError`` on a duplicate create,
    ``NoNodeError`` for a missing parent) unless they say otherwise.
    """

    def __init__(self, store: MetadataStore, cluster: str, num_bundles: int = DEFAULT_NUM_BUNDLES) -> None:
        self.store = store
        self.cluster = cluster
        self.num_bundles = num_bundles  # bundles of a namespace created without policies

    # ------------------------------------------------------------------ tenants and namespaces

    async def create_tenant(self, tenant: str, info: dict[str, Any] | None = None) -> None:
        """Create a tenant; raises ``NodeExistsError`` when it exists."""
        NamespaceName.parse(f"{tenant}/x")
        value = info or {"adminRoles": [], "allowedClusters": [self.cluster]}
        await self.store.create(f"{POLICIES_ROOT}/{tenant}", json.dumps(value).encode(), make_parents=True)

    async def tenant_exists(self, tenant: str) -> bool:
        """Whether the tenant exists."""
        return await self.store.exists(f"{POLICIES_ROOT}/{tenant}") is not None

    async def list_tenants(self) -> list[str]:
        """Names of all tenants, sorted."""
        try:
            return await self.store.children(POLICIES_ROOT)
        except NoNodeError:
            return []

    async def create_namespace(self, ns: NamespaceName, policies: dict[str, Any] | None = None) -> None:
        """Create a namespace of an existing tenant; ``NoNodeError`` if the tenant is missing."""
        if not await self.tenant_exists(ns.tenant):
            raise NoNodeError(f"{POLICIES_ROOT}/{ns.tenant}")
        value = policies if policies is not None else default_policies(self.cluster, self.num_bundles)
        await self.store.create(f"{POLICIES_ROOT}/{ns}", json.dumps(value).encode())

    async def ensure_namespace(self, ns: NamespaceName) -> None:
        """Create the tenant and namespace if missing (used for ``public/default`` at start)."""
        for create in (lambda: self.create_tenant(ns.tenant), lambda: self.create_namespace(ns)):
            try:
                await create()
            except NodeExistsError:
                pass

    async def list_namespaces(self, tenant: str) -> list[str]:
        """``tenant/ns`` names of a tenant, sorted; empty when the tenant does not exist."""
        try:
            return [f"{tenant}/{n}" for n in await self.store.children(f"{POLICIES_ROOT}/{tenant}")]
        except NoNodeError:
            return []

    async def get_policies(self, ns: NamespaceName) -> dict[str, Any] | None:
        """The namespace's Policies, or None when the namespace does not exist."""
        try:
            data, _ = await self.store.get(f"{POLICIES_ROOT}/{ns}")
        except NoNodeError:
            return None
        return json.loads(data) if data else {}

    async def update_policies(self, ns: NamespaceName, changes: dict[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` into the Policies with compare-and-set, retrying on a concurrent change."""
        path = f"{POLICIES_ROOT}/{ns}"
        while True:
            data, stat = await self.store.get(path)
            policies = json.loads(data) if data else {}
            policies.update(changes)
            try:
                await self.store.set(path, json.dumps(policies).encode(), version=stat.version)
                return policies
            except BadVersionError:
                continue

    async def modify_policies(
        self, ns: NamespaceName, change: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any] | None:
        """Apply ``change`` (which edits the dict in place) to the Policies with compare-and-set,
        re-reading and re-applying on a concurrent change; None when the namespace does not exist."""
        path = f"{POLICIES_ROOT}/{ns}"
        while True:
            try:
                data, stat = await self.store.get(path)
            except NoNodeError:
                return None
            policies = json.loads(data) if data else {}
            change(policies)
            try:
                await self.store.set(path, json.dumps(policies).encode(), version=stat.version)
                return policies
            except BadVersionError:
                continue
            except NoNodeError:
                return None

    async def get_tenant_info(self, tenant: str) -> dict[str, Any] | None:
        """The tenant's TenantInfo, or None when the tenant does not exist."""
        try:
            data, _ = await self.store.get(f"{POLICIES_ROOT}/{tenant}")
        except NoNodeError:
            return None
        return json.loads(data) if data else {}

    async def namespace_exists(self, ns: NamespaceName) -> bool:
        """Whether the namespace exists."""
        return await self.store.exists(f"{POLICIES_ROOT}/{ns}") is not None

    # ------------------------------------------------------------------ partitioned topics

    async def get_partitions(self, topic: TopicName) -> int:
        """Number of partitions of a partitioned topic; 0 when it is not partitioned."""
        try:
            data, _ = await self.store.get(f"{PARTITIONED_ROOT}/{topic.partitioned_topic.rest_path}")
        except NoNodeError:
            return 0
        return int(json.loads(data).get("partitions", 0))

    async def create_partitioned_topic(
        self, topic: TopicName, partitions: int, properties: Mapping[str, str] | None = None
    ) -> None:
        """Record a partitioned topic (with its ``properties``, Pulsar's PartitionedTopicMetadata
        ``properties``, when there are any); ``NodeExistsError`` when it exists."""
        if partitions <= 0:
            raise ValueError("a partitioned topic needs at least one partition")
        record: dict[str, object] = {"partitions": partitions}
        if properties:
            record["properties"] = dict(properties)
        await self.store.create(f"{PARTITIONED_ROOT}/{topic.rest_path}", json.dumps(record).encode(), make_parents=True)

    async def partitioned_topic_properties(self, topic: TopicName) -> dict[str, str]:
        """The properties a partitioned topic was created with (empty when none, or no such topic)."""
        try:
            data, _ = await self.store.get(f"{PARTITIONED_ROOT}/{topic.partitioned_topic.rest_path}")
        except NoNodeError:
            return {}
        return dict(json.loads(data).get("properties") or {})

    async def delete_partitioned_topic(self, topic: TopicName) -> None:
        """Forget a partitioned topic's metadata (its partitions' data is not touched)."""
        try:
            await self.store.delete(f"{PARTITIONED_ROOT}/{topic.rest_path}")
        except NoNodeError:
            pass

    async def list_partitioned_topics(self, ns: NamespaceName, domain: str = "persistent") -> dict[str, int]:
        """``{full topic name: partitions}`` for the namespace's partitioned topics of ``domain``
        (``persistent`` or ``non-persistent``)."""
        base = f"{PARTITIONED_ROOT}/{ns}/{domain}"
        try:
            names = await self.store.children(base)
        except NoNodeError:
            return {}
        out = {}
        for encoded in names:
            topic = TopicName.from_managed_ledger_name(f"{ns}/{domain}/{encoded}")  # same layout
            out[str(topic)] = await self.get_partitions(topic)
        return out
