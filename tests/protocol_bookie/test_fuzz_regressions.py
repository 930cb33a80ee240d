"""Inputs that bench/fuzz_decoders.py found crashing the bookie-protocol decoders, kept as tests.

upb hands proto2 ``string`` fields holding invalid UTF-8 back as ``bytes``; before the fix a
request with such an auth plugin name made the server's ``error_response`` raise
UnicodeDecodeError, a cookie's ledger dirs raised TypeError on ``split`` and a ledger's bookie
ids failed to re-encode. Each decoder now raises its documented error instead.
"""

from __future__ import annotations

import pytest

from protocols.bookkeeper import (
    Cookie,
    CookieFormatError,
    FrameDecoder,
    LedgerMetadata,
    MalformedFrame,
    MetadataFormatError,
    OperationType,
    Segment,
    StatusCode,
    add_request,
    encode_entry,
    encode_request,
    encode_response,
    error_response,
    parse_request,
    parse_response,
)
from protocols.bookkeeper import (
    bookie_protocol_pb2 as pb,
)
from protocols.bookkeeper import (
    ledger_metadata_pb2 as lpb,
)

BAD = b"\xff\xfe"


def _corrupt(encoded: bytes, text: str) -> bytes:
    raw = text.encode()
    assert encoded.count(raw) == 1
    return encoded.replace(raw, (BAD * len(raw))[: len(raw)])


def _auth_request(plugin: str) -> pb.Request:
    req = pb.Request()
    req.header.version, req.header.operation, req.header.txnId = 3, OperationType.AUTH, 7
    req.authRequest.authPluginName, req.authRequest.payload = plugin, b"token"
    return req


# ------------------------------------------------------------------------------- frames


def test_request_with_a_string_that_is_not_utf8_is_a_malformed_frame() -> None:
    # Before: it parsed, and the server's error_response(req, EBADREQ) raised UnicodeDecodeError
    # copying authPluginName into the response.
    bad = _corrupt(_auth_request("the-plugin").SerializeToString(), "the-plugin")
    with pytest.raises(MalformedFrame, match=r"AuthMessage\.authPluginName is not UTF-8"):
        parse_request(bad)


def test_request_context_is_checked_and_the_decoder_goes_on() -> None:
    add = add_request(1, 5, 6, b"key", encode_entry(5, 6, 5, 3, b"abc"), context=[("trace-id", "v")])
    frame = _corrupt(encode_request(add), "trace-id")
    decoder = FrameDecoder()
    decoder.feed(frame + encode_request(add))
    with pytest.raises(MalformedFrame, match=r"ContextPair\.key is not UTF-8"):
        decoder.next_request()
    assert decoder.next_request().addRequest.entryId == 6


def test_response_with_a_string_that_is_not_utf8_is_a_malformed_frame() -> None:
    resp = error_response(_auth_request("the-plugin"), StatusCode.EUA)
    with pytest.raises(MalformedFrame, match="not UTF-8"):
        parse_response(_corrupt(resp.SerializeToString(), "the-plugin"))


def test_every_parsed_request_can_be_answered() -> None:
    req = parse_request(_auth_request("plugin").SerializeToString())
    answer = encode_response(error_response(req, StatusCode.EBADREQ))
    assert parse_response(answer[4:]).status == StatusCode.EBADREQ


# ------------------------------------------------------------------------------- cookies


def _cookie_bytes(**fields: str) -> bytes:
    return b"MagnetarCookieVersion\t1\n" + lpb.CookieFormat(**fields).SerializeToString()


def test_cookie_dir_count_in_non_ascii_digits_is_a_format_error() -> None:
    # Before: "²".isdigit() is True, int("²") raised ValueError past the decoder.
    with pytest.raises(CookieFormatError, match="malformed"):
        Cookie.decode(_cookie_bytes(bookieHost="b", journalDir="/j", ledgerDirs="²\t/a\t/b"))


@pytest.mark.parametrize("field", ["bookieHost", "journalDir", "ledgerDirs", "instanceId"])
def test_cookie_field_not_utf8_is_a_format_error(field: str) -> None:
    # Before: ledgerDirs raised TypeError (bytes.split("\t")); the others came back as bytes.
    fields = {
        "bookieHost": "bookie-a",
        "journalDir": "/journal",
        "ledgerDirs": "1\t/ledger-dir",
        "instanceId": "instance",
    }
    data = _cookie_bytes(**fields)
    with pytest.raises(CookieFormatError, match=f"CookieFormat.{field} is not UTF-8"):
        Cookie.decode(_corrupt(data, fields[field].split("\t")[-1]))


def test_valid_cookie_still_round_trips() -> None:
    cookie = Cookie("bookie-1:3181", "/data/jöurnal", ("/data/l1", "/data/l2"), "inst")
    assert Cookie.decode(cookie.encode()) == cookie


# ------------------------------------------------------------------------------- ledger metadata


def test_ledger_metadata_with_a_bookie_id_not_utf8_is_a_format_error() -> None:
    # Before: it decoded with a bytes bookie id, and re-encoding it raised UnicodeDecodeError.
    md = LedgerMetadata(2, 2, 1, (Segment(0, ("bookie-one:3181", "b2:3181")),), custom_metadata={"k": b"\xff"})
    with pytest.raises(MetadataFormatError, match="ensembleMember is not UTF-8"):
        LedgerMetadata.decode(_corrupt(md.encode(), "bookie-one"))
    assert LedgerMetadata.decode(md.encode()) == md  # bytes values stay bytes: only strings are checked
