"""A Java Spark job using StreamNative's pulsar-spark connector against `magnetar standalone`.

The job (tests/support/pulsar_spark_job.py) reads a topic from its start with the connector's streaming
source and writes every message to another topic with its sink, in local mode, as a pulsar-spark
user's pipeline does; the copy must hold each message once, with its key and event time (which
the connector writes in microseconds).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.support.pulsar_spark_job import JobUnavailable, prepare, run_job
from tests.support.standalone import Standalone, start_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MESSAGES = 300


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    try:
        prepare()
    except JobUnavailable as exc:
        pytest.skip(str(exc))
    sa = start_standalone(tmp_path_factory.mktemp("pulsar-spark") / "standalone")
    try:
        yield sa
    finally:
        sa.stop()


def _client(sa: Standalone) -> pulsar.Client:
    return pulsar.Client(sa.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


def test_pulsar_spark_job_copies_a_topic_once(standalone: Standalone, tmp_path: Path) -> None:
    source = "persistent://public/default/pulsar-spark-in"
    copy = "persistent://public/default/pulsar-spark-out"
    expected = {(f"message-{i}".encode(), f"key-{i % 7}".encode(), 1_000_000 + i) for i in range(MESSAGES)}
    client = _client(standalone)
    try:
        # a subscription keeps the input from retention while the job starts
        client.subscribe(source, "keep").close()
        client.subscribe(copy, "check").close()
        producer = client.create_producer(source, batching_enabled=True, batching_max_messages=20)
        for value, key, event_time in sorted(expected):
            producer.send_async(value, None, partition_key=key.decode(), event_timestamp=event_time)
        producer.flush()
    finally:
        client.close()

    results = run_job("copy", tmp_path / "job.log", service_url=standalone.service_url,
                      admin_url=standalone.admin_url, in_=source, out=copy,
                      checkpoint=str(tmp_path / "checkpoint"))  # fmt: skip
    assert [(r.mode, r.rows) for r in results] == [("copy", MESSAGES)]

    client = _client(standalone)
    got = []
    try:
        consumer = client.subscribe(copy, "check")
        while len(got) < MESSAGES + 1:
            try:
                msg = consumer.receive(timeout_millis=5_000)
            except pulsar.Timeout:
                break
            # pulsar-spark writes the binary __key column as key bytes (base64 on the wire), and a
            # TIMESTAMP __eventTime as Spark's internal microseconds where Pulsar has milliseconds
            got.append((msg.data(), base64.b64decode(msg.partition_key()), msg.event_timestamp() // 1000))
            consumer.acknowledge(msg)
    finally:
        client.close()
    assert len(got) == MESSAGES, f"{len(got)} messages in the copy, {len(set(got))} distinct"
    assert set(got) == expected
