"""Small pure pieces: config keys in step with retention, message ids, publish times, CLI names."""

from __future__ import annotations

import dataclasses
import struct

import click
import pytest
import trio
import trio.lowlevel
from starlette.responses import JSONResponse

from broker import BrokerConfig, publish_time_of
from broker.admin import parse_message_id
from broker.admin._common import RestError, for_each_bounded
from broker.admin._request_guard import GuardSettings, RequestGuard
from magnetar.cli.cmd_admin import topic_path
from magnetar.common.config import ConfigError, load_config
from managed_ledger import Entry, InitialPosition, Position
from protocols.pulsar import InvalidTopicNameError, MessageMetadata, NamespaceName, TopicName, check_subscription_name
from retention import RetentionConfig


def test_broker_config_has_every_retention_key_with_the_same_alias() -> None:
    broker_fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    for f in dataclasses.fields(RetentionConfig):
        assert f.name in broker_fields
        assert broker_fields[f.name].metadata.get("alias") == f.metadata.get("alias")
        assert broker_fields[f.name].default == f.default
    cfg = load_config(
        BrokerConfig,
        {"retentionCheckIntervalInSeconds": 5.0, "defaultRetentionTimeInMinutes": -1, "defaultRetentionSizeInMB": 100},
    )
    assert cfg.retention_config() == RetentionConfig(
        retention_check_interval_s=5.0, default_retention_time_minutes=-1, default_retention_size_mb=100
    )
    with pytest.raises(ConfigError):
        load_config(BrokerConfig, {"defaultRetentionTimeInMinutes": 0, "defaultRetentionSizeInMB": 5})
    with pytest.raises(ConfigError):
        load_config(BrokerConfig, {"backlog_quota_hold_timeout_s": 0.0})


def test_parse_message_id() -> None:
    assert parse_message_id({"ledgerId": -1, "entryId": -1}) is InitialPosition.EARLIEST
    assert parse_message_id({"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}) is InitialPosition.LATEST
    assert parse_message_id({"ledgerId": 3, "entryId": 4, "partitionIndex": -1}) == Position(3, 4)
    for bad in ({"ledgerId": 3}, {"ledgerId": "x", "entryId": 1}, [1, 2], {"ledgerId": 3, "entryId": -5}):
        with pytest.raises(RestError, match="message id") as e:
            parse_message_id(bad)
        assert e.value.status == 400


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


@pytest.mark.parametrize(
    "text",
    [
        "persistent://t/../x",
        "persistent://./ns/x",
        "persistent://t/ns/..",
        "persistent://t/ns/.",
        "persistent://t/ns/-partition-0",
        "persistent://t/ns/..-partition-3",
        "t/ns/.-partition-1",
    ],
)
def test_dot_names_are_invalid(text: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(text)


def test_names_that_stay_valid() -> None:
    assert TopicName.parse("persistent://t/ns/...").local_name == "..."
    assert TopicName.parse("persistent://t/ns/a/../b").encoded_local_name == "a%2F..%2Fb"  # one component
    assert TopicName.parse("persistent://t/ns/x-partition-0").partitioned_topic.local_name == "x"
    assert NamespaceName.parse("t.1/ns..2") == NamespaceName("t.1", "ns..2")


def test_subscription_names() -> None:
    assert check_subscription_name("my-sub.1") == "my-sub.1"
    for bad in ("", ".", "..", "a/b", "a\x00b"):
        with pytest.raises(InvalidTopicNameError):
            check_subscription_name(bad)


def test_admin_limit_keys_take_pulsar_names_and_are_checked() -> None:
    cfg = BrokerConfig()
    assert cfg.http_max_request_size == 10 * 1024 * 1024
    assert cfg.max_num_partitions_per_partitioned_topic == 10_000
    cfg = load_config(BrokerConfig, {"httpMaxRequestSize": -1, "maxNumPartitionsPerPartitionedTopic": 0})
    assert cfg.http_max_request_size == -1 and cfg.max_num_partitions_per_partitioned_topic == 0
    with pytest.raises(ConfigError) as err:
        load_config(BrokerConfig, {"maxNumPartitionsPerPartitionedTopic": 4, "defaultNumPartitions": 5})
    assert err.value.key == "default_num_partitions"
    with pytest.raises(ConfigError):
        load_config(BrokerConfig, {"admin_max_stored_value_bytes": 0})


async def test_for_each_bounded_keeps_order_and_bounds_concurrency() -> None:
    running = most = 0

    async def work(i: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await trio.lowlevel.checkpoint()  # let the other workers start
        running -= 1
        return i * i

    assert await for_each_bounded(list(range(50)), work, concurrency=4) == [i * i for i in range(50)]
    assert most == 4
    assert await for_each_bounded([], work) == []


async def test_for_each_bounded_raises_the_first_failure_and_starts_no_more() -> None:
    started: list[int] = []

    async def work(i: int) -> None:
        started.append(i)
        if i == 2:
            raise RestError(404, "gone")
        await trio.sleep_forever()

    with pytest.raises(RestError) as err:  # as is, not in an exception group
        await for_each_bounded(list(range(100)), work, concurrency=3)
    assert err.value.status == 404 and sorted(started) == [0, 1, 2]


async def test_for_each_bounded_stops_with_its_caller() -> None:
    started: list[int] = []
    with trio.CancelScope() as caller:

        async def work(i: int) -> None:
            started.append(i)
            if len(started) == 5:
                caller.cancel()  # the request is cancelled while the first five items are running
            await trio.sleep_forever()

        await for_each_bounded(list(range(100)), work, concurrency=5)
    assert caller.cancelled_caught and sorted(started) == [0, 1, 2, 3, 4]


async def test_an_unread_body_is_drained_so_that_the_server_can_queue_its_disconnect(autojump_clock) -> None:
    """Hypercorn's contract, modelled: body chunks arrive through a short queue as the client sends
    them, and once the app has returned the server queues ``http.disconnect`` before closing the
    connection. An app that refuses a body unread must not leave that queue full forever."""
    queue_in, queue_out = trio.open_memory_channel[dict](2)
    sent: list[dict] = []

    async def refuse_unread(scope, receive, send) -> None:
        await JSONResponse({"reason": "no"}, status_code=400)(scope, receive, send)

    async def client_sends_forever() -> None:
        while True:
            await queue_in.send({"type": "http.request", "body": b"x" * 100, "more_body": True})

    async def collect(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "PUT", "path": "/x", "headers": [(b"content-length", b"1000000")]}
    async with trio.open_nursery() as nursery:
        guard = RequestGuard(refuse_unread, GuardSettings(max_body=None, drain_nursery=nursery))
        nursery.start_soon(client_sends_forever)
        await trio.sleep(1)  # the queue fills while the app has not yet looked at the request
        await guard(scope, queue_out.receive, collect)
        with trio.fail_after(60):  # virtual time: fails only if the disconnect can never be queued
            await queue_in.send({"type": "http.disconnect"})
        nursery.cancel_scope.cancel()  # the server closes the connection
    assert sent[0]["status"] == 400 and (b"connection", b"close") in sent[0]["headers"]
