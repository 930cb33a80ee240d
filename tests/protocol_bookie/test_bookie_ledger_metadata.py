"""Ledger metadata: encode/decode, validation, transitions; cookies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.bookkeeper import (
    Cookie,
    CookieFormatError,
    DigestType,
    LedgerMetadata,
    LedgerState,
    MetadataFormatError,
    Segment,
    ledger_metadata_pb2,
)

E3 = ("b1:3181", "b2:3181", "b3:3181")


def meta(**kw) -> LedgerMetadata:
    base = dict(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments=(Segment(0, E3),),
        password=b"pw",
        ctime_ms=1700000000000,
        custom_metadata={"component": b"ml"},
    )
    base.update(kw)
    return LedgerMetadata(**base)


def test_round_trip_and_header() -> None:
    m = meta()
    data = m.encode()
    assert data.startswith(b"BookieMetadataFormatVersion\t3\n")
    back = LedgerMetadata.decode(data)
    assert back == m
    assert back.state is LedgerState.OPEN and back.last_entry_id == -1
    assert back.custom_metadata == {"component": b"ml"}
    assert back.digest_type is DigestType.CRC32C


def test_body_is_length_delimited_ledger_metadata_format() -> None:
    data = meta().encode()
    body = data[len(b"BookieMetadataFormatVersion\t3\n") :]
    assert body[0] == len(body) - 1  # a one-byte varint for a small record
    fmt = ledger_metadata_pb2.LedgerMetadataFormat.FromString(body[1:])
    assert (fmt.quorumSize, fmt.ensembleSize, fmt.ackQuorumSize) == (2, 3, 2)
    assert list(fmt.segment[0].ensembleMember) == list(E3)


def test_encoding_is_deterministic() -> None:
    a = meta(custom_metadata={"a": b"1", "b": b"2"})
    b = meta(custom_metadata={"b": b"2", "a": b"1"})
    assert a == b and a.encode() == b.encode() and hash(a) == hash(b)


def test_transitions() -> None:
    m = meta()
    m2 = m.with_segment(10, ("b1:3181", "b4:3181", "b3:3181"))
    assert m2.ensemble_for(9) == E3
    assert m2.ensemble_for(10) == ("b1:3181", "b4:3181", "b3:3181")
    assert m2.ensemble_for(10**12) == m2.last_segment.ensemble
    # replacing the last segment at the same first entry
    m3 = m2.with_segment(10, ("b1:3181", "b5:3181", "b3:3181"))
    assert len(m3.segments) == 2 and m3.last_segment.ensemble[1] == "b5:3181"
    r = m3.in_recovery()
    assert r.state is LedgerState.IN_RECOVERY and r.in_recovery() == r
    c = r.closed(12, 4096)
    assert (c.state, c.last_entry_id, c.length, c.is_closed) == (LedgerState.CLOSED, 12, 4096, True)
    assert LedgerMetadata.decode(c.encode()) == c
    for op in (lambda: c.closed(13, 1), c.in_recovery, lambda: c.with_segment(20, E3)):
        with pytest.raises(ValueError):
            op()
    with pytest.raises(ValueError):
        m.ensemble_for(-1)


def test_many_segments_lookup() -> None:
    m = meta()
    for first in range(5, 500, 5):
        m = m.with_segment(first, (f"x{first}", "b2", "b3"))
    assert m.ensemble_for(0) == E3
    assert m.ensemble_for(4) == E3
    assert m.ensemble_for(7)[0] == "x5"
    assert m.ensemble_for(499)[0] == "x495"


@pytest.mark.parametrize(
    "kw",
    [
        {"ack_quorum": 3},  # Qa > Qw
        {"write_quorum": 4, "ack_quorum": 2},  # Qw > E
        {"ack_quorum": 0},
        {"segments": ()},
        {"segments": (Segment(1, E3),)},  # must start at 0
        {"segments": (Segment(0, E3), Segment(0, E3))},  # not increasing
        {"segments": (Segment(0, E3), Segment(5, E3), Segment(3, E3))},
        {"segments": (Segment(0, ("a", "b")),)},  # not E bookies
        {"segments": (Segment(0, ("a", "a", "b")),)},  # duplicate bookie
        {"last_entry_id": -2},
        {"length": -1},
        {"state": LedgerState.CLOSED, "last_entry_id": 3, "segments": (Segment(0, E3), Segment(9, E3))},
    ],
)
def test_validation(kw) -> None:
    with pytest.raises(ValueError):
        meta(**kw)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage",
        b"BookieMetadataFormatVersion\t",
        b"BookieMetadataFormatVersion\t2\nquorumSize: 2\n",  # text format (v2) lacking fields
        b"BookieMetadataFormatVersion\t2\nquorumSize: two\n",  # v2 text unparsable
        b"BookieMetadataFormatVersion\t1\n2\n3\n0\n0\tb1:3181\n",  # the 4.0 text format: unsupported
        b"BookieMetadataFormatVersion\tx\n\x00",
        b"BookieMetadataFormatVersion\t3",
        b"BookieMetadataFormatVersion\t3\n",  # no length
        b"BookieMetadataFormatVersion\t3\n\x80",  # truncated varint
        b"BookieMetadataFormatVersion\t3\n\x05\x08",  # body shorter than its length
        b"BookieMetadataFormatVersion\t3\n\x02\xff\xff",  # unparsable body
        b"BookieMetadataFormatVersion\t3\n\x00",  # required fields missing
    ],
)
def test_garbage_rejected(data: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        LedgerMetadata.decode(data)


# What BookKeeper's LedgerMetadataSerDe.serializeVersion2 writes (TextFormat of the message, no cToken)
V2_TEXT = b"""BookieMetadataFormatVersion\t2
quorumSize: 2
ensembleSize: 3
length: 120
lastEntryId: 4
state: CLOSED
segment {
  ensembleMember: "b1:3181"
  ensembleMember: "b2:3181"
  ensembleMember: "b3:3181"
  firstEntryId: 0
}
digestType: CRC32
password: "pw"
ackQuorumSize: 2
ctime: 1700000000000
"""


def test_format_2_text_is_read_and_written_back_in_it() -> None:
    m = LedgerMetadata.decode(V2_TEXT)
    assert m.format_version == 2 and m.digest_type is DigestType.CRC32 and m.state is LedgerState.CLOSED
    assert (m.last_entry_id, m.length, m.password, m.ctime_ms) == (4, 120, b"pw", 1700000000000)
    assert m.encode() == V2_TEXT
    opened = LedgerMetadata.decode(m.encode())
    assert opened == m and opened.format_version == 2
    assert meta().encode().startswith(b"BookieMetadataFormatVersion\t3\n")  # new ledgers: format 3


def test_trailing_bytes_and_invalid_values_rejected() -> None:
    with pytest.raises(MetadataFormatError):
        LedgerMetadata.decode(meta().encode() + b"\x00")
    fmt = meta().to_proto()
    fmt.ackQuorumSize = 3  # Qa > Qw
    body = fmt.SerializeToString()
    with pytest.raises(MetadataFormatError):
        LedgerMetadata.decode(b"BookieMetadataFormatVersion\t3\n" + bytes([len(body)]) + body)


def test_absent_optional_fields_take_bookkeeper_defaults() -> None:
    fmt = ledger_metadata_pb2.LedgerMetadataFormat(quorumSize=2, ensembleSize=3, length=0, state=1)
    fmt.segment.add(firstEntryId=0, ensembleMember=list(E3))
    m = LedgerMetadata.from_proto(fmt)
    assert m.ack_quorum == 2 and m.last_entry_id == -1 and m.ctime_ms is None
    assert m.digest_type is DigestType.CRC32


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda e: st.tuples(st.just(e), st.integers(1, e)).flatmap(
            lambda t: st.tuples(st.just(t[0]), st.just(t[1]), st.integers(1, t[1]))
        )
    ),
    st.lists(st.integers(1, 10**6), max_size=5, unique=True),
    st.sampled_from(list(LedgerState)),
    st.binary(max_size=20),
    st.dictionaries(st.text(max_size=5), st.binary(max_size=5), max_size=3),
    st.one_of(st.none(), st.integers(0, 2**62)),
)
def test_round_trip_property(quorums, firsts, state, password, custom, ctime) -> None:
    e, qw, qa = quorums
    segs = [Segment(f, tuple(f"b{f}-{i}" for i in range(e))) for f in sorted({0, *firsts})]
    last = segs[-1].first_entry_id + 3 if state is LedgerState.CLOSED else -1
    m = LedgerMetadata(e, qw, qa, tuple(segs), state, last, 0, DigestType.CRC32C, password, ctime, custom)
    assert LedgerMetadata.decode(m.encode()) == m


def test_cookie_round_trip_and_mismatch() -> None:
    c = Cookie("b1:3181", "/data/journal", ("/data/l1", "/data/l2"), "inst-1")
    assert Cookie.decode(c.encode()) == c
    assert Cookie.decode(Cookie("b", "/j", ()).encode()) == Cookie("b", "/j", ())
    other = Cookie("b1:3181", "/data/journal", ("/data/l1",), "inst-2")
    assert c.mismatches(other) == ["ledger_dirs", "instance_id"]
    assert c.mismatches(c) == []
    for bad in (b"", b"junk", b"MagnetarCookieVersion\t1\n\xff", b"MagnetarCookieVersion\t1\n"):
        with pytest.raises(CookieFormatError):
            Cookie.decode(bad)
