"""Cluster records in the metadata store, as Pulsar keeps them.

Layout: ``/admin/clusters/{cluster}`` holds Pulsar's ClusterData JSON (``serviceUrl``,
``serviceUrlTls``, ``brokerServiceUrl``, ``brokerServiceUrlTls``). Written once by
``magnetar initialize-cluster-metadata``; a create never overwrites (compare-and-set by create).
"""

from __future__ import annotations

import json
import re
from typing import Any

from metadata import MetadataStore, NodeExistsError, NoNodeError

__all__ = ["CLUSTERS_ROOT", "ClusterResources", "cluster_data"]

CLUSTERS_ROOT = "/admin/clusters"

_NAME = re.compile(r"[-=:.\w]{1,255}")  # Pulsar's named-entity rule


def cluster_data(
    *,
    web_service_url: str = "",
    web_service_url_tls: str = "",
    broker_service_url: str = "",
    broker_service_url_tls: str = "",
) -> dict[str, Any]:
    """Pulsar's ClusterData JSON for these URLs (comma-separated host lists allowed, as Pulsar)."""
    return {
        "serviceUrl": web_service_url,
        "serviceUrlTls": web_service_url_tls,
        "brokerServiceUrl": broker_service_url,
        "brokerServiceUrlTls": broker_service_url_tls,
    }


class ClusterResources:
    """Reads and creates cluster records; raises the store's errors unless a method says otherwise."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @staticmethod
    def check_name(name: str) -> str:
        """``name`` if it is a valid cluster name (letters, digits, ``-_=:.``), else ValueError."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"invalid cluster name {name!r}: use letters, digits, '-', '_', '=', ':' and '.'")
        return name

    async def get(self, name: str) -> dict[str, Any] | None:
        """The cluster's ClusterData, or None when it does not exist."""
        try:
            data, _ = await self.store.get(f"{CLUSTERS_ROOT}/{self.check_name(name)}")
        except NoNodeError:
            return None
        value = json.loads(data) if data else {}
        return value if isinstance(value, dict) else {}

    async def create(self, name: str, data: dict[str, Any]) -> bool:
        """Create the cluster record; False (and nothing written) when it already exists."""
        try:
            await self.store.create(
                f"{CLUSTERS_ROOT}/{self.check_name(name)}", json.dumps(data).encode(), make_parents=True
            )
        except NodeExistsError:
            return False
        return True

    async def list(self) -> list[str]:
        """Names of the clusters recorded, sorted."""
        try:
            return sorted(await self.store.children(CLUSTERS_ROOT))
        except NoNodeError:
            return []
