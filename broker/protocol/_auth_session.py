"""One connection's authentication: the CONNECT check, the periodic expiry check and the refresh.

Rules (authentication on; off, `AuthSession.on_connect` accepts every client without a role):

* CONNECT: its ``auth_method_name`` / ``auth_data`` must authenticate (`AuthenticationService`);
  else ERROR AuthenticationError (request id -1, as Pulsar) is written straight to the stream
  (nothing is queued before CONNECTED) and the connection is closed.
* Every ``authenticationRefreshCheckSeconds`` the identity is checked; once expired, a client that
  announced ``supports_auth_refresh`` gets AUTH_CHALLENGE (auth data ``PulsarAuthRefresh``) and
  must answer AUTH_RESPONSE with valid credentials for the same role before the next check; any
  other client, a failed or different-role answer, or no answer closes the connection.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from magnetar.common.version import VERSION
from protocols.pulsar import encode_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from ..auth._provider import AuthenticationError, Identity, PeerCert

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = ["AuthSession", "REFRESH_AUTH_DATA"]

log = logging.getLogger("broker.protocol._connection")

REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
"""The auth data of a broker's AUTH_CHALLENGE asking for fresh credentials (Pulsar's AuthData)."""

_UINT64_MAX = 2**64 - 1


class AuthSession:
    """The authentication state of ``conn`` (see the module rules)."""

    def __init__(self, conn: ServerConnection) -> None:
        self.conn = conn
        self.identity: Identity | None = None
        self.supports_refresh = False
        self._challenge_pending = False

    @property
    def role(self) -> str | None:
        """The authenticated role (None: authentication off, or not authenticated yet)."""
        return self.identity.role if self.identity is not None else None

    def peer_cert(self) -> PeerCert | None:
        """The client certificate the TLS handshake verified (None: plain port, or none presented)."""
        getpeercert = getattr(self.conn.stream, "getpeercert", None)  # trio.SSLStream forwards it
        if getpeercert is None:
            return None
        try:
            cert = getpeercert()
        except ValueError:  # handshake not done (cannot happen once CONNECT was read)
            return None
        return cert or None

    async def on_connect(self, connect: pb.CommandConnect) -> bool:
        """Authenticate a CONNECT; False when refused (the ERROR is sent and the connection closed)."""
        auth = self.conn.service.auth
        if not auth.enabled:
            return True
        try:
            self.identity = auth.authenticate(connect.auth_method_name, connect.auth_data, peer_cert=self.peer_cert())
        except AuthenticationError as exc:
            await self._refuse(str(exc))
            return False
        self.supports_refresh = connect.feature_flags.supports_auth_refresh
        return True

    async def _refuse(self, reason: str) -> None:
        conn = self.conn
        log.warning("connection %s: authentication failed: %s", conn.remote, reason)
        try:
            with trio.move_on_after(5):
                await conn.stream.send_all(
                    encode_command(
                        make_command(
                            "ERROR",
                            request_id=_UINT64_MAX,
                            error=pb.AuthenticationError,
                            message=f"Unable to authenticate: {reason}",
                        )
                    )
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        conn.close(f"authentication failed: {reason}")

    async def refresher(self) -> None:
        """Run for the connection's life (authentication on): the expiry checks of the module rules."""
        conn = self.conn
        interval = float(conn.config.authentication_refresh_check_s)
        while True:
            await trio.sleep(interval)
            identity = self.identity
            if identity is None or not identity.expired():
                continue
            if not self.supports_refresh:
                conn.close(f"credentials of role {identity.role!r} expired (client cannot refresh them)")
                return
            if self._challenge_pending:
                conn.close(f"credentials of role {identity.role!r} expired and were not refreshed")
                return
            self._challenge_pending = True
            log.info("connection %s: credentials of %r expired, sending AUTH_CHALLENGE", conn.remote, identity.role)
            conn.send_command(
                make_command(
                    "AUTH_CHALLENGE",
                    server_version=f"Magnetar-{VERSION}",
                    protocol_version=conn.protocol_version,
                    challenge={"auth_method_name": identity.method, "auth_data": REFRESH_AUTH_DATA},
                )
            )

    def on_auth_response(self, response: pb.CommandAuthResponse) -> None:
        """AUTH_RESPONSE: new credentials for the same role (see the module rules)."""
        conn, auth = self.conn, self.conn.service.auth
        if not auth.enabled or self.identity is None:
            return
        data = response.response
        try:
            identity = auth.authenticate(
                data.auth_method_name or self.identity.method, data.auth_data, peer_cert=self.peer_cert()
            )
        except AuthenticationError as exc:
            conn.close(f"authentication refresh failed: {exc}")
            return
        if identity.role != self.identity.role:
            conn.close(f"authentication refresh changed the role from {self.identity.role!r} to {identity.role!r}")
            return
        self.identity = identity
        self._challenge_pending = False
        log.info("connection %s: credentials of %r refreshed", conn.remote, identity.role)
