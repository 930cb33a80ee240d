"""A raw Pulsar connection that plays both a transactional client and a coordinator against one
broker: SENDs and ACKs carrying a transaction id, and the END_TXN_ON_PARTITION /
END_TXN_ON_SUBSCRIPTION a coordinator sends, without any coordinator running.

MESSAGE frames that arrive while the peer waits for an answer are kept (`received`), so a test
reads deliveries and answers in any order. Every wait is bounded by `HANG_GUARD_S`.
"""

from __future__ import annotations

import itertools
import socket
import time

from broker.topics._entries import ack_set_words
from protocols.pulsar import Frame, FrameDecoder, build_batch, encode_payload_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

HANG_GUARD_S = 20.0
"""How long a wait for an answer lasts before the test fails (only reached when the broker hangs)."""

T = pb.BaseCommand
COMMIT = pb.COMMIT
ABORT = pb.ABORT


class TxnPeer:
    """One connection; ids of producers, consumers and requests are chosen by the test."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_S)
        self.decoder = FrameDecoder()
        self.received: list[tuple[int, tuple[int, int], bytes]] = []  # (consumer id, position, payload)
        self.ack_sets: dict[tuple[int, tuple[int, int]], list[int]] = {}  # the last MESSAGE's ack_set
        self._requests = itertools.count(1)
        self._write(make_command("CONNECT", client_version="txn-peer", protocol_version=20))
        assert self._next().type == T.CONNECTED

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    # ------------------------------------------------------------------ frames

    def _write(self, command: pb.BaseCommand) -> None:
        from protocols.pulsar import encode_command

        self.sock.sendall(encode_command(command))

    def _next(self, timeout: float = HANG_GUARD_S) -> Frame:
        deadline = time.monotonic() + timeout
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.decoder.feed(data)

    def _answer(self, wanted: int, timeout: float = HANG_GUARD_S) -> pb.BaseCommand:
        """The next command of type ``wanted``; MESSAGEs met on the way are kept."""
        while True:
            frame = self._next(timeout)
            if frame.type == wanted:
                return frame.command
            if frame.type == T.MESSAGE:
                self._keep(frame)
            elif frame.type in (T.PING,):
                self._write(make_command("PONG"))
            elif frame.type == T.ERROR or frame.type == T.SEND_ERROR:
                raise AssertionError(f"broker answered {frame.command}")

    def _keep(self, frame: Frame) -> None:
        msg = frame.command.message
        raw = frame.raw_metadata_and_payload or b""
        size = int.from_bytes(raw[:4], "big")
        pos = (msg.message_id.ledgerId, msg.message_id.entryId)
        self.received.append((msg.consumer_id, pos, raw[4 + size :]))
        self.ack_sets[(msg.consumer_id, pos)] = list(msg.ack_set)

    def drain(self, quiet_s: float = 0.5) -> None:
        """Keep every MESSAGE that arrives until none came for ``quiet_s``."""
        self._write(make_command("PING"))
        self._answer(T.PONG)  # everything the broker sent before the PONG is read
        while True:
            try:
                frame = self._next(quiet_s)
            except TimeoutError:
                return
            if frame.type == T.MESSAGE:
                self._keep(frame)

    def payloads(self, consumer_id: int) -> list[bytes]:
        """The payloads ``consumer_id`` received so far, in arrival order."""
        return [p for c, _, p in self.received if c == consumer_id]

    # ------------------------------------------------------------------ producing

    def producer(self, topic: str, producer_id: int) -> None:
        """Create a producer (PRODUCER_SUCCESS expected)."""
        self._write(make_command("PRODUCER", topic=topic, producer_id=producer_id, request_id=next(self._requests)))
        self._answer(T.PRODUCER_SUCCESS)

    def send(
        self,
        producer_id: int,
        seq: int,
        payload: bytes,
        txn: tuple[int, int] | None = None,
        *,
        txn_in_metadata: bool = True,
        key: str | None = None,
    ) -> tuple[int, int]:
        """SEND one message (in ``txn`` = (most, least) when given, named in the message metadata
        too unless ``txn_in_metadata`` is False, as the Go client sends); its stored position."""
        md = pb.MessageMetadata(producer_name=f"p{producer_id}", sequence_id=seq, publish_time=int(time.time() * 1000))
        fields: dict[str, int] = {"producer_id": producer_id, "sequence_id": seq}
        if key is not None:
            md.partition_key = key
        if txn is not None:
            if txn_in_metadata:
                md.txnid_most_bits, md.txnid_least_bits = txn
            fields.update(txnid_most_bits=txn[0], txnid_least_bits=txn[1])
        self.sock.sendall(encode_payload_command(make_command("SEND", **fields), md, payload))
        receipt = self._answer(T.SEND_RECEIPT).send_receipt
        return receipt.message_id.ledgerId, receipt.message_id.entryId

    def send_batch(self, producer_id: int, seq: int, payloads: list[bytes]) -> tuple[int, int]:
        """SEND one batch of ``payloads`` outside any transaction; its stored position."""
        md = pb.MessageMetadata(
            producer_name=f"p{producer_id}", sequence_id=seq, publish_time=1, num_messages_in_batch=len(payloads)
        )
        body = build_batch((pb.SingleMessageMetadata(payload_size=len(p)), p) for p in payloads)
        command = make_command("SEND", producer_id=producer_id, sequence_id=seq, num_messages=len(payloads))
        self.sock.sendall(encode_payload_command(command, md, body))
        receipt = self._answer(T.SEND_RECEIPT).send_receipt
        return receipt.message_id.ledgerId, receipt.message_id.entryId

    def send_error(self, producer_id: int, seq: int, payload: bytes, txn: tuple[int, int]) -> pb.CommandSendError:
        """SEND in ``txn`` expecting SEND_ERROR; the error."""
        md = pb.MessageMetadata(producer_name=f"p{producer_id}", sequence_id=seq, publish_time=1)
        md.txnid_most_bits, md.txnid_least_bits = txn
        command = make_command(
            "SEND", producer_id=producer_id, sequence_id=seq, txnid_most_bits=txn[0], txnid_least_bits=txn[1]
        )
        self.sock.sendall(encode_payload_command(command, md, payload))
        while True:
            frame = self._next()
            if frame.type == T.SEND_ERROR:
                return frame.command.send_error
            assert frame.type != T.SEND_RECEIPT, frame.command

    # ------------------------------------------------------------------ consuming

    def subscribe(
        self,
        topic: str,
        sub: str,
        consumer_id: int,
        sub_type: int = pb.CommandSubscribe.Shared,
        permits: int = 100,
        *,
        read_compacted: bool = False,
    ) -> None:
        """SUBSCRIBE at the earliest position (reading the compacted view first when
        ``read_compacted``), then FLOW ``permits``."""
        self._write(
            make_command(
                "SUBSCRIBE",
                read_compacted=read_compacted,
                topic=topic,
                subscription=sub,
                subType=sub_type,
                consumer_id=consumer_id,
                request_id=next(self._requests),
                initialPosition=pb.CommandSubscribe.Earliest,
            )
        )
        self._answer(T.SUCCESS)
        self._write(make_command("FLOW", consumer_id=consumer_id, messagePermits=permits))

    def close_consumer(self, consumer_id: int) -> None:
        """CLOSE_CONSUMER (its unacknowledged messages go to the others)."""
        self._write(make_command("CLOSE_CONSUMER", consumer_id=consumer_id, request_id=next(self._requests)))
        self._answer(T.SUCCESS)

    def ack(
        self,
        consumer_id: int,
        positions: list[tuple[int, int]],
        txn: tuple[int, int] | None = None,
        *,
        cumulative: bool = False,
        batch_index: tuple[int, int] | None = None,
    ) -> pb.CommandAckResponse:
        """ACK with a request id; the ACK_RESPONSE (``error`` set when refused). ``batch_index``
        (index, batch size) acks one message of a batch, with the ack set a client sends."""
        ids = [pb.MessageIdData(ledgerId=le, entryId=en) for le, en in positions]
        if batch_index is not None:
            index, size = batch_index
            for mid in ids:
                mid.ack_set.extend(ack_set_words(size, [index]))
                mid.batch_size = size
        fields: dict[str, object] = {
            "consumer_id": consumer_id,
            "ack_type": pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
            "message_id": ids,
            "request_id": next(self._requests),
        }
        if txn is not None:
            fields.update(txnid_most_bits=txn[0], txnid_least_bits=txn[1])
        self._write(make_command("ACK", **fields))
        return self._answer(T.ACK_RESPONSE).ackResponse

    def last_message_id(self, consumer_id: int) -> tuple[int, int]:
        """GET_LAST_MESSAGE_ID: the position of the last message the consumer could get."""
        self._write(make_command("GET_LAST_MESSAGE_ID", consumer_id=consumer_id, request_id=next(self._requests)))
        mid = self._answer(T.GET_LAST_MESSAGE_ID_RESPONSE).getLastMessageIdResponse.last_message_id
        return mid.ledgerId, mid.entryId

    # ------------------------------------------------------------------ ending, as a coordinator

    def end_on_partition(self, topic: str, txn: tuple[int, int], action: int) -> pb.CommandEndTxnOnPartitionResponse:
        """END_TXN_ON_PARTITION; its response."""
        self._write(
            make_command(
                "END_TXN_ON_PARTITION",
                request_id=next(self._requests),
                txnid_most_bits=txn[0],
                txnid_least_bits=txn[1],
                topic=topic,
                txn_action=action,
            )
        )
        return self._answer(T.END_TXN_ON_PARTITION_RESPONSE).endTxnOnPartitionResponse

    def end_on_subscription(
        self, topic: str, sub: str, txn: tuple[int, int], action: int
    ) -> pb.CommandEndTxnOnSubscriptionResponse:
        """END_TXN_ON_SUBSCRIPTION; its response."""
        self._write(
            make_command(
                "END_TXN_ON_SUBSCRIPTION",
                request_id=next(self._requests),
                txnid_most_bits=txn[0],
                txnid_least_bits=txn[1],
                subscription=pb.Subscription(topic=topic, subscription=sub),
                txn_action=action,
            )
        )
        return self._answer(T.END_TXN_ON_SUBSCRIPTION_RESPONSE).endTxnOnSubscriptionResponse
