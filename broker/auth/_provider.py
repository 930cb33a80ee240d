"""Authentication providers (Pulsar's ``AuthenticationProvider``): credentials in, a role out.

Rules:

* A provider has an auth method ``name`` (the CONNECT's ``auth_method_name``, e.g. ``"token"``)
  and `authenticate` turns the credentials a client sent into an `Identity` (its role and when
  the credentials stop being valid), or raises `AuthenticationError` with the reason.
* Providers are named in ``authenticationProviders`` by their method name or by the class name
  Pulsar's broker.conf uses (`broker.auth.PROVIDER_ALIASES`, in `._service`, which builds them);
  an unknown name is a config error.
* The token provider verifies a JWT: HS256/384/512 with ``tokenSecretKey`` or, with
  ``tokenPublicKey``, the asymmetric algorithms (``tokenPublicAlg``'s family; RS256 and ES256 in
  practice); the role is the ``tokenAuthClaim`` claim (default ``sub``); ``exp`` is checked (a
  token without ``exp`` never expires, as in Pulsar); with ``tokenAudience`` set, the
  ``tokenAudienceClaim`` claim (a string or a list) must name it.
* The basic provider (``basic``, Pulsar's ``AuthenticationProviderBasic``) lives in `._basic`.
* The TLS provider (``tls``, Pulsar's ``AuthenticationProviderTls``) takes the client
  certificate the TLS handshake verified (``peer_cert``, as `ssl.SSLSocket.getpeercert` returns
  it); the role is its subject's common name (CN). The auth data is ignored; without a verified
  certificate (a plain port, or a client that presented none) it refuses. Certificates are only
  verified, and so only seen, when ``tlsTrustCertsFilePath`` is set.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.common.config import ConfigError

from ._keys import ASYMMETRIC_ALGORITHMS, HMAC_ALGORITHMS, load_public_key, read_key_bytes

if TYPE_CHECKING:
    from .._config import BrokerConfig

__all__ = [
    "AuthenticationError",
    "AuthenticationProvider",
    "Identity",
    "PeerCert",
    "TlsAuthenticationProvider",
    "TokenAuthenticationProvider",
    "certificate_common_name",
]

PeerCert = dict[str, Any]
"""A verified client certificate as `ssl.SSLSocket.getpeercert` returns it."""


class AuthenticationError(Exception):
    """Credentials are missing, malformed, forged or expired; the message says which."""


@dataclass(frozen=True)
class Identity:
    """Who a client proved to be: ``role``, the auth ``method`` used, and ``expires_at`` (epoch
    seconds) when its credentials stop being valid (None: never)."""

    role: str
    method: str
    expires_at: float | None = None

    def expired(self, now: float | None = None) -> bool:
        """Whether the credentials have expired at ``now`` (default: the wall clock)."""
        return self.expires_at is not None and (time.time() if now is None else now) >= self.expires_at


class AuthenticationProvider(ABC):
    """One way of authenticating (see the module rules)."""

    name: ClassVar[str]

    @abstractmethod
    def authenticate(self, auth_data: bytes, *, peer_cert: PeerCert | None = None) -> Identity:
        """The identity ``auth_data`` proves (``peer_cert``: the client certificate the TLS
        handshake verified, when there is one); raises `AuthenticationError`."""


class TokenAuthenticationProvider(AuthenticationProvider):
    """JWT tokens (see the module rules). Give exactly one of ``secret_key`` and ``public_key``."""

    name = "token"

    def __init__(
        self,
        *,
        secret_key: bytes | None = None,
        public_key: bytes | None = None,
        public_alg: str = "RS256",
        role_claim: str = "sub",
        audience: str = "",
        audience_claim: str = "aud",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if (secret_key is None) == (public_key is None):
            raise ValueError("give exactly one of a secret key and a public key")
        self.role_claim = role_claim
        self.audience = audience
        self.audience_claim = audience_claim
        self.clock = clock
        self._key: Any
        if secret_key is not None:
            self._key = secret_key
            self.algorithms = list(HMAC_ALGORITHMS)
        else:
            assert public_key is not None
            self._key = load_public_key(public_key)
            if isinstance(self._key, ec.EllipticCurvePublicKey):
                self.algorithms = [a for a in ASYMMETRIC_ALGORITHMS if a.startswith("ES")]
            elif isinstance(self._key, rsa.RSAPublicKey):
                self.algorithms = [a for a in ASYMMETRIC_ALGORITHMS if a[:2] in ("RS", "PS")]
            else:
                raise ValueError("the public key is neither RSA nor EC")
            if public_alg.upper() not in self.algorithms:
                raise ValueError(f"tokenPublicAlg {public_alg} does not fit a {type(self._key).__name__}")

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TokenAuthenticationProvider:
        """The provider ``config``'s token keys describe; `ConfigError` names the key at fault."""
        if config.token_secret_key and config.token_public_key:
            raise ConfigError("token_secret_key", "give tokenSecretKey or tokenPublicKey, not both")
        if config.token_secret_key:
            try:
                return cls(
                    secret_key=read_key_bytes(config.token_secret_key),
                    role_claim=config.token_auth_claim,
                    audience=config.token_audience,
                    audience_claim=config.token_audience_claim,
                )
            except ValueError as exc:
                raise ConfigError("token_secret_key", str(exc)) from None
        if config.token_public_key:
            try:
                return cls(
                    public_key=read_key_bytes(config.token_public_key),
                    public_alg=config.token_public_alg,
                    role_claim=config.token_auth_claim,
                    audience=config.token_audience,
                    audience_claim=config.token_audience_claim,
                )
            except ValueError as exc:
                raise ConfigError("token_public_key", str(exc)) from None
        raise ConfigError("token_secret_key", "the token provider needs tokenSecretKey or tokenPublicKey")

    def authenticate(self, auth_data: bytes, *, peer_cert: PeerCert | None = None) -> Identity:
        try:
            token = auth_data.decode("ascii").strip()
        except UnicodeDecodeError:
            raise AuthenticationError("the token is not ASCII") from None
        if token.startswith("token:"):  # the form Pulsar's clients accept in auth params
            token = token[len("token:") :]
        if not token:
            raise AuthenticationError("no token given")
        try:
            claims = jwt.decode(
                token, self._key, algorithms=self.algorithms, options={"verify_exp": False, "verify_aud": False}
            )
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"invalid token: {exc}") from None
        exp = claims.get("exp")
        if exp is not None:
            if not isinstance(exp, (int, float)):
                raise AuthenticationError("invalid token: exp is not a number")
            if self.clock() >= exp:
                raise AuthenticationError("token expired")
        if self.audience:
            aud = claims.get(self.audience_claim)
            names = aud if isinstance(aud, list) else [aud]
            if self.audience not in names:
                raise AuthenticationError(
                    f"invalid token: its {self.audience_claim!r} claim does not name this broker's audience"
                )
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationError(f"invalid token: no {self.role_claim!r} claim naming a role")
        return Identity(role=role, method=self.name, expires_at=float(exp) if exp is not None else None)


def certificate_common_name(cert: PeerCert | None) -> str | None:
    """The subject CN of ``cert`` (the last one when there are several, as the most specific), or None."""
    if not cert:
        return None
    names = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    return names[-1] if names else None


class TlsAuthenticationProvider(AuthenticationProvider):
    """Mutual TLS: the role is the verified client certificate's CN (see the module rules)."""

    name = "tls"

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TlsAuthenticationProvider:
        """The provider; `ConfigError` when client certificates cannot be verified."""
        if not config.tls_trust_certs_file_path:
            raise ConfigError(
                "tls_trust_certs_file_path",
                "the tls provider needs tlsTrustCertsFilePath, the CA client certificates chain to",
            )
        if config.tls_allow_insecure_connection:
            raise ConfigError(
                "tls_allow_insecure_connection",
                "the tls provider needs verified client certificates; "
                "tlsAllowInsecureConnection turns verification off",
            )
        return cls()

    def authenticate(self, auth_data: bytes, *, peer_cert: PeerCert | None = None) -> Identity:
        if not peer_cert:
            raise AuthenticationError(
                "no verified client certificate (connect over TLS with a certificate signed by the broker's trusted CA)"
            )
        role = certificate_common_name(peer_cert)
        if not role:
            raise AuthenticationError("the client certificate has no common name (CN) to use as the role")
        return Identity(role=role, method=self.name)
