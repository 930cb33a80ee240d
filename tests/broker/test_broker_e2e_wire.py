"""The connection layer over a raw socket: CONNECT, keep-alive, responses by type, bad frames."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pulsar
import pytest

from broker import BrokerConfig
from protocols.pulsar import FrameDecoder, encode_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.broker_thread import BrokerThread


@pytest.fixture(scope="module")
def fast_broker() -> Iterator[BrokerThread]:
    b = BrokerThread(
        BrokerConfig(
            advertised_address="127.0.0.1",
            bind_address="127.0.0.1",
            broker_service_port=0,
            keep_alive_interval_s=1,
            topic_unload_idle_s=0.5,
            max_pending_publish_requests_per_connection=2,
        )
    ).start()
    try:
        yield b
    finally:
        b.stop()


class Raw:
    """A raw connection. With ``answer_pings`` it answers the broker's keep-alive PINGs inside
    `recv` as a client does, for tests whose requests may take longer than the module's short
    keep-alive timeout on a loaded machine; without, PINGs are returned like any command."""

    def __init__(self, port: int, *, answer_pings: bool = False) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = FrameDecoder()
        self.answer_pings = answer_pings

    def send(self, type_: str, **fields) -> None:
        self.sock.sendall(encode_command(make_command(type_, **fields)))

    def recv(self, timeout: float = 5.0) -> pb.BaseCommand | None:
        """The next command, or None when the broker closed the connection."""
        self.sock.settimeout(timeout)
        while True:
            frame = self.decoder.next_frame()
            if frame is not None and self.answer_pings and frame.command.type == pb.BaseCommand.PING:
                self.send("PONG")
                continue
            if frame is not None:
                return frame.command
            data = self.sock.recv(65536)
            if not data:
                return None
            self.decoder.feed(data)

    def connect(self) -> pb.BaseCommand:
        self.send("CONNECT", client_version="raw-test", protocol_version=20)
        return self.recv()

    def close(self) -> None:
        self.sock.close()


def test_connected_fields(fast_broker: BrokerThread) -> None:
    raw = Raw(fast_broker.port)
    connected = raw.connect()
    assert connected.type == pb.BaseCommand.CONNECTED
    assert connected.connected.server_version.startswith("Magnetar")
    assert connected.connected.protocol_version == 20
    assert connected.connected.max_message_size == 5 * 1024 * 1024
    raw.close()


def test_command_before_connect_closes(fast_broker: BrokerThread) -> None:
    raw = Raw(fast_broker.port)
    raw.send("PING")
    assert raw.recv() is None
    raw.close()


def test_responses_by_type_with_overlapping_request_ids(fast_broker: BrokerThread) -> None:
    raw = Raw(fast_broker.port)
    raw.connect()
    raw.send("PARTITIONED_METADATA", topic="persistent://public/default/wire-a", request_id=1)
    raw.send("LOOKUP", topic="persistent://public/default/wire-a", request_id=1)
    raw.send("GET_SCHEMA", topic="persistent://public/default/wire-a", request_id=1)
    raw.send("LOOKUP", topic="persistent://nope/ns/wire-a", request_id=2)
    got: dict[int, list[pb.BaseCommand]] = {}
    for _ in range(4):
        cmd = raw.recv()
        got.setdefault(cmd.type, []).append(cmd)
    pm = got[pb.BaseCommand.PARTITIONED_METADATA_RESPONSE][0].partitionMetadataResponse
    assert pm.response == pb.CommandPartitionedTopicMetadataResponse.Success and pm.partitions == 0
    lookups = {c.lookupTopicResponse.request_id: c.lookupTopicResponse for c in got[pb.BaseCommand.LOOKUP_RESPONSE]}
    assert lookups[1].response == pb.CommandLookupTopicResponse.Connect and lookups[1].authoritative
    assert lookups[1].brokerServiceUrl == fast_broker.url
    assert lookups[2].response == pb.CommandLookupTopicResponse.Failed and lookups[2].error == pb.TopicNotFound
    schema = got[pb.BaseCommand.GET_SCHEMA_RESPONSE][0].getSchemaResponse
    assert schema.error_code == pb.TopicNotFound
    raw.close()


def test_ping_pong_and_keepalive_timeout(fast_broker: BrokerThread) -> None:
    raw = Raw(fast_broker.port)
    raw.connect()
    raw.send("PING")
    assert raw.recv().type == pb.BaseCommand.PONG
    # stay silent: the broker pings after ~1 s and closes after ~2 s without an answer
    start = time.monotonic()
    seen_ping = False
    while True:
        cmd = raw.recv(timeout=10)
        if cmd is None:
            break
        seen_ping |= cmd.type == pb.BaseCommand.PING
    assert seen_ping
    assert time.monotonic() - start < 8
    raw.close()


def test_bad_checksum_send_gets_send_error(fast_broker: BrokerThread) -> None:
    from protocols.pulsar import encode_payload_command

    raw = Raw(fast_broker.port)
    raw.connect()
    raw.send("PRODUCER", topic="persistent://public/default/wire-crc", producer_id=1, request_id=1)
    assert raw.recv().type == pb.BaseCommand.PRODUCER_SUCCESS
    md = pb.MessageMetadata(producer_name="x", sequence_id=0, publish_time=1)
    frame = bytearray(encode_payload_command(make_command("SEND", producer_id=1, sequence_id=0), md, b"payload"))
    frame[-1] ^= 0xFF
    raw.sock.sendall(bytes(frame))
    cmd = raw.recv()
    assert cmd.type == pb.BaseCommand.SEND_ERROR and cmd.send_error.error == pb.ChecksumError
    # the connection survives
    raw.sock.sendall(encode_payload_command(make_command("SEND", producer_id=1, sequence_id=1), md, b"payload"))
    receipt = raw.recv()
    assert receipt.type == pb.BaseCommand.SEND_RECEIPT and receipt.send_receipt.sequence_id == 1
    raw.close()


def test_wait_for_exclusive_producer(fast_broker: BrokerThread) -> None:
    client = pulsar.Client(fast_broker.url, operation_timeout_seconds=10)
    topic = "persistent://public/default/wire-wait-exclusive"
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    raw = Raw(fast_broker.port)
    raw.connect()
    raw.send("PRODUCER", topic=topic, producer_id=7, request_id=3, producer_access_mode=pb.WaitForExclusive)
    parked = raw.recv()
    assert parked.type == pb.BaseCommand.PRODUCER_SUCCESS and not parked.producer_success.producer_ready
    first.close()
    ready = raw.recv()
    assert ready.type == pb.BaseCommand.PRODUCER_SUCCESS and ready.producer_success.producer_ready
    assert ready.producer_success.request_id == 3
    raw.close()
    client.close()


def test_idle_topic_is_unloaded_and_reloads(fast_broker: BrokerThread) -> None:
    client = pulsar.Client(fast_broker.url, operation_timeout_seconds=10)
    topic = "persistent://public/default/wire-idle"
    # a subscription keeps it from being deleted for inactivity instead (brokerDeleteInactiveTopicsMode)
    client.subscribe(topic, "keeps-it").close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"a")
    assert topic in fast_broker.service.topics
    producer.close()
    deadline = time.monotonic() + 10
    while topic in fast_broker.service.topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in fast_broker.service.topics
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(5000).data() == b"a"
    client.close()


def test_consumer_requests_over_raw_socket(fast_broker: BrokerThread) -> None:
    from protocols.pulsar import encode_payload_command

    topic = "persistent://public/default/wire-consumer"
    raw = Raw(fast_broker.port, answer_pings=True)
    raw.connect()
    raw.send("PRODUCER", topic=topic, producer_id=1, request_id=1)
    assert raw.recv().type == pb.BaseCommand.PRODUCER_SUCCESS
    raw.send(
        "SUBSCRIBE",
        topic=topic,
        subscription="s",
        subType=pb.CommandSubscribe.Shared,
        consumer_id=1,
        request_id=2,
        initialPosition=pb.CommandSubscribe.Earliest,
    )
    assert raw.recv().type == pb.BaseCommand.SUCCESS
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=1)
    raw.sock.sendall(encode_payload_command(make_command("SEND", producer_id=1, sequence_id=0), md, b"x"))
    receipt = raw.recv().send_receipt
    raw.send("FLOW", consumer_id=1, messagePermits=10)
    message = raw.recv()
    assert message.type == pb.BaseCommand.MESSAGE
    assert message.message.message_id.entryId == receipt.message_id.entryId
    raw.send("GET_LAST_MESSAGE_ID", consumer_id=1, request_id=3)
    last = raw.recv().getLastMessageIdResponse
    assert last.last_message_id.entryId == receipt.message_id.entryId
    assert last.last_message_id.batch_index == 0
    raw.send("CONSUMER_STATS", consumer_id=1, request_id=4)
    stats = raw.recv().consumerStatsResponse
    assert stats.request_id == 4 and stats.unackedMessages == 1 and stats.type == "Shared"
    raw.send(
        "ACK", consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[message.message.message_id], request_id=5
    )
    ack = raw.recv()
    assert ack.type == pb.BaseCommand.ACK_RESPONSE and ack.ackResponse.request_id == 5
    raw.send("CONSUMER_STATS", consumer_id=99, request_id=6)
    missing = raw.recv().consumerStatsResponse
    assert missing.error_code == pb.ConsumerNotFound
    raw.send(
        "GET_OR_CREATE_SCHEMA",
        topic=topic,
        request_id=7,
        schema={"name": "s", "schema_data": b"", "type": pb.Schema.String},
    )
    created = raw.recv().getOrCreateSchemaResponse
    assert created.schema_version == (0).to_bytes(8, "big")
    raw.send("GET_SCHEMA", topic=topic, request_id=8)
    schema = raw.recv().getSchemaResponse
    assert schema.schema.type == pb.Schema.String and schema.schema_version == (0).to_bytes(8, "big")
    raw.send("UNSUBSCRIBE", consumer_id=1, request_id=9)
    assert raw.recv().type == pb.BaseCommand.SUCCESS
    raw.close()


def test_publish_backpressure_keeps_order(fast_broker: BrokerThread) -> None:
    # at most 2 SENDs in flight per connection: the broker stops reading, nothing is lost
    client = pulsar.Client(fast_broker.url, operation_timeout_seconds=10)
    topic = "persistent://public/default/wire-backpressure"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    for i in range(300):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    got = []
    for _ in range(300):
        m = consumer.receive(5000)
        got.append(int(m.data()))
        consumer.acknowledge(m)
    assert got == list(range(300))
    client.close()


def test_producer_success_always_carries_schema_version(fast_broker: BrokerThread) -> None:
    # The Java client (pulsar-perf, every JVM application) reads schema_version from PRODUCER_SUCCESS
    # unconditionally and fails the producer when the field is absent; Pulsar sends it empty when
    # the producer declared no schema, also when it confirms a producer the client re-requested.
    raw = Raw(fast_broker.port)
    raw.connect()
    for request_id in (1, 2):  # the second is a retry of the same producer id
        raw.send(
            "PRODUCER", topic="persistent://public/default/wire-schema-version", producer_id=1, request_id=request_id
        )
        ok = raw.recv()
        assert ok.type == pb.BaseCommand.PRODUCER_SUCCESS and ok.producer_success.request_id == request_id
        assert ok.producer_success.HasField("schema_version") and ok.producer_success.schema_version == b""
    raw.close()
