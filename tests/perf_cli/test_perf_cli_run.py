"""``magnetar perf produce`` then ``perf consume`` against a real standalone process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from magnetar.cli import main
from tests.standalone.standalone_proc import Standalone, start_standalone

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
    produced = runner.invoke(main, ["perf", "produce", "-u", standalone.service_url, topic, "--size", "200",
                                    "--num-messages", "3000", "--rate", "3000", "--producers", "2",
                                    "--no-batching"])
    assert produced.exit_code == 0, produced.output
    assert _row(produced.output, "messages") == "3,000"
    assert _row(produced.output, "errors") == "0"
    assert float(_row(produced.output, "publish latency p99 ms").replace(",", "")) > 0

    consumed = runner.invoke(main, ["perf", "consume", "-u", standalone.service_url, topic, "--initial-position",
                                    "earliest", "--subscription-type", "Shared", "--consumers", "2",
                                    "--num-messages", "3000", "--time", "60"])
    assert consumed.exit_code == 0, consumed.output
    assert _row(consumed.output, "messages") == "3,000"
    assert "end-to-end latency p99.9 ms" in consumed.output
