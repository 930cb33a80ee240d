"""The admin ASGI app (Starlette) and `serve_admin`, its hypercorn-on-trio server.

Every request goes through `RequestGuard` (bodies bounded by ``httpMaxRequestSize``, reads
cancelled when their client leaves, unread bodies drained so that hypercorn can close the
connection), then, with authentication on, `AuthMiddleware` (401 without a valid bearer token).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import trio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from magnetar.common.config import ConfigError
from magnetar.common.http_server import serve_http
from magnetar.common.tls import record_peer_certificates, server_context

from ..topics._stats import backlog_age_for_request
from . import (
    _auto_creation,
    _backlog,
    _broker_config,
    _broker_stats,
    _brokers,
    _buffer_stats,
    _cluster,
    _clusters,
    _compaction,
    _explain,
    _inactive_topic_policies,
    _limits,
    _messages,
    _namespaces,
    _nonpersistent,
    _offload,
    _permissions,
    _policies,
    _replication,
    _schema_routes,
    _subscriptions,
    _tenants,
    _topics,
    _transactions,
)
from ._auth import AuthMiddleware
from ._common import endpoint, service_of
from ._request_guard import GuardSettings, RequestGuard

if TYPE_CHECKING:
    from .._service import BrokerService
    from ._explain import GcExplainHook

__all__ = ["create_admin_app", "serve_admin"]

log = logging.getLogger("broker.admin")


@endpoint
async def metrics(request: Request) -> Response:
    s = service_of(request)
    # the backlog age needs a read per subscription: refreshed at most every few seconds, and
    # never waited for long (`broker.topics._stats` Rule 6)
    await backlog_age_for_request([t for t in list(s.topics.values()) if not t.closed], int(s.clock() * 1000))
    return Response(s.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


async def _not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse({"reason": f"no such admin endpoint: {request.method} {request.url.path}"}, status_code=404)


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return JSONResponse({"reason": f"method {request.method} not allowed on {request.url.path}"}, status_code=405)


def create_admin_app(service: BrokerService, *, gc_explain: GcExplainHook | None = None) -> Starlette:
    """The admin REST app of ``service`` (Pulsar v2 paths incl. ``/admin/v2/schemas``, ``/lookup/v2``,
    ``/metrics``).

    ``gc_explain`` joins the bookies' GC state into explain-storage (see `GcExplainHook`); it can
    also be set later as ``app.state.gc_explain``. ``app.state.request_guard`` holds the
    `GuardSettings` (`serve_admin` gives it the nursery that drains unread bodies).
    """
    routes: list[Route] = [Route("/metrics", metrics, methods=["GET"])]
    # order matters where paths overlap: specific topic sub-paths before generic ones
    for module in (
        _brokers,
        _broker_config,
        _broker_stats,
        _buffer_stats,
        _clusters,
        _cluster,
        _tenants,
        _namespaces,
        _permissions,
        _inactive_topic_policies,
        _topics,
        _subscriptions,
        _messages,
        _policies,
        _replication,
        _limits,
        _backlog,
        _explain,
        _schema_routes,
        _auto_creation,
        _compaction,
        _nonpersistent,
        _offload,
        _transactions,
    ):
        routes.extend(module.routes())
    limit = service.config.http_max_request_size
    guard = GuardSettings(max_body=limit if limit > 0 else None)  # <= 0: no limit, as in Pulsar
    app = Starlette(
        routes=routes,
        exception_handlers={404: _not_found, 405: _not_allowed},
        middleware=[
            Middleware(RequestGuard, settings=guard),
            Middleware(AuthMiddleware, auth=service.auth, authz=service.authz),
            Middleware(_cluster.OwnerRedirect, service=service),
        ],
    )
    app.state.service = service
    app.state.gc_explain = gc_explain
    app.state.request_guard = guard
    return app


async def serve_admin(
    service: BrokerService,
    host: str | None = None,
    port: int | None = None,
    *,
    tls_port: int | None = None,
    gc_explain: GcExplainHook | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin REST API of ``service`` on ``host:port`` until cancelled.

    Defaults: the config's ``bindAddress`` and ``webServicePort``; port 0 picks a free one; a
    ``webServicePort`` left empty in the config switches plain HTTP off. With ``tls_port`` or the
    config's ``webServicePortTls`` set, the same API is served over https there (the config's
    ``tls*`` keys, see `magnetar.common.tls`). ``task_status.started(port)`` reports the real HTTP port
    (the https one when HTTP is off); the service records both. The broker service must be
    running (``serve_broker`` or ``service.run``) for topic operations.
    """
    host = service.config.bind_address if host is None else host
    port = service.config.web_service_port if port is None else port
    tls_port = service.config.web_service_port_tls if tls_port is None else tls_port
    if port is None and tls_port is None:
        raise ConfigError("web_service_port", "webServicePort and webServicePortTls are both off")
    ssl_context = None if tls_port is None else record_peer_certificates(server_context(service.config.tls_settings()))
    app = create_admin_app(service, gc_explain=gc_explain)

    async with trio.open_nursery() as nursery:
        app.state.request_guard.drain_nursery = nursery
        urls = await nursery.start(
            functools.partial(
                serve_http,
                app,
                plain=[] if port is None else [(host, port)],
                secure=[] if tls_port is None else [(host, tls_port)],
                ssl_context=ssl_context,
                keys="webServicePort/webServicePortTls",
                errorlog=logging.getLogger("hypercorn.error"),
            )
        )
        plain_port = tls_real_port = None
        for url in urls:
            real = int(url.rsplit(":", 1)[1])
            if url.startswith("https://"):
                tls_real_port = real
                service.set_web_tls_port(real)
            else:
                plain_port = real
                service.set_web_port(real)
        log.info("admin REST listening on %s", ", ".join(urls))
        started = plain_port if plain_port is not None else tls_real_port
        assert started is not None
        task_status.started(started)
