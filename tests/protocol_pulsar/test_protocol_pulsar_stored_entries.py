"""Entries as Apache Pulsar's broker stores them: the bytes after the command of the producer's
SEND frame, so the producer's ``[0x0e01][crc32c]`` (and, with broker entry metadata
interceptors, ``[0x0e02][size][BrokerEntryMetadata]`` before it) precede the
``[metadataSize][MessageMetadata][payload]`` block that Magnetar stores alone."""

from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from broker.topics._entries import entry_metadata
from protocols.pulsar import (
    BrokerEntryMetadata,
    MessageMetadata,
    encode_metadata_and_payload,
    make_command,
    stored_entry_block,
)
from protocols.pulsar._frames import encode_payload_command


def _block(payload: bytes = b"hello") -> bytes:
    md = MessageMetadata(producer_name="p", sequence_id=7, publish_time=1234)
    return encode_metadata_and_payload(md, payload)


def _as_pulsar_stores(block: bytes, bem: BrokerEntryMetadata | None = None) -> bytes:
    head = b""
    if bem is not None:
        raw = bem.SerializeToString()
        head = struct.pack(">HI", 0x0E02, len(raw)) + raw
    return head + struct.pack(">HI", 0x0E01, crc32c(block)) + block


def test_checksum_header_is_skipped() -> None:
    block = _block()
    assert stored_entry_block(_as_pulsar_stores(block)) == block
    assert entry_metadata(stored_entry_block(_as_pulsar_stores(block))).sequence_id == 7


def test_broker_entry_metadata_and_checksum_are_skipped() -> None:
    block = _block()
    entry = _as_pulsar_stores(block, BrokerEntryMetadata(broker_timestamp=99, index=41))
    assert stored_entry_block(entry) == block


def test_what_follows_the_command_of_a_send_frame_is_read_as_its_block() -> None:
    """Pulsar's broker keeps exactly that part of the SEND frame (its ``headersAndPayload``)."""
    md = MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    send = make_command("SEND", producer_id=1, sequence_id=1)
    frame = encode_payload_command(send, md, b"payload")
    cmd_size = struct.unpack_from(">I", frame, 4)[0]
    headers_and_payload = frame[8 + cmd_size :]
    assert headers_and_payload[:2] == b"\x0e\x01"
    assert stored_entry_block(headers_and_payload) == encode_metadata_and_payload(md, b"payload")


def test_a_bare_block_is_returned_as_it_is() -> None:
    block = _block()
    assert stored_entry_block(block) is block


@given(st.binary(max_size=64))
def test_never_raises_and_only_drops_a_prefix(data: bytes) -> None:
    out = stored_entry_block(data)
    assert data.endswith(out)


def test_truncated_headers_are_left_for_the_parser() -> None:
    assert stored_entry_block(b"\x0e\x01\x00") == b"\x0e\x01\x00"
    assert stored_entry_block(b"\x0e\x02\x00\x00\x00\x09abc") == b"\x0e\x02\x00\x00\x00\x09abc"
