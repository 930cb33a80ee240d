"""Pulsar topic and namespace names, parsed and checked without I/O.

Rules (as Pulsar's TopicName):

* ``topic`` alone means ``persistent://public/default/topic``; ``tenant/ns/topic`` means
  ``persistent://tenant/ns/topic``; the full form is ``{domain}://{tenant}/{ns}/{local}``.
* The local name may contain ``/``; it is URL-encoded where it becomes a path (managed ledger name,
  metadata nodes, admin REST paths) and decoded where a path becomes a name again
  (`TopicName.from_managed_ledger_name`). This module is the one place that does either.
* A local name ending in ``-partition-N`` (N a non-negative integer) names partition N of the
  partitioned topic without that suffix.
* A tenant, namespace or local name is never ``.`` or ``..`` (nor is the partitioned topic a
  ``-partition-N`` name belongs to empty, ``.`` or ``..``), and a subscription name is none of
  those, has no ``/`` and no NUL: each becomes one component of a metadata path, where those would
  name another node (or none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = ["TopicName", "NamespaceName", "InvalidTopicNameError", "check_subscription_name", "PARTITIONED_SUFFIX"]

_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")
_PART_RE = re.compile(r"^[-=:.\w]+$")
PARTITIONED_SUFFIX = "-partition-"
_DOT_NAMES = (".", "..")


class InvalidTopicNameError(ValueError):
    """A topic or namespace name does not follow Pulsar's rules; the message says why."""


@dataclass(frozen=True, slots=True, order=True)
class NamespaceName:
    """A ``tenant/namespace`` pair."""

    tenant: str
    namespace: str

    @classmethod
    def parse(cls, text: str) -> NamespaceName:
        """Parse ``tenant/ns``; raise `InvalidTopicNameError` for any other shape."""
        parts = text.split("/")
        if len(parts) != 2:
            raise InvalidTopicNameError(f"invalid namespace name {text!r}: expected 'tenant/namespace'")
        tenant, ns = parts
        for what, value in (("tenant", tenant), ("namespace", ns)):
            if not value or value in _DOT_NAMES or not _PART_RE.match(value):
                raise InvalidTopicNameError(f"invalid {what} {value!r} in namespace name {text!r}")
        return cls(tenant, ns)

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


@dataclass(frozen=True, slots=True, order=True)
class TopicName:
    """A fully qualified topic name; ``partition`` is -1 unless the name ends in ``-partition-N``."""

    domain: str
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, text: str) -> TopicName:
        """Parse any accepted form (see the module rules); raise `InvalidTopicNameError` otherwise."""
        if not text:
            raise InvalidTopicNameError("empty topic name")
        if "://" in text:
            domain, _, rest = text.partition("://")
            if domain not in ("persistent", "non-persistent"):
                raise InvalidTopicNameError(f"invalid topic domain {domain!r} in {text!r}")
        else:
            domain = "persistent"
            rest = text if "/" in text else f"public/default/{text}"
            if rest.count("/") < 2:
                raise InvalidTopicNameError(
                    f"invalid short topic name {text!r}: use 'topic' or 'tenant/namespace/topic'"
                )
        parts = rest.split("/", 2)
        if len(parts) != 3 or not parts[2]:
            raise InvalidTopicNameError(f"invalid topic name {text!r}: expected {domain}://tenant/namespace/topic")
        tenant, ns, local = parts
        NamespaceName.parse(f"{tenant}/{ns}")
        if "\n" in local or "\x00" in local:
            raise InvalidTopicNameError(f"invalid characters in topic name {text!r}")
        partitioned = _PARTITION_RE.match(local)
        if local in _DOT_NAMES or (partitioned and partitioned.group(1) in ("", *_DOT_NAMES)):
            # the name (or its partitioned topic's) would be an empty, "." or ".." path component
            raise InvalidTopicNameError(f"invalid topic name {text!r}: the local name may not be {local!r}")
        return cls(domain, tenant, ns, local)

    @classmethod
    def from_managed_ledger_name(cls, ml_name: str) -> TopicName:
        """The topic whose `managed_ledger_name` is ``ml_name`` (``tenant/ns/domain/encoded-local``);
        `InvalidTopicNameError` for any other shape."""
        parts = ml_name.split("/")
        if len(parts) != 4 or parts[2] not in ("persistent", "non-persistent") or not parts[3]:
            raise InvalidTopicNameError(
                f"invalid managed ledger name {ml_name!r}: expected tenant/namespace/persistent/topic"
            )
        tenant, ns, domain, encoded = parts
        return cls.parse(f"{domain}://{tenant}/{ns}/{unquote(encoded)}")

    @property
    def namespace_name(self) -> NamespaceName:
        """The topic's namespace."""
        return NamespaceName(self.tenant, self.namespace)

    @property
    def persistent(self) -> bool:
        """True for ``persistent://`` topics."""
        return self.domain == "persistent"

    @property
    def partition(self) -> int:
        """The partition index encoded in the name, or -1."""
        m = _PARTITION_RE.match(self.local_name)
        return int(m.group(2)) if m else -1

    @property
    def partitioned_topic(self) -> TopicName:
        """The topic without its ``-partition-N`` suffix (itself when there is none)."""
        m = _PARTITION_RE.match(self.local_name)
        if not m:
            return self
        return TopicName(self.domain, self.tenant, self.namespace, m.group(1))

    def partition_name(self, index: int) -> TopicName:
        """The name of partition ``index`` of this (partitioned) topic."""
        if index < 0:
            raise ValueError("partition index must be >= 0")
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local_name}{PARTITIONED_SUFFIX}{index}")

    @property
    def encoded_local_name(self) -> str:
        """The local name URL-encoded so that it is one path component."""
        return quote(self.local_name, safe="")

    @property
    def managed_ledger_name(self) -> str:
        """``tenant/namespace/persistent/encoded-local-name``: the managed ledger's name."""
        return f"{self.tenant}/{self.namespace}/{self.domain}/{self.encoded_local_name}"

    @property
    def rest_path(self) -> str:
        """``tenant/namespace/domain/encoded-local-name``, as under ``/admin/partitioned-topics/``."""
        return f"{self.tenant}/{self.namespace}/{self.domain}/{self.encoded_local_name}"

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"


def check_subscription_name(name: str) -> str:
    """``name`` if it can name a subscription (see the module rules); `InvalidTopicNameError` otherwise."""
    if not name or name in _DOT_NAMES or "/" in name or "\x00" in name:
        raise InvalidTopicNameError(f"invalid subscription name {name!r}")
    return name
