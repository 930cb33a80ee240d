"""Pure units of the limits: the fixed-window rate limiter on a fake clock, and the resolution of a
topic's limits (topic > namespace > broker config) from Pulsar's policy JSON."""

from __future__ import annotations

import pytest

from broker import BrokerConfig
from broker.topics._rate_limit import RateLimiter
from broker.topics._topic_limits import DispatchRate, PublishRate, SubscribeRate, TopicLimits, parse_limit
from tests.support.clocks import FakeClock


def test_rate_limiter_windows() -> None:
    clock = FakeClock(100.0)
    limiter = RateLimiter(3, 0, 1.0, clock=clock)
    assert limiter.enabled and limiter.available_msgs() == 3
    limiter.record(2, 10)
    assert not limiter.exhausted() and limiter.available_msgs() == 1
    limiter.record(2, 10)  # the last admitted unit may overshoot (Rule 2)
    assert limiter.exhausted() and limiter.available_msgs() == 0
    clock.now += 0.25
    assert limiter.wait_s() == pytest.approx(0.75)
    clock.now += 0.75  # a new window: nothing carried over
    assert not limiter.exhausted() and limiter.available_msgs() == 3 and limiter.wait_s() == 0


def test_rate_limiter_bytes_and_off() -> None:
    clock = FakeClock(100.0)
    limiter = RateLimiter(0, 100, 2.0, clock=clock)
    assert limiter.available_msgs() is None  # no message bound
    limiter.record(1, 100)
    assert limiter.exhausted() and limiter.available_msgs() == 0 and limiter.wait_s() == pytest.approx(2.0)
    limiter.configure(0, 0)
    assert not limiter.enabled and not limiter.exhausted() and limiter.wait_s() == 0
    with pytest.raises(ValueError):
        limiter.configure(1, 1, 0)


def test_limits_resolve_topic_over_namespace_over_config() -> None:
    config = BrokerConfig(max_producers_per_topic=5, dispatch_throttling_rate_per_topic_in_msg=50)
    assert TopicLimits.resolve(config, None, None) == TopicLimits.from_config(config)
    ns = {
        "max_producers_per_topic": 3,
        "max_consumers_per_topic": 7,
        "publishMaxMessageRate": {
            "standalone": {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1},
            "other": {"publishThrottlingRateInMsg": 99},
        },
        "topicDispatchRate": {"other": {"dispatchThrottlingRateInMsg": 1}},
    }
    limits = TopicLimits.resolve(config, ns, None)
    assert (limits.max_producers, limits.max_consumers) == (3, 7)
    assert limits.publish_rate == PublishRate(10, -1)
    assert limits.dispatch_rate == DispatchRate(50, 0)  # no rate for this cluster: the config's
    own = {"maxProducerPerTopic": 1, "dispatchRate": {"dispatchThrottlingRateInMsg": 4, "ratePeriodInSecond": 2}}
    limits = TopicLimits.resolve(config, ns, own)
    assert limits.max_producers == 1 and limits.max_consumers == 7
    assert limits.dispatch_rate == DispatchRate(4, -1, 2)
    # a stored value that does not parse falls through to the next level
    assert TopicLimits.resolve(config, ns, {"maxProducerPerTopic": "x"}).max_producers == 3


def test_policy_json_validation() -> None:
    assert parse_limit(0) == 0 and parse_limit(-1) == -1
    for bad in (-2, 1.5, True, "3", 2**31):
        with pytest.raises(ValueError):
            parse_limit(bad)
    with pytest.raises(ValueError, match="ratePeriodInSecond"):
        DispatchRate.from_json({"ratePeriodInSecond": 0})
    with pytest.raises(ValueError, match="relativeToPublishRate"):
        DispatchRate.from_json({"relativeToPublishRate": True})
    with pytest.raises(ValueError):
        PublishRate.from_json([])
    assert SubscribeRate.from_json({}).to_json() == {"subscribeThrottlingRatePerConsumer": -1, "ratePeriodInSecond": 30}
