"""A raw-socket Pulsar peer for tests that send what no well-behaved client sends, and a check
that the official client still works afterwards.

`RawPeer` writes frames (or bare bytes) and reads the broker's answers; `recv` returns ``None``
once the broker closed the connection, and raises `socket.timeout` when nothing comes within
its hang guard (so a broker that ignores a bad input fails the test instead of hanging it).
`client_round_trip` produces a small and a 1 MiB message with the official client and reads
both back through a subscription.
"""

from __future__ import annotations

import itertools
import logging
import socket
import uuid

import pulsar

from protocols.pulsar import FrameDecoder, encode_command, encode_payload_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

HANG_GUARD_S = 20.0
"""How long `RawPeer.recv` waits before it fails the test: only ever reached when the broker hangs."""

_seq = itertools.count()


class RawPeer:
    """One TCP connection speaking frames; ``source_ip`` picks the local address (any 127.x.y.z)."""

    def __init__(self, port: int, source_ip: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_S, source_address=(source_ip, 0))
        self.decoder = FrameDecoder()

    def send_bytes(self, data: bytes) -> None:
        """Write bytes as they are."""
        self.sock.sendall(data)

    def send_command(self, command: pb.BaseCommand) -> None:
        """Write one simple frame around ``command`` (which may lack its body)."""
        self.sock.sendall(encode_command(command))

    def send(self, type_: str, **fields) -> None:
        """Write one simple frame of ``type_`` with ``fields`` in its body."""
        self.send_command(make_command(type_, **fields))

    def send_message(self, producer_id: int, sequence_id: int, payload: bytes) -> None:
        """Write a SEND of one unbatched message."""
        md = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1)
        self.sock.sendall(
            encode_payload_command(make_command("SEND", producer_id=producer_id, sequence_id=sequence_id), md, payload)
        )

    def recv(self, timeout: float = HANG_GUARD_S) -> pb.BaseCommand | None:
        """The next command, or None once the broker closed (or reset) the connection."""
        self.sock.settimeout(timeout)
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame.command
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:  # closed with our unread bytes in its buffer
                return None
            if not data:
                return None
            self.decoder.feed(data)

    def recv_until_closed(self) -> list[pb.BaseCommand]:
        """Every command up to the close (raises `socket.timeout` when the broker keeps it open)."""
        got = []
        while (cmd := self.recv()) is not None:
            got.append(cmd)
        return got

    def connect(self) -> pb.BaseCommand:
        """CONNECT and return the answer (CONNECTED)."""
        self.send("CONNECT", client_version="raw-test", protocol_version=20)
        answer = self.recv()
        assert answer is not None and answer.type == pb.BaseCommand.CONNECTED, answer
        return answer

    def assert_alive(self) -> None:
        """PING must be answered with PONG (commands are handled in order, so everything sent
        before the PING was handled without closing the connection)."""
        self.send("PING")
        answer = self.recv()
        assert answer is not None and answer.type == pb.BaseCommand.PONG, answer

    def close(self) -> None:
        self.sock.close()


def client_round_trip(url: str) -> None:
    """The official client produces a small and a 1 MiB message on a new topic and consumes both."""
    topic = f"persistent://public/default/round-trip-{next(_seq)}-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=logging.getLogger("pulsar-client"))
    try:
        consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [b"small", bytes(range(256)) * 4096]
        for payload in sent:
            producer.send(payload)
        got = []
        for _ in sent:
            msg = consumer.receive(timeout_millis=int(HANG_GUARD_S * 1000))
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == sent
    finally:
        client.close()
