"""Serving an ASGI app over HTTP and HTTPS with hypercorn on trio: the one set-up of the broker's
admin REST and the bookie's REST/metrics server.

Rules:

* TLS uses the `ssl.SSLContext` the caller built with `magnetar.common.tls` (Pulsar's or
  BookKeeper's keys and errors, coalesced reads, client certificates recorded), never hypercorn's
  own file options; hypercorn only adds its ALPN protocols to it.
* ``plain`` addresses serve http, ``secure`` ones https (they need ``ssl_context``); at least one
  address is needed. An IPv6 host is written in brackets. Port 0 picks a free port.
* ``task_status.started`` gets the bound URLs (``["http://127.0.0.1:8080", "https://..."]``),
  once every address listens.
* A port that cannot be bound raises `OSError` (its errno kept) naming every address and
  ``keys``, the config keys that chose them, instead of hypercorn's exception group. Errors after
  the start are not relabelled.
* The server stops when the task is cancelled, or gracefully (in-flight requests get
  ``graceful_timeout_s``) when ``shutdown_trigger`` returns. No access log; errors go to
  ``errorlog``.

A leaf module (hypercorn, trio and the standard library): only servers import it, so a client
package never loads hypercorn (`tests/test_architecture.py`).
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

__all__ = ["bind_address", "serve_http"]


class _Config(Config):
    """Hypercorn's config with a TLS context made elsewhere (module rules)."""

    def __init__(self, ssl_context: ssl.SSLContext | None) -> None:
        super().__init__()
        self._ssl_context = ssl_context

    @property
    def ssl_enabled(self) -> bool:
        return self._ssl_context is not None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        if self._ssl_context is not None:
            self._ssl_context.set_alpn_protocols(self.alpn_protocols)
        return self._ssl_context


def bind_address(host: str, port: int) -> str:
    """``host:port`` as hypercorn binds it (``[::1]:8080`` for an IPv6 host)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _bind_error(exc: BaseException) -> OSError | None:
    """The OSError hypercorn failed to bind with (it may come wrapped in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, OSError) else None


async def serve_http(
    app: Any,
    *,
    plain: Sequence[tuple[str, int]] = (),
    secure: Sequence[tuple[str, int]] = (),
    ssl_context: ssl.SSLContext | None = None,
    keys: str,
    errorlog: logging.Logger,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    graceful_timeout_s: float = 1.0,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on the ``plain`` (http) and ``secure`` (https) addresses until cancelled or
    until ``shutdown_trigger`` returns (module rules). Raises `ValueError` without an address or
    with ``secure`` addresses but no ``ssl_context``; `OSError` naming ``keys`` when binding fails."""
    if not plain and not secure:
        raise ValueError("serve_http needs at least one address")
    if secure and ssl_context is None:
        raise ValueError("https addresses need an SSL context")
    config = _Config(ssl_context if secure else None)
    if secure:
        config.bind = [bind_address(h, p) for h, p in secure]
        config.insecure_bind = [bind_address(h, p) for h, p in plain]
    else:
        config.bind = [bind_address(h, p) for h, p in plain]
    config.accesslog = None
    config.errorlog = errorlog
    config.graceful_timeout = graceful_timeout_s
    server = functools.partial(serve, app, config)
    if shutdown_trigger is not None:
        server = functools.partial(serve, app, config, shutdown_trigger=shutdown_trigger)
    failed: tuple[OSError, BaseException] | None = None
    async with trio.open_nursery() as nursery:
        try:
            urls = await nursery.start(server)
        except (OSError, BaseExceptionGroup) as exc:
            bind_error = _bind_error(exc)
            if bind_error is None:
                raise
            failed = (bind_error, exc)  # nothing runs in the nursery: it exits at once
        else:
            task_status.started(list(urls))
    if failed is not None:  # raised outside the nursery, so it is not wrapped in an exception group
        error, cause = failed
        where = ", ".join(config.bind + config.insecure_bind)
        raise OSError(error.errno, f"cannot listen on {where} ({keys}): {error.strerror or error}") from cause
