"""The whole bookie in one nursery: metadata session, cookies, core, servers, background loops.

`serve_bookie_process` is what ``magnetar bookie`` runs (and what a standalone deployment embeds).
Start-up order: bind the protocol port (so that ``port = 0`` yields a real bookie id), open the
metadata store, check cookies, open the bookie (journal replay + checkpoint, then its garbage
collector on the same metadata store), start the protocol
server, the HTTP server and the disk checker, register; then the bookie is ready
(`Bookie.set_ready`, REST ``/api/v1/bookie/is_ready``). Shutdown (cancellation) runs it backwards:
unregister, stop serving, close the bookie cleanly (journal synced, checkpoint), close the session.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import struct
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import trio
from prometheus_client import CollectorRegistry

from magnetar.common.tls import server_context
from metadata import open_metadata_store
from protocols.bookkeeper import BOOKIE_RPC, BookieServiceInfo, Endpoint

from .._errors import BookieException
from ._bookie import Bookie, open_bookie
from ._config import BookieConfig
from ._cookies import check_cookies, check_ledger_layout
from ._disks import run_disk_checker
from ._http import serve_bookie_http
from ._registration import run_registration
from ._server import serve_bookie

__all__ = ["BookieEndpoints", "BookieFatalError", "serve_bookie_process", "service_info"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BookieEndpoints:
    """Where a started bookie process listens."""

    bookie_id: str
    host: str
    port: int
    http_urls: tuple[str, ...]
    metadata_url: str
    core: Bookie | None = field(default=None, compare=False, repr=False)
    """The running bookie itself, for a client in the same process (`LocalConnection`)."""


class BookieFatalError(BookieException, RuntimeError):
    """The bookie had to stop (for example full disks with readOnlyModeEnabled = false)."""


def service_info(host: str, port: int, http_urls: Sequence[str], *, tls: bool) -> BookieServiceInfo:
    """What the bookie publishes in its registration, as a BookKeeper bookie does: the ``bookie``
    endpoint (protocol ``bookie-rpc``, extension ``tls`` when the port speaks TLS) and one
    ``httpserver`` endpoint per HTTP URL (a wildcard bind address replaced by ``host``)."""
    endpoints = [Endpoint("bookie", host, port, BOOKIE_RPC, extensions=("tls",) if tls else ())]
    for i, url in enumerate(http_urls):
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None:
            continue
        http_host = host if parts.hostname in ("0.0.0.0", "::") else parts.hostname
        endpoints.append(Endpoint("httpserver" if i == 0 else f"httpserver-{i}", http_host, parts.port, parts.scheme))
    return BookieServiceInfo(tuple(endpoints))


_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def _interface_address(name: str) -> str | None:
    """The IPv4 address of the local network interface ``name``; None when there is no such
    interface (or it has no IPv4 address, or the platform cannot say)."""
    if name not in {n for _i, n in socket.if_nameindex()}:
        return None
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
    except (ImportError, OSError):
        return None
    return socket.inet_ntoa(packed[20:24])


def bind_host(listen_address: str) -> str | None:
    """Where the bookie port binds: ``listen_address`` (``listeningInterface``) may name a network
    interface, as in BookKeeper (``eth0``: that interface's IPv4 address), or be an address or host
    name; empty means every address."""
    if not listen_address:
        return None
    return _interface_address(listen_address) or listen_address


async def serve_bookie_process(
    config: BookieConfig,
    *,
    registry: CollectorRegistry | None = None,
    task_status: trio.TaskStatus[BookieEndpoints] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a complete bookie until cancelled; ``task_status.started`` gets its `BookieEndpoints`.

    Raises ConfigError, CookieMismatchError (refuses to start), OSError (ports, directories),
    metadata errors while starting, and BookieFatalError if the bookie must stop while running.
    """
    config.validate()
    try:
        listeners = await trio.open_tcp_listeners(config.port, host=bind_host(config.listen_address))
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"cannot listen on {config.listen_address or '*'}:{config.port} (bookiePort): {exc.strerror or exc}",
        ) from exc
    port = listeners[0].socket.getsockname()[1]
    if not config.bookie_id and config.port == 0:
        config = dataclasses.replace(config, bookie_id=f"{config.advertised_address}:{port}")
    async with AsyncExitStack() as stack:
        for listener in listeners:
            stack.push_async_callback(listener.aclose)
        store = None
        if config.metadata_url:
            store = await stack.enter_async_context(
                open_metadata_store(config.metadata_url, security=config.zk_security(), tls=config.zk_tls())
            )
        await check_cookies(config, store)
        layout = await check_ledger_layout(config, store)
        # GC lists the layout the cluster records (the config may leave it to the record)
        config = dataclasses.replace(config, ledger_manager_factory_class=layout.value)
        bookie = await stack.enter_async_context(open_bookie(config, registry=registry, store=store))
        async with trio.open_nursery() as nursery:
            tls = server_context(config.tls_settings()) if config.tls_enabled else None
            await nursery.start(
                lambda task_status: serve_bookie(
                    bookie,
                    listeners=listeners,
                    ssl_context=tls,
                    authorizer=config.role_authorizer(),
                    task_status=task_status,
                )
            )
            http_urls: list[str] = []
            if config.http_enabled:
                http_tls = server_context(config.tls_settings()) if config.http_server_tls_enable else None
                http_urls = await nursery.start(
                    lambda task_status: serve_bookie_http(
                        bookie,
                        config.http_address,
                        config.http_port,
                        ssl_context=http_tls,
                        authorizer=config.role_authorizer() if http_tls is not None else None,
                        task_status=task_status,
                    )
                )
            await nursery.start(run_disk_checker, bookie)
            if store is not None:
                info = service_info(config.advertised_address, port, http_urls, tls=tls is not None)
                await nursery.start(
                    lambda task_status: run_registration(bookie, store, service_info=info, task_status=task_status)
                )
            bookie.set_ready(True)
            task_status.started(
                BookieEndpoints(
                    bookie.bookie_id,
                    config.advertised_address,
                    port,
                    tuple(http_urls),
                    config.metadata_url,
                    core=bookie,
                )
            )
            try:
                await bookie.fatal.wait()
            finally:
                bookie.set_ready(False)
            raise BookieFatalError(bookie.fatal_error or "bookie stopped")
