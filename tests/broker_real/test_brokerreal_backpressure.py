"""Clients that do not read, against a real ``magnetar standalone`` (real bookie, journal fsync on).

A raw-socket client pipelines SENDs and never reads its receipts; a raw consumer grants permits
for far more than it reads. The broker's memory for each connection stays bounded (read from its
``/metrics``: the bytes queued for writing and the connections it stopped reading), the broker keeps
serving the official client meanwhile, and once the client reads, everything arrives, in order.
The clients' receive buffers are made small so that the kernel holds little on their behalf.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker import BrokerConfig
from protocols.pulsar import FrameDecoder, encode_command, encode_payload_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.raw_pulsar import client_round_trip
from tests.support.standalone import Standalone, start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

CONFIG = BrokerConfig()
HIGH = CONFIG.write_buffer_high_water_mark
RECEIPT_MAX = 64  # a SEND_RECEIPT with 64-bit ids and sequence ids is smaller than this


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    proc = start_standalone(tmp_path_factory.mktemp("bp") / "data")
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            assert proc.stop() == 0, proc.log()[-3000:]


def metric(sa: Standalone, name: str) -> float:
    text = httpx.get(f"{sa.admin_url}/metrics", timeout=10).text
    values = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]
    assert values, f"{name} is not exported"
    return sum(values)


class SlowReader:
    """A raw connection whose receive buffer is as small as the kernel allows; reads only when told."""

    def __init__(self, sa: Standalone) -> None:
        url = urlparse(sa.service_url)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # before connect: a small window
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(60)
        self.sock.connect((url.hostname, url.port))
        self.decoder = FrameDecoder()
        self.send("CONNECT", client_version="slow-reader", protocol_version=20)
        assert self.recv().type == pb.BaseCommand.CONNECTED

    def send(self, type_: str, **fields: object) -> None:
        self.sock.sendall(encode_command(make_command(type_, **fields)))

    def start_reading(self) -> None:
        """Read at a normal pace from now on (a larger receive buffer)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)

    def recv(self) -> pb.BaseCommand:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame.command
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection"
            self.decoder.feed(data)

    def close(self) -> None:
        self.sock.close()


def test_pipelined_sends_whose_receipts_are_never_read(sa: Standalone) -> None:
    topic = "persistent://public/default/bp-pipelined-sends"
    total, limit, per_write = 40_000, CONFIG.max_pending_publish_requests_per_connection, 50
    peer = SlowReader(sa)
    peer.send("PRODUCER", topic=topic, producer_id=1, request_id=1)
    assert peer.recv().type == pb.BaseCommand.PRODUCER_SUCCESS
    sent = 0

    def pipeline() -> None:
        nonlocal sent
        for first in range(0, total, per_write):
            frames = []
            for i in range(first, first + per_write):
                md = pb.MessageMetadata(producer_name="slow-reader", sequence_id=i, publish_time=1)
                frames.append(
                    encode_payload_command(make_command("SEND", producer_id=1, sequence_id=i), md, b"r" * 100)
                )
            peer.sock.sendall(b"".join(frames))
            sent += per_write

    writer = threading.Thread(target=pipeline, daemon=True)
    writer.start()
    try:
        # once the kernel's buffers are full, receipts stay queued in the broker: its publish
        # window fills and it stops reading the connection
        wait_until(
            lambda: metric(sa, "pulsar_broker_throttled_connections") >= 1,
            "the broker stops reading the connection",
            timeout_s=60,
        )
        queued = metric(sa, "magnetar_broker_outbound_queued_bytes_max")
        assert queued <= HIGH + limit * RECEIPT_MAX, queued
        assert writer.is_alive() and sent < total  # the client's writes are not taken any more

        client_round_trip(sa.service_url)  # the broker serves the official client meanwhile
        assert metric(sa, "pulsar_broker_throttled_connections") >= 1

        peer.start_reading()
        receipts = []
        while len(receipts) < total:
            cmd = peer.recv()
            assert cmd.type == pb.BaseCommand.SEND_RECEIPT, cmd
            receipts.append(cmd.send_receipt.sequence_id)
        assert receipts == list(range(total))
        writer.join(30)
        assert not writer.is_alive() and sent == total
        wait_until(lambda: metric(sa, "pulsar_broker_throttled_connections") == 0, "the window empties", timeout_s=30)
    finally:
        peer.close()


def test_a_consumer_that_grants_permits_but_does_not_read(sa: Standalone) -> None:
    topic = "persistent://public/default/bp-slow-consumer"
    total, size = 2_000, 10_000
    peer = SlowReader(sa)
    peer.send(
        "SUBSCRIBE", topic=topic, subscription="s", subType=pb.CommandSubscribe.Exclusive, consumer_id=1, request_id=1
    )
    assert peer.recv().type == pb.BaseCommand.SUCCESS
    peer.send("FLOW", consumer_id=1, messagePermits=total)

    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        for i in range(total):
            producer.send_async(bytes([i % 256]) * size, None)
        producer.flush()
        wait_until(
            lambda: metric(sa, "magnetar_broker_unwritable_connections") >= 1,
            "the consumer's connection turns unwritable",
            timeout_s=60,
        )
        # the high water mark plus one dispatch round, not the 20 MB the permits allow
        one_round = CONFIG.dispatcher_max_read_batch_size * (size + 200)
        queued = metric(sa, "magnetar_broker_outbound_queued_bytes_max")
        assert queued <= HIGH + one_round, queued

        peer.start_reading()
        got = []
        while len(got) < total:
            cmd = peer.recv()
            assert cmd.type == pb.BaseCommand.MESSAGE, cmd
            got.append((cmd.message.message_id.ledgerId, cmd.message.message_id.entryId))
        assert got == sorted(got) and len(set(got)) == total
        stats = httpx.get(
            f"{sa.admin_url}/admin/v2/persistent/public/default/bp-slow-consumer/stats", timeout=10
        ).json()
        assert stats["subscriptions"]["s"]["msgOutCounter"] == total
    finally:
        client.close()
        peer.close()
