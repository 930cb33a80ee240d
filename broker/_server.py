"""``serve_broker``: the trio TCP server of the Pulsar binary protocol."""

from __future__ import annotations

import logging

import trio

from ._connection import ServerConnection
from ._service import BrokerService

__all__ = ["serve_broker"]

log = logging.getLogger(__name__)


async def serve_broker(service: BrokerService, host: str | None = None, port: int | None = None, *,
                       task_status=trio.TASK_STATUS_IGNORED) -> None:  # noqa: ANN001
    """Serve the Pulsar protocol for ``service`` until cancelled.

    Starts the service (its topic nursery and idle-unload loop) and listens on ``host:port``
    (defaults: the config's ``bindAddress`` and ``brokerServicePort``; port 0 picks a free one).
    ``task_status.started(port)`` reports the real port, which lookups then advertise. Each
    connection runs in its own task; a failing connection never affects the others. On
    cancellation every topic is unloaded (the managed-ledger factory and metadata store stay
    open: their owner closes them).
    """
    host = service.config.bind_address if host is None else host
    port = service.config.broker_service_port if port is None else port
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        listeners = await trio.open_tcp_listeners(port, host=host)
        real_port = listeners[0].socket.getsockname()[1]
        service.set_port(real_port)

        async def handle(stream: trio.SocketStream) -> None:
            try:
                peer = stream.socket.getpeername()
                remote = f"{peer[0]}:{peer[1]}"
            except OSError:
                remote = "?"
            try:
                await ServerConnection(service, stream, remote).serve()
            except Exception:  # one connection's bug must not stop the server
                log.exception("connection %s crashed", remote)

        log.info("broker listening on %s:%d (%s)", host, real_port, service.service_url)
        task_status.started(real_port)
        await trio.serve_listeners(handle, listeners, handler_nursery=nursery)
