"""Standalone on a disk that fills up, as a user meets it, with the official client.

Before: after a SIGKILL with the disk full standalone did not start again (journal replay hit
ENOSPC). Now: sends wait while storage is read-only (until the client's send timeout, as with
Pulsar; the producer is never refused for it, `broker.topics._topic` Rule 6), standalone restarts
on the full disk in read-only mode and serves every receipted message, and writes resume by
themselves once space is freed.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.support.standalone import Standalone, start_standalone
from tests.support.tmpfs import mounted_tmpfs

pytestmark = pytest.mark.slow

_SETTINGS = (
    "--set",
    "bookie.disk_check_interval_ms=200",
    "--set",
    "bookie.journal_max_size_mb=8",
    "--set",
    "bookie.journal_prealloc_size_mb=4",
    "--set",
    "bookie.write_cache_max_mb=8",
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "96m") as path:
        yield path


def _client(sa: Standalone) -> pulsar.Client:
    return pulsar.Client(
        sa.service_url, operation_timeout_seconds=20, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )


def _fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def _produce_until_refused(producer: pulsar.Producer) -> tuple[list[int], pulsar.Result]:
    """Send 64 KiB messages numbered 0, 1, ... until one fails (the producer's send timeout); the
    receipted numbers and the error."""
    receipted: list[int] = []
    deadline = time.monotonic() + 180
    seq = 0
    while time.monotonic() < deadline:
        done = threading.Event()
        outcome: list[pulsar.Result] = []

        def callback(
            result: pulsar.Result,
            _id: object,
            seq: int = seq,
            outcome: list[pulsar.Result] = outcome,
            done: threading.Event = done,
        ) -> None:
            outcome.append(result)
            if result == pulsar.Result.Ok:
                receipted.append(seq)
            done.set()

        producer.send_async(b"%08d" % seq + b"x" * 65536, callback)
        assert done.wait(60), f"send {seq} neither succeeded nor failed within 60 s"
        if outcome[0] != pulsar.Result.Ok:
            return receipted, outcome[0]
        seq += 1
    raise AssertionError("the disk never filled")


def _read_all(client: pulsar.Client, topic: str) -> set[int]:
    consumer = client.subscribe(topic, "s")
    got: set[int] = set()
    while True:
        try:
            msg = consumer.receive(5000)
        except pulsar.Timeout:
            break
        got.add(int(msg.data()[:8]))
        consumer.acknowledge(msg)
    consumer.close()
    return got


def test_full_disk_fails_sends_fast_restarts_read_only_and_resumes(disk: Path) -> None:
    data = disk / "data"
    sa = start_standalone(data, *_SETTINGS)
    try:
        client = _client(sa)
        client.subscribe("fill", "s").close()  # a durable subscription keeps what is written
        producer = client.create_producer("fill", batching_enabled=False, send_timeout_millis=10_000)
        receipted, error = _produce_until_refused(producer)
        assert receipted, "nothing could be written at all"
        # the send waited for storage until the client's send timeout ended it, as with Pulsar
        assert error == pulsar.Result.Timeout, error
        client.close()
    finally:
        sa.kill()
    _fill(disk / "filler")  # whatever room was left: 100% full

    sa = start_standalone(data, *_SETTINGS, timeout=120)
    try:
        client = _client(sa)
        assert set(receipted) <= _read_all(client, "fill")  # nothing receipted lost, served read-only
        os.unlink(disk / "filler")
        producer = None
        deadline = time.monotonic() + 180
        while True:  # the bookie turns writable by itself; the client's retries get through
            try:
                producer = producer or client.create_producer("fill", batching_enabled=False)
                producer.send(b"%08d" % 999_999)
                break
            except pulsar.Timeout:
                assert time.monotonic() < deadline, "writes never resumed after space was freed"
                time.sleep(1)
        assert 999_999 in _read_all(client, "fill")
        client.close()
    finally:
        if sa.proc.poll() is None:
            sa.stop()
