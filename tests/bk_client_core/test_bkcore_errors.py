"""The client's error types: hierarchy, codes, messages, bookie status mapping."""

from __future__ import annotations

import pytest

import bk_client
from bk_client import (
    BKError,
    BookieUnavailable,
    DigestMismatch,
    LedgerClosed,
    LedgerFenced,
    MetadataVersionConflict,
    NoSuchEntry,
    NoSuchLedger,
    NotEnoughBookies,
    ReadError,
    ReadOnlyBookie,
    Timeout,
    TooManyRequests,
    Unauthorized,
    WriteError,
    error_for_bookie_status,
)
from protocols import bookkeeper as protocol


def test_every_error_is_a_bkerror_with_a_distinct_code() -> None:
    kinds = [
        getattr(bk_client, n)
        for n in bk_client.__all__
        if isinstance(getattr(bk_client, n), type) and issubclass(getattr(bk_client, n), Exception)
    ]
    assert len(kinds) >= 18
    assert all(issubclass(k, BKError) for k in kinds)
    codes = [k.code for k in kinds]
    assert len(codes) == len(set(codes))
    # BookKeeper's numbers for the common ones
    assert (LedgerFenced.code, NoSuchLedger.code, NoSuchEntry.code, NotEnoughBookies.code) == (-101, -7, -13, -6)
    assert (MetadataVersionConflict.code, TooManyRequests.code, Timeout.code) == (-17, -105, -23)


def test_messages_name_the_subject() -> None:
    assert str(NoSuchLedger(5)) == "no such ledger: 5"
    assert str(NoSuchEntry(5, 9)) == "no such entry: 9 in ledger 5"
    assert str(LedgerFenced(ledger_id=3)) == "ledger is fenced (ledger 3)"
    assert str(LedgerClosed()) == "ledger is closed"
    assert "bookie-1" in str(BookieUnavailable("bookie-1"))
    e = NotEnoughBookies(3, 1, ledger_id=4)
    assert (e.needed, e.available, e.ledger_id) == (3, 1, 4)
    assert str(e) == "not enough bookies: needed 3, 1 available for ledger 4"


def test_digest_mismatch_is_both_kinds() -> None:
    with pytest.raises(protocol.DigestMismatch):
        raise DigestMismatch("bad checksum for entry 3", ledger_id=1)
    assert issubclass(DigestMismatch, BKError)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (402, NoSuchLedger),
        (403, NoSuchEntry),
        (501, WriteError),
        (502, Unauthorized),
        (504, LedgerFenced),
        (505, ReadOnlyBookie),
        (506, TooManyRequests),
    ],
)
def test_bookie_status_mapping(status: int, kind: type[BKError]) -> None:
    err = error_for_bookie_status(status, ledger_id=1, entry_id=2, bookie_id="b1:3181")
    assert type(err) is kind
    assert "b1:3181" in str(err) and err.ledger_id == 1


def test_bookie_status_special_cases() -> None:
    assert error_for_bookie_status(0) is None
    assert type(error_for_bookie_status(501, reading=True)) is ReadError
    unknown = error_for_bookie_status(999, bookie_id="b")
    assert type(unknown) is BKError and "999" in str(unknown)
