"""HTTP basic authentication (Pulsar's ``AuthenticationProviderBasic``): users and password hashes
from an htpasswd file.

Rules:

* ``basicAuthConf`` names the file as Pulsar does: ``file:///path``, a plain path, or the file's
  contents in base64 (or ``data:;base64,...``). Each non-empty line is ``user:hash``; lines
  starting with ``#`` are comments.
* Hash forms verified: ``$apr1$`` (Apache's MD5, ``htpasswd -m``, the default of ``htpasswd``
  and what Pulsar recommends), ``{SHA}`` (``htpasswd -s``) and the 13-character DES ``crypt``
  (``htpasswd -d``) while Python's ``crypt`` module exists (up to Python 3.12). bcrypt
  (``$2y$``, ``htpasswd -B``) needs a library this project does not install: a file holding one
  is a config error naming ``basicAuthConf``, as is any other unknown form.
* Credentials are ``user:password``: the auth data of the Pulsar protocol's ``basic`` method (the
  official client's ``AuthenticationBasic``) and the decoded ``Authorization: Basic`` header. The
  role is the user name. Hashes are compared in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.common.config import ConfigError

from ._keys import read_key_bytes
from ._provider import AuthenticationError, AuthenticationProvider, Identity, PeerCert

if TYPE_CHECKING:
    from .._config import BrokerConfig

__all__ = ["BasicAuthenticationProvider", "apr1_hash", "parse_htpasswd"]

_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_APR1 = "$apr1$"


def _to64(value: int, chars: int) -> str:
    out = []
    for _ in range(chars):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(out)


def apr1_hash(password: str, salt: str) -> str:
    """Apache's ``$apr1$`` MD5 hash of ``password`` with ``salt`` (up to 8 characters), as in the
    algorithm's public description (PHK's MD5-crypt with the ``$apr1$`` magic)."""
    pw, salt_b, magic = password.encode(), salt[:8].encode(), _APR1.encode()
    alternate = hashlib.md5(pw + salt_b + pw).digest()
    data = bytearray(pw + magic + salt_b)
    for left in range(len(pw), 0, -16):
        data += alternate[: min(16, left)]
    n = len(pw)
    while n:
        data += b"\0" if n & 1 else pw[:1]
        n >>= 1
    digest = hashlib.md5(data).digest()
    for i in range(1000):
        step = bytearray(pw if i & 1 else digest)
        if i % 3:
            step += salt_b
        if i % 7:
            step += pw
        step += digest if i & 1 else pw
        digest = hashlib.md5(step).digest()
    encoded = "".join(
        _to64((digest[a] << 16) | (digest[b] << 8) | digest[c], 4)
        for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5))
    )
    return f"{_APR1}{salt[:8]}${encoded}{_to64(digest[11], 2)}"


def _crypt_function() -> Callable[[str, str], str] | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt  # removed in Python 3.13
        except ImportError:
            return None
    return crypt.crypt


def _verifier(user: str, stored: str) -> Callable[[str], bool]:
    if stored.startswith(_APR1):
        salt = stored[len(_APR1) :].split("$", 1)[0]
        return lambda pw: hmac.compare_digest(apr1_hash(pw, salt), stored)
    if stored.startswith("{SHA}"):
        return lambda pw: hmac.compare_digest(
            base64.b64encode(hashlib.sha1(pw.encode()).digest()).decode(), stored[len("{SHA}") :]
        )
    if stored.startswith(("$2a$", "$2b$", "$2y$")):
        raise ConfigError(
            "basic_auth_conf", f"user {user!r}: bcrypt hashes are not supported (use htpasswd -m for $apr1$ MD5)"
        )
    if len(stored) == 13 and all(c in _ITOA64 for c in stored):
        crypt_fn = _crypt_function()
        if crypt_fn is None:
            raise ConfigError(
                "basic_auth_conf",
                f"user {user!r}: DES crypt hashes need Python's crypt module, "
                "which this Python lacks (use htpasswd -m for $apr1$ MD5)",
            )
        return lambda pw: hmac.compare_digest(crypt_fn(pw, stored[:2]), stored)
    raise ConfigError(
        "basic_auth_conf", f"user {user!r}: unsupported password hash (supported: $apr1$ MD5, {{SHA}}, DES crypt)"
    )


def parse_htpasswd(text: str) -> dict[str, Callable[[str], bool]]:
    """User name -> password check, from htpasswd ``text``; `ConfigError` names ``basic_auth_conf``."""
    users: dict[str, Callable[[str], bool]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, stored = line.partition(":")
        if not sep or not user or not stored:
            raise ConfigError("basic_auth_conf", f"line {number} is not 'user:hash'")
        users[user] = _verifier(user, stored)
    return users


class BasicAuthenticationProvider(AuthenticationProvider):
    """User name and password checked against an htpasswd file (see the module rules)."""

    name = "basic"

    def __init__(self, htpasswd: str) -> None:
        self._users = parse_htpasswd(htpasswd)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> BasicAuthenticationProvider:
        """The provider of ``basicAuthConf``; `ConfigError` names the key at fault."""
        if not config.basic_auth_conf:
            raise ConfigError("basic_auth_conf", "the basic provider needs basicAuthConf (an htpasswd file)")
        try:
            text = read_key_bytes(config.basic_auth_conf).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError("basic_auth_conf", f"cannot read the htpasswd file: {exc}") from None
        return cls(text)

    def authenticate(self, auth_data: bytes, *, peer_cert: PeerCert | None = None) -> Identity:
        try:
            credentials = auth_data.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationError("basic credentials are not UTF-8") from None
        user, sep, password = credentials.partition(":")
        if not sep or not user:
            raise AuthenticationError("basic credentials must be 'user:password'")
        check = self._users.get(user)
        if check is None or not check(password):
            raise AuthenticationError(f"unknown user or wrong password for {user!r}")
        return Identity(role=user, method=self.name)
