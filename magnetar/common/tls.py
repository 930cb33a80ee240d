"""TLS for every Magnetar server and client: `ssl.SSLContext`s from Pulsar / BookKeeper keys, and
trio streams wrapped in them.

TLS is a transport concern shared by every server and client (broker, admin REST, bookie, bookie
REST, the BookKeeper client), so it lives here, in a module every package may import; it uses
only `ssl`, trio and `magnetar.common.config`.

A component describes its TLS settings as a `TlsSettings` (certificate and key files in PEM, the
trusted CA file, whether a client certificate is required, protocol versions and ciphers) along
with `TlsKeys`, the names of the config keys the values came from, so that every error says
which key to fix: Pulsar's (`PULSAR_KEYS`: ``tlsCertificateFilePath``, ``tlsKeyFilePath``,
``tlsTrustCertsFilePath``, ``tlsRequireTrustedClientCertOnConnect``,
``tlsAllowInsecureConnection``, ``tlsProtocols``, ``tlsCiphers``) or BookKeeper's
(`BOOKKEEPER_KEYS`: ``tlsCertificatePath``, ``tlsKeyStore``, ``tlsTrustStore``,
``tlsClientAuthentication``, ...). Only PEM files are supported.

Rules (as Pulsar's broker):

* A server needs a certificate and its key. With a trusted-CA file, a client certificate, when
  presented, must chain to it; ``require_client_cert`` (``tlsRequireTrustedClientCertOnConnect``)
  refuses clients without one and needs the CA file. ``allow_insecure``
  (``tlsAllowInsecureConnection``) on a server does not check client certificates at all.
* A client checks the server's certificate against the trusted-CA file (the system's CAs when
  none is given), and its host name when ``verify_hostname``; ``allow_insecure`` accepts any
  server certificate. A client presents its own certificate when it has one (mutual TLS).
* A server context passed through `record_peer_certificates` remembers, in the task that ran a
  handshake (and the tasks it starts afterwards), the client certificate it verified:
  `handshake_peer_cert` returns it. Servers that do not hand their streams to the application
  (hypercorn's ASGI apps) find a request's client certificate this way.
* Every context made here reads coalesced (`CoalescingSSLObject`): one read returns the data of
  every whole TLS record already received, up to the size asked, not just the first record. A
  peer that writes one record per message (the Pulsar C++ client writes one per SEND) would
  otherwise hand the reader one message per ``receive_some`` and break up the broker's and
  bookie's per-burst batching (bench/RESULTS.md, "TLS on versus off").
* ``protocols`` lists the allowed versions (``TLSv1.2``, ``TLSv1.3``; empty = the library's
  defaults); ``ciphers`` lists OpenSSL cipher names for TLS 1.2 (empty = the defaults).
"""

from __future__ import annotations

import ssl
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from magnetar.common.config import ConfigError

__all__ = [
    "BOOKKEEPER_KEYS",
    "CoalescingSSLObject",
    "PULSAR_KEYS",
    "TlsKeys",
    "TlsSettings",
    "bookkeeper_settings",
    "client_context",
    "handshake_peer_cert",
    "open_tls_stream",
    "record_peer_certificates",
    "server_context",
    "wrap_server_stream",
]


@dataclass(frozen=True)
class TlsKeys:
    """The config key each TLS setting is read from, for error messages."""

    cert_file: str
    key_file: str
    trust_certs_file: str
    require_client_cert: str
    allow_insecure: str
    protocols: str
    ciphers: str


PULSAR_KEYS = TlsKeys(
    cert_file="tlsCertificateFilePath",
    key_file="tlsKeyFilePath",
    trust_certs_file="tlsTrustCertsFilePath",
    require_client_cert="tlsRequireTrustedClientCertOnConnect",
    allow_insecure="tlsAllowInsecureConnection",
    protocols="tlsProtocols",
    ciphers="tlsCiphers",
)
"""Pulsar's broker.conf key names."""

BOOKKEEPER_KEYS = TlsKeys(
    cert_file="tlsCertificatePath",
    key_file="tlsKeyStore",
    trust_certs_file="tlsTrustStore",
    require_client_cert="tlsClientAuthentication",
    allow_insecure="tlsAllowInsecureConnection",
    protocols="tlsEnabledProtocols",
    ciphers="tlsEnabledCipherSuites",
)
"""BookKeeper's bk_server.conf key names (PEM files: ``tlsKeyStoreType=PEM``)."""

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


@dataclass(frozen=True)
class TlsSettings:
    """One side's TLS settings; empty strings mean "not given"."""

    cert_file: str = ""
    key_file: str = ""
    trust_certs_file: str = ""
    require_client_cert: bool = False
    allow_insecure: bool = False
    protocols: tuple[str, ...] = ()
    ciphers: tuple[str, ...] = ()
    keys: TlsKeys = PULSAR_KEYS


def bookkeeper_settings(config: Any, *, client_auth: bool = False) -> TlsSettings:
    """`TlsSettings` from a config with BookKeeper's TLS fields (``tls_key_store_type`` /
    ``tlsKeyStoreType``, ``tls_key_store``, ``tls_certificate_path``, ``tls_trust_store_type``,
    ``tls_trust_store``, ``tls_enabled_protocols``, ``tls_enabled_cipher_suites``); ``client_auth``
    is the bookie's ``tlsClientAuthentication``. Only PEM stores are supported: any other store
    type raises `ConfigError` naming its key."""
    for field, key in (("tls_key_store_type", "tlsKeyStoreType"), ("tls_trust_store_type", "tlsTrustStoreType")):
        value = getattr(config, field)
        if value.upper() != "PEM":
            raise ConfigError(key, f"only PEM files are supported, got {value!r}")
    return TlsSettings(
        cert_file=config.tls_certificate_path,
        key_file=config.tls_key_store,
        trust_certs_file=config.tls_trust_store,
        require_client_cert=client_auth,
        protocols=tuple(config.tls_enabled_protocols),
        ciphers=tuple(config.tls_enabled_cipher_suites),
        keys=BOOKKEEPER_KEYS,
    )


def _readable(key: str, path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(key, f"file {path!r} does not exist or is not a file")
    try:
        with p.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(key, f"file {path!r} cannot be read: {exc.strerror}") from None
    return str(p)


def _common(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    if s.protocols:
        versions = []
        for name in s.protocols:
            if name not in _VERSIONS:
                raise ConfigError(s.keys.protocols, f"unknown TLS protocol {name!r} (known: {', '.join(_VERSIONS)})")
            versions.append(_VERSIONS[name])
        try:
            ctx.minimum_version = min(versions)
            ctx.maximum_version = max(versions)
        except ValueError as exc:
            raise ConfigError(s.keys.protocols, f"not supported by this OpenSSL: {exc}") from None
    if s.ciphers:
        try:
            ctx.set_ciphers(":".join(s.ciphers))
        except ssl.SSLError:
            raise ConfigError(
                s.keys.ciphers,
                f"no usable cipher in {', '.join(s.ciphers)} (OpenSSL cipher names, e.g. ECDHE-RSA-AES128-GCM-SHA256)",
            ) from None


def _load_chain(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    cert = _readable(s.keys.cert_file, s.cert_file)
    key = _readable(s.keys.key_file, s.key_file)
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise ConfigError(
            s.keys.key_file,
            f"cannot load the certificate {cert!r} with the key {key!r} "
            f"(PEM files of one key pair expected): {exc.reason or exc}",
        ) from None


def _load_trust(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    path = _readable(s.keys.trust_certs_file, s.trust_certs_file)
    try:
        ctx.load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        raise ConfigError(s.keys.trust_certs_file, f"{path!r} holds no PEM certificate: {exc.reason or exc}") from None


class CoalescingSSLObject(ssl.SSLObject):
    """An `ssl.SSLObject` whose `read` returns the data of every whole TLS record already in its
    incoming buffer (up to ``len`` bytes), where OpenSSL's read stops at the end of one record.

    Guarantees: it never waits for or asks for more input than a plain read would (it raises
    `ssl.SSLWantReadError` only when not even one record's data is ready, exactly as before), and
    never loses data or an error: a partial record stays buffered for the next read, and an error
    or end of stream met after some data was gathered is returned by the next read (OpenSSL's
    error and shutdown states are sticky). trio's `SSLStream.receive_some` calls ``read`` once per
    attempt without yielding in between, so the coalescing happens inside one non-blocking step;
    any bytes OpenSSL produces while reading (TLS 1.3 key-update replies) go to the outgoing
    buffer, which `SSLStream` sends after the call as it always does.
    """

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # ssl.SSLObject's signature
        if buffer is not None:  # readinto-style callers keep the one-record behaviour
            return super().read(len, buffer)
        first = super().read(len)  # may raise SSLWantReadError & co., as a plain read does
        room = len - first.__len__()
        if not first or room <= 0:
            return first
        chunks = [first]
        while room > 0:
            try:
                more = super().read(room)
            except ssl.SSLError:  # no whole record left (SSLWantReadError), EOF or an error:
                break  # the next read reports the last two
            if not more:
                break
            chunks.append(more)
            room -= more.__len__()
        return b"".join(chunks)


def server_context(s: TlsSettings) -> ssl.SSLContext:
    """An `ssl.SSLContext` for a server; raises `ConfigError` naming the key that is wrong."""
    if not s.cert_file:
        raise ConfigError(
            s.keys.cert_file,
            "a TLS server needs a certificate file" + (f" (only {s.keys.key_file} is set)" if s.key_file else ""),
        )
    if not s.key_file:
        raise ConfigError(s.keys.key_file, f"a TLS server needs the private key of {s.keys.cert_file}")
    if s.require_client_cert and not s.trust_certs_file:
        raise ConfigError(
            s.keys.trust_certs_file, f"{s.keys.require_client_cert} needs the CA file client certificates must chain to"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.sslobject_class = CoalescingSSLObject
    _common(ctx, s)
    _load_chain(ctx, s)
    if s.allow_insecure:
        ctx.verify_mode = ssl.CERT_NONE
    elif s.trust_certs_file:
        _load_trust(ctx, s)
        ctx.verify_mode = ssl.CERT_REQUIRED if s.require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def client_context(s: TlsSettings, *, verify_hostname: bool = False) -> ssl.SSLContext:
    """An `ssl.SSLContext` for a client; raises `ConfigError` naming the key that is wrong.

    Presents ``cert_file``/``key_file`` when given (both or neither), checks the server against
    ``trust_certs_file`` (the system CAs when empty) unless ``allow_insecure``.
    """
    if bool(s.cert_file) != bool(s.key_file):
        missing = s.keys.key_file if s.cert_file else s.keys.cert_file
        raise ConfigError(missing, f"a client certificate needs both {s.keys.cert_file} and {s.keys.key_file}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.sslobject_class = CoalescingSSLObject
    _common(ctx, s)
    if s.cert_file:
        _load_chain(ctx, s)
    if s.allow_insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if s.trust_certs_file:
        _load_trust(ctx, s)
    else:
        ctx.load_default_certs()
    ctx.check_hostname = verify_hostname
    return ctx


def wrap_server_stream(stream: trio.abc.Stream, ctx: ssl.SSLContext) -> trio.SSLStream[trio.abc.Stream]:
    """The server side of TLS over an accepted ``stream``; the handshake runs on first use (or
    ``await wrapped.do_handshake()``) and fails with `trio.BrokenResourceError`."""
    return trio.SSLStream(stream, ctx, server_side=True, https_compatible=True)


async def open_tls_stream(
    host: str, port: int, ctx: ssl.SSLContext, *, server_hostname: str | None = None
) -> trio.SSLStream[trio.SocketStream]:
    """Connect to ``host:port`` and complete a TLS handshake (the server's name checked as
    ``server_hostname``, default ``host``, when the context checks host names). Raises
    `trio.BrokenResourceError` when the handshake fails (untrusted certificate, refused client)."""
    sock = await trio.open_tcp_stream(host, port)
    tls = trio.SSLStream(sock, ctx, server_hostname=server_hostname or host, https_compatible=True)
    try:
        await tls.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(sock)
        raise
    return tls


_PEER_CERT: ContextVar[dict[str, Any] | None] = ContextVar("magnetar_tls_peer_cert", default=None)


class _RecordingSSLObject(CoalescingSSLObject):
    """A `CoalescingSSLObject` that, once its handshake completes, stores the verified peer certificate
    in the running task's context (see the module rules)."""

    def do_handshake(self) -> None:
        super().do_handshake()  # raises SSLWantReadError & co. until the handshake is done
        _PEER_CERT.set(self.getpeercert() or None)


def record_peer_certificates(ctx: ssl.SSLContext) -> ssl.SSLContext:
    """Make ``ctx`` record verified client certificates for `handshake_peer_cert`; returns ``ctx``."""
    ctx.sslobject_class = _RecordingSSLObject
    return ctx


def handshake_peer_cert() -> dict[str, Any] | None:
    """The client certificate verified by the last handshake this task (or its parent before
    starting it) ran with a `record_peer_certificates` context; None when there is none."""
    return _PEER_CERT.get()
