"""Unit tests of the Pulsar frame codec: shapes, partial input, limits, corruption, fuzz."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.pulsar import (
    DEFAULT_MAX_FRAME_SIZE,
    BrokerEntryMetadata,
    ChecksumMismatch,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    MalformedFrame,
    MessageMetadata,
    command_body,
    command_field,
    decode_frame,
    encode_command,
    encode_message,
    encode_metadata_and_payload,
    encode_payload_command,
    encode_payload_command_raw,
    encode_send_receipt,
    make_command,
    type_name,
)
from protocols.pulsar import (
    pulsar_api_pb2 as pb,
)

T = pb.BaseCommand


def _send(seq: int = 1) -> pb.BaseCommand:
    return make_command("SEND", producer_id=3, sequence_id=seq, num_messages=1)


def _meta(seq: int = 1) -> MessageMetadata:
    return MessageMetadata(
        producer_name="p", sequence_id=seq, publish_time=1_700_000_000_000, properties=[pb.KeyValue(key="a", value="b")]
    )


def _decode_all(decoder: FrameDecoder) -> list:
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
    return out


# ------------------------------------------------------------------------------- commands


def test_make_command_sets_type_and_matching_sub_message() -> None:
    cmd = make_command(T.PRODUCER, topic="t", producer_id=1, request_id=2, metadata=[{"key": "k", "value": "v"}])
    assert cmd.type == T.PRODUCER and cmd.HasField("producer")
    assert command_body(cmd).metadata[0].key == "k"
    assert make_command("PING").HasField("ping")
    assert command_field(T.SEND) == "send" and command_field("LOOKUP") == "lookupTopic"
    assert type_name(T.SEND_RECEIPT) == "SEND_RECEIPT" and type_name(999) == "UNKNOWN(999)"
    with pytest.raises(ValueError):
        make_command("NOPE")
    with pytest.raises(ValueError):
        make_command(1)


def test_every_type_has_its_field_numbered_like_the_type() -> None:
    for value in T.Type.values():
        cmd = make_command(value)
        field = cmd.DESCRIPTOR.fields_by_name[command_field(value)]
        assert field.number == value


def test_encoding_a_command_missing_required_fields_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="request_id"):
        encode_command(make_command(T.SUCCESS))


# ---------------------------------------------------------------------------- round trips


def test_simple_frame_layout_and_round_trip() -> None:
    cmd = make_command(T.CONNECTED, server_version="x", protocol_version=20, max_message_size=5 << 20)
    data = encode_command(cmd)
    total, cmd_size = struct.unpack_from(">II", data)
    assert total == len(data) - 4 == cmd_size + 4
    frame = decode_frame(data)
    assert frame.command == cmd and frame.size == len(data)
    assert not frame.has_payload and frame.payload == b"" and frame.metadata is None


def test_payload_frame_layout_checksum_and_round_trip() -> None:
    data = encode_payload_command(_send(), _meta(), b"hello")
    cmd_size = struct.unpack_from(">I", data, 4)[0]
    offset = 8 + cmd_size
    magic, crc = struct.unpack_from(">HI", data, offset)
    assert magic == 0x0E01 and crc == crc32c.crc32c(data[offset + 6 :])
    frame = decode_frame(data)
    assert frame.command == _send() and frame.metadata == _meta()
    assert frame.payload == b"hello" and frame.checksum == crc
    assert frame.raw_metadata_and_payload == encode_metadata_and_payload(_meta(), b"hello")
    assert frame.broker_entry_metadata is None


def test_payload_frame_without_checksum_from_old_clients() -> None:
    data = encode_payload_command(_send(), _meta(), b"old", checksum=False)
    frame = decode_frame(data)
    assert frame.checksum is None and frame.payload == b"old" and frame.metadata == _meta()


def test_raw_block_is_forwarded_verbatim_with_broker_entry_metadata() -> None:
    stored = decode_frame(encode_payload_command(_send(), _meta(), b"body")).raw_metadata_and_payload
    message = make_command(T.MESSAGE, consumer_id=9, message_id=pb.MessageIdData(ledgerId=4, entryId=5))
    bem = BrokerEntryMetadata(broker_timestamp=123, index=77)
    data = encode_payload_command_raw(message, stored, bem)
    frame = decode_frame(data)
    assert frame.command == message and frame.broker_entry_metadata == bem
    assert frame.raw_metadata_and_payload == stored and frame.payload == b"body"
    assert frame.checksum == crc32c.crc32c(stored)
    # Layout: the 0x0e02 block sits between the command and the 0x0e01 block.
    cmd_size = struct.unpack_from(">I", data, 4)[0]
    assert struct.unpack_from(">H", data, 8 + cmd_size)[0] == 0x0E02
    no_crc = decode_frame(encode_payload_command_raw(message, stored, bem, checksum=False))
    assert no_crc.checksum is None and no_crc.broker_entry_metadata == bem


_U64 = st.integers(0, 2**64 - 1)


@settings(max_examples=60, deadline=None)
@given(_U64, _U64, _U64, st.integers(-1, 2**64 - 1), st.integers(-1, 2**64 - 1))
def test_send_receipt_encoder_writes_what_make_command_writes(
    producer_id: int, sequence_id: int, highest: int, ledger_id: int, entry_id: int
) -> None:
    expected = encode_command(
        make_command(
            "SEND_RECEIPT",
            producer_id=producer_id,
            sequence_id=sequence_id,
            highest_sequence_id=highest,
            message_id={"ledgerId": ledger_id % 2**64, "entryId": entry_id % 2**64},
        )
    )
    assert encode_send_receipt(producer_id, sequence_id, highest, ledger_id, entry_id) == expected


@settings(max_examples=60, deadline=None)
@given(
    _U64,
    st.integers(-1, 2**64 - 1),
    st.integers(-1, 2**64 - 1),
    st.integers(-1, 2**31 - 1),
    st.integers(0, 2**32 - 1),
    st.none() | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
    st.binary(max_size=40),
)
def test_message_encoder_writes_what_make_command_writes(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery: int,
    ack_set: list[int] | None,
    payload: bytes,
) -> None:
    raw = encode_metadata_and_payload(MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), payload)
    message_id = {"ledgerId": ledger_id % 2**64, "entryId": entry_id % 2**64}
    if partition >= 0:
        message_id["partition"] = partition
    fields: dict[str, object] = {"consumer_id": consumer_id, "message_id": message_id}
    if redelivery:
        fields["redelivery_count"] = redelivery
    if ack_set is not None:
        fields["ack_set"] = ack_set
    expected = encode_payload_command_raw(make_command("MESSAGE", **fields), raw)
    frame = encode_message(
        consumer_id, ledger_id, entry_id, raw, partition=partition, redelivery_count=redelivery, ack_set=ack_set
    )
    assert frame == expected


def test_send_receipt_encoder_refuses_ids_outside_uint64() -> None:
    with pytest.raises(ValueError):
        encode_send_receipt(1, -1, 0, 0, 0)


def test_empty_payload_is_valid() -> None:
    frame = decode_frame(encode_payload_command(_send(), _meta(), b""))
    assert frame.has_payload and frame.payload == b""


def test_raw_encoder_rejects_a_block_with_a_bad_metadata_size() -> None:
    with pytest.raises(ValueError):
        encode_payload_command_raw(_send(), b"\x00\x00\x00\x09abc")
    with pytest.raises(ValueError):
        encode_payload_command_raw(_send(), b"\x00")


# ----------------------------------------------------------------------- partial input


def test_truncated_input_returns_none_until_complete() -> None:
    data = encode_payload_command(_send(), _meta(), b"x" * 100)
    for cut in range(len(data)):
        decoder = FrameDecoder()
        decoder.feed(data[:cut])
        assert decoder.next_frame() is None
        decoder.feed(data[cut:])
        assert decoder.next_frame().payload == b"x" * 100
        assert decoder.next_frame() is None and decoder.buffered == 0


def test_many_frames_split_byte_by_byte() -> None:
    stream = b"".join(
        [encode_command(make_command("PING"))]
        + [encode_payload_command(_send(i), _meta(i), bytes([i]) * i) for i in range(20)]
    )
    decoder = FrameDecoder()
    frames = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        frames += _decode_all(decoder)
    assert frames[0].type == T.PING
    assert [f.metadata.sequence_id for f in frames[1:]] == list(range(20))
    assert [f.payload for f in frames[1:]] == [bytes([i]) * i for i in range(20)]


def test_hundreds_of_frames_in_one_read() -> None:
    one = encode_payload_command(_send(), _meta(), b"abcdefgh")
    count = 65536 // len(one)
    decoder = FrameDecoder()
    decoder.feed(one * count + one[:10])
    frames = _decode_all(decoder)
    assert len(frames) == count and decoder.buffered == 10
    decoder.feed(one[10:])
    assert len(_decode_all(decoder)) == 1 and decoder.buffered == 0


# ------------------------------------------------------------------------- bad input


def test_oversized_frame_fails_from_its_header_and_stays_failed() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.feed(struct.pack(">I", 1024 - 4 + 1))
    assert decoder.error is None
    with pytest.raises(FrameTooLarge, match="exceeds the limit of 1024") as info:
        decoder.next_frame()
    assert decoder.error is info.value
    decoder.feed(encode_command(make_command("PING")))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_frame_at_the_limit_is_accepted() -> None:
    data = encode_payload_command(_send(), _meta(), b"p" * 500)
    assert decode_frame(data, max_frame_size=len(data)).payload == b"p" * 500
    with pytest.raises(FrameTooLarge):
        decode_frame(data, max_frame_size=len(data) - 1)


def test_default_limit_is_pulsars_message_size_plus_padding() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 5 * 1024 * 1024 + 10 * 1024


def test_cmd_size_larger_than_total_size() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">II", 10, 7))
    with pytest.raises(MalformedFrame, match="cmdSize 7"):
        decoder.next_frame()


def test_total_size_too_small() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">I", 2) + b"\x00\x00")
    with pytest.raises(MalformedFrame):
        decoder.next_frame()


def test_unparsable_and_incomplete_commands_are_malformed_and_skipped() -> None:
    garbage = b"\xff\xff\xff"
    bad = struct.pack(">II", 4 + len(garbage), len(garbage)) + garbage
    no_type = make_command("PING")
    no_type.ClearField("type")
    missing = no_type.SerializePartialToString()
    incomplete = struct.pack(">II", 4 + len(missing), len(missing)) + missing
    send = make_command("SEND", producer_id=1)  # sequence_id missing
    partial = send.SerializePartialToString()
    lacks = struct.pack(">II", 4 + len(partial), len(partial)) + partial
    ok = encode_command(make_command("PONG"))
    decoder = FrameDecoder()
    decoder.feed(bad + incomplete + lacks + ok)
    with pytest.raises(MalformedFrame, match="unparsable BaseCommand"):
        decoder.next_frame()
    with pytest.raises(MalformedFrame, match="type"):
        decoder.next_frame()
    with pytest.raises(MalformedFrame, match=r"send\.sequence_id"):
        decoder.next_frame()
    assert decoder.next_frame().type == T.PONG


def _reframe(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_bad_sizes_inside_a_payload_frame() -> None:
    cmd = _send().SerializeToString()
    head = struct.pack(">I", len(cmd)) + cmd
    cases = {
        "no metadata size": head + b"\x00\x01",
        "metadataSize": head + struct.pack(">I", 50) + b"abc",
        "truncated checksum": head + b"\x0e\x01\x00",
        "broker entry metadata size": head + b"\x0e\x02" + struct.pack(">I", 99),
        "unparsable MessageMetadata": head + struct.pack(">I", 3) + b"\xff\xff\xff",
        "lacks required": head + struct.pack(">I", 0),
    }
    for what, body in cases.items():
        with pytest.raises(MalformedFrame) as info:
            decode_frame(_reframe(body))
        assert info.value.command == _send(), what


def test_corrupted_checksum_names_the_command_and_decoder_continues() -> None:
    data = bytearray(encode_payload_command(_send(42), _meta(), b"payload"))
    data[-1] ^= 0x01
    decoder = FrameDecoder()
    decoder.feed(bytes(data) + encode_command(make_command("PING")))
    with pytest.raises(ChecksumMismatch, match="checksum mismatch") as info:
        decoder.next_frame()
    assert info.value.command.send.sequence_id == 42
    assert decoder.next_frame().type == T.PING


def test_corrupted_checksum_value() -> None:
    data = bytearray(encode_payload_command(_send(), _meta(), b"payload"))
    cmd_size = struct.unpack_from(">I", data, 4)[0]
    data[8 + cmd_size + 2] ^= 0xFF
    with pytest.raises(ChecksumMismatch):
        decode_frame(bytes(data))


def test_decode_frame_requires_exactly_one_frame() -> None:
    one = encode_command(make_command("PING"))
    with pytest.raises(MalformedFrame, match="incomplete"):
        decode_frame(one[:-1])
    with pytest.raises(MalformedFrame, match="after the frame"):
        decode_frame(one + one)


def test_max_frame_size_is_validated() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=4)
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=0x0E01_0000)


# -------------------------------------------------------------------------------- fuzz


def _drain(decoder: FrameDecoder) -> int:
    """Pull frames until more bytes are needed or the decoder stays failed."""
    seen = 0
    for _ in range(10_000):
        try:
            frame = decoder.next_frame()
        except (FrameTooLarge, MalformedFrame) as exc:
            if decoder.error is exc:  # sticky: the stream is dead
                return seen
            continue
        except FrameError:
            continue
        if frame is None:
            return seen
        seen += 1
    raise AssertionError("decoder did not make progress")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=8))
def test_fuzz_random_bytes_only_raise_frame_errors(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    for chunk in chunks:
        decoder.feed(chunk)
        _drain(decoder)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.binary(max_size=120))
def test_fuzz_well_framed_random_contents(cmd_size: int, body: bytes) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    decoder.feed(_reframe(struct.pack(">I", min(cmd_size, len(body))) + body))
    _drain(decoder)


_valid = st.builds(
    lambda seq, payload: encode_payload_command(_send(seq), _meta(seq), payload),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=64),
)


@settings(max_examples=300, deadline=None)
@given(_valid, st.integers(0, 10_000), st.integers(0, 255))
def test_fuzz_single_byte_corruption_of_valid_frames(frame: bytes, where: int, xor: int) -> None:
    data = bytearray(frame)
    data[where % len(data)] ^= xor or 1
    decoder = FrameDecoder(max_frame_size=4096)
    decoder.feed(bytes(data))
    _drain(decoder)


@settings(max_examples=100, deadline=None)
@given(st.lists(_valid, min_size=1, max_size=10), st.lists(st.integers(1, 50), max_size=30))
def test_fuzz_any_split_yields_the_same_frames(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frames)
    decoder = FrameDecoder()
    got, pos = [], 0
    for cut in [*cuts, len(stream)]:
        decoder.feed(stream[pos : pos + cut])
        pos += cut
        got += _decode_all(decoder)
    decoder.feed(stream[pos:])
    got += _decode_all(decoder)
    assert [decode_frame(f).raw_metadata_and_payload for f in frames] == [g.raw_metadata_and_payload for g in got]
