"""BookKeeper's v2 bookie protocol (its clients with useV2WireProtocol): packets as
BookieProtoEncoding's RequestEnDeCoderPreV3 writes them, responses as its ResponseEnDeCoderPreV3
writes them. The Java client itself speaks it to Magnetar bookies in tests/bk_interop."""

from __future__ import annotations

import struct

import pytest

from protocols.bookkeeper import (
    MalformedFrame,
    StatusCode,
    V2Flag,
    V2Op,
    add_request,
    encode_entry,
    encode_request,
    encode_v2_response,
    is_v2_payload,
    parse_v2_request,
    v2_status,
)

KEY = bytes(range(20))


def header(op: int, flags: int = 0, version: int = 2) -> bytes:
    return struct.pack(">i", version << 24 | op << 16 | flags)


def test_add_packet() -> None:
    body = encode_entry(7, 3, 2, 100, b"payload")
    req = parse_v2_request(header(1, V2Flag.RECOVERY_ADD | V2Flag.HIGH_PRIORITY) + KEY + body)
    assert (req.op, req.ledger_id, req.entry_id, req.master_key, req.body) == (V2Op.ADD_ENTRY, 7, 3, KEY, body)
    assert req.flags == V2Flag.RECOVERY_ADD | V2Flag.HIGH_PRIORITY and req.version == 2


def test_read_and_fencing_read_packets() -> None:
    plain = parse_v2_request(header(2) + struct.pack(">qq", 7, -1))
    assert (plain.op, plain.ledger_id, plain.entry_id, plain.master_key) == (V2Op.READ_ENTRY, 7, -1, b"")
    fence = parse_v2_request(header(2, V2Flag.DO_FENCING) + struct.pack(">qq", 7, -1) + KEY)
    assert fence.flags & V2Flag.DO_FENCING and fence.master_key == KEY
    old = parse_v2_request(struct.pack(">i", 2) + struct.pack(">qq", 1, 2))  # version 0: the bare op code
    assert (old.version, old.op, old.flags) == (0, V2Op.READ_ENTRY, V2Flag.NONE)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x02",
        header(2) + b"\x00" * 8,
        header(1) + KEY,
        header(2, V2Flag.DO_FENCING) + b"\x00" * 16 + b"k",
        header(3) + b"auth",
        header(7) + b"\x00" * 36,
    ],
)
def test_what_is_not_served_or_too_short_is_malformed(payload: bytes) -> None:
    with pytest.raises(MalformedFrame):
        parse_v2_request(payload)


def test_v3_and_v2_payloads_are_told_apart() -> None:
    v3 = encode_request(add_request(1, 7, 0, KEY, b"x"))[4:]
    assert not is_v2_payload(v3) and is_v2_payload(header(1)) and is_v2_payload(struct.pack(">i", 1))


def test_response_bytes() -> None:
    # the frame length counts the 24 header bytes (RESPONSE_HEADERS_SIZE) and the body
    assert encode_v2_response(2, 1, 0, 7, 3) == struct.pack(">Iiiqq", 24, 2 << 24 | 1 << 16, 0, 7, 3)
    read = encode_v2_response(2, 2, v2_status(StatusCode.EOK), 7, -1, b"entry")
    assert read == struct.pack(">Iiiqq", 29, 2 << 24 | 2 << 16, 0, 7, -1) + b"entry"
    assert [
        v2_status(s)
        for s in (StatusCode.ENOLEDGER, StatusCode.ENOENTRY, StatusCode.EFENCED, StatusCode.EUA, StatusCode.EBADREQ)
    ] == [1, 2, 104, 102, 100]
