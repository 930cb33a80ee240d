"""Request/response constructors and the frame codec, without sockets."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.bookkeeper import (
    PROTOCOL_VERSION,
    BookieInfoFlag,
    FrameDecoder,
    FrameTooLarge,
    MalformedFrame,
    OperationType,
    StatusCode,
    add_request,
    add_response,
    encode_frame,
    encode_request,
    encode_response,
    error_response,
    force_ledger_request,
    force_ledger_response,
    get_bookie_info_request,
    get_bookie_info_response,
    operation_of,
    parse_request,
    parse_response,
    read_lac_request,
    read_lac_response,
    read_request,
    read_response,
    request_body,
    response_body,
    write_lac_request,
    write_lac_response,
)
from protocols.bookkeeper import (
    bookie_protocol_pb2 as pb,
)

REQUESTS = [
    add_request(1, 7, 0, b"k" * 20, b"body"),
    add_request(2, 7, 1, b"k", b"", recovery=True, write_flags=1, priority=3, context=[("trace", "x")]),
    read_request(3, 7, 5),
    read_request(4, 7, -1, fence=True, master_key=b"k"),
    read_request(5, 7, 6, piggyback=True, previous_lac=5, timeout_ms=1000),
    read_lac_request(6, 7),
    write_lac_request(7, 7, 42, b"k", b"lacbody"),
    force_ledger_request(8, 7),
    get_bookie_info_request(2**64 - 1),
    get_bookie_info_request(9, BookieInfoFlag.FREE_DISK_SPACE),
]

RESPONSES = [
    add_response(1, StatusCode.EOK, 7, 0),
    add_response(2, StatusCode.EFENCED, 7, 1),
    read_response(3, StatusCode.EOK, 7, 5, body=b"entry", max_lac=4, lac_update_timestamp=99),
    read_response(4, StatusCode.ENOENTRY, 7, 9),
    read_lac_response(6, StatusCode.EOK, 7, lac_body=b"l", last_entry_body=b"e"),
    write_lac_response(7, StatusCode.EUA, 7),
    force_ledger_response(8, StatusCode.EOK, 7),
    get_bookie_info_response(9, StatusCode.EOK, total_disk_capacity=10**12, free_disk_space=10**9),
]

EXPECTED_OPS = {
    "addRequest": OperationType.ADD_ENTRY,
    "readRequest": OperationType.READ_ENTRY,
    "readLacRequest": OperationType.READ_LAC,
    "writeLacRequest": OperationType.WRITE_LAC,
    "forceLedgerRequest": OperationType.FORCE_LEDGER,
    "getBookieInfoRequest": OperationType.GET_BOOKIE_INFO,
}


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: f"{operation_of(r).name}-{r.header.txnId}")
def test_request_round_trip(req: pb.Request) -> None:
    frame = encode_request(req)
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    dec = FrameDecoder()
    dec.feed(frame)
    got = dec.next_request()
    assert got == req
    assert got.header.version == PROTOCOL_VERSION
    body = request_body(got)
    assert body is not None
    assert EXPECTED_OPS[body.DESCRIPTOR.name[0].lower() + body.DESCRIPTOR.name[1:]] == operation_of(got)
    assert dec.next_request() is None
    assert dec.buffered_bytes == 0


@pytest.mark.parametrize("resp", RESPONSES, ids=lambda r: f"{operation_of(r).name}-{r.header.txnId}")
def test_response_round_trip(resp: pb.Response) -> None:
    dec = FrameDecoder()
    dec.feed(encode_response(resp))
    got = dec.next_response()
    assert got == resp
    sub = response_body(got)
    assert sub is not None and sub.status == got.status


def test_request_fields() -> None:
    add = add_request(1, 7, 3, b"key", b"body", recovery=True).addRequest
    assert (add.ledgerId, add.entryId, add.masterKey, add.body, add.flag) == (7, 3, b"key", b"body", 1)
    assert not add_request(1, 7, 3, b"key", b"b").addRequest.HasField("flag")
    fence = read_request(1, 7, -1, fence=True, master_key=b"key").readRequest
    assert fence.flag == pb.ReadRequest.FENCE_LEDGER and fence.masterKey == b"key"
    poll = read_request(1, 7, 3, piggyback=True, previous_lac=2, timeout_ms=50).readRequest
    assert (poll.flag, poll.previousLAC, poll.timeOut) == (pb.ReadRequest.ENTRY_PIGGYBACK, 2, 50)
    plain = read_response(1, StatusCode.EOK, 7, 3, body=b"x").readResponse
    assert not plain.HasField("maxLAC")
    assert read_response(1, 0, 7, 3, max_lac=-1).readResponse.maxLAC == -1
    info = get_bookie_info_response(1, 0, free_disk_space=5).getBookieInfoResponse
    assert info.freeDiskSpace == 5 and not info.HasField("totalDiskCapacity")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fence": True},  # fencing needs the master key
        {"fence": True, "master_key": b"k", "piggyback": True},
        {"previous_lac": 3},  # long poll needs piggyback
    ],
)
def test_read_request_rejects_bad_flag_combinations(kwargs) -> None:
    with pytest.raises(ValueError):
        read_request(1, 7, 0, **kwargs)


def test_txn_id_must_be_u64() -> None:
    with pytest.raises(ValueError):
        read_lac_request(-1, 7)
    with pytest.raises(ValueError):
        read_lac_request(2**64, 7)


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: f"{operation_of(r).name}-{r.header.txnId}")
def test_error_response_echoes_request(req: pb.Request) -> None:
    resp = parse_response(encode_response(error_response(req, StatusCode.EIO))[4:])
    assert resp.header.txnId == req.header.txnId
    assert resp.header.operation == req.header.operation
    assert resp.status == StatusCode.EIO
    sub, body = response_body(resp), request_body(req)
    assert sub.status == StatusCode.EIO
    if hasattr(body, "ledgerId"):
        assert sub.ledgerId == body.ledgerId
    if hasattr(sub, "entryId"):
        assert sub.entryId == body.entryId


def test_error_response_without_sub_request() -> None:
    req = pb.Request()
    req.header.version, req.header.operation, req.header.txnId = 3, OperationType.ADD_ENTRY, 5
    assert request_body(req) is None
    resp = error_response(req, StatusCode.EBADREQ)
    assert resp.status == StatusCode.EBADREQ and response_body(resp) is None
    assert parse_response(encode_response(resp)[4:]) == resp


def test_encoding_incomplete_message_raises() -> None:
    with pytest.raises(MalformedFrame):
        encode_request(pb.Request())


def test_byte_by_byte_feeding() -> None:
    stream = b"".join(encode_request(r) for r in REQUESTS)
    dec = FrameDecoder()
    got = []
    for i in range(len(stream)):
        dec.feed(stream[i : i + 1])
        while (req := dec.next_request()) is not None:
            got.append(req)
    assert got == REQUESTS
    assert dec.buffered_bytes == 0


def test_many_frames_in_one_feed() -> None:
    reqs = [add_request(i, 1, i, b"k", b"x" * 100) for i in range(2000)]
    dec = FrameDecoder()
    dec.feed(b"".join(encode_request(r) for r in reqs))
    out = []
    while (r := dec.next_request()) is not None:
        out.append(r.header.txnId)
    assert out == list(range(2000))


def test_compaction_keeps_partial_frame() -> None:
    frame = encode_request(add_request(1, 1, 1, b"k", b"y" * 1000))
    dec = FrameDecoder()
    for _ in range(200):  # crosses the compaction threshold many times with a partial tail
        dec.feed(frame + frame[:10])
        assert dec.next_request() is not None
        dec.feed(frame[10:])
        assert dec.next_request() is not None
        assert dec.next_request() is None
    assert dec.buffered_bytes == 0


def test_oversized_frame_poisons_decoder() -> None:
    dec = FrameDecoder(max_frame_size=100)
    dec.feed(struct.pack(">I", 101))  # rejected on the prefix alone, before any body arrives
    with pytest.raises(FrameTooLarge) as info:
        dec.next_frame()
    assert (info.value.size, info.value.limit) == (101, 100)
    with pytest.raises(FrameTooLarge):
        dec.next_request()
    with pytest.raises(FrameTooLarge):
        dec.feed(b"more")


def test_frame_at_limit_is_accepted() -> None:
    dec = FrameDecoder(max_frame_size=100)
    dec.feed(encode_frame(b"\x00" * 100))
    assert dec.next_frame() == b"\x00" * 100


def test_truncated_frame_waits() -> None:
    frame = encode_request(REQUESTS[0])
    for cut in range(len(frame)):
        dec = FrameDecoder()
        dec.feed(frame[:cut])
        assert dec.next_request() is None
        assert dec.buffered_bytes == cut


def test_garbage_frame_is_malformed_and_decoder_continues() -> None:
    dec = FrameDecoder()
    dec.feed(encode_frame(b"\xff\xff\xff") + encode_request(REQUESTS[2]))
    with pytest.raises(MalformedFrame):
        dec.next_request()
    assert dec.next_request() == REQUESTS[2]


def test_missing_required_fields_is_malformed() -> None:
    with pytest.raises(MalformedFrame):
        parse_request(b"")  # no header
    no_ledger = pb.Request()
    no_ledger.header.version, no_ledger.header.operation, no_ledger.header.txnId = 3, 2, 1
    no_ledger.addRequest.entryId = 1  # partial sub-request serialised without the check
    with pytest.raises(MalformedFrame):
        parse_request(no_ledger.SerializePartialToString())
    with pytest.raises(MalformedFrame):
        parse_response(pb.BKPacketHeader(version=3, operation=2, txnId=1).SerializeToString())


def test_request_bytes_are_not_a_response() -> None:
    with pytest.raises(MalformedFrame):
        parse_response(encode_request(REQUESTS[0])[4:])


def test_invalid_max_frame_size() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(0)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=64))
def test_arbitrary_bytes_never_crash(data: bytes, chunk: int) -> None:
    dec = FrameDecoder(max_frame_size=64)
    try:
        for i in range(0, len(data), chunk):
            dec.feed(data[i : i + chunk])
            while True:
                try:
                    if dec.next_request() is None:
                        break
                except MalformedFrame:
                    continue
    except FrameTooLarge:
        pass


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(REQUESTS), max_size=20), st.lists(st.integers(1, 50), min_size=1))
def test_any_chunking_yields_the_same_frames(reqs: list[pb.Request], chunks: list[int]) -> None:
    stream = b"".join(encode_request(r) for r in reqs)
    dec = FrameDecoder()
    out, pos, i = [], 0, 0
    while pos < len(stream):
        n = chunks[i % len(chunks)]
        dec.feed(stream[pos : pos + n])
        pos, i = pos + n, i + 1
        while (r := dec.next_request()) is not None:
            out.append(r)
    assert out == reqs


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 2**64 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-1, 2**63 - 1),
    st.binary(max_size=64),
    st.binary(max_size=256),
    st.booleans(),
)
def test_add_round_trip_property(txn, ledger, entry, key, body, recovery) -> None:
    req = add_request(txn, ledger, entry, key, body, recovery=recovery)
    assert parse_request(encode_request(req)[4:]) == req


def test_unknown_operation_number_is_malformed() -> None:
    # proto2 enums are closed: an undefined operation leaves the required field unset
    raw = add_request(1, 7, 0, b"k", b"b").SerializeToString().replace(b"\x10\x02", b"\x10\x63", 1)
    with pytest.raises(MalformedFrame):
        parse_request(raw)
