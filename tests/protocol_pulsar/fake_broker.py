"""A tiny Pulsar "broker" for wire-compatibility tests of ``protocols.pulsar``.

It speaks just enough of the protocol for the official client to connect, look up a topic,
create a producer and publish: every frame it receives is recorded for the test to inspect.
It stores nothing and is not the broker (that lives in ``broker/``); it exists to prove the
.proto file and the framing match what the official client sends and accepts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import trio

from protocols.pulsar import (
    ChecksumMismatch,
    Frame,
    FrameDecoder,
    FrameError,
    encode_command,
    encode_payload_command_raw,
    make_command,
)
from protocols.pulsar import (
    pulsar_api_pb2 as pb,
)

SERVER_VERSION = "magnetar-protocol-test"
MAX_MESSAGE_SIZE = 5 * 1024 * 1024
T = pb.BaseCommand


@dataclass
class FakeBroker:
    """Records frames; answers CONNECT, lookups, PRODUCER, SEND, PING, closes, SUBSCRIBE, ACK.

    Sent entries are kept (raw metadata + payload, as a broker stores them) and delivered to
    a consumer on FLOW, with BrokerEntryMetadata when the client advertised support for it.
    """

    port: int = 0
    frames: list[Frame] = field(default_factory=list)
    errors: list[FrameError] = field(default_factory=list)
    entries: list[bytes] = field(default_factory=list)
    broker_entry_metadata: bool = True
    _entry_ids: itertools.count = field(default_factory=itertools.count)
    _producer_names: itertools.count = field(default_factory=itertools.count)

    def replies(self, frame: Frame, conn: dict) -> list[bytes]:
        """The encoded frames answering one received frame; ``conn`` is per-connection state."""
        cmd = frame.command
        if cmd.type == T.FLOW:
            # Deliver every stored entry once per FLOW, verbatim, as MESSAGE frames.
            out = []
            for entry_id, raw in enumerate(self.entries[conn.get("delivered", 0) :], conn.get("delivered", 0)):
                message = make_command(
                    T.MESSAGE,
                    consumer_id=cmd.flow.consumer_id,
                    message_id=pb.MessageIdData(ledgerId=7, entryId=entry_id),
                )
                bem = None
                if conn.get("entry_metadata") and self.broker_entry_metadata:
                    bem = pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_000 + entry_id, index=entry_id)
                out.append(encode_payload_command_raw(message, raw, bem))
            conn["delivered"] = len(self.entries)
            return out
        if cmd.type == T.CONNECT:
            conn["entry_metadata"] = cmd.connect.feature_flags.supports_broker_entry_metadata
        return [encode_command(c) for c in self._command_replies(frame)]

    def _command_replies(self, frame: Frame) -> list[pb.BaseCommand]:
        cmd = frame.command
        if cmd.type == T.CONNECT:
            version = min(cmd.connect.protocol_version, 20)
            return [
                make_command(
                    T.CONNECTED,
                    server_version=SERVER_VERSION,
                    protocol_version=version,
                    max_message_size=MAX_MESSAGE_SIZE,
                )
            ]
        if cmd.type == T.PARTITIONED_METADATA:
            return [
                make_command(
                    T.PARTITIONED_METADATA_RESPONSE,
                    partitions=0,
                    request_id=cmd.partitionMetadata.request_id,
                    response=pb.CommandPartitionedTopicMetadataResponse.Success,
                )
            ]
        if cmd.type == T.LOOKUP:
            return [
                make_command(
                    T.LOOKUP_RESPONSE,
                    brokerServiceUrl=f"pulsar://127.0.0.1:{self.port}",
                    response=pb.CommandLookupTopicResponse.Connect,
                    request_id=cmd.lookupTopic.request_id,
                    authoritative=True,
                )
            ]
        if cmd.type == T.PRODUCER:
            name = cmd.producer.producer_name or f"magnetar-test-{next(self._producer_names)}"
            return [
                make_command(
                    T.PRODUCER_SUCCESS, request_id=cmd.producer.request_id, producer_name=name, last_sequence_id=-1
                )
            ]
        if cmd.type == T.SEND:
            send = cmd.send
            self.entries.append(frame.raw_metadata_and_payload)
            receipt = make_command(
                T.SEND_RECEIPT,
                producer_id=send.producer_id,
                sequence_id=send.sequence_id,
                message_id=pb.MessageIdData(ledgerId=7, entryId=next(self._entry_ids)),
            )
            if send.HasField("highest_sequence_id"):
                receipt.send_receipt.highest_sequence_id = send.highest_sequence_id
            return [receipt]
        if cmd.type == T.PING:
            return [make_command(T.PONG)]
        if cmd.type == T.CLOSE_PRODUCER:
            return [make_command(T.SUCCESS, request_id=cmd.close_producer.request_id)]
        if cmd.type == T.SUBSCRIBE:
            return [make_command(T.SUCCESS, request_id=cmd.subscribe.request_id)]
        if cmd.type == T.UNSUBSCRIBE:
            return [make_command(T.SUCCESS, request_id=cmd.unsubscribe.request_id)]
        if cmd.type == T.ACK and cmd.ack.HasField("request_id"):
            return [make_command(T.ACK_RESPONSE, consumer_id=cmd.ack.consumer_id, request_id=cmd.ack.request_id)]
        if cmd.type == T.CLOSE_CONSUMER:
            return [make_command(T.SUCCESS, request_id=cmd.close_consumer.request_id)]
        return []

    async def _handle(self, stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        conn: dict = {}
        try:
            while data := await stream.receive_some(65536):
                decoder.feed(data)
                out = bytearray()
                while True:
                    try:
                        frame = decoder.next_frame()
                    except ChecksumMismatch as exc:
                        self.errors.append(exc)
                        continue
                    if frame is None:
                        break
                    self.frames.append(frame)
                    for reply in self.replies(frame, conn):
                        out += reply
                if out:
                    await stream.send_all(out)
        except FrameError as exc:
            self.errors.append(exc)
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (port 0 = any) and report the port through ``task_status``."""
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.port)
