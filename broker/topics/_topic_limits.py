"""The limits a topic enforces: max producers/consumers, max unacked messages, publish and
dispatch rates, resolved topic override > namespace policy > broker config, as Pulsar does.

Rules:

* Rule 1 (where they are stored): namespace values are keys of Pulsar's ``Policies`` JSON
  (``max_producers_per_topic``, ..., and the rates as maps by cluster: ``publishMaxMessageRate``,
  ``topicDispatchRate``, ``subscriptionDispatchRate``, ``clusterSubscribeRate``); topic values
  are keys of Pulsar's ``TopicPolicies`` JSON (``maxProducerPerTopic``, ``publishRate``, ...) in
  the topic's override node. A value absent (or null) at one level lets the next one apply.
* Rule 2 (meaning of 0): a count or rate of 0 (or less) means "no limit", as in Pulsar.
* Rule 3 (when they apply): a topic resolves its limits when it loads, when an admin changes a
  policy of it or of its namespace, and on the service's policy recheck (changes made through
  another broker); the limiters keep counting across a change.
* Rule 4 (enforced where): max producers in `Topic.add_producer` (ProducerBusy "Topic reached
  max producers limit"); max consumers per topic and per subscription when a consumer
  subscribes (ConsumerBusy); max unacked per consumer and per subscription in the dispatcher
  (Shared and Key_Shared, as Pulsar: delivery stops until acks come); rates by `_rate_limit`;
  the subscribe rate when a consumer subscribes (NotAllowed "Subscribe limited by subscribe rate
  limit per consumer.", counted per client host, consumer name and consumer id, as Pulsar).
* Rule 5 (both kinds of topic): persistent and non-persistent topics satisfy `LimitedTopic` and
  resolve, refresh and check their limits through this module (`check_producer_limit`,
  `check_consumer_limits`) and their rates through `_rate_limit`, so a limit means the same on
  both. Non-persistent topics apply what Pulsar applies to them: max producers, max consumers per
  topic and per subscription, the publish rate and the topic / subscription dispatch rates (over
  those, a message is dropped for the subscription and counted, as any message it cannot
  deliver); nothing is unacknowledged there and, as in Pulsar, they have no subscribe rate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from protocols.pulsar import TopicName

from .._errors import ConsumerBusyError, ProducerBusyError

if TYPE_CHECKING:
    from .._config import BrokerConfig
    from .._service import BrokerService
    from ._rate_limit import RateLimiter

__all__ = [
    "DispatchRate",
    "LimitedTopic",
    "PublishRate",
    "SubscribeRate",
    "TopicLimits",
    "check_consumer_limits",
    "check_producer_limit",
    "configure_rates",
    "parse_limit",
    "refresh_limits",
    "resolve_for",
    "topic_overrides",
    "NS_KEYS",
    "TOPIC_KEYS",
]

_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1


def _int(body: Any, what: str, maximum: int = _I32_MAX) -> int:
    if isinstance(body, bool) or not isinstance(body, int) or not -1 <= body <= maximum:
        raise ValueError(f"{what} must be an integer between -1 and {maximum}, not {body!r}")
    return body


def parse_limit(body: Any) -> int:
    """A count limit from a request body (an integer >= -1; 0 or -1: no limit); raises `ValueError`."""
    return _int(body, "the limit")


def _field(obj: Mapping[str, Any], key: str, default: int, maximum: int = _I64_MAX) -> int:
    value = obj.get(key, default)
    return default if value is None else _int(value, key, maximum)


@dataclass(frozen=True)
class PublishRate:
    """Pulsar's ``PublishRate``: messages and bytes per second a topic takes (<= 0: no bound)."""

    msgs: int = 0
    bytes: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> PublishRate:
        """Parse ``{"publishThrottlingRateInMsg": n, "publishThrottlingRateInByte": n}``; `ValueError`."""
        if not isinstance(obj, dict):
            raise ValueError(f"expected a PublishRate object, not {obj!r}")
        return cls(
            _field(obj, "publishThrottlingRateInMsg", -1, _I32_MAX), _field(obj, "publishThrottlingRateInByte", -1)
        )

    def to_json(self) -> dict[str, Any]:
        """Pulsar's JSON form."""
        return {"publishThrottlingRateInMsg": self.msgs, "publishThrottlingRateInByte": self.bytes}


@dataclass(frozen=True)
class DispatchRate:
    """Pulsar's ``DispatchRate``: messages and bytes per ``period_s`` seconds (<= 0: no bound)."""

    msgs: int = 0
    bytes: int = 0
    period_s: int = 1
    relative_to_publish_rate: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> DispatchRate:
        """Parse Pulsar's DispatchRate JSON; raises `ValueError` (also for ``relativeToPublishRate``,
        which Magnetar does not support)."""
        if not isinstance(obj, dict):
            raise ValueError(f"expected a DispatchRate object, not {obj!r}")
        period = _field(obj, "ratePeriodInSecond", 1, _I32_MAX)
        if period <= 0:
            raise ValueError(f"ratePeriodInSecond must be positive, not {period}")
        if obj.get("relativeToPublishRate"):
            raise ValueError("relativeToPublishRate is not supported")
        return cls(
            _field(obj, "dispatchThrottlingRateInMsg", -1, _I32_MAX),
            _field(obj, "dispatchThrottlingRateInByte", -1),
            period,
        )

    def to_json(self) -> dict[str, Any]:
        """Pulsar's JSON form."""
        return {
            "dispatchThrottlingRateInMsg": self.msgs,
            "dispatchThrottlingRateInByte": self.bytes,
            "relativeToPublishRate": self.relative_to_publish_rate,
            "ratePeriodInSecond": self.period_s,
        }


@dataclass(frozen=True)
class SubscribeRate:
    """Pulsar's ``SubscribeRate``: subscribes one consumer (host, name, id) may make per
    ``period_s`` seconds (<= 0: no bound)."""

    per_consumer: int = -1
    period_s: int = 30

    @classmethod
    def from_json(cls, obj: Any) -> SubscribeRate:
        """Parse ``{"subscribeThrottlingRatePerConsumer": n, "ratePeriodInSecond": n}``; `ValueError`."""
        if not isinstance(obj, dict):
            raise ValueError(f"expected a SubscribeRate object, not {obj!r}")
        period = _field(obj, "ratePeriodInSecond", 30, _I32_MAX)
        if period <= 0:
            raise ValueError(f"ratePeriodInSecond must be positive, not {period}")
        return cls(_field(obj, "subscribeThrottlingRatePerConsumer", -1, _I32_MAX), period)

    def to_json(self) -> dict[str, Any]:
        """Pulsar's JSON form."""
        return {"subscribeThrottlingRatePerConsumer": self.per_consumer, "ratePeriodInSecond": self.period_s}


NS_KEYS: dict[str, str] = {
    "maxProducersPerTopic": "max_producers_per_topic",
    "maxConsumersPerTopic": "max_consumers_per_topic",
    "maxConsumersPerSubscription": "max_consumers_per_subscription",
    "maxUnackedMessagesPerConsumer": "max_unacked_messages_per_consumer",
    "maxUnackedMessagesPerSubscription": "max_unacked_messages_per_subscription",
}
"""Namespace REST policy name -> key of the Policies JSON (count limits)."""

NS_RATE_KEYS: dict[str, tuple[str, type]] = {
    "publishRate": ("publishMaxMessageRate", PublishRate),
    "dispatchRate": ("topicDispatchRate", DispatchRate),
    "subscriptionDispatchRate": ("subscriptionDispatchRate", DispatchRate),
    "subscribeRate": ("clusterSubscribeRate", SubscribeRate),
}
"""Namespace REST policy name -> (key of the Policies JSON, holding a map by cluster; value type)."""

TOPIC_KEYS: dict[str, str] = {
    "maxProducers": "maxProducerPerTopic",
    "maxConsumers": "maxConsumerPerTopic",
    "maxConsumersPerSubscription": "maxConsumersPerSubscription",
    "maxUnackedMessagesOnConsumer": "maxUnackedMessagesOnConsumer",
    "maxUnackedMessagesOnSubscription": "maxUnackedMessagesOnSubscription",
}
"""Topic REST policy name -> key of the TopicPolicies JSON (count limits)."""

TOPIC_RATE_KEYS: dict[str, tuple[str, type]] = {
    "publishRate": ("publishRate", PublishRate),
    "dispatchRate": ("dispatchRate", DispatchRate),
    "subscriptionDispatchRate": ("subscriptionDispatchRate", DispatchRate),
    "subscribeRate": ("subscribeRate", SubscribeRate),
}
"""Topic REST policy name -> (key of the TopicPolicies JSON; value type)."""


@dataclass(frozen=True)
class TopicLimits:
    """The limits one topic enforces (Rule 2: 0 = none)."""

    max_producers: int = 0
    max_consumers: int = 0
    max_consumers_per_subscription: int = 0
    max_unacked_per_consumer: int = 0
    max_unacked_per_subscription: int = 0
    publish_rate: PublishRate = PublishRate()
    dispatch_rate: DispatchRate = DispatchRate()
    subscription_dispatch_rate: DispatchRate = DispatchRate()
    subscribe_rate: SubscribeRate = SubscribeRate(0)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TopicLimits:
        """The broker-wide defaults."""
        return cls(
            config.max_producers_per_topic,
            config.max_consumers_per_topic,
            config.max_consumers_per_subscription,
            config.max_unacked_messages_per_consumer,
            config.max_unacked_messages_per_subscription,
            PublishRate(config.max_publish_rate_per_topic_in_messages, config.max_publish_rate_per_topic_in_bytes),
            DispatchRate(
                config.dispatch_throttling_rate_per_topic_in_msg, config.dispatch_throttling_rate_per_topic_in_byte
            ),
            DispatchRate(
                config.dispatch_throttling_rate_per_subscription_in_msg,
                config.dispatch_throttling_rate_per_subscription_in_byte,
            ),
            SubscribeRate(config.subscribe_throttling_rate_per_consumer, config.subscribe_rate_period_per_consumer_s),
        )

    @classmethod
    def resolve(
        cls, config: BrokerConfig, ns_policies: Mapping[str, Any] | None, topic_overrides: Mapping[str, Any] | None
    ) -> TopicLimits:
        """Topic override > namespace policy > config (Rule 1). A stored value that does not parse
        is ignored (it could only come from a direct write to the metadata store)."""
        base = cls.from_config(config)
        ns = ns_policies or {}
        own = topic_overrides or {}
        cluster = config.cluster_name

        def count(ns_key: str, topic_key: str, default: int) -> int:
            for value in (own.get(topic_key), ns.get(ns_key)):
                if value is not None and not isinstance(value, bool) and isinstance(value, int):
                    return value
            return default

        def rate(ns_key: str, topic_key: str, kind: type, default: Any) -> Any:
            by_cluster = ns.get(ns_key)
            for value in (own.get(topic_key), by_cluster.get(cluster) if isinstance(by_cluster, dict) else None):
                if value is not None:
                    try:
                        return kind.from_json(value)  # type: ignore[attr-defined]
                    except ValueError:
                        continue
            return default

        return cls(
            count("max_producers_per_topic", "maxProducerPerTopic", base.max_producers),
            count("max_consumers_per_topic", "maxConsumerPerTopic", base.max_consumers),
            count("max_consumers_per_subscription", "maxConsumersPerSubscription", base.max_consumers_per_subscription),
            count("max_unacked_messages_per_consumer", "maxUnackedMessagesOnConsumer", base.max_unacked_per_consumer),
            count(
                "max_unacked_messages_per_subscription",
                "maxUnackedMessagesOnSubscription",
                base.max_unacked_per_subscription,
            ),
            rate("publishMaxMessageRate", "publishRate", PublishRate, base.publish_rate),
            rate("topicDispatchRate", "dispatchRate", DispatchRate, base.dispatch_rate),
            rate("subscriptionDispatchRate", "subscriptionDispatchRate", DispatchRate, base.subscription_dispatch_rate),
            rate("clusterSubscribeRate", "subscribeRate", SubscribeRate, base.subscribe_rate),
        )


class LimitedTopic(Protocol):
    """What a topic of either kind offers this module and `_rate_limit` (Rule 5): its name, the
    limits in force, its publish and topic dispatch limiters, and `apply_limits`."""

    name: TopicName
    limits: TopicLimits
    publish_limiter: RateLimiter
    dispatch_limiter: RateLimiter

    def apply_limits(self, limits: TopicLimits) -> None:
        """Enforce ``limits`` from now on (Rule 3)."""


def configure_rates(topic: LimitedTopic, limits: TopicLimits, subscription_limiters: Iterable[RateLimiter]) -> None:
    """Rule 3 for either kind of topic: record ``limits`` on ``topic`` and give its publish and
    dispatch limiters, and its subscriptions' dispatch limiters, the new bounds (each limiter keeps
    counting its current window)."""
    topic.limits = limits
    topic.publish_limiter.configure(limits.publish_rate.msgs, limits.publish_rate.bytes)
    rate = limits.dispatch_rate
    topic.dispatch_limiter.configure(rate.msgs, rate.bytes, rate.period_s)
    sub_rate = limits.subscription_dispatch_rate
    for limiter in subscription_limiters:
        limiter.configure(sub_rate.msgs, sub_rate.bytes, sub_rate.period_s)


def check_producer_limit(limits: TopicLimits, attached: int) -> None:
    """Refuse one more producer when ``attached`` (ready and waiting producers) has reached the max
    producers limit: `ProducerBusyError` with Pulsar's message (Rule 4)."""
    if 0 < limits.max_producers <= attached:
        raise ProducerBusyError("Topic reached max producers limit")


def check_consumer_limits(limits: TopicLimits, on_topic: int, on_subscription: int) -> None:
    """Refuse one more consumer when the topic's (``on_topic``) or the subscription's
    (``on_subscription``) consumers have reached their limit: `ConsumerBusyError` with Pulsar's
    messages (Rule 4)."""
    if 0 < limits.max_consumers <= on_topic:
        raise ConsumerBusyError("Topic reached max consumers limit")
    if 0 < limits.max_consumers_per_subscription <= on_subscription:
        raise ConsumerBusyError("Subscription reached max consumers limit")


async def topic_overrides(service: BrokerService, name: TopicName) -> dict[str, Any]:
    """The stored overrides of topic ``name`` (a partition without its own falls back to those of
    its partitioned topic, as the other topic policies do)."""
    own = await service.topic_policies.get(name)
    if not own and name.partition >= 0:
        own = await service.topic_policies.get(name.partitioned_topic)
    return own


async def resolve_for(
    service: BrokerService, name: TopicName, ns: Mapping[str, Any] | None = None, own: Mapping[str, Any] | None = None
) -> TopicLimits:
    """The limits of topic ``name`` from the metadata store. ``ns`` / ``own``: the namespace's
    policies / the topic's overrides when the caller has read them already."""
    if ns is None:
        ns = await service.namespaces.get_policies(name.namespace_name)
    if own is None:
        own = await topic_overrides(service, name)
    return TopicLimits.resolve(service.config, ns, own)


async def refresh_limits(
    service: BrokerService,
    topic: LimitedTopic,
    ns: Mapping[str, Any] | None = None,
    own: Mapping[str, Any] | None = None,
) -> None:
    """Resolve and apply the limits of a loaded topic (Rule 3); ``ns`` and ``own`` as for `resolve_for`."""
    topic.apply_limits(await resolve_for(service, topic.name, ns, own))
