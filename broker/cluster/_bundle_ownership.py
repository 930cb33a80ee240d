"""The bundles this broker owns: taking, serving, unloading and splitting them (`_ownership`
module header: the ownership nodes and Rules 1, 3, 5 and 6).

A bundle's state on this broker: absent -> OWNED -> UNLOADING -> absent. Every change is kept,
with its reason, in a bounded list of decisions (`decisions`), which the admin API shows.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from metadata import MetadataError, MetadataStore, NodeExistsError, NoNodeError
from protocols.pulsar import NamespaceName, TopicName

from .._errors import NamespaceNotFoundError, ServiceNotReadyError
from ..resources._bundles import (
    BundleRange,
    boundaries_of,
    bundle_for,
    bundle_hash,
    bundles_of,
    split_boundaries,
)

__all__ = [
    "ADOPTED",
    "HEARTBEAT_TENANT",
    "OWNERSHIP_ROOT",
    "BundleHost",
    "BundleOwnership",
    "BundleState",
    "MemberState",
    "NamespacePolicies",
]

log = logging.getLogger(__name__)

OWNERSHIP_ROOT = "/namespace"
HEARTBEAT_TENANT = "pulsar"
MAX_DECISIONS = 200
"""How many recent decisions `BundleOwnership.decisions` keeps."""

ADOPTED = "this session's ownership node found unrecorded (its creation's caller was cancelled, or a release failed)"


class BundleState(enum.Enum):
    """A bundle's state on this broker (module header)."""

    OWNED = "owned"
    UNLOADING = "unloading"


@dataclass
class Owned:
    """One bundle this broker holds, in its state."""

    ns: NamespaceName
    bundle: BundleRange
    state: BundleState = BundleState.OWNED
    since: float = field(default_factory=time.time)


class NamespacePolicies(Protocol):
    """The namespace Policies the bundle boundaries are kept in (`NamespaceResources`)."""

    async def get_policies(self, ns: NamespaceName) -> dict[str, Any] | None: ...

    async def modify_policies(
        self, ns: NamespaceName, change: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any] | None: ...


class BundleHost(Protocol):
    """What bundle ownership needs of the broker: the namespaces, and its loaded topics to close."""

    @property
    def namespaces(self) -> NamespacePolicies: ...

    # topics are `Topic` or `NonPersistentTopic`; only their ``name`` is read here
    def loaded_topics(self) -> Iterable[Any]: ...

    def loading(self) -> Iterable[str]: ...

    async def unload(self, topic: Any) -> None: ...


class MemberState(Protocol):
    """What bundle ownership needs of this broker's membership (`Membership`)."""

    @property
    def broker_id(self) -> str: ...
    @property
    def registered(self) -> bool: ...
    @property
    def closing(self) -> bool: ...

    def owner_info(self) -> dict[str, Any]: ...

    def report_changed(self) -> None: ...


class BundleOwnership:
    """The bundles this broker holds (``owned``, keyed by namespace and bundle name) and the
    decisions that changed them (module rules)."""

    def __init__(self, host: BundleHost, store: MetadataStore, member: MemberState) -> None:
        self.host = host
        self.store = store
        self.member = member
        self.owned: dict[tuple[str, str], Owned] = {}
        self.decisions: list[dict[str, Any]] = []  # recent assignments/unloads with reasons, bounded

    # ------------------------------------------------------------------ reading

    async def namespace_boundaries(self, ns: NamespaceName) -> list[int]:
        """The namespace's bundle boundaries; `NamespaceNotFoundError` when it does not exist."""
        policies = await self.host.namespaces.get_policies(ns)
        if policies is None:
            raise NamespaceNotFoundError(f"namespace {ns} does not exist")
        return boundaries_of(policies)

    async def bundle_of(self, topic: TopicName) -> BundleRange:
        """The bundle ``topic`` belongs to now."""
        return bundle_for(await self.namespace_boundaries(topic.namespace_name), str(topic))

    def is_heartbeat(self, ns: NamespaceName) -> bool:
        """Whether ``ns`` is this broker's heartbeat namespace, which it always serves (as Pulsar)."""
        return str(ns) == f"{HEARTBEAT_TENANT}/{self.member.broker_id}"

    def owns_topic(self, topic: TopicName) -> bool:
        """Whether this broker serves ``topic`` now (its bundle OWNED, Rule 1)."""
        if self.is_heartbeat(topic.namespace_name):
            return True
        h = bundle_hash(str(topic))
        ns = str(topic.namespace_name)
        return any(o.state is BundleState.OWNED and k[0] == ns and o.bundle.contains(h) for k, o in self.owned.items())

    def check_serves(self, topic: TopicName) -> None:
        """Raise ServiceNotReady (Pulsar's message) unless this broker serves ``topic``."""
        if not self.owns_topic(topic):
            raise ServiceNotReadyError(
                f"Namespace bundle for topic ({topic}) not served by this instance. Please redo the lookup. "
                f"Request is denied: namespace={topic.namespace_name}"
            )

    def owner_path(self, ns: NamespaceName, bundle: BundleRange) -> str:
        """The path of the bundle's ownership node."""
        return f"{OWNERSHIP_ROOT}/{ns}/{bundle.name}"

    async def owner_of(self, ns: NamespaceName, bundle: BundleRange) -> dict[str, Any] | None:
        """The owner node's JSON (with ``"self"`` True when it is this broker's session), or None."""
        try:
            data, stat = await self.store.get(self.owner_path(ns, bundle))
        except NoNodeError:
            return None
        info = json.loads(data)
        info["self"] = stat.ephemeral_owner == self.store.session_id
        return dict(info)

    def bundles_owned(self) -> list[tuple[NamespaceName, BundleRange, BundleState]]:
        """The bundles this broker holds, with their state."""
        return [(o.ns, o.bundle, o.state) for o in self.owned.values()]

    # ------------------------------------------------------------------ changing

    async def acquire(self, ns: NamespaceName, bundle: BundleRange, reason: str) -> bool:
        """Take the bundle (Rule 1); False when another session holds it."""
        key = (str(ns), bundle.name)
        if key in self.owned:
            return self.owned[key].state is BundleState.OWNED
        if self.member.closing or not self.member.registered:
            return False
        try:
            await self.store.create(
                self.owner_path(ns, bundle),
                json.dumps(self.member.owner_info()).encode(),
                ephemeral=True,
                make_parents=True,
            )
        except NodeExistsError:
            owner = await self.owner_of(ns, bundle)
            if owner is None or not owner.get("self"):
                return False
            reason = ADOPTED
        self.record_owned(ns, bundle, reason)
        return True

    def record_owned(self, ns: NamespaceName, bundle: BundleRange, reason: str) -> None:
        """Record the bundle as OWNED: this session holds its ownership node."""
        self.owned[(str(ns), bundle.name)] = Owned(ns, bundle)
        self.decide("assigned", ns, bundle, reason)
        self.member.report_changed()

    def _in_bundle(self, o: Owned, topic_key: str) -> bool:
        try:
            name = TopicName.parse(topic_key)
        except ValueError:
            return False
        return name.namespace_name == o.ns and o.bundle.contains(bundle_hash(topic_key))

    async def _close_topics(self, o: Owned) -> None:
        ns = str(o.ns)
        # non-persistent topics belong to bundles too: their clients must reconnect to the new owner
        for t in self.host.loaded_topics():
            if str(t.name.namespace_name) == ns and o.bundle.contains(bundle_hash(str(t.name))):
                try:
                    await self.host.unload(t)
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
                while any(self._in_bundle(o, key) for key in self.host.loading()):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            await self._close_topics(o)
        finally:
            try:
                await self.store.delete(self.owner_path(ns, bundle))
            except NoNodeError:
                pass
            except MetadataError as exc:
                log.warning("releasing %s/%s: %s (the session's end releases it)", ns, bundle, exc)
            self.owned.pop(key, None)
            self.decide("unloaded", ns, bundle, reason)
            self.member.report_changed()
        return True

    async def unload_all(self, reason: str) -> None:
        """Rule 4's second step: unload every owned bundle (Rule 3)."""
        for key in list(self.owned):
            o = self.owned.get(key)
            if o is not None:
                await self.unload(o.ns, o.bundle, reason=reason)

    async def drop_all(self, reason: str) -> None:
        """Rule 5: the ownership nodes are gone with the session; forget every bundle at once and
        close its topics."""
        log.warning("metadata session lost: dropping %d owned bundle(s)", len(self.owned))
        lost = list(self.owned.values())
        self.owned.clear()
        for o in lost:
            await self._close_topics(o)
            self.decide("lost", o.ns, o.bundle, reason)

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

        namespaces = self.host.namespaces
        if o is None:
            if await namespaces.modify_policies(ns, change) is None:
                raise NamespaceNotFoundError(f"namespace {ns} does not exist")
            self.decide("split", ns, bundle, "admin split of an unowned bundle")
            return new
        # take the halves first, so that no lookup finds them unowned once the boundaries change
        halves = [BundleRange(bundle.lower, bundle.lower + (bundle.upper - bundle.lower) // 2)]
        halves.append(BundleRange(halves[0].upper, bundle.upper))
        for h in halves:
            await self.store.create(
                self.owner_path(ns, h), json.dumps(self.member.owner_info()).encode(), ephemeral=True, make_parents=True
            )
            self.owned[(str(ns), h.name)] = Owned(ns, h)
        try:
            if await namespaces.modify_policies(ns, change) is None:
                raise NamespaceNotFoundError(f"namespace {ns} does not exist")
        except BaseException:
            for h in halves:
                self.owned.pop((str(ns), h.name), None)
                try:
                    await self.store.delete(self.owner_path(ns, h))
                except MetadataError:
                    pass
            raise
        self.owned.pop(key, None)
        try:
            await self.store.delete(self.owner_path(ns, bundle))
        except NoNodeError:
            pass
        self.decide("split", ns, bundle, f"split into {halves[0]} and {halves[1]}")
        self.member.report_changed()
        return new

    def decide(self, action: str, ns: NamespaceName, bundle: BundleRange, reason: str) -> None:
        """Log a change of a bundle and keep it, with its reason, among the recent decisions."""
        entry = {
            "time": int(time.time() * 1000),
            "action": action,
            "bundle": f"{ns}/{bundle.name}",
            "broker": self.member.broker_id,
            "reason": reason,
        }
        log.info("bundle %s/%s %s: %s", ns, bundle, action, reason)
        self.decisions.append(entry)
        del self.decisions[:-MAX_DECISIONS]
