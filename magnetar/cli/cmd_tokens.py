"""``magnetar tokens``: create and inspect JWT tokens and their keys, as ``pulsar tokens``.

Key values given to ``--secret-key`` / ``--private-key`` / ``--public-key`` take the broker's
forms: ``data:;base64,<key>``, ``file:///path``, a file path, or plain base64. Keys are written raw
(secret) or DER (key pairs), which the broker's ``tokenSecretKey`` / ``tokenPublicKey`` read back
with ``file:///path``.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import click
import jwt

from broker.auth import (
    AuthenticationError,
    TokenAuthenticationProvider,
    create_token,
    new_key_pair,
    new_secret_key,
    read_key_bytes,
)
from magnetar.common.durations import parse_duration

from ._help import HelpGroup

__all__ = ["command"]


@click.group(name="tokens", cls=HelpGroup)
def command() -> None:
    """Create and inspect authentication tokens (as ``pulsar tokens``)."""


def _key(value: str, what: str) -> bytes:
    try:
        return read_key_bytes(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=what) from None


@command.command(name="create-secret-key")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the key to this file.")
@click.option("-b", "--base64", "as_base64", is_flag=True, help="Print the key base64-encoded.")
def create_secret_key(output: str | None, as_base64: bool) -> None:
    """A new random HS256 secret key (32 bytes)."""
    key = new_secret_key()
    data = base64.b64encode(key) if as_base64 else key
    if output:
        Path(output).write_bytes(data)
        Path(output).chmod(0o600)
    elif as_base64:
        click.echo(data.decode())
    else:
        sys.stdout.buffer.write(data)


@command.command(name="create-key-pair")
@click.option(
    "-a",
    "--signature-algorithm",
    default="RS256",
    show_default=True,
    type=click.Choice(["RS256", "RS384", "RS512", "ES256", "ES384", "ES512"], case_sensitive=False),
)
@click.option(
    "--output-private-key",
    required=True,
    type=click.Path(dir_okay=False),
    help="File for the private key (DER, PKCS#8).",
)
@click.option(
    "--output-public-key", required=True, type=click.Path(dir_okay=False), help="File for the public key (DER, X.509)."
)
def create_key_pair(signature_algorithm: str, output_private_key: str, output_public_key: str) -> None:
    """A new key pair for RS256 / ES256 tokens."""
    private, public = new_key_pair(signature_algorithm.upper())
    Path(output_private_key).write_bytes(private)
    Path(output_private_key).chmod(0o600)
    Path(output_public_key).write_bytes(public)


@command.command(name="create")
@click.option("-sk", "--secret-key", help="Secret key (HS256) to sign with.")
@click.option("-pk", "--private-key", help="Private key (RS256/ES256) to sign with.")
@click.option("-s", "--subject", required=True, help="The role the token grants (its 'sub' claim).")
@click.option("-e", "--expiry-time", help="Validity, e.g. 1y, 30d, 12h, 10m, 60s (default: no expiry).")
@click.option(
    "-a",
    "--signature-algorithm",
    default=None,
    help="HS256 for a secret key; RS256 or ES256 for a private key (default: from the key).",
)
@click.option("--claim", "claims", multiple=True, metavar="NAME=VALUE", help="An extra string claim.")
def create(
    secret_key: str | None,
    private_key: str | None,
    subject: str,
    expiry_time: str | None,
    signature_algorithm: str | None,
    claims: tuple[str, ...],
) -> None:
    """Print a new signed token for SUBJECT."""
    if (secret_key is None) == (private_key is None):
        raise click.UsageError("give exactly one of --secret-key and --private-key")
    try:
        expires = int(parse_duration(expiry_time)) if expiry_time else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expiry-time") from None
    extra = {}
    for item in claims:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--claim")
        extra[name] = value
    try:
        token = create_token(
            subject,
            secret_key=_key(secret_key, "--secret-key") if secret_key else None,
            private_key=_key(private_key, "--private-key") if private_key else None,
            algorithm=signature_algorithm.upper() if signature_algorithm else None,
            expires_in_s=expires,
            claims=extra,
        )
    except (ValueError, jwt.PyJWTError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(token)


def _read_token(token: str | None, stdin: bool, token_file: str | None) -> str:
    if stdin:
        return sys.stdin.read().strip()
    if token_file:
        return Path(token_file).read_text().strip()
    if token:
        return token.strip()
    raise click.UsageError("give a token, --stdin or --token-file")


@command.command(name="show")
@click.argument("token", required=False)
@click.option("-i", "--stdin", is_flag=True, help="Read the token from standard input.")
@click.option("-f", "--token-file", type=click.Path(exists=True, dir_okay=False), help="Read the token from a file.")
def show(token: str | None, stdin: bool, token_file: str | None) -> None:
    """Print a token's header and claims (without checking its signature)."""
    value = _read_token(token, stdin, token_file)
    try:
        header = jwt.get_unverified_header(value)
        claims = jwt.decode(value, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise click.ClickException(f"not a token: {exc}") from None
    click.echo(json.dumps(header, sort_keys=True))
    click.echo(json.dumps(claims, sort_keys=True))


@command.command(name="validate")
@click.argument("token", required=False)
@click.option("-i", "--stdin", is_flag=True, help="Read the token from standard input.")
@click.option("-f", "--token-file", type=click.Path(exists=True, dir_okay=False), help="Read the token from a file.")
@click.option("-sk", "--secret-key", help="Secret key (HS256) the token must be signed with.")
@click.option("-pk", "--public-key", help="Public key (RS256/ES256) the token must be signed with.")
@click.option(
    "-a",
    "--signature-algorithm",
    default="RS256",
    show_default=True,
    help="Algorithm of --public-key (RS256 or ES256).",
)
def validate(
    token: str | None,
    stdin: bool,
    token_file: str | None,
    secret_key: str | None,
    public_key: str | None,
    signature_algorithm: str,
) -> None:
    """Check a token's signature and expiry as the broker would; print its claims, or fail."""
    if (secret_key is None) == (public_key is None):
        raise click.UsageError("give exactly one of --secret-key and --public-key")
    value = _read_token(token, stdin, token_file)
    try:
        if secret_key:
            provider = TokenAuthenticationProvider(secret_key=_key(secret_key, "--secret-key"))
        else:
            provider = TokenAuthenticationProvider(
                public_key=_key(public_key or "", "--public-key"), public_alg=signature_algorithm
            )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        provider.authenticate(value.encode())
    except AuthenticationError as exc:
        raise click.ClickException(f"token is not valid: {exc}") from None
    click.echo(json.dumps(jwt.decode(value, options={"verify_signature": False}), sort_keys=True))
