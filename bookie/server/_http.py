"""The bookie's HTTP server: Prometheus metrics and a small REST API (Starlette on hypercorn/trio).

Endpoints:

* ``GET /metrics`` - Prometheus text from the bookie's registry (journal, storage, requests, GC).
* ``GET /api/v1/bookie/info`` - id, state, read-only reasons, free and total space (bytes).
* ``GET /api/v1/bookie/state`` - ``{"running": true, "readOnly": bool, "reasons": [...]}``.
* ``PUT /api/v1/bookie/state`` and ``PUT /api/v1/bookie/state/readonly`` with ``{"readOnly": bool}``
  set or clear the MANUAL read-only reason (BookKeeper spells the second form); the bookie stays
  read-only while another reason (a full disk) holds. ``GET .../state/readonly`` answers too.
* ``GET /heartbeat`` - ``OK`` (text) while the HTTP server answers: a liveness probe, as BookKeeper's.
* ``GET /api/v1/bookie/is_ready`` - 200 ``OK`` once the bookie is ready to serve (`Bookie.ready`:
  its protocol server runs and, with a metadata store, it is registered), 503 ``Bookie is not
  ready`` before that and while shutting down (BookKeeper answers 503 likewise).
* The garbage collector's ``/api/v1/bookie/gc``, ``/api/v1/bookie/gc_details`` and
  ``/api/v1/bookie/gc/explain`` (`gc_routes`), when the bookie runs one (`Bookie.gc`).

Over https with certificate-role authorization (``bookieAuthProviderFactoryClass``, see
``_authz``), every request but the probes and metrics (``/metrics``, ``/heartbeat``,
``/api/v1/bookie/is_ready``) needs a client certificate carrying an authorized role, else it is
answered 403 ``{"reason": ...}``: a trusted certificate of another role cannot turn the bookie
read-only or run its GC.
"""

from __future__ import annotations

import json
import logging
import ssl

import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from magnetar.common.http_server import serve_http
from magnetar.common.tls import handshake_peer_cert, record_peer_certificates

from ..gc import gc_routes
from ._authz import CertificateRoleAuthorizer
from ._bookie import Bookie, BookieState

__all__ = ["bookie_http_app", "serve_bookie_http"]

log = logging.getLogger(__name__)


def _state_doc(bookie: Bookie) -> dict[str, object]:
    return {
        "running": True,
        "readOnly": bookie.state is BookieState.READ_ONLY,
        "reasons": sorted(r.value for r in bookie.read_only_reasons),
    }


def bookie_http_app(bookie: Bookie) -> Starlette:
    """The ASGI app serving the endpoints of the module docstring for ``bookie``."""

    async def metrics(request: Request) -> Response:
        body = await trio.to_thread.run_sync(generate_latest, bookie.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def info(request: Request) -> Response:
        total, free = await trio.to_thread.run_sync(bookie.disk_space)
        return JSONResponse(
            {
                "bookieId": bookie.bookie_id,
                "state": bookie.state.value,
                "readOnly": bookie.state is BookieState.READ_ONLY,
                "reasons": sorted(r.value for r in bookie.read_only_reasons),
                "freeSpace": free,
                "totalSpace": total,
            }
        )

    async def state(request: Request) -> Response:
        if request.method == "PUT":
            try:
                doc = json.loads(await request.body() or b"{}")
                read_only = doc["readOnly"]
                if not isinstance(read_only, bool):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                return JSONResponse({"error": 'expected a JSON body like {"readOnly": true}'}, status_code=400)
            bookie.set_manual_read_only(read_only)
        return JSONResponse(_state_doc(bookie))

    async def heartbeat(request: Request) -> Response:
        return PlainTextResponse("OK\n")

    async def is_ready(request: Request) -> Response:
        if bookie.ready:
            return PlainTextResponse("OK")
        return PlainTextResponse("Bookie is not ready", status_code=503)

    routes = [
        Route("/metrics", metrics, methods=["GET"]),
        Route("/heartbeat", heartbeat, methods=["GET"]),
        Route("/api/v1/bookie/is_ready", is_ready, methods=["GET"]),
        Route("/api/v1/bookie/info", info, methods=["GET"]),
        Route("/api/v1/bookie/state", state, methods=["GET", "PUT"]),
        Route("/api/v1/bookie/state/readonly", state, methods=["GET", "PUT"]),
    ]
    if bookie.gc is not None:
        routes += gc_routes(bookie.gc)
    return Starlette(routes=routes)


_OPEN_PATHS = frozenset({"/metrics", "/heartbeat", "/api/v1/bookie/is_ready"})


class _RoleMiddleware:
    """Refuses (403) requests whose verified client certificate has no authorized role, except
    on `_OPEN_PATHS`. The certificate comes from the TLS handshake of the request's connection
    (`magnetar.common.tls.handshake_peer_cert`)."""

    def __init__(self, app: ASGIApp, authorizer: CertificateRoleAuthorizer) -> None:
        self.app = app
        self.authorizer = authorizer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in _OPEN_PATHS:
            refused = self.authorizer.authorize(handshake_peer_cert())
            if refused is not None:
                await JSONResponse({"reason": f"forbidden: {refused}"}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def serve_bookie_http(
    bookie: Bookie,
    host: str = "0.0.0.0",
    port: int = 8000,
    *,
    shutdown_trigger: trio.Event | None = None,
    ssl_context: ssl.SSLContext | None = None,
    authorizer: CertificateRoleAuthorizer | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the app on ``host:port`` until ``shutdown_trigger`` is set (a graceful stop) or the
    task is cancelled; ``task_status.started`` gets the bound URLs (``["http://127.0.0.1:8000"]``,
    ``https://`` with ``ssl_context``: ``httpServerTlsEnable``). With ``authorizer`` (needs
    ``ssl_context``) requests are checked as the module docstring says. Raises OSError naming
    ``httpServerPort`` if the port cannot be bound, ValueError for an ``authorizer`` without TLS."""
    app: ASGIApp = bookie_http_app(bookie)
    if authorizer is not None:
        if ssl_context is None:
            raise ValueError("certificate-role authorization of the bookie REST needs https (httpServerTlsEnable)")
        ssl_context = record_peer_certificates(ssl_context)
        app = _RoleMiddleware(app, authorizer)
    address = [(host, port)]
    await serve_http(
        app,
        plain=address if ssl_context is None else [],
        secure=address if ssl_context is not None else [],
        ssl_context=ssl_context,
        keys="httpServerPort",
        errorlog=logging.getLogger("bookie.http"),
        shutdown_trigger=shutdown_trigger.wait if shutdown_trigger is not None else None,
        task_status=task_status,
    )
