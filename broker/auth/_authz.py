"""Authorization: what an authenticated role may do (Pulsar's default authorization provider).

Rules (only with ``authorizationEnabled``; off, everything is allowed):

* A role in ``superUserRoles`` may do anything.
* A role in a tenant's ``adminRoles`` administers that tenant: its namespaces, topics, policies
  and permissions on the admin REST, and it may also produce and consume on its topics.
* Other roles need a permission: granted on a namespace (the namespace Policies'
  ``auth_policies.namespace_auth[role]``) or on a topic (``auth_policies.destination_auth[topic]
  [role]``, a partition inheriting its partitioned topic's), as lists of actions (`ACTIONS`).
  PRODUCER needs ``produce``, SUBSCRIBE ``consume``; LOOKUP, PARTITIONED_METADATA and schema reads
  either one.
* Subscription permissions (Pulsar's ``subscription_auth_roles``, set per namespace): when a
  subscription name has a non-empty list of roles, only those roles (and super users and the
  tenant's admins) may subscribe with that name, on every topic of the namespace; they still
  need ``consume``. A subscription that is not listed is open to every role with ``consume``.
* Without a role (authentication off, or an anonymous client without ``anonymousUserRole``)
  nothing is allowed while authorization is on.
* Permissions are read from the metadata store on every check, so a grant or revoke made through
  any broker applies to the next command (connections already holding a producer or consumer
  keep it, as in Pulsar).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocols.pulsar import NamespaceName, TopicName
from protocols.pulsar import pulsar_api_pb2 as pb

from .._errors import BrokerServiceError

if TYPE_CHECKING:
    from .._config import BrokerConfig
    from ..resources._namespaces import NamespaceResources

__all__ = ["ACTIONS", "AuthorizationError", "AuthorizationService", "check_actions"]

ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
"""Pulsar's AuthAction values (only produce and consume are checked by this broker)."""


class AuthorizationError(BrokerServiceError):
    """The role may not do this (ServerError AuthorizationError; 403 on the admin REST)."""

    code = pb.AuthorizationError


def check_actions(value: Any) -> list[str]:
    """A permission body (a JSON list of actions) as a sorted list; `ValueError` when malformed."""
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValueError('the body must be a JSON list of actions, e.g. ["produce", "consume"]')
    unknown = sorted({a for a in value} - set(ACTIONS))
    if unknown:
        raise ValueError(f"unknown actions {unknown} (known: {', '.join(ACTIONS)})")
    return sorted(set(value))


def _auth_policies(policies: dict[str, Any]) -> dict[str, Any]:
    auth = policies.get("auth_policies")
    if not isinstance(auth, dict):
        auth = {}
    for key in ("namespace_auth", "destination_auth", "subscription_auth_roles"):
        if not isinstance(auth.get(key), dict):
            auth[key] = {}
    return auth


class AuthorizationService:
    """Checks of the module rules over ``namespaces`` (the broker's `NamespaceResources`)."""

    def __init__(self, config: BrokerConfig, namespaces: NamespaceResources) -> None:
        self.enabled = config.authorization_enabled
        self.super_users = frozenset(config.super_user_roles)
        self.namespaces = namespaces

    def is_super_user(self, role: str | None) -> bool:
        """Whether ``role`` is a super user."""
        return role is not None and role in self.super_users

    async def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        """Whether ``role`` is a super user or one of ``tenant``'s admin roles."""
        if role is None:
            return False
        if self.is_super_user(role):
            return True
        info = await self.namespaces.get_tenant_info(tenant)
        roles = (info or {}).get("adminRoles") or []
        return isinstance(roles, list) and role in roles

    async def actions_of(self, role: str, topic: TopicName) -> set[str]:
        """The actions granted to ``role`` on ``topic`` by its namespace's and its own permissions."""
        policies = await self.namespaces.get_policies(topic.namespace_name)
        if policies is None:
            return set()
        auth = _auth_policies(policies)
        granted = set(auth["namespace_auth"].get(role) or [])
        names = {str(topic), str(topic.partitioned_topic)}
        for name in names:
            granted |= set((auth["destination_auth"].get(name) or {}).get(role) or [])
        return granted

    async def allowed(self, role: str | None, topic: TopicName, *wanted: str) -> bool:
        """Whether ``role`` may do one of ``wanted`` (actions) on ``topic``."""
        if not self.enabled:
            return True
        if role is None:
            return False
        if await self.is_tenant_admin(role, topic.tenant):
            return True
        return bool(await self.actions_of(role, topic) & set(wanted))

    async def check(self, role: str | None, topic: TopicName, *wanted: str) -> None:
        """Raise `AuthorizationError` unless ``role`` may do one of ``wanted`` on ``topic``."""
        if not await self.allowed(role, topic, *wanted):
            raise AuthorizationError(
                f"Client with role {role!r} is not authorized to {' or '.join(wanted)} on topic {topic}"
            )

    async def may_use_subscription(self, role: str | None, topic: TopicName, subscription: str) -> bool:
        """Whether ``role`` may use ``subscription`` on ``topic`` by its namespace's subscription
        permissions (the module rules; ``consume`` is checked separately)."""
        if not self.enabled:
            return True
        if role is None:
            return False
        if await self.is_tenant_admin(role, topic.tenant):
            return True
        roles = (await self.subscription_permissions(topic.namespace_name) or {}).get(subscription) or []
        return not roles or role in roles

    async def check_subscription(self, role: str | None, topic: TopicName, subscription: str) -> None:
        """Raise `AuthorizationError` unless ``role`` may use ``subscription`` on ``topic``."""
        if not await self.may_use_subscription(role, topic, subscription):
            raise AuthorizationError(
                f"Client with role {role!r} is not authorized to use subscription {subscription!r} on topic {topic}"
            )

    async def check_namespace(self, role: str | None, ns: NamespaceName, *wanted: str) -> None:
        """Raise `AuthorizationError` unless ``role`` administers ``ns``'s tenant or was granted one of
        ``wanted`` on the namespace itself."""
        if not self.enabled:
            return
        if role is not None and await self.is_tenant_admin(role, ns.tenant):
            return
        if role is not None:
            granted = set((await self.namespace_permissions(ns) or {}).get(role) or [])
            if granted & set(wanted):
                return
        raise AuthorizationError(
            f"Client with role {role!r} is not authorized to {' or '.join(wanted)} on namespace {ns}"
        )

    # ------------------------------------------------------------------ permissions (admin REST)

    async def namespace_permissions(self, ns: NamespaceName) -> dict[str, list[str]] | None:
        """role -> actions granted on the namespace; None when it does not exist."""
        policies = await self.namespaces.get_policies(ns)
        return None if policies is None else dict(_auth_policies(policies)["namespace_auth"])

    async def subscription_permissions(self, ns: NamespaceName) -> dict[str, list[str]] | None:
        """subscription -> roles allowed to use it; None when the namespace does not exist."""
        policies = await self.namespaces.get_policies(ns)
        if policies is None:
            return None
        found = _auth_policies(policies)["subscription_auth_roles"]
        return {sub: sorted(roles) for sub, roles in sorted(found.items()) if isinstance(roles, list)}

    async def grant_subscription(self, ns: NamespaceName, subscription: str, roles: list[str]) -> bool:
        """Add ``roles`` to those allowed to use ``subscription``; False when the namespace is missing."""

        def change(policies: dict[str, Any]) -> None:
            auth = _auth_policies(policies)
            current = set(auth["subscription_auth_roles"].get(subscription) or [])
            auth["subscription_auth_roles"][subscription] = sorted(current | set(roles))
            policies["auth_policies"] = auth

        return await self.namespaces.modify_policies(ns, change) is not None

    async def revoke_subscription(self, ns: NamespaceName, subscription: str, role: str) -> bool:
        """Remove ``role`` from ``subscription``'s roles (the subscription is open again once none is
        left); False when the namespace is missing."""

        def change(policies: dict[str, Any]) -> None:
            auth = _auth_policies(policies)
            left = sorted(set(auth["subscription_auth_roles"].get(subscription) or []) - {role})
            if left:
                auth["subscription_auth_roles"][subscription] = left
            else:
                auth["subscription_auth_roles"].pop(subscription, None)
            policies["auth_policies"] = auth

        return await self.namespaces.modify_policies(ns, change) is not None

    async def topic_permissions(self, topic: TopicName) -> dict[str, list[str]] | None:
        """role -> actions on ``topic``, its namespace's grants included (as Pulsar answers)."""
        policies = await self.namespaces.get_policies(topic.namespace_name)
        if policies is None:
            return None
        auth = _auth_policies(policies)
        merged: dict[str, set[str]] = {r: set(a) for r, a in auth["namespace_auth"].items()}
        for name in {str(topic), str(topic.partitioned_topic)}:
            for role, actions in (auth["destination_auth"].get(name) or {}).items():
                merged.setdefault(role, set()).update(actions)
        return {role: sorted(actions) for role, actions in sorted(merged.items())}

    async def grant(self, ns: NamespaceName, role: str, actions: list[str], topic: TopicName | None = None) -> bool:
        """Set ``role``'s actions on the namespace (or on ``topic``); False when the namespace is missing."""

        def change(policies: dict[str, Any]) -> None:
            auth = _auth_policies(policies)
            if topic is None:
                auth["namespace_auth"][role] = actions
            else:
                auth["destination_auth"].setdefault(str(topic), {})[role] = actions
            policies["auth_policies"] = auth

        return await self.namespaces.modify_policies(ns, change) is not None

    async def revoke(self, ns: NamespaceName, role: str, topic: TopicName | None = None) -> bool:
        """Remove ``role``'s grant on the namespace (or ``topic``); False when the namespace is missing."""

        def change(policies: dict[str, Any]) -> None:
            auth = _auth_policies(policies)
            if topic is None:
                auth["namespace_auth"].pop(role, None)
            else:
                grants = auth["destination_auth"].get(str(topic)) or {}
                grants.pop(role, None)
                if grants:
                    auth["destination_auth"][str(topic)] = grants
                else:
                    auth["destination_auth"].pop(str(topic), None)
            policies["auth_policies"] = auth

        return await self.namespaces.modify_policies(ns, change) is not None
