"""Certificates for TLS tests, generated with trustme into a temporary directory (never committed)."""

from __future__ import annotations

from dataclasses import dataclass
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


def make_certs(directory: Path, *, name: str = "ca") -> Certs:
    """Write a fresh CA, a server pair (127.0.0.1, localhost) and a client pair under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.magnetar.test", common_name="client")
    paths = {k: directory / f"{name}-{k}.pem" for k in ("ca", "server-cert", "server-key", "client-cert",
                                                         "client-key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["server-cert"]))
    for blob in server.cert_chain_pems[1:]:
        blob.write_to_path(str(paths["server-cert"]), append=True)
    server.private_key_pem.write_to_path(str(paths["server-key"]))
    client.cert_chain_pems[0].write_to_path(str(paths["client-cert"]))
    client.private_key_pem.write_to_path(str(paths["client-key"]))
    return Certs(*(str(paths[k]) for k in ("ca", "server-cert", "server-key", "client-cert", "client-key")))
