"""This broker among the registered brokers: its registration node and load report, and the
leader election (`_ownership` module header: the layout, Rules 4 and 5).

* ``/loadbalance/brokers/{brokerId}`` (ephemeral) holds `Membership.load_report`; it is created
  once the ports are known (`register`; a node of this id's previous session is waited out),
  refreshed every ``report_interval_s`` or as soon as the owned bundles change
  (`report_changed`), and recreated when the store lost it while this broker is registered.
* ``/loadbalance/leader`` (ephemeral): the broker that created it is the load-manager leader;
  the others try again every second, so a new leader follows the old one's session end.
* `deregister` (Rule 4's first step) deletes both; `session_lost` (Rule 5) forgets them, since
  the store already removed them.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Any, Protocol

import trio

from metadata import MetadataError, MetadataStore, NodeExistsError, NoNodeError
from protocols.pulsar import NamespaceName, TopicName

from .._service import broker_id_of
from ..resources._bundles import BundleRange, bundle_hash
from ..topics._stats import topic_rates

__all__ = ["BROKERS_ROOT", "LEADER_PATH", "Membership", "MembershipHost"]

log = logging.getLogger(__name__)

BROKERS_ROOT = "/loadbalance/brokers"
LEADER_PATH = "/loadbalance/leader"


class MembershipHost(Protocol):
    """What membership reads of the broker: the URLs it serves on and what it has loaded."""

    @property
    def service_url(self) -> str: ...
    @property
    def service_url_tls(self) -> str: ...
    @property
    def web_service_url(self) -> str: ...
    @property
    def web_service_url_tls(self) -> str: ...
    @property
    def advertised_listeners(self) -> Mapping[str, Any]: ...  # name -> listener with service URLs
    @property
    def internal_listener_name(self) -> str: ...
    @property
    def topics(self) -> Mapping[str, Any]: ...  # loaded persistent topics (closed, name, producers, ...)
    @property
    def connections(self) -> Sized: ...


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


class Membership:
    """This broker's registration, load report and leadership (module rules).

    ``owned`` lists the bundles this broker holds now (the load report's ``bundles``). Until
    `register` returned, ``registered`` is False: nothing assigns bundles to a broker that is not
    registered. ``closing`` is set by `deregister` and never cleared."""

    def __init__(
        self,
        host: MembershipHost,
        store: MetadataStore,
        owned: Callable[[], Iterable[tuple[NamespaceName, BundleRange]]],
        *,
        report_interval_s: float = 5.0,
    ) -> None:
        self.host = host
        self.store = store
        self.owned = owned
        self.report_interval_s = report_interval_s
        self.registered = False
        self.closing = False
        self.is_leader = False
        self._cpu_at = (time.monotonic(), _cpu_seconds())
        self._cpu_percent = 0.0
        self._report_changed = trio.Event()

    # ------------------------------------------------------------------ identity and report

    @property
    def broker_id(self) -> str:
        """``host:port`` of this broker's admin service (Pulsar's lookupServiceAddress, as
        `BrokerService.broker_id`)."""
        h = self.host
        return broker_id_of(h.web_service_url, h.web_service_url_tls, h.service_url, h.service_url_tls)

    def owner_info(self) -> dict[str, Any]:
        """The JSON of this broker's ownership nodes (URLs per advertised listener)."""
        h = self.host
        listeners = {
            name: {"brokerServiceUrl": lst.service_url, "brokerServiceUrlTls": lst.service_url_tls}
            for name, lst in h.advertised_listeners.items()
        }
        return {
            "brokerId": self.broker_id,
            "nativeUrl": h.service_url,
            "nativeUrlTls": h.service_url_tls,
            "httpUrl": h.web_service_url,
            "httpUrlTls": h.web_service_url_tls,
            "disabled": False,
            "advertisedListeners": listeners,
            "internalListenerName": h.internal_listener_name,
        }

    def load_report(self) -> dict[str, Any]:
        """This broker's load report (also its registration node's value)."""
        h = self.host
        owned = list(self.owned())
        topics = [t for t in h.topics.values() if not t.closed]
        rate_in = rate_out = thr_in = thr_out = 0.0
        producers = consumers = 0
        bundle_stats: dict[str, dict[str, float]] = {
            f"{ns}/{bundle.name}": {
                "topics": 0,
                "producers": 0,
                "consumers": 0,
                "msgRateIn": 0.0,
                "msgRateOut": 0.0,
                "msgThroughputIn": 0.0,
                "msgThroughputOut": 0.0,
            }
            for ns, bundle in owned
        }
        for t in topics:
            # the rates of the last stats period, as the topic stats report them (`_stats` Rule 3)
            t_rate_in, t_thr_in, t_rate_out, t_thr_out = topic_rates(t)
            rate_in, thr_in = rate_in + t_rate_in, thr_in + t_thr_in
            rate_out, thr_out = rate_out + t_rate_out, thr_out + t_thr_out
            n_prod = len(t.producers)
            n_cons = sum(len(getattr(sub, "consumers", ()) or ()) for sub in t.subscriptions.values())
            producers += n_prod
            consumers += n_cons
            key = _bundle_key_of(owned, t.name)
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
            "pulsarServiceUrl": h.service_url,
            "webServiceUrl": h.web_service_url,
            "timestamp": int(time.time() * 1000),
            "numBundles": len(owned),
            "numTopics": len(topics),
            "numProducers": producers,
            "numConsumers": consumers,
            "connections": len(h.connections),
            "msgRateIn": rate_in,
            "msgRateOut": rate_out,
            "msgThroughputIn": thr_in,
            "msgThroughputOut": thr_out,
            "cpu": {"usage": self._cpu_percent, "limit": 100.0},
            "memory": {"usage": _rss_mb()},
            "bundles": sorted(bundle_stats),
            "bundleStats": bundle_stats,
            "leader": self.is_leader,
        }

    def report_changed(self) -> None:
        """Publish the load report now rather than at the next interval (the owned bundles changed)."""
        self._report_changed.set()

    def _path(self) -> str:
        return f"{BROKERS_ROOT}/{self.broker_id}"

    # ------------------------------------------------------------------ registration

    async def register(self) -> None:
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
                log.info("broker node %s of a previous session still exists; waiting for it to expire", self._path())
                await trio.sleep(0.5)
        self.registered = True
        log.info("registered broker %s", self.broker_id)

    async def _publish_report(self) -> None:
        try:
            await self.store.set(self._path(), json.dumps(self.load_report()).encode(), version=-1)
        except NoNodeError:
            if self.registered and not self.closing:
                await self.register()

    async def report_loop(self) -> None:
        """Sample the CPU and publish the load report, every interval or on `report_changed`."""
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

    async def leader_loop(self) -> None:
        """Leader election: the broker holding the ephemeral leader node is the leader."""
        value = json.dumps({"brokerId": self.broker_id, "serviceUrl": self.host.web_service_url}).encode()
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

    def session_lost(self) -> None:
        """Rule 5: the store dropped this session's ephemerals: neither registered nor leader."""
        self.registered = False
        self.is_leader = False

    async def deregister(self) -> None:
        """Rule 4's first step: delete the registration (and the leader node when this broker
        holds it), so that nobody assigns this broker bundles any more."""
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

    # ------------------------------------------------------------------ the others

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


def _bundle_key_of(owned: list[tuple[NamespaceName, BundleRange]], topic: TopicName) -> str | None:
    h = bundle_hash(str(topic))
    ns = str(topic.namespace_name)
    for n, bundle in owned:
        if str(n) == ns and bundle.contains(h):
            return f"{n}/{bundle.name}"
    return None
