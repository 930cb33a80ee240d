"""The leader's load manager round (`_ownership` Rule 7).

While this broker is the leader, every ``loadBalancerSheddingIntervalMinutes`` it reads the
registered brokers' load reports and carries out `._load_manager`'s decisions: unload bundles of
brokers loaded above the average plus the threshold, split hot bundles. A decision about a bundle
of this broker is carried out here; one about another broker's bundle through that broker's admin
API, with this broker's credentials (``brokerClient*`` keys). A bundle moved is left alone for
five intervals; a failed round is logged and retried at the next interval.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import trio

from magnetar.common.admin_client import AdminError
from protocols.pulsar import NamespaceName

from ..resources._bundles import BundleRange, parse_bundle
from ._load_manager import Decision, ShedPolicy, SplitPolicy, plan_shedding, plan_splits, smoothed_load

if TYPE_CHECKING:
    from .._config import BrokerConfig
    from ._broker_client import BrokerClient

__all__ = ["BundleActions", "Leadership", "LoadManagerHost", "LoadManagerLoop"]

log = logging.getLogger(__name__)


class LoadManagerHost(Protocol):
    """What the load manager reads of the broker: its config and its client to the other brokers."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def broker_client(self) -> BrokerClient: ...


class Leadership(Protocol):
    """Whether this broker leads, and the registered brokers' reports (`Membership`)."""

    @property
    def broker_id(self) -> str: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def closing(self) -> bool: ...

    async def brokers(self) -> dict[str, dict[str, Any]]: ...


class BundleActions(Protocol):
    """What the load manager does to this broker's bundles (`BundleOwnership`)."""

    async def namespace_boundaries(self, ns: NamespaceName) -> list[int]: ...

    async def unload(self, ns: NamespaceName, bundle: BundleRange, *, reason: str) -> bool: ...

    async def split(self, ns: NamespaceName, bundle: BundleRange) -> list[BundleRange]: ...

    def decide(self, action: str, ns: NamespaceName, bundle: BundleRange, reason: str) -> None: ...


class LoadManagerLoop:
    """Rule 7: `run` sheds load and splits hot bundles while this broker is the leader."""

    def __init__(self, host: LoadManagerHost, member: Leadership, bundles: BundleActions) -> None:
        self.host = host
        self.member = member
        self.bundles = bundles

    async def run(self) -> None:
        """One round per interval until cancelled (module rules)."""
        cfg = self.host.config
        interval = cfg.load_balancer_shedding_interval_minutes * 60.0
        loads: dict[str, float] = {}
        moved: dict[str, float] = {}  # bundle -> when the leader moved it (bounded by the pruning below)
        while True:
            await trio.sleep(interval)
            if not (self.member.is_leader and cfg.load_balancer_enabled) or self.member.closing:
                loads.clear()
                continue
            try:
                reports = await self.member.brokers()
                loads = {
                    b: smoothed_load(
                        loads.get(b),
                        float((r.get("cpu") or {}).get("usage", 0.0)),
                        cfg.load_balancer_history_resource_percentage,
                    )
                    for b, r in reports.items()
                }
                now = time.monotonic()
                moved = {k: t for k, t in moved.items() if now - t < 5 * interval}
                decisions: list[Decision] = []
                if cfg.load_balancer_shedding_enabled:
                    decisions += plan_shedding(
                        loads,
                        reports,
                        ShedPolicy(
                            cfg.load_balancer_broker_threshold_shedder_percentage,
                            cfg.load_balancer_history_resource_percentage,
                        ),
                        set(moved),
                    )
                if cfg.load_balancer_auto_bundle_split_enabled:
                    counts = await self._bundle_counts(reports)
                    decisions += plan_splits(
                        reports,
                        counts,
                        SplitPolicy(
                            cfg.load_balancer_namespace_bundle_max_topics,
                            cfg.load_balancer_namespace_bundle_max_sessions,
                            cfg.load_balancer_namespace_bundle_max_msg_rate,
                            cfg.load_balancer_namespace_maximum_bundles,
                        ),
                    )
                for d in decisions:
                    await self._carry_out(d, reports)
                    moved[d.bundle] = now
            except Exception as exc:  # a failed round is retried at the next interval
                log.warning("load manager round failed: %s", exc)

    async def _bundle_counts(self, reports: dict[str, dict[str, Any]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in reports.values():
            for key in r.get("bundleStats") or {}:
                ns = key.rsplit("/", 1)[0]
                if ns not in out:
                    try:
                        out[ns] = len(await self.bundles.namespace_boundaries(NamespaceName.parse(ns))) - 1
                    except Exception:
                        out[ns] = 1 << 30  # unknown: never split
        return out

    async def _carry_out(self, d: Decision, reports: dict[str, dict[str, Any]]) -> None:
        ns_name, bundle_name = d.bundle.rsplit("/", 1)
        ns, bundle = NamespaceName.parse(ns_name), parse_bundle(bundle_name)
        action = "shed" if d.action == "unload" else "auto-split"
        self.bundles.decide(action, ns, bundle, f"leader decision for {d.broker}: {d.reason}")
        if d.broker == self.member.broker_id:
            if d.action == "unload":
                await self.bundles.unload(ns, bundle, reason=f"load shedding: {d.reason}")
            else:
                await self.bundles.split(ns, bundle)
            return
        client = self.host.broker_client
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
