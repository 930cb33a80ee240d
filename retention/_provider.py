"""Where the service gets each topic's policies, and the mapping between topic and managed-ledger names
(both ways through ``protocols.pulsar.TopicName``, which URL-encodes the local name).

`PoliciesProvider` is the seam: the broker implements it over its namespace / topic policies in
the metadata store (set through the admin REST API); `StaticPoliciesProvider` keeps them in memory
(standalone without admin changes, and tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from protocols.pulsar import TopicName

from ._policies import PolicyOverrides, RetentionConfig, TopicPolicies

__all__ = ["PoliciesProvider", "StaticPoliciesProvider", "ml_name_of", "namespace_of", "topic_of"]

_SCHEME = "persistent://"


def topic_of(ml_name: str) -> str:
    """``tenant/ns/persistent/encoded-topic`` -> ``persistent://tenant/ns/topic``; a name already in
    topic form is returned as is. Raises `ValueError` for other shapes."""
    if ml_name.startswith(_SCHEME):
        return ml_name
    topic = TopicName.from_managed_ledger_name(ml_name)
    if not topic.persistent:
        raise ValueError(f"not a managed ledger name of a persistent topic: {ml_name!r}")
    return str(topic)


def ml_name_of(topic: str) -> str:
    """``persistent://tenant/ns/topic`` -> ``tenant/ns/persistent/encoded-topic``; a managed-ledger
    name is returned as is. Raises `ValueError` for other shapes."""
    if not topic.startswith(_SCHEME):
        topic_of(topic)  # validates
        return topic
    return TopicName.parse(topic).managed_ledger_name


def namespace_of(topic: str) -> str:
    """The ``tenant/namespace`` of a topic or managed-ledger name."""
    parts = ml_name_of(topic).split("/")
    return f"{parts[0]}/{parts[1]}"


class PoliciesProvider(Protocol):
    """Resolves the policies in force for a topic (``persistent://tenant/ns/topic``).

    Implementations return a `TopicPolicies` (usually `TopicPolicies.resolve` over their broker
    defaults, namespace and topic overrides) and may raise; the service logs the error, counts it
    and skips that topic for the pass.
    """

    async def topic_policies(self, topic: str) -> TopicPolicies:
        """The effective policies of ``topic``."""
        ...


class StaticPoliciesProvider:
    """In-memory namespace and topic overrides over a `RetentionConfig`'s broker defaults."""

    def __init__(
        self,
        config: RetentionConfig | None = None,
        namespaces: Mapping[str, PolicyOverrides] | None = None,
        topics: Mapping[str, PolicyOverrides] | None = None,
    ) -> None:
        self.config = config if config is not None else RetentionConfig()
        self.config.validate()
        self._namespaces = dict(namespaces or {})
        self._topics = {topic_of(k): v for k, v in (topics or {}).items()}

    def set_namespace(self, namespace: str, overrides: PolicyOverrides | None) -> None:
        """Set (or with None remove) the policies of ``tenant/namespace``."""
        if overrides is None:
            self._namespaces.pop(namespace, None)
        else:
            self._namespaces[namespace] = overrides

    def set_topic(self, topic: str, overrides: PolicyOverrides | None) -> None:
        """Set (or with None remove) the topic-level policies of ``topic``."""
        key = topic_of(topic)
        if overrides is None:
            self._topics.pop(key, None)
        else:
            self._topics[key] = overrides

    async def topic_policies(self, topic: str) -> TopicPolicies:
        """Topic over namespace over broker defaults."""
        key = topic_of(topic)
        return TopicPolicies.resolve(self.config, self._namespaces.get(namespace_of(key)), self._topics.get(key))
