"""Certificates for TLS tests, generated with trustme into a temporary directory (never committed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import trustme


@dataclass(frozen=True)
class Certs:
    """PEM files of one test CA, a server certificate for 127.0.0.1/localhost and a client's."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    clients: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Extra client pairs (certificate, key) by their common name (`make_certs`'s ``clients``)."""


def make_certs(
    directory: Path, *, name: str = "ca", clients: tuple[str, ...] = (), units: dict[str, str] | None = None
) -> Certs:
    """Write a fresh CA, a server pair (127.0.0.1, localhost) and a client pair (CN ``client``)
    under ``directory``, and one more client pair per name in ``clients`` (that name as its CN,
    and ``units[name]`` as its organizational unit when given, e.g. BookKeeper's ``0:role``)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.magnetar.test", common_name="client")
    paths = {k: directory / f"{name}-{k}.pem" for k in ("ca", "server-cert", "server-key", "client-cert", "client-key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["server-cert"]))
    for blob in server.cert_chain_pems[1:]:
        blob.write_to_path(str(paths["server-cert"]), append=True)
    server.private_key_pem.write_to_path(str(paths["server-key"]))
    client.cert_chain_pems[0].write_to_path(str(paths["client-cert"]))
    client.private_key_pem.write_to_path(str(paths["client-key"]))
    extra: dict[str, tuple[str, str]] = {}
    for cn in clients:
        pair = ca.issue_cert(f"{cn}.magnetar.test", common_name=cn, organization_unit_name=(units or {}).get(cn))
        cert_path, key_path = directory / f"{name}-{cn}-cert.pem", directory / f"{name}-{cn}-key.pem"
        pair.cert_chain_pems[0].write_to_path(str(cert_path))
        pair.private_key_pem.write_to_path(str(key_path))
        extra[cn] = (str(cert_path), str(key_path))
    return Certs(
        *(str(paths[k]) for k in ("ca", "server-cert", "server-key", "client-cert", "client-key")), clients=extra
    )
