"""Small pure pieces: config keys in step with retention, message ids, publish times, CLI names."""

from __future__ import annotations

import dataclasses
import struct

import click
import pytest

from broker import BrokerConfig, publish_time_of
from broker.admin import parse_message_id
from broker.protocol import MessageMetadata
from magnetar.cli.cmd_admin import topic_path
from magnetar.config import ConfigError, load_config
from managed_ledger import Entry, InitialPosition, Position
from retention import RetentionConfig


def test_broker_config_has_every_retention_key_with_the_same_alias() -> None:
    broker_fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    for f in dataclasses.fields(RetentionConfig):
        assert f.name in broker_fields
        assert broker_fields[f.name].metadata.get("alias") == f.metadata.get("alias")
        assert broker_fields[f.name].default == f.default
    cfg = load_config(BrokerConfig, {"retentionCheckIntervalInSeconds": 5.0, "defaultRetentionTimeInMinutes": -1,
                                     "defaultRetentionSizeInMB": 100})
    assert cfg.retention_config() == RetentionConfig(retention_check_interval_s=5.0,
                                                     default_retention_time_minutes=-1,
                                                     default_retention_size_mb=100)
    with pytest.raises(ConfigError):
        load_config(BrokerConfig, {"defaultRetentionTimeInMinutes": 0, "defaultRetentionSizeInMB": 5})
    with pytest.raises(ConfigError):
        load_config(BrokerConfig, {"backlog_quota_hold_timeout_s": 0.0})


def test_parse_message_id() -> None:
    assert parse_message_id({"ledgerId": -1, "entryId": -1}) is InitialPosition.EARLIEST
    assert parse_message_id({"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}) is InitialPosition.LATEST
    assert parse_message_id({"ledgerId": 3, "entryId": 4, "partitionIndex": -1}) == Position(3, 4)
    for bad in ({"ledgerId": 3}, {"ledgerId": "x", "entryId": 1}, [1, 2], {"ledgerId": 3, "entryId": -5}):
        with pytest.raises(Exception, match="message id"):
            parse_message_id(bad)


def test_publish_time_of() -> None:
    md = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1234)
    raw = md.SerializeToString()
    entry = Entry(Position(1, 0), struct.pack(">I", len(raw)) + raw + b"payload")
    assert publish_time_of(entry) == 1234
    assert publish_time_of(Entry(Position(1, 1), b"\x00")) is None
    assert publish_time_of(Entry(Position(1, 2), b"\xff\xff\xff\xff garbage")) is None


def test_cli_topic_path() -> None:
    assert topic_path("persistent://t/ns/a") == "t/ns/a"
    assert topic_path("t/ns/a/b") == "t/ns/a%2Fb"
    assert topic_path("x") == "public/default/x"
    for bad in ("non-persistent://t/ns/a", "t/ns", "persistent://t//a"):
        with pytest.raises(click.BadParameter):
            topic_path(bad)
