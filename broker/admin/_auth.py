"""Authentication of admin REST requests (and, with authorization on, the role's access check).

Rules:

* Authentication off: requests pass untouched.
* On: every request except ``GET /metrics`` (Pulsar's ``authenticateMetricsEndpoint`` is off by
  default) and the probes ``/status.html`` and ``/admin/v2/brokers/ready`` must carry
  ``Authorization: Bearer <token>`` (or ``Basic <credentials>`` with the ``basic`` provider)
  that the broker's authentication service accepts, or (``tls`` provider, no ``Authorization``
  header) come over https with a client certificate the handshake verified
  (`magnetar.common.tls.handshake_peer_cert`), else 401
  ``{"reason": ...}`` (with ``WWW-Authenticate: Bearer``). The role is put in
  ``request.state.role`` for the handlers.
* Authorization on (`required_access` says what each path needs): clusters may be read by any
  authenticated role and changed by super users; the tenant list, tenant creation, update and
  deletion, and every path this table does not name, need a super user; a tenant's info, its
  namespaces (policies and permissions included) and its topics need one of its ``adminRoles``
  (or a super user); schema reads, HTTP lookups and partitioned metadata reads (``GET
  .../partitions``, a lookup in Pulsar) of a topic need ``produce`` or ``consume`` on it (or tenant
  admin); reading a topic's messages (peek, examine, get by id, last message id)
  needs ``consume`` on it (or tenant admin); reads of transaction state (``GET /admin/v3/transactions/...``)
  need any authenticated role, as in Pulsar; the broker health check (``/admin/v2/brokers/health``, it writes) needs a
  super user, as in Pulsar. A refusal is 403 ``{"reason": ...}``.
* The body is never read before the request is authenticated (`RequestGuard`, outside this
  middleware, drains what was not read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from starlette.responses import JSONResponse

from magnetar.common.tls import handshake_peer_cert
from protocols.pulsar import InvalidTopicNameError, TopicName

from ..auth import AuthenticationError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from ..auth import AuthenticationService, AuthorizationService

__all__ = ["Access", "AuthMiddleware", "required_access"]

log = logging.getLogger("broker.admin")

# probes carry no credentials: Pulsar serves these without authentication too
_UNAUTHENTICATED_PATHS = frozenset({"/metrics", "/status.html", "/admin/v2/brokers/ready"})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


@dataclass(frozen=True)
class Access:
    """What a request needs: ``kind`` is "any" (any authenticated role), "super", "tenant" (admin of
    ``tenant``), "topic" (``produce``/``consume`` on ``topic``, or admin of its tenant) or
    "consume" (``consume`` on ``topic``, or admin of its tenant)."""

    kind: str
    tenant: str = ""
    topic: str = ""


_SUPER = Access("super")


def _reads_messages(rest: list[str]) -> bool:
    """Whether ``{tenant}/{ns}/{topic}/...`` is a message read: lastMessageId, examinemessage,
    get-message-by-id (``ledger/{l}/entry/{e}``) or peek (``subscription/{s}/position/{n}``)."""
    if len(rest) < 4:
        return False
    tail = rest[3:]
    return (
        tail in (["lastMessageId"], ["examinemessage"])
        or (len(tail) == 4 and tail[0] == "ledger" and tail[2] == "entry")
        or (len(tail) == 4 and tail[0] == "subscription" and tail[2] == "position")
    )


def required_access(method: str, raw_path: str) -> Access:
    """The `Access` a request of ``method`` on ``raw_path`` (still percent-encoded) needs."""
    parts = [unquote(p) for p in raw_path.strip("/").split("/")]
    read = method in ("GET", "HEAD")
    if parts[:2] == ["admin", "v2"] and len(parts) >= 3:
        area, rest = parts[2], parts[3:]
        if area == "brokers" and rest == ["ready"]:
            return Access("any")
        if area == "brokers" and rest == ["health"]:
            return _SUPER
        if area == "clusters":
            return Access("any") if read else _SUPER
        if area == "tenants":
            return Access("tenant", rest[0]) if len(rest) == 1 and read else _SUPER
        if area in ("persistent", "non-persistent") and read and _reads_messages(rest):
            return Access("consume", rest[0], f"{area}://{rest[0]}/{rest[1]}/{rest[2]}")
        if area in ("persistent", "non-persistent") and read and len(rest) == 4 and rest[3] == "partitions":
            # partitioned metadata: Pulsar checks it as a lookup (clients with an http:// URL read it)
            return Access("topic", rest[0], f"{area}://{rest[0]}/{rest[1]}/{rest[2]}")
        if area in ("namespaces", "persistent", "non-persistent") and rest and rest[0]:
            return Access("tenant", rest[0])
        if area == "schemas" and len(rest) >= 3:
            if read:
                return Access("topic", rest[0], f"persistent://{rest[0]}/{rest[1]}/{rest[2]}")
            return Access("tenant", rest[0])
    if parts[:3] == ["admin", "v3", "transactions"]:
        # Pulsar reads transaction state for any authenticated role (its clients' tests read a
        # transaction's metadata anonymously); changing it is a super user's
        return Access("any") if read else _SUPER
    if parts[:3] == ["lookup", "v2", "topic"] and len(parts) >= 7:
        return Access("topic", parts[4], f"{parts[3]}://{parts[4]}/{parts[5]}/{parts[6]}")
    return _SUPER


async def _allowed(authz: AuthorizationService, role: str, access: Access) -> bool:
    if access.kind == "any" or authz.is_super_user(role):
        return True
    if access.kind == "tenant":
        return await authz.is_tenant_admin(role, access.tenant)
    if access.kind in ("topic", "consume"):
        try:
            topic = TopicName.parse(access.topic)
        except InvalidTopicNameError:
            return await authz.is_tenant_admin(role, access.tenant)
        wanted = ("consume",) if access.kind == "consume" else ("produce", "consume")
        return await authz.allowed(role, topic, *wanted)
    return False


class AuthMiddleware:
    """ASGI middleware applying the module rules with ``auth`` (and ``authz`` when given)."""

    def __init__(self, app: ASGIApp, auth: AuthenticationService, authz: AuthorizationService | None = None) -> None:
        self.app = app
        self.auth = auth
        self.authz = authz

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.auth.enabled or scope.get("path") in _UNAUTHENTICATED_PATHS:
            await self.app(scope, receive, send)
            return
        try:
            peer_cert = handshake_peer_cert() if scope.get("scheme") == "https" else None
            identity = self.auth.authenticate_http(_header(scope, b"authorization"), peer_cert=peer_cert)
        except AuthenticationError as exc:
            log.warning("admin %s %s refused: %s", scope.get("method"), scope.get("path"), exc)
            response = JSONResponse(
                {"reason": f"Authentication required: {exc}"}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["role"] = identity.role
        if self.authz is not None and self.authz.enabled:
            method = scope.get("method", "GET")
            raw = scope.get("raw_path") or scope.get("path", "/").encode()
            access = required_access(method, bytes(raw).decode("latin-1").split("?", 1)[0])
            if not await _allowed(self.authz, identity.role, access):
                what = {
                    "super": "a super user",
                    "tenant": f"an admin of tenant {access.tenant}",
                    "topic": f"produce or consume permission on {access.topic}",
                    "consume": f"consume permission on {access.topic}",
                }.get(access.kind, "more")
                log.warning("admin %s %s refused to role %r: needs %s", method, scope.get("path"), identity.role, what)
                response = JSONResponse(
                    {"reason": f"Role {identity.role!r} is not authorized: this needs {what}"}, status_code=403
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
