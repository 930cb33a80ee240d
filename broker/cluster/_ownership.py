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
"""

from __future__ import annotations

import enum
import json
import logging
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from magnetar.common.admin_client import AdminError
from metadata import (
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionState,
)
from protocols.pulsar import NamespaceName, TopicName

from .._errors import NamespaceNotFoundError, ServiceNotReadyError
from .._service import broker_id_of
from ..resources._bundles import (
    BundleRange,
    boundaries_of,
    bundle_for,
    bundle_hash,
    bundles_of,
    parse_bundle,
    split_boundaries,
)
from ..topics._stats import topic_rates
from ._broker_client import own_role_problem
from ._load_manager import Decision, ShedPolicy, SplitPolicy, plan_shedding, plan_splits, smoothed_load

if TYPE_CHECKING:
    from .._service import BrokerService

__all__ = ["BROKERS_ROOT", "LEADER_PATH", "OWNERSHIP_ROOT", "Ownership", "LookupAnswer", "BundleState"]

log = logging.getLogger(__name__)

BROKERS_ROOT = "/loadbalance/brokers"
LEADER_PATH = "/loadbalance/leader"
OWNERSHIP_ROOT = "/namespace"
HEARTBEAT_TENANT = "pulsar"


class BundleState(enum.Enum):
    """A bundle's state on this broker (module header)."""

    OWNED = "owned"
    UNLOADING = "unloading"


_ADOPTED = "this session's ownership node found unrecorded (its creation's caller was cancelled, or a release failed)"


@dataclass
class _Owned:
    ns: NamespaceName
    bundle: BundleRange
    state: BundleState = BundleState.OWNED
    since: float = field(default_factory=time.time)


@dataclass(frozen=True)
class LookupAnswer:
    """What a lookup answers: Connect (``redirect`` False) or Redirect to ``urls``."""

    redirect: bool
    urls: dict[str, str]
    authoritative: bool = True


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


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
        self.report_interval_s = report_interval_s
        self.owned: dict[tuple[str, str], _Owned] = {}
        self.registered = False
        self.closing = False
        self.is_leader = False
        self.decisions: list[dict[str, Any]] = []  # recent assignments/unloads with reasons, bounded
        self._assigned_since_report: dict[str, int] = {}
        self._cpu_at = (time.monotonic(), _cpu_seconds())
        self._cpu_percent = 0.0
        self._report_changed = trio.Event()

    # ------------------------------------------------------------------ identity

    @property
    def broker_id(self) -> str:
        """``host:port`` of this broker's admin service (Pulsar's lookupServiceAddress, as
        `BrokerService.broker_id`)."""
        s = self.service
        return broker_id_of(s.web_service_url, s.web_service_url_tls, s.service_url, s.service_url_tls)

    def owner_info(self) -> dict[str, Any]:
        """The JSON of this broker's ownership nodes (URLs per advertised listener)."""
        s = self.service
        listeners = {name: {"brokerServiceUrl": lst.service_url, "brokerServiceUrlTls": lst.service_url_tls}
                     for name, lst in s.advertised_listeners.items()}
        return {"brokerId": self.broker_id, "nativeUrl": s.service_url, "nativeUrlTls": s.service_url_tls,
                "httpUrl": s.web_service_url, "httpUrlTls": s.web_service_url_tls, "disabled": False,
                "advertisedListeners": listeners, "internalListenerName": s.internal_listener_name}

    def load_report(self) -> dict[str, Any]:
        """This broker's load report (also its registration node's value)."""
        s = self.service
        topics = [t for t in s.topics.values() if not t.closed]
        rate_in = rate_out = thr_in = thr_out = 0.0
        producers = consumers = 0
        bundle_stats: dict[str, dict[str, float]] = {
            f"{o.ns}/{o.bundle.name}": {"topics": 0, "producers": 0, "consumers": 0, "msgRateIn": 0.0,
                                        "msgRateOut": 0.0, "msgThroughputIn": 0.0, "msgThroughputOut": 0.0}
            for o in self.owned.values()}
        for t in topics:
            # the rates of the last stats period, as the topic stats report them (`_stats` Rule 3)
            t_rate_in, t_thr_in, t_rate_out, t_thr_out = topic_rates(t)
            rate_in, thr_in = rate_in + t_rate_in, thr_in + t_thr_in
            rate_out, thr_out = rate_out + t_rate_out, thr_out + t_thr_out
            n_prod = len(t.producers)
            n_cons = sum(len(getattr(sub, "consumers", ()) or ()) for sub in t.subscriptions.values())
            producers += n_prod
            consumers += n_cons
            key = self._bundle_key_of(t.name)
            if key is not None:
                b = bundle_stats[key]
                b["topics"] += 1
                b["producers"] += n_prod
                b["consumers"] += n_cons
                b["msgRateIn"] += t_rate_in
                b["msgThroughputIn"] += t_thr_in
                b["msgRateOut"] += t_rate_out
                b["msgThroughputOut"] += t_thr_out
        return {
            **self.owner_info(),
            "pulsarServiceUrl": s.service_url, "webServiceUrl": s.web_service_url,
            "timestamp": int(time.time() * 1000), "numBundles": len(self.owned), "numTopics": len(topics),
            "numProducers": producers, "numConsumers": consumers, "connections": len(s.connections),
            "msgRateIn": rate_in, "msgRateOut": rate_out, "msgThroughputIn": thr_in, "msgThroughputOut": thr_out,
            "cpu": {"usage": self._cpu_percent, "limit": 100.0}, "memory": {"usage": _rss_mb()},
            "bundles": sorted(bundle_stats), "bundleStats": bundle_stats,
            "leader": self.is_leader,
        }

    def _bundle_key_of(self, topic: TopicName) -> str | None:
        h = bundle_hash(str(topic))
        ns = str(topic.namespace_name)
        for (n, _name), o in self.owned.items():
            if n == ns and o.bundle.contains(h):
                return f"{n}/{o.bundle.name}"
        return None

    def _path(self) -> str:
        return f"{BROKERS_ROOT}/{self.broker_id}"

    # ------------------------------------------------------------------ running

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, then keep the load report fresh, contend for leadership and watch the
        session until cancelled. The service's close calls `shutdown` (Rule 4) before it closes
        its other topics, so that a topic is closed by one closer only, before its bundle goes."""
        problem = own_role_problem(self.service.broker_client, self.service.auth, self.service.authz)
        if problem:
            log.warning("SECURITY: %s", problem)
        async with trio.open_nursery() as nursery:
            await self._register()
            nursery.start_soon(self._report_loop)
            nursery.start_soon(self._leader_loop)
            nursery.start_soon(self._session_loop)
            nursery.start_soon(self._load_manager_loop)
            task_status.started()
            await trio.sleep_forever()

    async def _register(self) -> None:
        """Create the registration node; a node left by this id's previous session is waited out."""
        data = json.dumps(self.load_report()).encode()
        while True:
            try:
                await self.store.create(self._path(), data, ephemeral=True, make_parents=True)
                break
            except NodeExistsError:
                stat = await self.store.exists(self._path())
                if stat is not None and stat.ephemeral_owner == self.store.session_id:
                    break
                log.info("broker node %s of a previous session still exists; waiting for it to expire",
                         self._path())
                await trio.sleep(0.5)
        self.registered = True
        log.info("registered broker %s", self.broker_id)

    async def _publish_report(self) -> None:
        try:
            await self.store.set(self._path(), json.dumps(self.load_report()).encode(), version=-1)
        except NoNodeError:
            if self.registered and not self.closing:
                await self._register()

    async def _report_loop(self) -> None:
        while True:
            with trio.move_on_after(self.report_interval_s):
                await self._report_changed.wait()
            self._report_changed = trio.Event()
            now, cpu = time.monotonic(), _cpu_seconds()
            if now > self._cpu_at[0]:
                self._cpu_percent = 100.0 * (cpu - self._cpu_at[1]) / (now - self._cpu_at[0])
            self._cpu_at = (now, cpu)
            if self.closing or not self.registered:
                continue
            try:
                await self._publish_report()
            except MetadataError as exc:
                log.warning("publishing the load report failed: %s", exc)

    async def _leader_loop(self) -> None:
        """Leader election: the broker holding the ephemeral leader node is the leader."""
        value = json.dumps({"brokerId": self.broker_id, "serviceUrl": self.service.web_service_url}).encode()
        while True:
            if not self.closing and self.registered:
                try:
                    await self.store.create(LEADER_PATH, value, ephemeral=True, make_parents=True)
                    if not self.is_leader:
                        log.info("this broker (%s) is the load-manager leader", self.broker_id)
                    self.is_leader = True
                except NodeExistsError:
                    stat = await self.store.exists(LEADER_PATH)
                    self.is_leader = stat is not None and stat.ephemeral_owner == self.store.session_id
                except MetadataError as exc:
                    log.debug("leader election: %s", exc)
            await trio.sleep(1.0)

    async def _load_manager_loop(self) -> None:
        """Rule 7: while this broker is the leader, shed load and split hot bundles."""
        cfg = self.service.config
        interval = cfg.load_balancer_shedding_interval_minutes * 60.0
        loads: dict[str, float] = {}
        moved: dict[str, float] = {}  # bundle -> when the leader moved it (bounded by the pruning below)
        while True:
            await trio.sleep(interval)
            if not (self.is_leader and cfg.load_balancer_enabled) or self.closing:
                loads.clear()
                continue
            try:
                reports = await self.brokers()
                loads = {b: smoothed_load(loads.get(b), float((r.get("cpu") or {}).get("usage", 0.0)),
                                          cfg.load_balancer_history_resource_percentage)
                         for b, r in reports.items()}
                now = time.monotonic()
                moved = {k: t for k, t in moved.items() if now - t < 5 * interval}
                decisions: list[Decision] = []
                if cfg.load_balancer_shedding_enabled:
                    decisions += plan_shedding(loads, reports, ShedPolicy(
                        cfg.load_balancer_broker_threshold_shedder_percentage,
                        cfg.load_balancer_history_resource_percentage), set(moved))
                if cfg.load_balancer_auto_bundle_split_enabled:
                    counts = await self._bundle_counts(reports)
                    decisions += plan_splits(reports, counts, SplitPolicy(
                        cfg.load_balancer_namespace_bundle_max_topics, cfg.load_balancer_namespace_bundle_max_sessions,
                        cfg.load_balancer_namespace_bundle_max_msg_rate, cfg.load_balancer_namespace_maximum_bundles))
                for d in decisions:
                    await self._carry_out(d, reports)
                    moved[d.bundle] = now
            except Exception as exc:  # a failed round is retried at the next interval
                log.warning("load manager round failed: %s", exc)

    async def _bundle_counts(self, reports: dict[str, dict[str, Any]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in reports.values():
            for key in (r.get("bundleStats") or {}):
                ns = key.rsplit("/", 1)[0]
                if ns not in out:
                    try:
                        out[ns] = len(await self.namespace_boundaries(NamespaceName.parse(ns))) - 1
                    except Exception:
                        out[ns] = 1 << 30  # unknown: never split
        return out

    async def _carry_out(self, d: Decision, reports: dict[str, dict[str, Any]]) -> None:
        ns_name, bundle_name = d.bundle.rsplit("/", 1)
        ns, bundle = NamespaceName.parse(ns_name), parse_bundle(bundle_name)
        action = "shed" if d.action == "unload" else "auto-split"
        self._decide(action, ns, bundle, f"leader decision for {d.broker}: {d.reason}")
        if d.broker == self.broker_id:
            if d.action == "unload":
                await self.unload(ns, bundle, reason=f"load shedding: {d.reason}")
            else:
                await self.split(ns, bundle)
            return
        client = self.service.broker_client
        base = client.admin_url(reports.get(d.broker) or {})
        if not base:
            return
        # with this broker's credentials (brokerClient* keys): the owner refuses anonymous unloads
        try:
            await client.request("PUT", f"{base.rstrip('/')}/admin/v2/namespaces/{ns}/{bundle.name}/{d.action}")
        except AdminError as exc:
            if not exc.status:
                raise  # unreachable: as any other failure of a leader round
            log.warning("leader's %s of %s on %s failed: %s %s", d.action, d.bundle, d.broker, exc.status, exc.reason)

    async def _session_loop(self) -> None:
        async with self.store.watch_session() as states:
            async for state in states:
                if state is SessionState.LOST:
                    await self._on_session_lost()

    async def _on_session_lost(self) -> None:
        """Rule 5: the ephemerals are gone; drop every bundle and its topics, then register again."""
        log.warning("metadata session lost: dropping %d owned bundle(s)", len(self.owned))
        self.registered = False
        self.is_leader = False
        lost = list(self.owned.values())
        self.owned.clear()
        for o in lost:
            await self._close_topics(o)
            self._decide("lost", o.ns, o.bundle, "metadata session expired")
        if not self.closing:
            await self._register()

    async def shutdown(self) -> None:
        """Rule 4: deregister, then unload every owned bundle."""
        if self.closing:
            return
        self.closing = True
        try:
            await self.store.delete(self._path())
        except (NoNodeError, MetadataError) as exc:
            log.debug("deregistering: %s", exc)
        if self.is_leader:
            try:
                await self.store.delete(LEADER_PATH)
            except MetadataError:
                pass
        for key in list(self.owned):
            o = self.owned.get(key)
            if o is not None:
                await self.unload(o.ns, o.bundle, reason="broker shutting down")
        self.registered = False

    # ------------------------------------------------------------------ bundles

    async def namespace_boundaries(self, ns: NamespaceName) -> list[int]:
        """The namespace's bundle boundaries; `NamespaceNotFoundError` when it does not exist."""
        policies = await self.service.namespaces.get_policies(ns)
        if policies is None:
            raise NamespaceNotFoundError(f"namespace {ns} does not exist")
        return boundaries_of(policies)

    async def bundle_of(self, topic: TopicName) -> BundleRange:
        """The bundle ``topic`` belongs to now."""
        return bundle_for(await self.namespace_boundaries(topic.namespace_name), str(topic))

    def _is_heartbeat(self, ns: NamespaceName) -> bool:
        # Pulsar's heartbeat namespace of a broker is always served by that broker
        return str(ns) == f"{HEARTBEAT_TENANT}/{self.broker_id}"

    def owns_topic(self, topic: TopicName) -> bool:
        """Whether this broker serves ``topic`` now (its bundle OWNED, Rule 1)."""
        if self._is_heartbeat(topic.namespace_name):
            return True
        h = bundle_hash(str(topic))
        ns = str(topic.namespace_name)
        return any(o.state is BundleState.OWNED and k[0] == ns and o.bundle.contains(h)
                   for k, o in self.owned.items())

    def check_serves(self, topic: TopicName) -> None:
        """Raise ServiceNotReady (Pulsar's message) unless this broker serves ``topic``."""
        if not self.owns_topic(topic):
            raise ServiceNotReadyError(
                f"Namespace bundle for topic ({topic}) not served by this instance. Please redo the lookup. "
                f"Request is denied: namespace={topic.namespace_name}")

    def _owner_path(self, ns: NamespaceName, bundle: BundleRange) -> str:
        return f"{OWNERSHIP_ROOT}/{ns}/{bundle.name}"

    async def owner_of(self, ns: NamespaceName, bundle: BundleRange) -> dict[str, Any] | None:
        """The owner node's JSON (with ``"self"`` True when it is this broker's session), or None."""
        try:
            data, stat = await self.store.get(self._owner_path(ns, bundle))
        except NoNodeError:
            return None
        info = json.loads(data)
        info["self"] = stat.ephemeral_owner == self.store.session_id
        return dict(info)

    async def acquire(self, ns: NamespaceName, bundle: BundleRange, reason: str) -> bool:
        """Take the bundle (Rule 1); False when another session holds it."""
        key = (str(ns), bundle.name)
        if key in self.owned:
            return self.owned[key].state is BundleState.OWNED
        if self.closing or not self.registered:
            return False
        try:
            await self.store.create(self._owner_path(ns, bundle), json.dumps(self.owner_info()).encode(),
                                    ephemeral=True, make_parents=True)
        except NodeExistsError:
            owner = await self.owner_of(ns, bundle)
            if owner is None or not owner.get("self"):
                return False
            reason = _ADOPTED
        self._record_owned(ns, bundle, reason)
        return True

    def _record_owned(self, ns: NamespaceName, bundle: BundleRange, reason: str) -> None:
        self.owned[(str(ns), bundle.name)] = _Owned(ns, bundle)
        self._decide("assigned", ns, bundle, reason)
        self._report_changed.set()

    def _in_bundle(self, o: _Owned, topic_key: str) -> bool:
        try:
            name = TopicName.parse(topic_key)
        except ValueError:
            return False
        return name.namespace_name == o.ns and o.bundle.contains(bundle_hash(topic_key))

    async def _close_topics(self, o: _Owned) -> None:
        ns = str(o.ns)
        # non-persistent topics belong to bundles too: their clients must reconnect to the new owner
        for t in self.service.loaded_topics():
            if str(t.name.namespace_name) == ns and o.bundle.contains(bundle_hash(str(t.name))):
                try:
                    await self.service.unload(t)
                except Exception as exc:
                    log.warning("closing %s while unloading %s/%s: %s", t.name, ns, o.bundle, exc)

    async def unload(self, ns: NamespaceName, bundle: BundleRange, *, reason: str) -> bool:
        """Rule 3: close the bundle's topics, then release its ownership; False when not owned here."""
        key = (str(ns), bundle.name)
        o = self.owned.get(key)
        if o is None or o.state is BundleState.UNLOADING:
            return False
        o.state = BundleState.UNLOADING
        try:
            await self._close_topics(o)
            # a topic that passed the ownership check before UNLOADING may still be opening: it
            # notices the bundle went (`BrokerService.get_topic` checks again) and closes; wait
            # for such loads to end (bounded) so its ledger is closed before the node goes
            with trio.move_on_after(30):
                while any(self._in_bundle(o, key) for key in self.service.loading()):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            await self._close_topics(o)
        finally:
            try:
                await self.store.delete(self._owner_path(ns, bundle))
            except NoNodeError:
                pass
            except MetadataError as exc:
                log.warning("releasing %s/%s: %s (the session's end releases it)", ns, bundle, exc)
            self.owned.pop(key, None)
            self._decide("unloaded", ns, bundle, reason)
            self._report_changed.set()
        return True

    async def split(self, ns: NamespaceName, bundle: BundleRange) -> list[BundleRange]:
        """Rule 6: split ``bundle`` of ``ns`` in halves; the new bundles. `ValueError` when the
        bundle is not one of the namespace's; `ServiceNotReadyError` when another broker owns it."""
        key = (str(ns), bundle.name)
        o = self.owned.get(key)
        if o is None and await self.owner_of(ns, bundle) is not None:
            raise ServiceNotReadyError(f"bundle {ns}/{bundle} is owned by another broker")
        if o is not None and o.state is not BundleState.OWNED:
            raise ServiceNotReadyError(f"bundle {ns}/{bundle} is being unloaded")
        new: list[BundleRange] = []

        def change(policies: dict[str, Any]) -> None:
            b = split_boundaries(boundaries_of(policies), bundle)  # ValueError: not a bundle of ns
            new[:] = [r for r in bundles_of(b) if bundle.lower <= r.lower and r.upper <= bundle.upper]
            policies["bundles"] = {"boundaries": [f"0x{x:08x}" for x in b], "numBundles": len(b) - 1}

        if o is None:
            if await self.service.namespaces.modify_policies(ns, change) is None:
                raise NamespaceNotFoundError(f"namespace {ns} does not exist")
            self._decide("split", ns, bundle, "admin split of an unowned bundle")
            return new
        # take the halves first, so that no lookup finds them unowned once the boundaries change
        halves = [BundleRange(bundle.lower, bundle.lower + (bundle.upper - bundle.lower) // 2)]
        halves.append(BundleRange(halves[0].upper, bundle.upper))
        for h in halves:
            await self.store.create(self._owner_path(ns, h), json.dumps(self.owner_info()).encode(),
                                    ephemeral=True, make_parents=True)
            self.owned[(str(ns), h.name)] = _Owned(ns, h)
        try:
            if await self.service.namespaces.modify_policies(ns, change) is None:
                raise NamespaceNotFoundError(f"namespace {ns} does not exist")
        except BaseException:
            for h in halves:
                self.owned.pop((str(ns), h.name), None)
                try:
                    await self.store.delete(self._owner_path(ns, h))
                except MetadataError:
                    pass
            raise
        self.owned.pop(key, None)
        try:
            await self.store.delete(self._owner_path(ns, bundle))
        except NoNodeError:
            pass
        self._decide("split", ns, bundle, f"split into {halves[0]} and {halves[1]}")
        self._report_changed.set()
        return new

    def _decide(self, action: str, ns: NamespaceName, bundle: BundleRange, reason: str) -> None:
        entry = {"time": int(time.time() * 1000), "action": action, "bundle": f"{ns}/{bundle.name}",
                 "broker": self.broker_id, "reason": reason}
        log.info("bundle %s/%s %s: %s", ns, bundle, action, reason)
        self.decisions.append(entry)
        del self.decisions[:-200]  # bounded: the most recent 200 decisions

    # ------------------------------------------------------------------ assignment and lookup

    async def brokers(self) -> dict[str, dict[str, Any]]:
        """The registered brokers' load reports by broker id."""
        out: dict[str, dict[str, Any]] = {}
        try:
            names = await self.store.children(BROKERS_ROOT)
        except NoNodeError:
            return out
        for name in names:
            try:
                data, _ = await self.store.get(f"{BROKERS_ROOT}/{name}")
                out[name] = json.loads(data)
            except (NoNodeError, ValueError):
                continue
        return out

    async def leader(self) -> dict[str, Any] | None:
        """The leader node's JSON, or None while there is none."""
        try:
            data, _ = await self.store.get(LEADER_PATH)
        except NoNodeError:
            return None
        return dict(json.loads(data))

    async def pick_broker(self, ns: NamespaceName, bundle: BundleRange) -> tuple[str, dict[str, Any]]:
        """The least loaded registered broker for an unowned bundle (Rule 2) and its report."""
        reports = await self.brokers()
        if not reports:
            raise ServiceNotReadyError("no broker is registered in the cluster")
        key = f"{ns}/{bundle.name}"

        def score(item: tuple[str, dict[str, Any]]) -> tuple[int, int, int]:
            # loaded topics first (bundles whose topics went idle cost nothing), then bundles held;
            # bundles assigned since the broker's last report count as one topic each
            bid, r = item
            pending = self._assigned_since_report.get(f"{bid}@{r.get('timestamp')}", 0)
            return (int(r.get("numTopics", 0)) + pending, int(r.get("numBundles", 0)) + pending,
                    zlib.crc32(f"{key}|{bid}".encode()))

        bid, report = min(reports.items(), key=score)
        tag = f"{bid}@{report.get('timestamp')}"
        # only the counts since each broker's current report matter: those of older reports (and of
        # brokers gone) are dropped, so the map holds at most one entry per registered broker
        current = {f"{b}@{r.get('timestamp')}" for b, r in reports.items()}
        self._assigned_since_report = {k: v for k, v in self._assigned_since_report.items() if k in current}
        self._assigned_since_report[tag] = self._assigned_since_report.get(tag, 0) + 1
        return bid, report

    def _urls_of(self, info: dict[str, Any], listener_name: str) -> dict[str, str]:
        name = listener_name.strip() or str(info.get("internalListenerName") or "")
        if name:
            listener = (info.get("advertisedListeners") or {}).get(name)
            if listener is None:
                raise ServiceNotReadyError(f"the broker do not have {name} listener")
            plain, tls = listener.get("brokerServiceUrl", ""), listener.get("brokerServiceUrlTls", "")
        else:
            plain, tls = info.get("nativeUrl", ""), info.get("nativeUrlTls", "")
        urls = {"brokerServiceUrl": plain or tls}
        if tls:
            urls["brokerServiceUrlTls"] = tls
        return urls

    async def _resolve(self, topic: TopicName, authoritative: bool) -> dict[str, Any] | None:
        """Rule 2: None when this broker serves ``topic`` (taking its bundle if it was unowned and
        this broker is chosen), else the JSON (owner node or load report) of the broker to go to."""
        if self.closing or not self.registered:
            raise ServiceNotReadyError("the broker is not serving lookups (starting or stopping)")
        ns = topic.namespace_name
        if self._is_heartbeat(ns):
            return None
        bundle = await self.bundle_of(topic)
        for _attempt in range(3):
            o = self.owned.get((str(ns), bundle.name))
            if o is not None:
                if o.state is not BundleState.OWNED:
                    raise ServiceNotReadyError(f"bundle {ns}/{bundle} is being unloaded")
                return None
            owner = await self.owner_of(ns, bundle)
            if owner is not None:
                if owner.get("self"):  # this session's node, not recorded (Rule 1): it is ours
                    self._record_owned(ns, bundle, _ADOPTED)
                    return None
                if owner.get("brokerId") == self.broker_id:
                    raise ServiceNotReadyError(f"bundle {ns}/{bundle} is held by this broker's previous "
                                               "session until it expires")
                return owner
            if authoritative:
                bid, report = self.broker_id, None
                why = "unowned bundle taken on an authoritative lookup (another broker picked this one)"
            else:
                bid, report = await self.pick_broker(ns, bundle)
                why = "unowned bundle assigned on lookup (least loaded broker)"
            if bid == self.broker_id:
                if await self.acquire(ns, bundle, why):
                    return None
                continue  # another broker won the race: look again
            assert report is not None
            self._decide("redirected", ns, bundle, f"unowned; least loaded broker is {bid}")
            return report
        raise ServiceNotReadyError(f"bundle {ns}/{bundle} is changing owner; retry")

    async def lookup(self, topic: TopicName, listener_name: str, authoritative: bool,
                     tls: bool = False) -> LookupAnswer:
        """Rule 2 for LOOKUP. Raises ServiceNotReady while this broker is starting or stopping, or
        when the bundle's owner is this broker's previous session (it expires soon). ``tls``: the
        client connected over TLS; a Redirect then carries the owner's ``brokerServiceUrlTls``
        (which the official client follows), and an owner without one is an error rather than a
        silent downgrade to plain text."""
        target = await self._resolve(topic, authoritative)
        if target is None:
            return LookupAnswer(False, self.service.lookup_urls(listener_name))
        urls = self._urls_of(target, listener_name)
        if tls and "brokerServiceUrlTls" not in urls:
            raise ServiceNotReadyError(f"the owner of {topic} ({target.get('brokerId')}) has no TLS service URL "
                                       "(brokerServicePortTls) for a client connected over TLS")
        return LookupAnswer(True, urls)

    @staticmethod
    def http_url_of(info: dict[str, Any], tls: bool) -> str | None:
        """The admin URL in a broker's owner node or load report: https when ``tls`` and it has one."""
        plain = str(info.get("httpUrl") or info.get("webServiceUrl") or "")
        secure = str(info.get("httpUrlTls") or info.get("webServiceUrlTls") or "")
        # a request that came over https is sent to https (Pulsar redirects to webServiceUrlTls)
        return ((secure or plain) if tls else (plain or secure)) or None

    async def admin_target(self, topic: TopicName, tls: bool = False, authoritative: bool = False) -> str | None:
        """The admin URL (``http[s]://host:port``) of the broker that serves ``topic``, None when
        it is this one; an unowned bundle is assigned first, as a lookup does (``authoritative``:
        the request was redirected here to take it, so this broker takes it instead of picking
        again). ``tls``: the https URL when the broker has one."""
        target = await self._resolve(topic, authoritative)
        if target is None:
            return None
        return self.http_url_of(target, tls)

    async def bundle_admin_target(self, ns: NamespaceName, bundle: BundleRange, tls: bool = False) -> str | None:
        """The admin URL of the bundle's owner when another broker owns it, else None (``tls``: the
        https URL when the owner has one)."""
        if (str(ns), bundle.name) in self.owned:
            return None
        owner = await self.owner_of(ns, bundle)
        if owner is None or owner.get("self"):
            return None
        return self.http_url_of(owner, tls)

    def bundles_owned(self) -> list[tuple[NamespaceName, BundleRange, BundleState]]:
        """The bundles this broker holds, with their state."""
        return [(o.ns, o.bundle, o.state) for o in self.owned.values()]
