"""`broker.housekeeping._inactive_topics`: Pulsar's InactiveTopicPolicies JSON and the broker keys behind them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker import BrokerConfig
from broker.housekeeping._inactive_topics import InactiveTopicPolicies, _active
from magnetar.common.config import ConfigError, load_config


def test_broker_defaults_are_pulsars() -> None:
    config = BrokerConfig()
    assert InactiveTopicPolicies.from_config(config) == InactiveTopicPolicies("delete_when_no_subscriptions", 60, True)
    # the inactive duration defaults to the check frequency, as in Pulsar
    config = load_config(BrokerConfig, properties={"brokerDeleteInactiveTopicsFrequencySeconds": "30"})
    assert config.inactive_topic_max_duration_s == 30
    config = load_config(
        BrokerConfig,
        properties={
            "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": "600",
            "brokerDeleteInactiveTopicsMode": "delete_when_subscriptions_caught_up",
        },
    )
    assert InactiveTopicPolicies.from_config(config) == InactiveTopicPolicies(
        "delete_when_subscriptions_caught_up", 600, True
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("brokerDeleteInactiveTopicsMode", "delete_sometimes"),
        ("brokerDeleteInactiveTopicsFrequencySeconds", "0"),
        ("brokerDeleteInactiveTopicsMaxInactiveDurationSeconds", "-1"),
    ],
)
def test_bad_broker_keys_are_refused(key: str, value: str) -> None:
    with pytest.raises(ConfigError):
        load_config(BrokerConfig, properties={key: value})


def test_policies_json_round_trip_and_java_defaults() -> None:
    body = {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 10,
        "deleteWhileInactive": True,
    }
    assert InactiveTopicPolicies.from_json(body).to_json() == body
    assert InactiveTopicPolicies.from_json({}) == InactiveTopicPolicies("delete_when_no_subscriptions", 0, False)


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"inactiveTopicDeleteMode": "never"},
        {"maxInactiveDurationSeconds": "10"},
        {"maxInactiveDurationSeconds": True},
        {"deleteWhileInactive": "yes"},
        {"deleteWhileInactve": True},
    ],
)
def test_bad_policies_json_is_refused(body: object) -> None:
    with pytest.raises(ValueError):
        InactiveTopicPolicies.from_json(body)


def test_a_replication_backlog_keeps_a_topic_active() -> None:
    """As in Pulsar, a topic is never deleted for inactivity while a replicator has something left
    to send, whatever the mode (its cursor is not a subscription)."""
    replicator = SimpleNamespace(backlog=3)
    topic = SimpleNamespace(
        producers={},
        waiting_producers=[],
        consumer_count=0,
        compactor=SimpleNamespace(running=False),
        txn_buffer=SimpleNamespace(ongoing={}),
        ml=SimpleNamespace(cursors={}),
        subscriptions={},
        replicators={"east": replicator},
    )
    for mode in ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"):
        assert _active(topic, mode)  # type: ignore[arg-type]
    replicator.backlog = 0
    for mode in ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"):
        assert not _active(topic, mode)  # type: ignore[arg-type]
