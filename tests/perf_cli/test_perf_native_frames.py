"""The native engine's pre-encoded SEND frames decode as the broker decodes them."""

from __future__ import annotations

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from magnetar.cli._perf_native import SendTemplate, padded_varint, parse_service_url
from protocols.pulsar import BaseCommand, MessageMetadata, decode_frame, split_batch


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_padded_varint_parses_to_the_value(value: int) -> None:
    encoded = padded_varint(value)
    assert len(encoded) == 10
    meta = MessageMetadata()
    # field 2 (sequence_id), wire type 0, then the padded value; required fields may be absent here
    meta.ParseFromString(b"\x10" + encoded)
    assert meta.sequence_id == value


def test_padded_varint_refuses_what_does_not_fit() -> None:
    with pytest.raises(ValueError):
        padded_varint(-1)
    with pytest.raises(ValueError):
        padded_varint(1 << 70)


@pytest.mark.parametrize(("messages", "batched"), [(1, False), (1, True), (7, True), (1000, True)])
@given(first=st.integers(min_value=0, max_value=2**62), publish=st.integers(min_value=0, max_value=2**45))
def test_template_frames_decode_with_their_patched_fields(
    messages: int, batched: bool, first: int, publish: int
) -> None:
    template = SendTemplate(3, "perf-x", messages, 100, batched=batched)
    frame = decode_frame(bytes(template.frame(first, publish)))  # checksum verified by the decoder
    assert frame.type == BaseCommand.SEND
    send = frame.command.send
    assert (send.producer_id, send.sequence_id, send.num_messages) == (3, first, messages)
    assert send.highest_sequence_id == first + messages - 1
    meta = frame.metadata
    assert meta is not None
    assert (meta.producer_name, meta.sequence_id, meta.publish_time) == ("perf-x", first, publish)
    assert meta.HasField("num_messages_in_batch") is batched
    if batched:
        singles = split_batch(frame.payload, messages)
        assert [len(p) for _, p in singles] == [100] * messages
    else:
        assert frame.payload == b"a" * 100
    raw = frame.raw_metadata_and_payload
    assert raw is not None and frame.checksum == crc32c(raw)


def test_template_frames_are_independent_once_copied() -> None:
    template = SendTemplate(1, "p", 2, 10)
    out = bytearray()
    out += template.frame(0, 5)
    out += template.frame(2, 6)
    half = len(out) // 2
    assert decode_frame(bytes(out[:half])).command.send.sequence_id == 0
    assert decode_frame(bytes(out[half:])).command.send.sequence_id == 2


def test_template_refuses_an_unbatched_frame_of_several_messages() -> None:
    with pytest.raises(ValueError):
        SendTemplate(1, "p", 2, 10, batched=False)


def test_parse_service_url() -> None:
    assert parse_service_url("pulsar://localhost:6650") == ("localhost", 6650, False)
    assert parse_service_url("pulsar+ssl://broker.example") == ("broker.example", 6651, True)
    assert parse_service_url("pulsar://[::1]:7000/") == ("::1", 7000, False)
    for bad in ("http://x:1", "pulsar://a:1,b:2", "pulsar://"):
        with pytest.raises(ValueError):
            parse_service_url(bad)
