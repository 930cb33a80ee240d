"""``magnetar perf produce`` then ``perf consume`` against a real standalone process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from magnetar.cli import main
from tests.support.standalone import Standalone, start_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    s = start_standalone(tmp_path / "data")
    try:
        yield s
    finally:
        s.stop()


def _row(output: str, name: str) -> str:
    match = re.search(rf"{re.escape(name)}\s*│\s*([^│]+?)\s*│", output)
    assert match, f"no {name!r} row in:\n{output}"
    return match.group(1)


def test_produce_then_consume_reports_every_message(standalone: Standalone) -> None:
    topic = "persistent://public/default/perf-run"
    runner = CliRunner()
    produced = runner.invoke(
        main,
        [
            "perf",
            "produce",
            "-u",
            standalone.service_url,
            topic,
            "--size",
            "200",
            "--num-messages",
            "3000",
            "--rate",
            "3000",
            "--producers",
            "2",
            "--no-batching",
        ],
    )
    assert produced.exit_code == 0, produced.output
    assert _row(produced.output, "messages") == "3,000"
    assert _row(produced.output, "errors") == "0"
    assert float(_row(produced.output, "publish latency p99 ms").replace(",", "")) > 0

    consumed = runner.invoke(
        main,
        [
            "perf",
            "consume",
            "-u",
            standalone.service_url,
            topic,
            "--initial-position",
            "earliest",
            "--subscription-type",
            "Shared",
            "--consumers",
            "2",
            "--num-messages",
            "3000",
            "--time",
            "60",
        ],
    )
    assert consumed.exit_code == 0, consumed.output
    assert _row(consumed.output, "messages") == "3,000"
    assert "end-to-end latency p99.9 ms" in consumed.output


def test_produce_defaults_are_pulsar_perfs_and_the_run_says_what_limited_it(standalone: Standalone) -> None:
    topic = "persistent://public/default/perf-defaults"
    metrics = ["--broker-metrics-url", f"{standalone.admin_url}/metrics"]
    produced = CliRunner().invoke(main, ["perf", "produce", "-u", standalone.service_url, topic, "-m", "200", *metrics])
    assert produced.exit_code == 0, produced.output
    assert "1024 B messages, batching on, rate 100 msg/s, max pending no limit" in produced.output
    assert _row(produced.output, "messages") == "200"
    last = produced.output.strip().splitlines()[-1]
    assert last.startswith("limited by the rate asked for (100 msg/s"), produced.output
    assert "broker CPU" in last and "not measured" not in last

    one_at_a_time = CliRunner().invoke(
        main,
        [
            "perf",
            "produce",
            "-u",
            standalone.service_url,
            topic,
            "-m",
            "300",
            "--rate",
            "0",
            "--max-outstanding",
            "1",
            *metrics,
        ],
    )
    assert one_at_a_time.exit_code == 0, one_at_a_time.output
    last = one_at_a_time.output.strip().splitlines()[-1]
    assert last.startswith("limited by pending messages (--max-pending 1 "), one_at_a_time.output


def test_native_engine_produces_what_the_official_client_reads(standalone: Standalone) -> None:
    """Pre-encoded batched frames from 2 worker processes x 2 connections over a 2-partition topic:
    every message arrives intact for the official client, and the native consumer counts them all."""
    import httpx
    import pulsar

    topic = "persistent://public/default/perf-native"
    r = httpx.put(f"{standalone.admin_url}/admin/v2/persistent/public/default/perf-native/partitions", json=2)
    assert r.status_code in (200, 204), r.text
    runner = CliRunner()
    produced = runner.invoke(
        main,
        [
            "perf",
            "produce",
            "--engine",
            "native",
            "-u",
            standalone.service_url,
            topic,
            "--size",
            "200",
            "--num-messages",
            "20000",
            "--batch-max-messages",
            "100",
            "--workers",
            "2",
            "--connections",
            "2",
            "--broker-metrics-url",
            f"{standalone.admin_url}/metrics",
        ],
    )
    assert produced.exit_code == 0, produced.output
    assert _row(produced.output, "messages") == "20,000"
    assert _row(produced.output, "errors") == "0"
    assert float(_row(produced.output, "broker CPU s / 1M msgs").replace(",", "")) > 0

    client = pulsar.Client(standalone.service_url)
    try:
        consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        sizes: dict[int, int] = {}
        partitions: set[int] = set()
        for _ in range(20000):
            msg = consumer.receive(30_000)
            sizes[len(msg.data())] = sizes.get(len(msg.data()), 0) + 1
            partitions.add(msg.message_id().partition())
            consumer.acknowledge(msg)
        assert sizes == {200: 20000}
        assert partitions == {0, 1}
        with pytest.raises(pulsar.Timeout):
            consumer.receive(500)
        consumer.close()
    finally:
        client.close()

    consumed = runner.invoke(
        main,
        [
            "perf",
            "consume",
            "--engine",
            "native",
            "-u",
            standalone.service_url,
            topic,
            "--initial-position",
            "earliest",
            "--subscription",
            "native-sub",
            "--num-messages",
            "20000",
            "--time",
            "60",
        ],
    )
    assert consumed.exit_code == 0, consumed.output
    assert _row(consumed.output, "messages") == "20,000"


def test_native_engine_unbatched_at_a_fixed_rate(standalone: Standalone) -> None:
    topic = "persistent://public/default/perf-native-rate"
    produced = CliRunner().invoke(
        main,
        [
            "perf",
            "produce",
            "--engine",
            "native",
            "-u",
            standalone.service_url,
            topic,
            "--no-batching",
            "--num-messages",
            "600",
            "--rate",
            "300",
            "--connections",
            "3",
        ],
    )
    assert produced.exit_code == 0, produced.output
    assert _row(produced.output, "messages") == "600"
    assert _row(produced.output, "errors") == "0"


def test_native_engine_reports_a_refused_connection() -> None:
    produced = CliRunner().invoke(
        main,
        [
            "perf",
            "produce",
            "--engine",
            "native",
            "-u",
            "pulsar://127.0.0.1:1",
            "persistent://public/default/x",
            "--num-messages",
            "10",
        ],
    )
    assert produced.exit_code == 1, produced.output
    assert "failure" in produced.output
