"""Token keys as Pulsar takes them, and the `pulsar tokens` style helpers built on them.

Rules:

* A key value (``tokenSecretKey``, ``tokenPublicKey``, ``--secret-key``, ...) is one of
  ``data:;base64,<base64>``, ``file:///path`` (``file:/path`` too), a path to an existing file, or
  else the base64 of the key itself (Pulsar's ``AuthTokenUtils.readKeyFromUrl``).
* A secret key is raw bytes (HS256); ``create-secret-key`` makes 32 random ones.
* Key pairs are DER (PKCS#8 private, X.509 SubjectPublicKeyInfo public), as ``pulsar tokens
  create-key-pair`` writes them; PEM is accepted as well when reading. RS256 keys are 2048-bit
  RSA, ES256 keys P-256.
* A token's role is its ``sub`` claim (or the configured claim); ``exp`` is seconds since the
  epoch and is checked on every use.
"""

from __future__ import annotations

import base64
import os
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

__all__ = [
    "read_key_bytes",
    "load_private_key",
    "load_public_key",
    "new_secret_key",
    "new_key_pair",
    "create_token",
    "HMAC_ALGORITHMS",
    "ASYMMETRIC_ALGORITHMS",
]

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")


def read_key_bytes(value: str) -> bytes:
    """The bytes a key value names (see the module rules). Raises `ValueError` with the reason."""
    value = value.strip()
    if not value:
        raise ValueError("empty key value")
    if value.startswith("data:"):
        head, sep, payload = value.partition(",")
        if not sep:
            raise ValueError("a data: key value needs a ',' before its payload")
        if head.endswith(";base64"):
            try:
                return base64.b64decode(payload, validate=True)
            except ValueError as exc:
                raise ValueError(f"bad base64 in data: key value: {exc}") from None
        return unquote(payload).encode()
    if value.startswith("file:"):
        path = unquote(urlparse(value).path)
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read key file {path}: {exc.strerror}") from None
    if os.path.isfile(value):
        return Path(value).read_bytes()
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ValueError("neither data:, file:, an existing file nor base64") from None


def load_public_key(data: bytes) -> Any:
    """A public key from DER or PEM bytes (a certificate's key is not accepted)."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except ValueError as exc:
        raise ValueError(f"not a public key: {exc}") from None


def load_private_key(data: bytes) -> Any:
    """A private key from DER or PEM bytes (unencrypted)."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a private key: {exc}") from None


def new_secret_key() -> bytes:
    """32 random bytes for HS256."""
    return secrets.token_bytes(32)


def new_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """(private DER PKCS#8, public DER SubjectPublicKeyInfo) for ``algorithm`` (RS*/PS* or ES256/384/512)."""
    alg = algorithm.upper()
    key: Any
    if alg[:2] in ("RS", "PS") and alg in ASYMMETRIC_ALGORITHMS:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg in ("ES256", "ES384", "ES512"):
        curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}[alg]
        key = ec.generate_private_key(curve)
    else:
        raise ValueError(f"unsupported key pair algorithm {algorithm!r}")
    private = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def create_token(
    subject: str,
    *,
    secret_key: bytes | None = None,
    private_key: bytes | None = None,
    algorithm: str | None = None,
    expires_in_s: int | None = None,
    claims: dict[str, Any] | None = None,
    subject_claim: str = "sub",
) -> str:
    """A signed JWT whose ``subject_claim`` is ``subject`` (exactly one of the two keys)."""
    if (secret_key is None) == (private_key is None):
        raise ValueError("give exactly one of a secret key and a private key")
    payload: dict[str, Any] = dict(claims or {})
    payload[subject_claim] = subject
    if expires_in_s is not None:
        payload["exp"] = int(time.time()) + expires_in_s
    if secret_key is not None:
        return jwt.encode(payload, secret_key, algorithm=algorithm or "HS256")
    assert private_key is not None
    key = load_private_key(private_key)
    if algorithm is None:
        algorithm = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
    return jwt.encode(payload, key, algorithm=algorithm)
