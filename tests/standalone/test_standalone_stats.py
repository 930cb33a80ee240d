"""After the README's example (produce, receive, acknowledge, close) against a real standalone
(real bookies), the topic's stats and metrics show what was sent and received: the consumer that
left is not forgotten, and the subscription keeps its type."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow

TOPIC = "persistent://public/default/my-topic"


def _admin(admin_url: str, *argv: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "magnetar", "admin", "--admin-url", admin_url, *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _metric(admin_url: str, name: str, **labels: str) -> float | None:
    text = httpx.get(f"{admin_url}/metrics", timeout=10).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and s.labels == {"cluster": "standalone", **labels}:
                return s.value
    return None


def test_stats_keep_what_the_readme_example_sent_and_received(tmp_path: Path) -> None:
    sa = start_standalone(tmp_path / "data")
    try:
        client = pulsar.Client(sa.service_url, logger=logging.getLogger("pulsar-client"))
        producer = client.create_producer("my-topic")
        producer.send(b"hello")
        consumer = client.subscribe("my-topic", "my-sub", initial_position=pulsar.InitialPosition.Earliest)
        msg = consumer.receive(30_000)
        consumer.acknowledge(msg)
        client.close()

        stats = json.loads(_admin(sa.admin_url, "--json", "topics", "stats", "my-topic"))
        sub = stats["subscriptions"]["my-sub"]
        assert stats["msgInCounter"] == 1 and stats["bytesInCounter"] > 0
        assert (stats["msgOutCounter"], stats["bytesOutCounter"]) == (1, stats["bytesInCounter"])
        assert (sub["msgOutCounter"], sub["bytesOutCounter"]) == (1, stats["bytesInCounter"])
        assert sub["type"] == "Exclusive" and sub["consumers"] == [] and sub["msgBacklog"] == 0
        assert "Exclusive" in _admin(sa.admin_url, "topics", "stats", "my-topic")
        labels = {"namespace": "public/default", "topic": TOPIC, "subscription": "my-sub"}
        assert _metric(sa.admin_url, "pulsar_out_messages_total", **labels) == 1
        assert _metric(sa.admin_url, "pulsar_out_bytes_total", **labels) == stats["bytesInCounter"]
    finally:
        assert sa.stop() == 0, sa.log()
