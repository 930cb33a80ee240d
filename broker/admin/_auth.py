"""Authentication of admin REST requests (and, with authorization on, the role's access check).

Rules:

* Authentication off: requests pass untouched.
* On: every request except ``GET /metrics`` (Pulsar's ``authenticateMetricsEndpoint`` is off by
  default) must carry ``Authorization: Bearer <token>`` that the broker's authentication service
  accepts, else 401 ``{"reason": ...}`` (with ``WWW-Authenticate: Bearer``). The role is put in
  ``request.state.role`` for the handlers.
* The body is never read before the request is authenticated (`RequestGuard`, outside this
  middleware, drains what was not read).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse

from ..auth import AuthenticationError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from ..auth import AuthenticationService

__all__ = ["AuthMiddleware"]

log = logging.getLogger("broker.admin")

_UNAUTHENTICATED_PATHS = frozenset({"/metrics"})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class AuthMiddleware:
    """ASGI middleware applying the module rules with ``auth``."""

    def __init__(self, app: ASGIApp, auth: AuthenticationService) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.auth.enabled or scope.get("path") in _UNAUTHENTICATED_PATHS:
            await self.app(scope, receive, send)
            return
        try:
            identity = self.auth.authenticate_http(_header(scope, b"authorization"))
        except AuthenticationError as exc:
            log.warning("admin %s %s refused: %s", scope.get("method"), scope.get("path"), exc)
            response = JSONResponse({"reason": f"Authentication required: {exc}"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["role"] = identity.role
        await self.app(scope, receive, send)
