"""Policy types: Pulsar JSON round trips, bad input, and topic > namespace > broker resolution."""

from __future__ import annotations

import pytest

from magnetar.common.config import ConfigError, load_config
from retention import (
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    PolicyOverrides,
    RetentionConfig,
    RetentionPolicies,
    StaticPoliciesProvider,
    TopicPolicies,
    ml_name_of,
    namespace_of,
    parse_message_ttl,
    topic_of,
)


@pytest.mark.parametrize("t,s", [(0, 0), (-1, -1), (10, -1), (-1, 100), (60, 1024)])
def test_retention_round_trip(t: int, s: int) -> None:
    p = RetentionPolicies(t, s)
    assert p.to_json() == {"retentionTimeInMinutes": t, "retentionSizeInMB": s}
    assert RetentionPolicies.from_json(p.to_json()) == p


def test_retention_properties() -> None:
    assert RetentionPolicies(-1, -1).infinite
    assert not RetentionPolicies(-1, 5).infinite
    p = RetentionPolicies(2, 3)
    assert p.time_ms == 120_000 and p.size_bytes == 3 * 1024 * 1024
    assert RetentionPolicies(-1, 3).time_ms is None


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}, "single time or size limit of 0"),
        ({"retentionTimeInMinutes": 5, "retentionSizeInMB": 0}, "single time or size limit of 0"),
        ({"retentionTimeInMinutes": -2, "retentionSizeInMB": -1}, "retentionTimeInMinutes"),
        ({"retentionTimeInMinutes": "5.5", "retentionSizeInMB": -1}, "must be an integer"),
        ({"retentionTimeInMinutes": "five", "retentionSizeInMB": -1}, "must be an integer"),
        ({"retentionTimeInMinutes": True, "retentionSizeInMB": -1}, "must be an integer"),
        ({"retentionSizeInMB": -1}, "'retentionTimeInMinutes' is required"),
        ([1, 2], "JSON object"),
    ],
)
def test_retention_bad_input(data: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        RetentionPolicies.from_json(data)


def test_backlog_quota_round_trip_and_legacy_limit() -> None:
    q = BacklogQuota(1024, 60, BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION)
    j = q.to_json()
    assert j == {"limitSize": 1024, "limitTime": 60, "policy": "consumer_backlog_eviction"}
    assert BacklogQuota.from_json(j) == q
    legacy = BacklogQuota.from_json({"limit": 2048, "policy": "producer_exception"})
    assert legacy == BacklogQuota(2048, -1, BacklogQuotaPolicy.PRODUCER_EXCEPTION)
    assert BacklogQuota.from_json({}) == BacklogQuota()


def test_numbers_in_strings_are_read_as_pulsar_reads_them() -> None:
    # Pulsar's JSON mapper takes a number written as a string for an integer field; the Go
    # client's tests set quotas so ({"limit": "10240"})
    assert BacklogQuota.from_json({"limit": "10240", "policy": "producer_request_hold"}) == BacklogQuota(10240)
    assert BacklogQuota.from_json({"limitSize": "-1", "limitTime": " 60 "}) == BacklogQuota(-1, 60)
    assert RetentionPolicies.from_json({"retentionTimeInMinutes": "5", "retentionSizeInMB": "-1"}) == RetentionPolicies(
        5, -1
    )
    with pytest.raises(ValueError, match="limitSize"):
        BacklogQuota.from_json({"limitSize": "-2"})


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"limitSize": 10, "policy": "drop_everything"}, "policy must be one of"),
        ({"limitSize": -5}, "limitSize"),
        ({"limitTime": 1.5}, "must be an integer"),
        ("x", "JSON object"),
    ],
)
def test_backlog_quota_bad_input(data: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        BacklogQuota.from_json(data)


def test_message_ttl() -> None:
    assert parse_message_ttl(None) is None
    assert parse_message_ttl(0) == 0
    assert parse_message_ttl(3600) == 3600
    for bad in (-1, "10", 1.0, True):
        with pytest.raises(ValueError, match="messageTTLInSeconds"):
            parse_message_ttl(bad)


def test_overrides_round_trip_and_bad_type() -> None:
    o = PolicyOverrides(RetentionPolicies(10, -1), 30, {BacklogQuotaType.MESSAGE_AGE: BacklogQuota(-1, 60)})
    j = o.to_json()
    assert j == {
        "retention_policies": {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1},
        "message_ttl_in_seconds": 30,
        "backlog_quota_map": {"message_age": {"limitSize": -1, "limitTime": 60, "policy": "producer_request_hold"}},
    }
    assert PolicyOverrides.from_json(j) == o
    assert PolicyOverrides.from_json({}) == PolicyOverrides()
    with pytest.raises(ValueError, match="backlog quota type"):
        PolicyOverrides.from_json({"backlog_quota_map": {"disk": {}}})


def test_resolution_topic_over_namespace_over_broker() -> None:
    cfg = RetentionConfig(
        default_retention_time_minutes=5,
        default_retention_size_mb=-1,
        ttl_duration_default_s=100,
        backlog_quota_default_limit_bytes=1000,
    )
    broker_only = TopicPolicies.resolve(cfg)
    assert broker_only.retention == RetentionPolicies(5, -1)
    assert broker_only.message_ttl_s == 100
    assert broker_only.backlog_quotas == {BacklogQuotaType.DESTINATION_STORAGE: BacklogQuota(1000, -1)}
    assert set(broker_only.sources.values()) == {"broker"}

    ns = PolicyOverrides(RetentionPolicies(60, 10), 0, {BacklogQuotaType.MESSAGE_AGE: BacklogQuota(-1, 30)})
    topic = PolicyOverrides(RetentionPolicies(-1, -1))
    p = TopicPolicies.resolve(cfg, ns, topic)
    assert p.retention.infinite and p.sources["retention"] == "topic"
    assert p.message_ttl_s == 0 and p.sources["message_ttl_s"] == "namespace"  # 0 set = off, not unset
    assert p.backlog_quotas[BacklogQuotaType.MESSAGE_AGE] == BacklogQuota(-1, 30)
    assert p.backlog_quotas[BacklogQuotaType.DESTINATION_STORAGE] == BacklogQuota(1000, -1)
    assert p.sources["backlog_quota.destination_storage"] == "broker"
    assert p.to_json()["retention"] == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}


async def test_static_provider() -> None:
    prov = StaticPoliciesProvider(RetentionConfig())
    prov.set_namespace("t/ns", PolicyOverrides(RetentionPolicies(1, 1)))
    prov.set_topic("t/ns/persistent/a", PolicyOverrides(message_ttl_s=9))
    a = await prov.topic_policies("persistent://t/ns/a")
    b = await prov.topic_policies("persistent://t/ns/b")
    assert a.retention == RetentionPolicies(1, 1) and a.message_ttl_s == 9
    assert b.message_ttl_s == 0
    prov.set_namespace("t/ns", None)
    assert (await prov.topic_policies("persistent://t/ns/b")).retention == RetentionPolicies(0, 0)


def test_names() -> None:
    assert topic_of("t/ns/persistent/x") == "persistent://t/ns/x"
    assert ml_name_of("persistent://t/ns/x") == "t/ns/persistent/x"
    assert ml_name_of("t/ns/persistent/x") == "t/ns/persistent/x"
    assert namespace_of("persistent://t/ns/x") == "t/ns"
    with pytest.raises(ValueError):
        topic_of("t/ns/x")


def test_config_aliases_and_validation() -> None:
    cfg = load_config(
        RetentionConfig,
        {"retentionCheckIntervalInSeconds": 5.0, "defaultRetentionTimeInMinutes": -1, "defaultRetentionSizeInMB": -1},
    )
    assert cfg.retention_check_interval_s == 5.0
    with pytest.raises(ConfigError, match="default_retention_time_minutes"):
        RetentionConfig(default_retention_time_minutes=0, default_retention_size_mb=3).validate()
    with pytest.raises(ConfigError, match="backlog_quota_default_retention_policy"):
        RetentionConfig(backlog_quota_default_retention_policy="nope").validate()


def test_backlog_quota_default_limit_gb_wins_over_bytes_as_in_pulsar() -> None:
    cfg = RetentionConfig(backlog_quota_default_limit_bytes=1000, backlog_quota_default_limit_gb=10.0)
    assert TopicPolicies.resolve(cfg).backlog_quotas == {
        BacklogQuotaType.DESTINATION_STORAGE: BacklogQuota(10 * 1024**3, -1)
    }
    half = RetentionConfig(backlog_quota_default_limit_gb=0.5)
    storage = TopicPolicies.resolve(half).backlog_quotas[BacklogQuotaType.DESTINATION_STORAGE]
    assert storage.limit_size == 512 * 1024**2
    assert TopicPolicies.resolve(RetentionConfig()).backlog_quotas == {}  # -1 (unset) in both
