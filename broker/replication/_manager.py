"""Which replicators a loaded topic runs: one per remote cluster of its replication clusters.

Rules:

* Rule 1 (which clusters): a topic's replication clusters are its own ``replicationClusters``
  override (topic policies; a partition falls back to its partitioned topic's), else its
  namespace's ``replication_clusters`` policy, else only this cluster. Every cluster of them but
  this broker's (``clusterName``) gets a replicator; only persistent topics replicate.
* Rule 2 (when): `refresh` runs when a topic loads (before it serves any client, so a producer's
  first message is already behind the new replicator cursor), when its namespace's or its own
  policies change through this broker's admin API, and on the service's policy recheck. A
  cluster added starts a replicator whose cursor is created at ``replicationStartAt`` (latest by
  default, as Pulsar; earliest copies what the topic holds); a cluster removed stops its
  replicator and deletes its cursor, so the entries it held can go, as Pulsar does.
* Rule 3: the remote's ``brokerServiceUrl`` is read from its cluster record (`ClusterResources`)
  at each connection of a replicator, never cached.
* Rule 5 (the remote topic, ``createTopicToRemoteClusterForReplication``, on by default as in
  Pulsar 4.0): before a replicator creates its producer it makes the remote topic match the local
  one through the remote's admin REST (its cluster record's ``serviceUrl``, with this broker's
  ``brokerClient*`` credentials): a partitioned topic is created there with the same partitions
  when the remote has none, a non-partitioned one is created when missing; different partition
  counts, or a partitioned topic on one side only, stop the replicator with Pulsar's error (it
  retries with its backoff). Off: the remote must not have a partitioned topic of that name.
* Rule 6 (credentials and TLS): replicators present this broker's ``brokerClient*`` credentials
  (token, basic, or a TLS client certificate) to the remote brokers, as its admin calls do; the
  remote must accept them and let the role produce (a super user, as Pulsar advises). With
  ``brokerClientTlsEnabled`` they connect to the remote's ``brokerServiceUrlTls`` (and call its
  ``serviceUrlTls``) with the broker client's TLS settings; a remote without those URLs is
  reached on the plain ones.
* Rule 4 (after a restart): `resume`, run once when the service starts, loads every topic of a
  namespace replicated to another cluster that has a replicator cursor, so replication picks up
  where the cursors stand without waiting for a client; a topic with nothing left to send
  unloads again when idle. Topics this broker does not serve (another broker owns their bundle)
  are left to their owner. A topic replicated only by its own topic policy in a namespace that is
  not replicated resumes when something loads it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from magnetar.common.admin_client import AdminError
from managed_ledger import CursorNotFound, InitialPosition, ManagedLedgerError
from protocols.pulsar import InvalidTopicNameError, NamespaceName, TopicName

from .._errors import BrokerServiceError
from ..resources._clusters import ClusterResources
from ..schema._registry import version_from_bytes
from ..topics._replication_view import (
    REPLICATOR_PREFIX,
    is_replicator_name,
    replicator_cursor,
    replicator_producer,
)
from ..topics._topic_limits import topic_overrides
from ._remote import Dialer, RemoteError
from ._replicator import Replicator

if TYPE_CHECKING:
    from .._service import BrokerService
    from ..topics._topic import Topic

__all__ = ["Replication", "TOPIC_REPLICATION_KEY", "NAMESPACE_REPLICATION_KEY"]

log = logging.getLogger(__name__)

TOPIC_REPLICATION_KEY = "replicationClusters"
"""The topic-policies key of a topic's replication clusters (Pulsar's TopicPolicies field)."""
NAMESPACE_REPLICATION_KEY = "replication_clusters"
"""The Policies key of a namespace's replication clusters."""


class Replication:
    """The replicators of the service's loaded topics (module rules)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.clusters = ClusterResources(service.store)

    @property
    def local_cluster(self) -> str:
        """This broker's ``clusterName``."""
        return self.service.config.cluster_name

    async def clusters_of(
        self, topic: TopicName, ns_policies: Mapping[str, Any] | None = None, own: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Rule 1: the topic's replication clusters."""
        if own is None:
            own = await topic_overrides(self.service, topic)
        clusters = own.get(TOPIC_REPLICATION_KEY)
        if not clusters:
            if ns_policies is None:
                ns_policies = await self.service.namespaces.get_policies(topic.namespace_name) or {}
            clusters = ns_policies.get(NAMESPACE_REPLICATION_KEY)
        return sorted({str(c) for c in clusters or [self.local_cluster]})

    async def refresh(
        self, topic: Topic, ns_policies: Mapping[str, Any] | None = None, own: Mapping[str, Any] | None = None
    ) -> None:
        """Rule 2: start and stop the topic's replicators to match its replication clusters.
        Raises `ManagedLedgerError` when a cursor cannot be opened or deleted (the next refresh
        retries)."""
        if topic.closed or not topic.name.persistent:
            return
        remotes = set(await self.clusters_of(topic.name, ns_policies, own)) - {self.local_cluster}
        prefix = REPLICATOR_PREFIX + "."
        stored = {name[len(prefix) :] for name in topic.ml.cursors if is_replicator_name(name)}
        for remote in sorted(set(topic.replicators) - remotes):
            topic.replicators.pop(remote).stop()
            log.info("replication of %s to %s stopped", topic.name, remote)
        for remote in sorted(stored - remotes):
            try:
                await topic.ml.delete_cursor(replicator_cursor(remote))
            except CursorNotFound:
                pass
        for remote in sorted(remotes - set(topic.replicators)):
            await self._start(topic, remote)

    async def _start(self, topic: Topic, remote: str) -> None:
        start = (
            InitialPosition.EARLIEST
            if self.service.config.replication_start_at == "earliest"
            else InitialPosition.LATEST
        )
        cursor = await topic.ml.open_cursor(replicator_cursor(remote), initial_position=start)
        name = topic.name

        async def remote_url() -> str:
            data = await self.clusters.get(remote) or {}  # Rule 3
            tls = str(data.get("brokerServiceUrlTls") or "") if self.service.broker_client.tls_enabled else ""
            return tls or str(data.get("brokerServiceUrl") or "")

        async def local_schema(version: bytes) -> dict[str, Any] | None:
            try:
                found = await self.service.schemas.get(name, version_from_bytes(version))
            except ValueError:
                return None
            if found is None:
                return None
            info, _ = found
            return {
                "name": info.name,
                "schema_data": info.data,
                "type": info.type,
                "properties": [{"key": k, "value": v} for k, v in info.properties],
            }

        async def prepare() -> None:
            await self._prepare_remote(name, remote)

        replicator = Replicator(
            topic_name=str(name),
            local_cluster=self.local_cluster,
            remote_cluster=remote,
            producer_name=replicator_producer(self.local_cluster, remote),
            cursor=cursor,
            remote_url=remote_url,
            local_schema=local_schema,
            prepare=prepare,
            dialer=self._dialer,
            queue_size=self.service.config.replication_producer_queue_size,
        )
        topic.replicators[remote] = replicator
        try:
            await topic.start_task(replicator.run)
        except BaseException:
            topic.replicators.pop(remote, None)
            raise
        log.info("replication of %s to %s started", name, remote)

    async def refresh_quietly(
        self, topic: Topic, ns_policies: Mapping[str, Any] | None = None, own: Mapping[str, Any] | None = None
    ) -> None:
        """`refresh`, logging a failure instead of raising it (Rule 2's later triggers retry)."""
        try:
            await self.refresh(topic, ns_policies, own)
        except (ManagedLedgerError, BrokerServiceError, ValueError) as exc:  # closed meanwhile, too
            log.warning("replication of %s not updated: %s", topic.name, exc)

    async def resume(self) -> None:
        """Rule 4: load the topics whose replicators may have something left to send."""
        service = self.service
        for tenant in await service.namespaces.list_tenants():
            for name in await service.namespaces.list_namespaces(tenant):
                ns = NamespaceName.parse(name)
                policies = await service.namespaces.get_policies(ns) or {}
                if not set(policies.get(NAMESPACE_REPLICATION_KEY) or []) - {self.local_cluster}:
                    continue
                prefix = f"{ns}/persistent/"
                for ml_name in await service.factory.list(prefix):
                    cursors = await service.factory.stored_cursors(ml_name)
                    if not any(is_replicator_name(c) for c in cursors):
                        continue
                    try:
                        await service.get_topic(TopicName.from_managed_ledger_name(ml_name), create=False)
                    except (BrokerServiceError, InvalidTopicNameError) as exc:
                        log.info("replication of %s not resumed here: %s", ml_name, exc)

    def _dialer(self) -> Dialer:
        """Rule 6: CONNECT's auth method and data from the broker client's plugin, and its TLS."""
        client = self.service.broker_client
        ctx = client.ssl_context if client.tls_enabled else None
        header = client.authorization() or ""
        if client.method == "token" and header.startswith("Bearer "):
            return Dialer(("token", header.removeprefix("Bearer ").encode()), ctx)
        if client.method == "basic":
            return Dialer(("basic", client.credentials.basic.encode()), ctx)
        if client.method == "tls":
            return Dialer(("tls", b""), ctx)
        return Dialer(("", b""), ctx)

    async def _prepare_remote(self, topic: TopicName, remote: str) -> None:
        """Rule 5; raises `RemoteError` when the remote topic cannot match the local one."""
        data = await self.clusters.get(remote) or {}
        base = topic.partitioned_topic if topic.partition >= 0 else topic
        local = await self.service.namespaces.get_partitions(base)
        create = self.service.config.create_topic_to_remote_cluster_for_replication
        tls = str(data.get("serviceUrlTls") or "") if self.service.broker_client.tls_enabled else ""
        url = tls or str(data.get("serviceUrl") or "")
        if not url:
            if create:
                raise RemoteError(f"cluster {remote} has no serviceUrl to create {base} on")
            return
        rest = f"{url.rstrip('/')}/admin/v2/{base.domain}/{base.tenant}/{base.namespace}/{base.encoded_local_name}"
        client = self.service.broker_client
        try:
            try:
                answer = await client.request("GET", f"{rest}/partitions", timeout_s=30)
                remote_n = int(answer.json().get("partitions", 0))
            except AdminError as exc:
                if exc.status != 404:
                    raise
                remote_n = 0
            if not create:
                if remote_n:
                    raise RemoteError(f"the partitions of {base} in cluster {remote} are {remote_n}, not 0")
                return
            if local == 0 and remote_n == 0:
                await _create(client, "PUT", rest, None)
            elif local and remote_n == 0:
                await _create(client, "PUT", f"{rest}/partitions", local)
                answer = await client.request("GET", f"{rest}/partitions", timeout_s=30)
                if topic.partition >= int(answer.json().get("partitions", 0)):
                    raise RemoteError(
                        f"Topic type is not matched between local and remote cluster: local partitions: {local}, "
                        "remote partitions: 0"
                    )
            elif local != remote_n:
                raise RemoteError(
                    "The number of topic partitions is inconsistent between local and remote clusters: "
                    f"local partitions: {local}, remote partitions: {remote_n}"
                )
        except AdminError as exc:
            raise RemoteError(f"preparing {base} in cluster {remote}: {exc}") from None


async def _create(client: Any, method: str, url: str, body: Any) -> None:
    """A create call where 409 (it exists already) is success."""
    try:
        await client.request(method, url, body, timeout_s=30)
    except AdminError as exc:
        if exc.status != 409:
            raise
