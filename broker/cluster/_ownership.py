"""Bundle ownership in a multi-broker cluster: who serves which bundle, and lookups.

A broker started with ownership (``magnetar broker``) shares the cluster's topics with the other
brokers through the metadata store (ZooKeeper), as Pulsar does. Standalone runs none of this:
its single broker owns every bundle (`BrokerService` Rule 4).

Layout (JSON values):

* ``/loadbalance/brokers/{brokerId}``: ephemeral, this broker's registration and load report
  (`LoadReport`); ``brokerId`` is ``host:port`` of its admin service (of the protocol port when
  the admin port is off). Absent while it starts or stops, so no bundle is assigned to it then.
* ``/loadbalance/leader``: ephemeral, ``{"brokerId": ..., "serviceUrl": ...}`` of the leader.
* ``/namespace/{tenant}/{namespace}/{0xLOWER_0xUPPER}``: ephemeral, the owner of a bundle
  (`OwnerInfo`: its URLs per advertised listener, as Pulsar's NamespaceEphemeralData).

Rules (states of a bundle on this broker: absent -> OWNED -> UNLOADING -> absent):

* Rule 1: a bundle is OWNED once this broker created its ownership node (compare-and-set: one
  broker wins); topics of a bundle are loaded only while it is OWNED (`check_serves`), so the
  ownership is taken before a managed ledger is opened. Others get ServiceNotReady, which the
  official client answers by looking the topic up again. A node this session holds but did not
  record (its creation's caller was cancelled after the store created it, or an unload's delete
  failed) is this broker's: the next lookup or acquire records it as OWNED, so the bundle is
  never left unserved while the session lives.
* Rule 2 (lookup): Connect when this broker owns the bundle; Redirect (authoritative) to the
  owner when another broker does; an unowned bundle is assigned to the least loaded registered
  broker (fewest loaded topics, then bundles; ties broken by rendezvous hash so a namespace's
  bundles spread): Connect after taking it when that is this broker, else Redirect with
  ``authoritative`` set, and the broker receiving an authoritative lookup for an unowned bundle
  takes it (Pulsar's lookup protocol).
* Rule 3 (unload): OWNED -> UNLOADING refuses new clients of the bundle, closes its loaded topics
  (producers and consumers are told to reconnect, adds in flight finish, cursors persisted, the
  managed ledgers closed) and only then deletes the ownership node.
* Rule 4 (stop): a stopping broker first deletes its registration (nobody assigns it bundles),
  then unloads every bundle (Rule 3); SIGTERM therefore moves clients without an error.
* Rule 5 (session lost): when the store reports its session LOST the ephemerals are gone and
  another broker may own the bundles already: every owned bundle is dropped at once and its
  topics closed (their managed ledgers are fenced by the new owner anyway: a paused old owner
  cannot write), then the broker registers again.
* Rule 7 (load manager): the leader (holder of the leader node) reads every load report each
  ``loadBalancerSheddingIntervalMinutes`` and carries out `broker.cluster._load_manager`'s decisions
  through the owners' admin API: unload bundles of brokers loaded above the average plus the
  threshold, split hot bundles. Every decision is logged and kept with its reason.
* Rule 6 (split): the owner splits a bundle in halves by taking both halves' nodes, writing the
  new boundaries (compare-and-set on the namespace's Policies) and deleting the parent's node;
  its topics stay loaded. An unowned bundle is split by writing the boundaries only.

`Ownership` joins four parts, each behind narrow interfaces of what it needs: `Membership`
(registration, load report, leader election), `BundleOwnership` (Rules 1, 3, 5 and 6),
`Lookups` (Rule 2) and the leader's `LoadManagerLoop` (Rule 7); it runs their loops and carries
out Rules 4 and 5, which involve them all.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from metadata import MetadataStore, SessionState
from protocols.pulsar import NamespaceName, TopicName

from ..resources._bundles import BundleRange
from ._broker_client import own_role_problem
from ._bundle_ownership import OWNERSHIP_ROOT, BundleOwnership, BundleState, Owned
from ._load_manager_loop import LoadManagerLoop
from ._lookup import LookupAnswer, Lookups, http_url_of
from ._membership import BROKERS_ROOT, LEADER_PATH, Membership

if TYPE_CHECKING:
    from .._service import BrokerService

__all__ = ["BROKERS_ROOT", "LEADER_PATH", "OWNERSHIP_ROOT", "Ownership", "LookupAnswer", "BundleState"]

log = logging.getLogger(__name__)


class Ownership:
    """This broker's share of the cluster: registration, load report, owned bundles, lookups.

    Create it with the service, set ``service.ownership`` to it before the protocol server
    starts, and run `run` in the broker's nursery once the ports are known: until it has
    registered, lookups answer ServiceNotReady. `shutdown` (called when `run` is cancelled)
    follows Rule 4.
    """

    def __init__(self, service: BrokerService, store: MetadataStore, *, report_interval_s: float = 5.0) -> None:
        self.service = service
        self.store = store
        self.membership = Membership(service, store, self._owned_bundles, report_interval_s=report_interval_s)
        self.bundles = BundleOwnership(service, store, self.membership)
        self.lookups = Lookups(service, self.membership, self.bundles)
        self.load_manager = LoadManagerLoop(service, self.membership, self.bundles)

    def _owned_bundles(self) -> list[tuple[NamespaceName, BundleRange]]:
        return [(o.ns, o.bundle) for o in self.bundles.owned.values()]

    # ------------------------------------------------------------------ state

    @property
    def registered(self) -> bool:
        """Whether this broker's registration node exists (lookups are answered only then)."""
        return self.membership.registered

    @registered.setter
    def registered(self, value: bool) -> None:
        self.membership.registered = value

    @property
    def closing(self) -> bool:
        """Whether `shutdown` began (never cleared)."""
        return self.membership.closing

    @property
    def is_leader(self) -> bool:
        """Whether this broker holds the leader node."""
        return self.membership.is_leader

    @property
    def owned(self) -> dict[tuple[str, str], Owned]:
        """The bundles this broker holds, by namespace and bundle name."""
        return self.bundles.owned

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """The recent assignments, unloads and splits with their reasons (bounded)."""
        return self.bundles.decisions

    @property
    def broker_id(self) -> str:
        """``host:port`` of this broker's admin service (Pulsar's lookupServiceAddress, as
        `BrokerService.broker_id`)."""
        return self.membership.broker_id

    def owner_info(self) -> dict[str, Any]:
        """The JSON of this broker's ownership nodes (URLs per advertised listener)."""
        return self.membership.owner_info()

    def load_report(self) -> dict[str, Any]:
        """This broker's load report (also its registration node's value)."""
        return self.membership.load_report()

    # ------------------------------------------------------------------ running

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, then keep the load report fresh, contend for leadership and watch the
        session until cancelled. The service's close calls `shutdown` (Rule 4) before it closes
        its other topics, so that a topic is closed by one closer only, before its bundle goes."""
        problem = own_role_problem(self.service.broker_client, self.service.auth, self.service.authz)
        if problem:
            log.warning("SECURITY: %s", problem)
        async with trio.open_nursery() as nursery:
            await self.membership.register()
            nursery.start_soon(self.membership.report_loop)
            nursery.start_soon(self.membership.leader_loop)
            nursery.start_soon(self._session_loop)
            nursery.start_soon(self.load_manager.run)
            task_status.started()
            await trio.sleep_forever()

    async def _session_loop(self) -> None:
        async with self.store.watch_session() as states:
            async for state in states:
                if state is SessionState.LOST:
                    await self._on_session_lost()

    async def _on_session_lost(self) -> None:
        """Rule 5: the ephemerals are gone; drop every bundle and its topics, then register again."""
        self.membership.session_lost()
        await self.bundles.drop_all("metadata session expired")
        if not self.closing:
            await self.membership.register()

    async def shutdown(self) -> None:
        """Rule 4: deregister, then unload every owned bundle."""
        if self.closing:
            return
        await self.membership.deregister()
        await self.bundles.unload_all("broker shutting down")
        self.membership.registered = False

    # ------------------------------------------------------------------ bundles

    async def namespace_boundaries(self, ns: NamespaceName) -> list[int]:
        """The namespace's bundle boundaries; `NamespaceNotFoundError` when it does not exist."""
        return await self.bundles.namespace_boundaries(ns)

    async def bundle_of(self, topic: TopicName) -> BundleRange:
        """The bundle ``topic`` belongs to now."""
        return await self.bundles.bundle_of(topic)

    def owns_topic(self, topic: TopicName) -> bool:
        """Whether this broker serves ``topic`` now (its bundle OWNED, Rule 1)."""
        return self.bundles.owns_topic(topic)

    def check_serves(self, topic: TopicName) -> None:
        """Raise ServiceNotReady (Pulsar's message) unless this broker serves ``topic``."""
        self.bundles.check_serves(topic)

    async def owner_of(self, ns: NamespaceName, bundle: BundleRange) -> dict[str, Any] | None:
        """The owner node's JSON (with ``"self"`` True when it is this broker's session), or None."""
        return await self.bundles.owner_of(ns, bundle)

    async def acquire(self, ns: NamespaceName, bundle: BundleRange, reason: str) -> bool:
        """Take the bundle (Rule 1); False when another session holds it."""
        return await self.bundles.acquire(ns, bundle, reason)

    async def unload(self, ns: NamespaceName, bundle: BundleRange, *, reason: str) -> bool:
        """Rule 3: close the bundle's topics, then release its ownership; False when not owned here."""
        return await self.bundles.unload(ns, bundle, reason=reason)

    async def split(self, ns: NamespaceName, bundle: BundleRange) -> list[BundleRange]:
        """Rule 6: split ``bundle`` of ``ns`` in halves; the new bundles. `ValueError` when the
        bundle is not one of the namespace's; `ServiceNotReadyError` when another broker owns it."""
        return await self.bundles.split(ns, bundle)

    def bundles_owned(self) -> list[tuple[NamespaceName, BundleRange, BundleState]]:
        """The bundles this broker holds, with their state."""
        return self.bundles.bundles_owned()

    # ------------------------------------------------------------------ the cluster and lookups

    async def brokers(self) -> dict[str, dict[str, Any]]:
        """The registered brokers' load reports by broker id."""
        return await self.membership.brokers()

    async def leader(self) -> dict[str, Any] | None:
        """The leader node's JSON, or None while there is none."""
        return await self.membership.leader()

    async def pick_broker(self, ns: NamespaceName, bundle: BundleRange) -> tuple[str, dict[str, Any]]:
        """The least loaded registered broker for an unowned bundle (Rule 2) and its report."""
        return await self.lookups.pick_broker(ns, bundle)

    async def lookup(
        self, topic: TopicName, listener_name: str, authoritative: bool, tls: bool = False
    ) -> LookupAnswer:
        """Rule 2 for LOOKUP (`Lookups.lookup`)."""
        return await self.lookups.lookup(topic, listener_name, authoritative, tls)

    http_url_of = staticmethod(http_url_of)

    async def admin_target(self, topic: TopicName, tls: bool = False, authoritative: bool = False) -> str | None:
        """The admin URL of the broker that serves ``topic``, None when it is this one
        (`Lookups.admin_target`)."""
        return await self.lookups.admin_target(topic, tls, authoritative)

    async def bundle_admin_target(self, ns: NamespaceName, bundle: BundleRange, tls: bool = False) -> str | None:
        """The admin URL of the bundle's owner when another broker owns it, else None
        (`Lookups.bundle_admin_target`)."""
        return await self.lookups.bundle_admin_target(ns, bundle, tls)
