"""The bookie protocol and the bookie REST over TLS, and the BookKeeper client's TLS connections,
over real sockets: a client with a trusted certificate writes and reads; under
tlsClientAuthentication a client without a certificate, a plain-text client or one whose
certificate another CA signed is refused before any request is read (so it cannot fence or
overwrite entries)."""

from __future__ import annotations

import hashlib
import itertools
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from bk_client import BookKeeper, ClientConfig, NotEnoughBookies
from bookie import serve_bookie_process
from bookie.server import BOOKIE_AUTHZ_FACTORY, certificate_roles
from magnetar.common.config import ConfigError, load_config
from magnetar.common.tls import TlsSettings, client_context, open_tls_stream
from metadata import open_metadata_store
from protocols.bookkeeper import add_request, encode_entry, encode_request, read_request
from tests.support.bookie_server import make_config
from tests.support.certs import Certs, make_certs

PASSWORD = b"pw"
_ids = itertools.count()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("other"), name="other")


def _bookie_tls(certs: Certs, **kw: Any) -> dict[str, Any]:
    return dict(
        tls_enabled=True,
        tlsCertificatePath=certs.server_cert,
        tlsKeyStore=certs.server_key,
        tlsTrustStore=certs.ca,
        **kw,
    )


def _client(certs: Certs | None, *, with_cert: bool = True, ca: str | None = None) -> ClientConfig:
    fast: dict[str, Any] = dict(
        add_entry_timeout_s=2.0,
        connect_timeout_s=2.0,
        reconnect_backoff_min_s=0.05,
        reconnect_backoff_max_s=0.2,
        bookie_quarantine_time_s=0.0,
    )
    if certs is None:
        return load_config(ClientConfig, fast)
    tls: dict[str, Any] = dict(tls_enabled=True, tlsTrustStore=ca or certs.ca)
    if with_cert:
        tls.update(tlsCertificatePath=certs.client_cert, tlsKeyStore=certs.client_key)
    return load_config(ClientConfig, {**fast, **tls})


@asynccontextmanager
async def _bookie(tmp: Path, **overrides: Any) -> AsyncIterator[tuple[str, Any]]:
    url = f"memory://bookie-tls-{next(_ids)}"
    async with open_metadata_store(url) as store, trio.open_nursery() as nursery:
        cfg = make_config(tmp, metadata_url=url, **overrides)
        endpoints = await nursery.start(lambda task_status: serve_bookie_process(cfg, task_status=task_status))
        yield url, endpoints
        del store
        nursery.cancel_scope.cancel()


async def _write_and_read(url: str, config: ClientConfig) -> list[bytes]:
    async with open_metadata_store(url) as store, BookKeeper.open(store, config=config) as bk:
        lh = await bk.create_ledger(1, 1, 1, password=PASSWORD)
        for i in range(3):
            await (await lh.append(f"e{i}".encode())).result()
        await lh.close()
        rh = await bk.open_ledger(lh.ledger_id, password=PASSWORD, recovery=False)
        return [e.data for e in await rh.read(0, 2)]


async def test_client_writes_and_reads_over_tls(tmp_path: Path, certs: Certs) -> None:
    async with _bookie(tmp_path, **_bookie_tls(certs)) as (url, _):
        assert await _write_and_read(url, _client(certs, with_cert=False)) == [b"e0", b"e1", b"e2"]


@pytest.mark.parametrize("who", ["no certificate", "plain text", "untrusted CA"])
async def test_client_authentication_refuses_strangers(tmp_path: Path, certs: Certs, other: Certs, who: str) -> None:
    async with _bookie(tmp_path, **_bookie_tls(certs, tlsClientAuthentication=True)) as (url, _):
        assert await _write_and_read(url, _client(certs)) == [b"e0", b"e1", b"e2"]
        stranger = {
            "no certificate": _client(certs, with_cert=False),
            "plain text": _client(None),
            "untrusted CA": _client(other, ca=certs.ca),
        }[who]
        with pytest.raises(BaseExceptionGroup) as e, trio.fail_after(30):
            await _write_and_read(url, stranger)
        # its add was refused with the connection, and the one bookie cannot be replaced
        assert e.group_contains(NotEnoughBookies, depth=None)


def _only_tls_alerts(data: bytes) -> bool:
    """Whether ``data`` is nothing but whole TLS alert records (type 21, version 3.x)."""
    while data:
        if len(data) < 5 or data[0] != 21 or data[1] != 3:
            return False
        length = int.from_bytes(data[3:5], "big")
        if len(data) < 5 + length:
            return False
        data = data[5 + length :]
    return True


async def test_raw_socket_without_tls_gets_nothing(tmp_path: Path, certs: Certs) -> None:
    """A well-formed ADD sent in plain text gets no bookie response: at most TLS alerts, then the
    connection closes."""
    async with _bookie(tmp_path, **_bookie_tls(certs, tlsClientAuthentication=True)) as (_, ep):
        stream = await trio.open_tcp_stream("127.0.0.1", ep.port)
        key = hashlib.sha1(b"ledger" + PASSWORD).digest()
        got = b""
        try:
            await stream.send_all(encode_request(add_request(1, 77, 0, key, encode_entry(77, 0, -1, 1, b"x"))))
            with trio.fail_after(10):
                while data := await stream.receive_some(1024):
                    got += data
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()
        assert _only_tls_alerts(got), got[:64]


async def test_bookie_rest_over_https_with_client_authentication(tmp_path: Path, certs: Certs) -> None:
    overrides = _bookie_tls(certs, tlsClientAuthentication=True, httpServerTlsEnable=True)
    async with _bookie(tmp_path, **overrides) as (_, ep):
        (base,) = ep.http_urls
        assert base.startswith("https://")
        trusted = ssl.create_default_context(cafile=certs.ca)
        trusted.load_cert_chain(certs.client_cert, certs.client_key)
        async with httpx.AsyncClient(verify=trusted, timeout=10) as http:
            assert (await http.get(f"{base}/api/v1/bookie/state")).status_code == 200
        anonymous = ssl.create_default_context(cafile=certs.ca)
        async with httpx.AsyncClient(verify=anonymous, timeout=10) as http:
            with pytest.raises(httpx.TransportError):  # refused in the TLS handshake, no HTTP answer
                await http.put(f"{base}/api/v1/bookie/state/readonly", json={"readOnly": True})


def test_bookkeeper_key_names_in_errors(tmp_path: Path, certs: Certs) -> None:
    with pytest.raises(ConfigError) as e:
        make_config(tmp_path, tls_enabled=True, tlsCertificatePath=certs.server_cert)
    assert e.value.key == "tlsKeyStore"
    with pytest.raises(ConfigError) as e:
        make_config(tmp_path, **_bookie_tls(certs, tlsKeyStoreType="JKS"))
    assert e.value.key == "tlsKeyStoreType"
    with pytest.raises(ConfigError) as e:
        make_config(
            tmp_path,
            tls_enabled=True,
            tlsCertificatePath=certs.server_cert,
            tlsKeyStore=certs.server_key,
            tlsClientAuthentication=True,
        )
    assert e.value.key == "tlsTrustStore"
    with pytest.raises(ConfigError) as e:
        load_config(ClientConfig, {"tls_enabled": True, "tlsTrustStore": str(tmp_path / "missing.pem")})
    assert e.value.key == "tlsTrustStore"


# ---------------------------------------------------------------- certificate roles (BookieAuthZFactory)

_AUTHZ = dict(bookieAuthProviderFactoryClass=BOOKIE_AUTHZ_FACTORY, authorizedRoles=["pulsar-broker"])


@pytest.fixture(scope="module")
def role_certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(
        tmp_path_factory.mktemp("roles"),
        clients=("broker", "intruder"),
        units={"broker": "0:other-role,pulsar-broker;1:cluster-a", "intruder": "0:pulsar-proxy"},
    )


def _role_client(certs: Certs, cn: str) -> ClientConfig:
    cert, key = certs.clients[cn]
    return load_config(
        ClientConfig,
        dict(
            tls_enabled=True,
            tlsTrustStore=certs.ca,
            tlsCertificatePath=cert,
            tlsKeyStore=key,
            add_entry_timeout_s=2.0,
            connect_timeout_s=2.0,
            reconnect_backoff_min_s=0.05,
            reconnect_backoff_max_s=0.2,
            bookie_quarantine_time_s=0.0,
        ),
    )


async def _raw_tls_requests(port: int, certs: Certs, cn: str, requests: list[bytes]) -> bytes:
    """Send framed bookie requests over TLS with ``cn``'s certificate; every byte answered until EOF."""
    cert, key = certs.clients[cn]
    ctx = client_context(TlsSettings(trust_certs_file=certs.ca, cert_file=cert, key_file=key))
    got = b""
    with trio.fail_after(20):
        try:
            stream = await open_tls_stream("127.0.0.1", port, ctx)
        except trio.BrokenResourceError:  # TLS 1.2 may refuse in the handshake already
            return got
        try:
            for r in requests:
                await stream.send_all(r)
            while data := await stream.receive_some(65536):
                got += data
        except trio.BrokenResourceError:
            pass
        finally:
            await trio.aclose_forcefully(stream)
    return got


async def test_trusted_certificate_without_an_authorized_role_cannot_read_fence_or_overwrite(
    tmp_path: Path, role_certs: Certs
) -> None:
    """The issue's attack: a client with a trusted certificate but another role knows the ledger
    id and password and tries to read, fence and overwrite entry 0; the bookie closes its
    connection before answering anything, and the entries stay as the broker wrote them."""
    overrides = _bookie_tls(role_certs, tlsClientAuthentication=True, **_AUTHZ)
    async with _bookie(tmp_path, **overrides) as (url, ep):
        broker = _role_client(role_certs, "broker")
        async with open_metadata_store(url) as store, BookKeeper.open(store, config=broker) as bk:
            lh = await bk.create_ledger(1, 1, 1, password=PASSWORD)
            for i in range(3):
                await (await lh.append(f"e{i}".encode())).result()
            ledger_id = lh.ledger_id
            master_key = hashlib.sha1(b"ledger" + PASSWORD).digest()  # as BookKeeper derives it
            requests = [
                encode_request(read_request(1, ledger_id, 0)),
                encode_request(read_request(2, ledger_id, 1, fence=True, master_key=master_key)),
                encode_request(add_request(3, ledger_id, 0, master_key, encode_entry(ledger_id, 0, -1, 6, b"forged"))),
            ]
            assert await _raw_tls_requests(ep.port, role_certs, "intruder", requests) == b""
            # nothing changed: the ledger is still open for its writer, its entries intact
            await (await lh.append(b"e3")).result()
            await lh.close()
            rh = await bk.open_ledger(ledger_id, password=PASSWORD, recovery=False)
            assert [e.data for e in await rh.read(0, 3)] == [b"e0", b"e1", b"e2", b"e3"]
        with pytest.raises(BaseExceptionGroup) as e, trio.fail_after(30):
            await _write_and_read(url, _role_client(role_certs, "intruder"))
        assert e.group_contains(NotEnoughBookies, depth=None)


def test_role_authorization_needs_client_authentication_and_roles(tmp_path: Path, role_certs: Certs) -> None:
    with pytest.raises(ConfigError) as e:
        make_config(tmp_path, **_bookie_tls(role_certs, **_AUTHZ))
    assert e.value.key == "bookieAuthProviderFactoryClass"
    with pytest.raises(ConfigError) as e:
        make_config(
            tmp_path,
            **_bookie_tls(
                role_certs, tlsClientAuthentication=True, bookieAuthProviderFactoryClass=BOOKIE_AUTHZ_FACTORY
            ),
        )
    assert e.value.key == "authorizedRoles"
    with pytest.raises(ConfigError) as e:
        make_config(
            tmp_path,
            **_bookie_tls(
                role_certs,
                tlsClientAuthentication=True,
                authorizedRoles=["x"],
                bookieAuthProviderFactoryClass="org.example.Other",
            ),
        )
    assert e.value.key == "bookieAuthProviderFactoryClass"


@pytest.mark.parametrize(
    ("unit", "roles"),
    [
        ("0:pulsar-broker;1:cluster-a", {"pulsar-broker"}),
        ("0:a, b ,c", {"a", "b", "c"}),
        ("1:cluster-a", set()),
        ("pulsar-broker", set()),  # not BookKeeper's layout: no role
        ("", set()),
    ],
)
def test_certificate_roles_from_the_ou(unit: str, roles: set[str]) -> None:
    cert = {"subject": ((("commonName", "x"),), (("organizationalUnitName", unit),))}
    assert certificate_roles(cert) == roles
    assert certificate_roles(None) == frozenset()


async def test_bookie_rest_needs_an_authorized_role(tmp_path: Path, role_certs: Certs) -> None:
    overrides = _bookie_tls(role_certs, tlsClientAuthentication=True, httpServerTlsEnable=True, **_AUTHZ)
    async with _bookie(tmp_path, **overrides) as (_, ep):
        (base,) = ep.http_urls

        def http(cn: str) -> httpx.AsyncClient:
            ctx = ssl.create_default_context(cafile=role_certs.ca)
            ctx.load_cert_chain(*role_certs.clients[cn])
            return httpx.AsyncClient(verify=ctx, timeout=10)

        async with http("intruder") as intruder:
            r = await intruder.put(f"{base}/api/v1/bookie/state/readonly", json={"readOnly": True})
            assert r.status_code == 403 and "authorizedRoles" in r.json()["reason"]
            assert (await intruder.get(f"{base}/api/v1/bookie/info")).status_code == 403
            # probes and metrics stay open to any trusted certificate
            assert (await intruder.get(f"{base}/metrics")).status_code == 200
            assert (await intruder.get(f"{base}/heartbeat")).status_code == 200
        async with http("broker") as broker:
            assert (await broker.get(f"{base}/api/v1/bookie/state")).json()["readOnly"] is False
            r = await broker.put(f"{base}/api/v1/bookie/state/readonly", json={"readOnly": True})
            assert r.status_code == 200, r.text
            assert (await broker.get(f"{base}/api/v1/bookie/state")).json()["readOnly"] is True
