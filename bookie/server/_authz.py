"""Which TLS clients may use the bookie: BookKeeper's certificate-role authorization.

As BookKeeper's ``BookieAuthZFactory`` (``bookieAuthProviderFactoryClass``), a bookie that
requires client certificates (``tlsClientAuthentication``) can further require that a client's
certificate carries one of ``authorizedRoles``. The roles are written in the certificate
subject's organizational unit (OU) in BookKeeper's layout ``0:role1,role2;1:cluster-a``: the
section numbered 0 lists the roles (later sections, such as the cluster, are not checked here).
A certificate may hold several OU attributes; roles from all of them count.

Rules:

* A connection whose certificate has no authorized role is closed right after the TLS handshake,
  before any request is read: it can neither read, fence, nor add (overwrite) entries.
* The check is pure (`certificate_roles`, `CertificateRoleAuthorizer.authorize`) and runs on the
  certificate the TLS handshake already verified against ``tlsTrustStore``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["BOOKIE_AUTHZ_FACTORY", "CertificateRoleAuthorizer", "certificate_roles"]

BOOKIE_AUTHZ_FACTORY = "org.apache.bookkeeper.tls.BookieAuthZFactory"
"""The ``bookieAuthProviderFactoryClass`` value that turns certificate-role authorization on."""


def _organizational_units(peer_cert: dict[str, Any]) -> list[str]:
    """The OU values of a certificate as `ssl.SSLSocket.getpeercert` returns it."""
    units = []
    for rdn in peer_cert.get("subject", ()):
        for key, value in rdn:
            if key == "organizationalUnitName":
                units.append(str(value))
    return units


def certificate_roles(peer_cert: dict[str, Any] | None) -> frozenset[str]:
    """The roles a certificate's OU grants in BookKeeper's ``0:role1,role2;1:...`` layout; empty
    when there is no certificate, no OU, or no section 0. Never raises on odd OU values."""
    if not peer_cert:
        return frozenset()
    roles: set[str] = set()
    for unit in _organizational_units(peer_cert):
        for section in unit.split(";"):
            index, sep, values = section.partition(":")
            if sep and index.strip() == "0":
                roles.update(r.strip() for r in values.split(",") if r.strip())
    return frozenset(roles)


@dataclass(frozen=True)
class CertificateRoleAuthorizer:
    """Admits a TLS client whose verified certificate carries one of ``authorized_roles``."""

    authorized_roles: frozenset[str]

    @classmethod
    def of(cls, roles: Iterable[str]) -> CertificateRoleAuthorizer:
        """An authorizer for these role names."""
        return cls(frozenset(roles))

    def authorize(self, peer_cert: dict[str, Any] | None) -> str | None:
        """None when the client may use the bookie, else the reason it may not (for the log)."""
        roles = certificate_roles(peer_cert)
        if roles & self.authorized_roles:
            return None
        if not peer_cert:
            return "no client certificate"
        return (
            f"certificate roles {sorted(roles) or '(none: no OU section 0)'} hold none of "
            f"authorizedRoles {sorted(self.authorized_roles)}"
        )
