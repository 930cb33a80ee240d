"""``serve_broker``: the trio TCP server of the Pulsar binary protocol, and its connection caps."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import trio

from magnetar.common.config import ConfigError
from magnetar.common.tls import server_context
from protocols.pulsar import encode_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from .._service import BrokerService
from ..topics._entries import UINT64_MAX
from ._connection import ServerConnection

__all__ = ["serve_broker", "ConnectionLimiter"]

log = logging.getLogger(__name__)


class ConnectionLimiter:
    """Counts served connections, in total and per client IP, against two caps (0 = no cap).

    `admit` either takes a slot and returns ``None`` or returns the reason it refused (and takes
    nothing); every admitted connection must be given back with exactly one `release`. Pure and
    synchronous, so admitting and counting cannot be interleaved with another accept.
    """

    def __init__(self, max_total: int, max_per_ip: int) -> None:
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: Counter[str] = Counter()

    def admit(self, ip: str) -> str | None:
        """Take a slot for a connection from ``ip``, or say why not (Pulsar's wording)."""
        if self.max_total and self.total >= self.max_total:
            return f"Reached the maximum number of connections ({self.max_total})"
        if self.max_per_ip and self.per_ip[ip] >= self.max_per_ip:
            return f"Reached the maximum number of connections on address {ip} ({self.max_per_ip})"
        self.total += 1
        self.per_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        """Give back the slot of an admitted connection from ``ip``."""
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]  # the counter holds only addresses with live connections


async def _refuse(stream: trio.abc.Stream, remote: str, reason: str, handshake_s: float) -> None:
    """Tell the client why (ERROR NotAllowed, request id -1, as Pulsar does) and close the stream.

    On a TLS port this needs the handshake first: a client that does not complete it within
    ``handshake_s`` is closed without the message."""
    log.warning("refusing connection %s: %s", remote, reason)
    try:
        with trio.move_on_after(handshake_s):
            # a few dozen bytes into a new socket's empty send buffer: this does not wait for the peer
            await stream.send_all(
                encode_command(make_command("ERROR", request_id=UINT64_MAX, error=pb.NotAllowedError, message=reason))
            )
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


def _socket_stream(stream: trio.abc.Stream) -> trio.SocketStream | None:
    inner = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    return inner if isinstance(inner, trio.SocketStream) else None


async def _listen(port: int, host: str, key: str) -> list[trio.SocketListener]:
    """`trio.open_tcp_listeners`; an OSError (a port in use) names the address and config key."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {host or '*'}:{port} ({key}): {exc.strerror or exc}") from exc


async def serve_broker(
    service: BrokerService,
    host: str | None = None,
    port: int | None = None,
    *,
    tls_port: int | None = None,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the Pulsar protocol for ``service`` until cancelled.

    Starts the service (its topic nursery and idle-unload loop) and listens on ``host:port``
    (defaults: the config's ``bindAddress`` and ``brokerServicePort``; port 0 picks a free one;
    a ``brokerServicePort`` left empty in the config switches the plain-text port off) and, when
    ``tls_port`` or the config's ``brokerServicePortTls`` is set, on that port over TLS
    (``pulsar+ssl://``, with the config's ``tls*`` keys, see `magnetar.common.tls`).
    ``task_status.started(port)`` reports the real plain-text port (the TLS one when the plain
    port is off); the service records both, and lookups advertise both (``brokerServiceUrlTls``).
    Each connection runs in its own task; a failing connection (a failed TLS handshake included)
    never affects the others. A connection over ``brokerMaxConnections`` or
    ``brokerMaxConnectionsPerIp`` is answered ERROR NotAllowed and closed right after accept,
    with the reason logged; a served connection's slot is free again once its stream is closed.
    On cancellation every topic is unloaded (the managed-ledger factory and metadata store stay
    open: their owner closes them).
    """
    config = service.config
    host = config.bind_address if host is None else host
    port = config.broker_service_port if port is None else port
    tls_port = config.broker_service_port_tls if tls_port is None else tls_port
    if port is None and tls_port is None:
        raise ConfigError("broker_service_port", "brokerServicePort and brokerServicePortTls are both off")
    limiter = ConnectionLimiter(config.broker_max_connections, config.broker_max_connections_per_ip)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        listeners: list[trio.abc.Listener[Any]] = []
        real_port = real_tls_port = None
        if port is not None:
            plain = await _listen(port, host, "brokerServicePort")
            real_port = plain[0].socket.getsockname()[1]
            service.set_port(real_port)
            listeners.extend(plain)
        if tls_port is not None:
            ctx = server_context(config.tls_settings())
            secure = await _listen(tls_port, host, "brokerServicePortTls")
            real_tls_port = secure[0].socket.getsockname()[1]
            service.set_tls_port(real_tls_port)
            listeners.extend(trio.SSLListener(lst, ctx, https_compatible=True) for lst in secure)

        async def handle(stream: trio.abc.Stream) -> None:
            sock = _socket_stream(stream)
            try:
                if sock is None:
                    raise OSError
                peer = sock.socket.getpeername()
                ip, remote = str(peer[0]), f"{peer[0]}:{peer[1]}"
            except OSError:
                ip = remote = "?"
            refusal = limiter.admit(ip)
            if refusal is not None:
                await _refuse(stream, remote, refusal, config.handshake_timeout_s)
                return
            try:
                await ServerConnection(service, stream, remote).serve()
            except Exception:  # one connection's bug must not stop the server
                log.exception("connection %s crashed", remote)
            finally:
                limiter.release(ip)

        log.info(
            "broker listening on %s (%s%s%s)",
            host,
            service.service_url,
            " " if service.service_url and service.service_url_tls else "",
            service.service_url_tls,
        )
        task_status.started(real_port if real_port is not None else real_tls_port)
        await trio.serve_listeners(handle, listeners, handler_nursery=nursery)
