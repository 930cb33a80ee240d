"""magnetar.common.tls: contexts from Pulsar / BookKeeper keys, errors naming the key, handshakes over sockets."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import trio

from magnetar.common.config import ConfigError
from magnetar.common.tls import (
    BOOKKEEPER_KEYS,
    TlsSettings,
    client_context,
    open_tls_stream,
    server_context,
    wrap_server_stream,
)
from tests.support.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("other"), name="other")


def _server(certs: Certs, **kw: object) -> TlsSettings:
    return TlsSettings(cert_file=certs.server_cert, key_file=certs.server_key, **kw)  # type: ignore[arg-type]


def test_server_needs_cert_and_key(certs: Certs) -> None:
    with pytest.raises(ConfigError) as e:
        server_context(TlsSettings(key_file=certs.server_key))
    assert e.value.key == "tlsCertificateFilePath"
    with pytest.raises(ConfigError) as e:
        server_context(TlsSettings(cert_file=certs.server_cert))
    assert e.value.key == "tlsKeyFilePath"


def test_missing_files_and_wrong_key_are_named(certs: Certs, other: Certs, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        server_context(TlsSettings(cert_file=str(tmp_path / "nope.pem"), key_file=certs.server_key))
    assert e.value.key == "tlsCertificateFilePath" and "does not exist" in str(e.value)
    with pytest.raises(ConfigError) as e:
        server_context(TlsSettings(cert_file=certs.server_cert, key_file=other.server_key))
    assert e.value.key == "tlsKeyFilePath"
    with pytest.raises(ConfigError) as e:
        server_context(_server(certs, trust_certs_file=certs.server_key))
    assert e.value.key == "tlsTrustCertsFilePath"


def test_client_auth_needs_a_ca_and_bookkeeper_names(certs: Certs) -> None:
    with pytest.raises(ConfigError) as e:
        server_context(_server(certs, require_client_cert=True))
    assert e.value.key == "tlsTrustCertsFilePath"
    with pytest.raises(ConfigError) as e:
        server_context(TlsSettings(cert_file=certs.server_cert, keys=BOOKKEEPER_KEYS))
    assert e.value.key == "tlsKeyStore"
    with pytest.raises(ConfigError) as e:
        client_context(TlsSettings(cert_file=certs.client_cert, keys=BOOKKEEPER_KEYS))
    assert e.value.key == "tlsKeyStore"


def test_protocols_and_ciphers_are_checked(certs: Certs) -> None:
    ctx = server_context(_server(certs, protocols=("TLSv1.2", "TLSv1.3")))
    assert ctx.minimum_version.name == "TLSv1_2"
    with pytest.raises(ConfigError) as e:
        server_context(_server(certs, protocols=("SSLv3",)))
    assert e.value.key == "tlsProtocols"
    with pytest.raises(ConfigError) as e:
        server_context(_server(certs, ciphers=("NOT-A-CIPHER",)))
    assert e.value.key == "tlsCiphers"
    server_context(_server(certs, ciphers=("ECDHE-RSA-AES128-GCM-SHA256",)))


async def _echo_server(ctx, nursery: trio.Nursery) -> int:  # type: ignore[no-untyped-def]
    async def handle(stream: trio.SocketStream) -> None:
        tls = wrap_server_stream(stream, ctx)
        try:
            data = await tls.receive_some(100)
            await tls.send_all(data)
        except trio.BrokenResourceError:
            pass
        finally:
            await trio.aclose_forcefully(tls)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


async def _echo(port: int, ctx) -> bytes:  # type: ignore[no-untyped-def]
    tls = await open_tls_stream("127.0.0.1", port, ctx)
    try:
        await tls.send_all(b"ping")
        return await tls.receive_some(100)
    finally:
        await trio.aclose_forcefully(tls)


async def test_handshake_hostname_and_wrong_ca(certs: Certs, other: Certs) -> None:
    async with trio.open_nursery() as nursery:
        port = await _echo_server(server_context(_server(certs)), nursery)
        trusted = client_context(TlsSettings(trust_certs_file=certs.ca), verify_hostname=True)
        assert await _echo(port, trusted) == b"ping"
        with pytest.raises(trio.BrokenResourceError):
            await _echo(port, client_context(TlsSettings(trust_certs_file=other.ca)))
        assert await _echo(port, client_context(TlsSettings(allow_insecure=True))) == b"ping"
        nursery.cancel_scope.cancel()


async def test_mutual_tls_refuses_a_client_without_a_trusted_certificate(certs: Certs, other: Certs) -> None:
    async with trio.open_nursery() as nursery:
        port = await _echo_server(
            server_context(_server(certs, trust_certs_file=certs.ca, require_client_cert=True)), nursery
        )
        ok = client_context(
            TlsSettings(trust_certs_file=certs.ca, cert_file=certs.client_cert, key_file=certs.client_key)
        )
        assert await _echo(port, ok) == b"ping"
        for bad in (
            TlsSettings(trust_certs_file=certs.ca),
            TlsSettings(trust_certs_file=certs.ca, cert_file=other.client_cert, key_file=other.client_key),
        ):
            # TLS 1.3: the client may finish its handshake before the server refuses its certificate,
            # so the refusal shows as a broken stream or an end of stream, never as the echo
            try:
                answer = await _echo(port, client_context(bad))
            except trio.BrokenResourceError:
                answer = b""
            assert answer == b""
        nursery.cancel_scope.cancel()
