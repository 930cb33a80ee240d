"""Which broker serves a topic: lookups and admin redirects (`_ownership` Rule 2).

Connect when this broker owns the topic's bundle (answered from the bundles it holds, with no
metadata read); Redirect (authoritative) to the owner when another broker does; an unowned
bundle is assigned to the least loaded registered broker (fewest loaded topics, then bundles,
counting the bundles assigned since that broker's last report; ties broken by rendezvous hash so
that a namespace's bundles spread): Connect after taking it when that is this broker, else
Redirect with ``authoritative`` set, and the broker receiving an authoritative lookup for an
unowned bundle takes it. Admin requests about a topic or a bundle are sent to the same broker,
on its admin URL.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from protocols.pulsar import NamespaceName, TopicName

from .._errors import ServiceNotReadyError
from ..resources._bundles import BundleRange
from ._bundle_ownership import ADOPTED, BundleState, Owned

__all__ = ["BundleTable", "LookupAnswer", "LookupHost", "Lookups", "Registry", "http_url_of"]


@dataclass(frozen=True)
class LookupAnswer:
    """What a lookup answers: Connect (``redirect`` False) or Redirect to ``urls``."""

    redirect: bool
    urls: dict[str, str]
    authoritative: bool = True


class LookupHost(Protocol):
    """What lookups read of the broker: the URLs it answers Connect with."""

    def lookup_urls(self, listener_name: str = "") -> dict[str, str]: ...


class Registry(Protocol):
    """This broker's membership and the registered brokers (`Membership`)."""

    @property
    def broker_id(self) -> str: ...
    @property
    def registered(self) -> bool: ...
    @property
    def closing(self) -> bool: ...

    async def brokers(self) -> dict[str, dict[str, Any]]: ...


class BundleTable(Protocol):
    """The bundles this broker owns and the ownership nodes (`BundleOwnership`)."""

    @property
    def owned(self) -> Mapping[tuple[str, str], Owned]: ...

    def is_heartbeat(self, ns: NamespaceName) -> bool: ...

    def owns_topic(self, topic: TopicName) -> bool: ...

    async def bundle_of(self, topic: TopicName) -> BundleRange: ...

    async def owner_of(self, ns: NamespaceName, bundle: BundleRange) -> dict[str, Any] | None: ...

    async def acquire(self, ns: NamespaceName, bundle: BundleRange, reason: str) -> bool: ...

    def record_owned(self, ns: NamespaceName, bundle: BundleRange, reason: str) -> None: ...

    def decide(self, action: str, ns: NamespaceName, bundle: BundleRange, reason: str) -> None: ...


def http_url_of(info: dict[str, Any], tls: bool) -> str | None:
    """The admin URL in a broker's owner node or load report: https when ``tls`` and it has one."""
    plain = str(info.get("httpUrl") or info.get("webServiceUrl") or "")
    secure = str(info.get("httpUrlTls") or info.get("webServiceUrlTls") or "")
    # a request that came over https is sent to https (Pulsar redirects to webServiceUrlTls)
    return ((secure or plain) if tls else (plain or secure)) or None


def _urls_of(info: dict[str, Any], listener_name: str) -> dict[str, str]:
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


class Lookups:
    """Rule 2 for LOOKUP and for admin requests (module rules)."""

    def __init__(self, host: LookupHost, member: Registry, bundles: BundleTable) -> None:
        self.host = host
        self.member = member
        self.bundles = bundles
        # bundles assigned to each broker since its current report ("brokerId@timestamp")
        self.assigned_since_report: dict[str, int] = {}

    async def pick_broker(self, ns: NamespaceName, bundle: BundleRange) -> tuple[str, dict[str, Any]]:
        """The least loaded registered broker for an unowned bundle (Rule 2) and its report."""
        reports = await self.member.brokers()
        if not reports:
            raise ServiceNotReadyError("no broker is registered in the cluster")
        key = f"{ns}/{bundle.name}"

        def score(item: tuple[str, dict[str, Any]]) -> tuple[int, int, int]:
            # loaded topics first (bundles whose topics went idle cost nothing), then bundles held;
            # bundles assigned since the broker's last report count as one topic each
            bid, r = item
            pending = self.assigned_since_report.get(f"{bid}@{r.get('timestamp')}", 0)
            return (
                int(r.get("numTopics", 0)) + pending,
                int(r.get("numBundles", 0)) + pending,
                zlib.crc32(f"{key}|{bid}".encode()),
            )

        bid, report = min(reports.items(), key=score)
        tag = f"{bid}@{report.get('timestamp')}"
        # only the counts since each broker's current report matter: those of older reports (and of
        # brokers gone) are dropped, so the map holds at most one entry per registered broker
        current = {f"{b}@{r.get('timestamp')}" for b, r in reports.items()}
        self.assigned_since_report = {k: v for k, v in self.assigned_since_report.items() if k in current}
        self.assigned_since_report[tag] = self.assigned_since_report.get(tag, 0) + 1
        return bid, report

    async def _resolve(self, topic: TopicName, authoritative: bool) -> dict[str, Any] | None:
        """None when this broker serves ``topic`` (taking its bundle if it was unowned and this
        broker is chosen), else the JSON (owner node or load report) of the broker to go to."""
        member, bundles = self.member, self.bundles
        if member.closing or not member.registered:
            raise ServiceNotReadyError("the broker is not serving lookups (starting or stopping)")
        ns = topic.namespace_name
        if bundles.is_heartbeat(ns) or bundles.owns_topic(topic):
            # served here: answered from memory, with no metadata read (those queue behind the
            # session's writes, and lookups of owned topics took seconds on a loaded ZooKeeper)
            return None
        bundle = await bundles.bundle_of(topic)
        for _attempt in range(3):
            o = bundles.owned.get((str(ns), bundle.name))
            if o is not None:
                if o.state is not BundleState.OWNED:
                    raise ServiceNotReadyError(f"bundle {ns}/{bundle} is being unloaded")
                return None
            owner = await bundles.owner_of(ns, bundle)
            if owner is not None:
                if owner.get("self"):  # this session's node, not recorded (Rule 1): it is ours
                    bundles.record_owned(ns, bundle, ADOPTED)
                    return None
                if owner.get("brokerId") == member.broker_id:
                    raise ServiceNotReadyError(
                        f"bundle {ns}/{bundle} is held by this broker's previous session until it expires"
                    )
                return owner
            if authoritative:
                bid, report = member.broker_id, None
                why = "unowned bundle taken on an authoritative lookup (another broker picked this one)"
            else:
                bid, report = await self.pick_broker(ns, bundle)
                why = "unowned bundle assigned on lookup (least loaded broker)"
            if bid == member.broker_id:
                if await bundles.acquire(ns, bundle, why):
                    return None
                continue  # another broker won the race: look again
            assert report is not None
            bundles.decide("redirected", ns, bundle, f"unowned; least loaded broker is {bid}")
            return report
        raise ServiceNotReadyError(f"bundle {ns}/{bundle} is changing owner; retry")

    async def lookup(
        self, topic: TopicName, listener_name: str, authoritative: bool, tls: bool = False
    ) -> LookupAnswer:
        """Rule 2 for LOOKUP. Raises ServiceNotReady while this broker is starting or stopping, or
        when the bundle's owner is this broker's previous session (it expires soon). ``tls``: the
        client connected over TLS; a Redirect then carries the owner's ``brokerServiceUrlTls``
        (which the official client follows), and an owner without one is an error rather than a
        silent downgrade to plain text."""
        target = await self._resolve(topic, authoritative)
        if target is None:
            return LookupAnswer(False, self.host.lookup_urls(listener_name))
        urls = _urls_of(target, listener_name)
        if tls and "brokerServiceUrlTls" not in urls:
            raise ServiceNotReadyError(
                f"the owner of {topic} ({target.get('brokerId')}) has no TLS service URL "
                "(brokerServicePortTls) for a client connected over TLS"
            )
        return LookupAnswer(True, urls)

    async def admin_target(self, topic: TopicName, tls: bool = False, authoritative: bool = False) -> str | None:
        """The admin URL (``http[s]://host:port``) of the broker that serves ``topic``, None when
        it is this one; an unowned bundle is assigned first, as a lookup does (``authoritative``:
        the request was redirected here to take it, so this broker takes it instead of picking
        again). ``tls``: the https URL when the broker has one."""
        target = await self._resolve(topic, authoritative)
        if target is None:
            return None
        return http_url_of(target, tls)

    async def bundle_admin_target(self, ns: NamespaceName, bundle: BundleRange, tls: bool = False) -> str | None:
        """The admin URL of the bundle's owner when another broker owns it, else None (``tls``: the
        https URL when the owner has one)."""
        if (str(ns), bundle.name) in self.bundles.owned:
            return None
        owner = await self.bundles.owner_of(ns, bundle)
        if owner is None or owner.get("self"):
            return None
        return http_url_of(owner, tls)
