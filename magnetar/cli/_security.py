"""The loud start-up warning of a cluster process (metadata in ZooKeeper) left unsecured.

Rules:

* Only processes whose metadata store is ZooKeeper (``zk://``) are checked: standalone and the
  embedded store are for a single trusted host.
* A broker is unsecured without ``authenticationEnabled`` (anyone may connect, produce, consume
  and administer), without ``authorizationEnabled``, or with ``managedLedgerPassword`` empty or
  the sample's placeholder (anyone reaching a bookie may read, fence or overwrite its ledgers).
* A bookie is unsecured unless its port is TLS with client authentication (``tls_enabled``,
  ``tlsClientAuthentication``, ``tlsTrustStore``): only that keeps strangers from its ledgers.
* Either is unsecured with ZooKeeper ACLs off (``zkEnableSecurity``): anyone reaching ZooKeeper
  may rewrite ownership, policies, permissions and ledger metadata, whatever the ports check.
* Each check returns one message naming every key to set, or None; the caller logs it once as a
  WARNING at start.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PASSWORD_PLACEHOLDER", "bookie_security_warning", "broker_security_warning"]

PASSWORD_PLACEHOLDER = "CHANGE-ME-before-the-first-start"
"""The ``managedLedgerPassword`` deploy/broker.toml ships: a value the operator must replace."""

_BANNER = "SECURITY: this {what} is reachable by anyone who can reach its ports: {problems}. Set {keys}."


_ZK_KEYS = "[{table}] zkEnableSecurity = true and zkDigestCredentials (the same on every broker and bookie)"


def broker_security_warning(
    metadata_url: str, broker: Any, managed_ledger: Any, *, zk_enable_security: bool
) -> str | None:
    """The warning for a broker with ``broker`` (`BrokerConfig`) and ``managed_ledger``
    (`ManagedLedgerConfig`) on ``metadata_url`` with ZooKeeper ACLs on or off
    (``zk_enable_security``), or None (see the module rules)."""
    if not metadata_url.startswith("zk://"):
        return None
    problems, keys = [], []
    if not zk_enable_security:
        problems.append("ZooKeeper ACLs are off")
        keys.append(_ZK_KEYS.format(table="cluster"))
    if not broker.authentication_enabled:
        problems.append("authentication is off")
        keys.append(
            '[broker] authenticationEnabled = true, authenticationProviders (e.g. ["token"]) '
            "and its key (tokenSecretKey or tokenPublicKey)"
        )
    if not broker.authorization_enabled:
        problems.append("authorization is off")
        keys.append("[broker] authorizationEnabled = true and superUserRoles")
    if managed_ledger.password in ("", PASSWORD_PLACEHOLDER):
        problems.append("the ledger password is " + ("empty" if not managed_ledger.password else "the placeholder"))
        keys.append("[managed_ledger] managedLedgerPassword (a secret, before the first start)")
    if not problems:
        return None
    return _BANNER.format(what="broker", problems=", ".join(problems), keys="; ".join(keys))


def bookie_security_warning(bookie: Any) -> str | None:
    """The warning for a bookie with ``bookie`` (`BookieConfig`), or None (see the module rules)."""
    if not bookie.metadata_url.startswith("zk://"):
        return None
    problems, keys = [], []
    if not (bookie.tls_enabled and bookie.tls_client_authentication):
        problem = "the bookie port is plain TCP" if not bookie.tls_enabled else "clients need no certificate"
        problems.append(f"{problem}, so anyone may read, fence or overwrite ledgers")
        keys.append(
            "[bookie] tls_enabled = true, tlsClientAuthentication = true, tlsTrustStore, tlsCertificatePath "
            "and tlsKeyStore (and [bk_client] certificates on the brokers and AutoRecovery)"
        )
    if not bookie.zk_enable_security:
        problems.append("ZooKeeper ACLs are off")
        keys.append(_ZK_KEYS.format(table="bookie"))
    if not problems:
        return None
    return _BANNER.format(what="bookie", problems=", ".join(problems), keys="; ".join(keys))
