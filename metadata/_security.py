"""ZooKeeper digest authentication and the ACLs of the nodes a session creates.

As BookKeeper's ``zkEnableSecurity``: every Magnetar component of a cluster (broker, bookies,
AutoRecovery, the Spark reader) opens its ZooKeeper session with the same digest credential
(``user:password``, added with ZooKeeper's ``addauth digest``) and creates every node with the
ACL CREATOR_ALL: only sessions authenticated as that user may then read, change or delete it.
BookKeeper requires the same of its components (one identity for the whole cluster) because a
ledger created by the broker is later changed by AutoRecovery and fenced by a new owner.

Rules:

* Nodes that existed before security was turned on keep their old ACL (ZooKeeper never changes an
  ACL on create): turn it on for a fresh metadata root, or set ACLs on old nodes with zkCli's
  ``setAcl``.
* No node is world-readable: every reader of the tree (the Spark bookie reader too) is a
  component holding the credential, and ledger metadata names the ensemble of every topic.
* The config keys, the same in the broker's ``[cluster]``, the bookie's and AutoRecovery's tables:
  ``zkEnableSecurity`` (BookKeeper's name) and ``zkDigestCredentials`` (``user:password``, or
  ``file:/path`` to a file holding it); `ZkSecurity.from_config` checks them.
* Only ZooKeeper stores (``zk://``) use it; the embedded and in-memory stores of a standalone are
  local to one process and have no sessions from outside.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from magnetar.common.config import ConfigError

__all__ = ["ZkSecurity"]


@dataclass(frozen=True)
class ZkSecurity:
    """A digest credential ``user:password``; nodes created with it get CREATOR_ALL."""

    digest: str

    def __post_init__(self) -> None:
        user, sep, password = self.digest.partition(":")
        if not sep or not user or not password:
            raise ValueError("a ZooKeeper digest credential looks like user:password (both non-empty)")

    @property
    def user(self) -> str:
        """The user name of the credential (ZooKeeper's ACLs name it, never the password)."""
        return self.digest.partition(":")[0]

    @classmethod
    def from_config(cls, enabled: bool, credentials: str) -> ZkSecurity | None:
        """The security of ``zkEnableSecurity`` / ``zkDigestCredentials`` (None when off). The
        credential is ``user:password`` or ``file:/path`` to a file holding it (so the secret stays
        out of the config file). Raises `ConfigError` naming the key."""
        if not enabled:
            return None
        key = "zkDigestCredentials"
        if not credentials:
            raise ConfigError(key, "zkEnableSecurity needs the digest credential user:password (or file:/path)")
        value = credentials
        if value.startswith("file:"):
            path = Path(value[len("file:") :])
            try:
                value = path.read_text().strip()
            except OSError as exc:
                raise ConfigError(key, f"cannot read the credential file {str(path)!r}: {exc.strerror}") from None
        try:
            return cls(value)
        except ValueError as exc:
            raise ConfigError(key, str(exc)) from None

    def __repr__(self) -> str:  # never print the password
        return f"ZkSecurity(user={self.user!r})"
