"""Times in ``magnetar admin`` tables are human-readable (dates in UTC, ages as durations); the
``--json`` output keeps Pulsar's raw numbers."""

from __future__ import annotations

import json
import re

import pulsar
from click.testing import CliRunner

from magnetar.cli import main
from magnetar.cli._human import duration, when
from tests.broker_admin.admin_harness import AdminBroker

_EPOCH_MS = re.compile(r"\b1[5-9]\d{11}\b")  # a 13-digit time in ms since the epoch


def _run(broker: AdminBroker, *args: str) -> str:
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_duration_and_when() -> None:
    assert duration(0.4) == "0.4s" and duration(12) == "12s" and duration(75) == "1m 15s"
    assert duration(3725) == "1h 2m" and duration(90061) == "1d 1h" and duration(None) == ""
    assert when(1_700_000_000_000, now_s=1_700_000_310) == "2023-11-14 22:13:20 UTC (5m 10s ago)"
    assert when(0) == "never" and when(None) == "never"


def test_stats_internal_and_explain_storage_print_readable_times(
    broker: AdminBroker, client: pulsar.Client, name: str
) -> None:
    topic = f"persistent://public/default/{name}-times"
    client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(str(i).encode())
    raw = json.loads(_run(broker, "--json", "topics", "stats-internal", topic))
    created = raw["lastLedgerCreatedTimestamp"]  # Pulsar's ISO date text
    internal = _run(broker, "topics", "stats-internal", topic)
    assert "UTC (" in internal and created not in internal  # written as other times are
    assert not _EPOCH_MS.search(internal), internal
    explain = _run(broker, "topics", "explain-storage", topic)
    assert "age" in explain and "ageSeconds" not in explain
    assert not _EPOCH_MS.search(explain), explain
    raw_explain = json.loads(_run(broker, "--json", "topics", "explain-storage", topic))
    assert all("ageSeconds" in row for row in raw_explain["ledgers"])


def test_human_output_fits_100_columns_in_words_and_units(
    broker: AdminBroker, client: pulsar.Client, name: str
) -> None:
    topic = f"persistent://public/default/{name}-words"
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    client.create_producer(topic).send(b"x" * 100)
    consumer.acknowledge(consumer.receive(10_000))
    for command in (
        ["topics", "stats", topic],
        ["topics", "explain-storage", topic],
        ["namespaces", "policies", "public/default"],
    ):
        out = _run(broker, *command)
        assert max(len(line) for line in out.splitlines()) <= 100, out
        assert not re.search(r"\{'|\[\]|\bNone\b|\bTrue\b|\bFalse\b", out), out
        assert not _EPOCH_MS.search(out), out
    stats = _run(broker, "topics", "stats", topic)
    assert re.search(r"^storageSize +\d+ B$", stats, re.M) and re.search(r"^msgChunkPublished +no$", stats, re.M)
    assert re.search(r"^sub +Shared +0 +0 B +0 +1 ", stats, re.M), stats  # no header cut in two
    explain = _run(broker, "topics", "explain-storage", topic)
    assert re.search(r"^\d+ +1 +\d+ B +[\dmhs. ]+\(open\) +keep ", explain, re.M), explain  # the open ledger's age
    assert "retention: none: acknowledged messages are deleted (broker default)" in explain
