"""Inputs that bench/fuzz_decoders.py found crashing the Pulsar-side decoders, kept as tests.

Root cause of most: upb does not check UTF-8 in proto2 ``string`` fields and hands them back as
``bytes``, so a decoded frame could carry a ``bytes`` topic, producer name or partition key
(AttributeError in ``sticky_key``, TypeError in handlers). Decoders now refuse such messages with
their documented error.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from broker.topics._entries import entry_info, entry_metadata
from protocols.pulsar import (
    NONE_KEY,
    FrameDecoder,
    MalformedBatch,
    MalformedFrame,
    MessageMetadata,
    SingleMessageMetadata,
    build_batch,
    decode_frame,
    encode_command,
    encode_metadata_and_payload,
    encode_payload_command,
    invalid_utf8_field,
    key_hash_slot,
    make_command,
    split_batch,
)
from protocols.pulsar import (
    pulsar_api_pb2 as pb,
)

ROOT = Path(__file__).resolve().parents[2]
BAD = b"\xff\xfe"  # never valid UTF-8


def _corrupt(encoded: bytes, text: str) -> bytes:
    """``encoded`` with the (unique) UTF-8 string ``text`` replaced by invalid bytes of its length."""
    raw = text.encode()
    assert encoded.count(raw) == 1
    return encoded.replace(raw, (BAD * len(raw))[: len(raw)])


def _meta(**fields: object) -> MessageMetadata:
    return MessageMetadata(producer_name="producer", sequence_id=1, publish_time=1_700_000_000_000, **fields)


# ------------------------------------------------------------------------------- frames


def test_command_string_that_is_not_utf8_is_a_malformed_frame_and_the_stream_goes_on() -> None:
    producer = make_command("PRODUCER", topic="persistent://public/default/topic-name", producer_id=1, request_id=2)
    bad = _corrupt(encode_command(producer), "topic-name")
    decoder = FrameDecoder()
    decoder.feed(bad + encode_command(make_command("PING")))
    with pytest.raises(MalformedFrame, match=r"CommandProducer\.topic is not UTF-8"):
        decoder.next_frame()
    assert decoder.error is None  # the frame was consumed: the next one decodes
    assert decoder.next_frame().type == pb.BaseCommand.PING


def test_nested_command_string_is_checked_too() -> None:
    producer = make_command(
        "PRODUCER", topic="t", producer_id=1, request_id=2, metadata=[{"key": "meta-key", "value": "v"}]
    )
    with pytest.raises(MalformedFrame, match=r"KeyValue\.key is not UTF-8"):
        decode_frame(_corrupt(encode_command(producer), "meta-key"))


def test_send_with_partition_key_not_utf8_is_malformed_and_names_the_send() -> None:
    # Before: the frame decoded, partition_key read as bytes and the dispatcher's sticky_key
    # raised AttributeError on every read of the stored entry.
    send = make_command("SEND", producer_id=4, sequence_id=9, num_messages=1)
    frame = encode_payload_command(send, _meta(partition_key="part-key"), b"payload", checksum=False)
    with pytest.raises(MalformedFrame, match=r"MessageMetadata\.partition_key is not UTF-8") as info:
        decode_frame(_corrupt(frame, "part-key"))
    assert info.value.command is not None and info.value.command.send.sequence_id == 9


def test_valid_frames_still_decode() -> None:
    send = make_command("SEND", producer_id=4, sequence_id=9, num_messages=1)
    meta = _meta(partition_key="clé", properties=[pb.KeyValue(key="ключ", value="値")])
    frame = decode_frame(encode_payload_command(send, meta, b"\xff binary payload is fine"))
    assert frame.metadata.partition_key == "clé" and frame.metadata.properties[0].value == "値"


# ------------------------------------------------------------------------------- batches


def test_batch_with_single_metadata_not_utf8_is_a_malformed_batch() -> None:
    batch = build_batch([(SingleMessageMetadata(partition_key="single-key"), b"one")])
    with pytest.raises(MalformedBatch, match=r"SingleMessageMetadata\.partition_key is not UTF-8"):
        split_batch(_corrupt(batch, "single-key"), 1)


# ------------------------------------------------------------------------------- stored entries


def test_entry_metadata_raises_only_value_error() -> None:
    # Before: google.protobuf DecodeError escaped, against the documented ValueError.
    with pytest.raises(ValueError, match="unparsable"):
        entry_metadata(b"\x00\x00\x00\x02\xff\xff")
    entry = encode_metadata_and_payload(_meta(partition_key="part-key"), b"x")
    with pytest.raises(ValueError, match="not UTF-8"):
        entry_metadata(_corrupt(entry, "part-key"))


def test_entry_info_never_raises_on_a_poisoned_entry() -> None:
    # Before: entry_metadata succeeded, then sticky_key called .encode() on bytes (AttributeError)
    # outside entry_info's guard, so one stored entry broke dispatch for the subscription.
    entry = _corrupt(encode_metadata_and_payload(_meta(partition_key="part-key"), b"x"), "part-key")
    info = entry_info(entry)
    assert (info.num_messages, info.is_batch, info.hash_slot) == (1, False, key_hash_slot(NONE_KEY))


# ------------------------------------------------------------------------------- the UTF-8 helper


def test_invalid_utf8_field_finds_strings_at_any_depth() -> None:
    good = make_command(
        "SUBSCRIBE",
        topic="t",
        subscription="s",
        subType=0,
        consumer_id=1,
        request_id=2,
        metadata=[{"key": "k", "value": "v"}],
        start_message_id={"ledgerId": 1, "entryId": 2},
    )
    assert invalid_utf8_field(good, good.SerializeToString()) is None
    data = _corrupt(good.SerializeToString(), "k")
    bad = pb.BaseCommand.FromString(data)
    assert isinstance(bad.subscribe.metadata[0].key, bytes)  # what upb does
    assert invalid_utf8_field(bad, data) == "magnetar.pulsar.KeyValue.key"
    data = _corrupt(_meta(replicate_to=["east"]).SerializeToString(), "east")
    assert invalid_utf8_field(MessageMetadata.FromString(data), data) == "magnetar.pulsar.MessageMetadata.replicate_to"
    meta = _meta(partition_key="ok", properties=[pb.KeyValue(key="ключ", value="値")])  # valid non-ASCII
    assert invalid_utf8_field(meta, memoryview(meta.SerializeToString())) is None


@pytest.mark.parametrize("package", ["protocols.pulsar", "protocols.bookkeeper", "protocols.managed_ledger"])
def test_every_message_type_of_the_protocols_has_a_utf8_twin(package: str) -> None:
    # The twin is built on first use; building them all here means no decoder meets a
    # NotImplementedError at run time, and an empty message (all defaults) passes the check.
    utf8 = importlib.import_module("protocols._utf8")
    pkg = importlib.import_module(package)
    modules = [getattr(pkg, name) for name in dir(pkg) if name.endswith("_pb2")]
    assert modules
    with_strings = 0
    for module in modules:
        for name in module.DESCRIPTOR.message_types_by_name:
            cls = getattr(module, name)
            twin = utf8._twin(cls)
            with_strings += twin is not None
            assert utf8.invalid_utf8_field(cls(), b"") is None
    assert with_strings > 0
