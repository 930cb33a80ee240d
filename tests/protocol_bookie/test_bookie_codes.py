"""The Python enums equal the .proto enums name for name, number for number."""

from __future__ import annotations

import pytest

from protocols.bookkeeper import (
    BookieInfoFlag,
    DigestType,
    LedgerState,
    OperationType,
    StatusCode,
    bookie_protocol_pb2,
    ledger_metadata_pb2,
)

PB_FMT = ledger_metadata_pb2.LedgerMetadataFormat


@pytest.mark.parametrize(
    ("py", "pb"),
    [
        (StatusCode, bookie_protocol_pb2.StatusCode),
        (OperationType, bookie_protocol_pb2.OperationType),
        (BookieInfoFlag, bookie_protocol_pb2.GetBookieInfoRequest.Flags),
        (LedgerState, PB_FMT.State),
        (DigestType, PB_FMT.DigestType),
    ],
)
def test_enum_matches_proto(py, pb) -> None:
    assert {m.name: int(m) for m in py} == dict(pb.items())


def test_bookkeeper_numbers() -> None:
    assert [
        StatusCode.EOK,
        StatusCode.ENOLEDGER,
        StatusCode.ENOENTRY,
        StatusCode.EBADREQ,
        StatusCode.EIO,
        StatusCode.EUA,
        StatusCode.EBADVERSION,
        StatusCode.EFENCED,
        StatusCode.EREADONLY,
        StatusCode.ETOOMANYREQUESTS,
    ] == [0, 402, 403, 404, 501, 502, 503, 504, 505, 506]
    ops = OperationType
    assert (ops.READ_ENTRY, ops.ADD_ENTRY, ops.WRITE_LAC, ops.READ_LAC, ops.GET_BOOKIE_INFO, ops.FORCE_LEDGER) == (
        1,
        2,
        6,
        7,
        8,
        10,
    )
    assert bookie_protocol_pb2.AddRequest.RECOVERY_ADD == 1
    assert bookie_protocol_pb2.ReadRequest.FENCE_LEDGER == 1
    assert bookie_protocol_pb2.ReadRequest.ENTRY_PIGGYBACK == 2
