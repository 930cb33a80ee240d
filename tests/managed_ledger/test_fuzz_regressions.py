"""Managed-ledger and cursor records that bench/fuzz_decoders.py found crashing their decoders.

upb hands proto2 ``string`` fields holding invalid UTF-8 back as ``bytes``: a ledger list with
such a property key decoded, then failed to re-encode (TypeError sorting bytes with str,
UnicodeDecodeError copying it); the decoders now raise MLFormatError.
"""

from __future__ import annotations

import pytest

from protocols.managed_ledger import CursorInfo, LedgerInfo, ManagedLedgerInfo, MLFormatError, Position

BAD = b"\xff\xfe"


def _corrupt(encoded: bytes, text: str) -> bytes:
    raw = text.encode()
    assert encoded.count(raw) == 1
    return encoded.replace(raw, (BAD * len(raw))[: len(raw)])


@pytest.mark.parametrize("text", ["prop-key", "prop-value"])
def test_ledger_list_property_not_utf8_is_a_format_error(text: str) -> None:
    info = ManagedLedgerInfo((LedgerInfo(3, 10, 100),), properties={"prop-key": "prop-value", "a": "b"})
    with pytest.raises(MLFormatError, match="not UTF-8"):
        ManagedLedgerInfo.decode(_corrupt(info.encode(), text))
    assert ManagedLedgerInfo.decode(info.encode()) == info


@pytest.mark.parametrize("text", ["mark-prop", "cursor-prop", "cursor-value"])
def test_cursor_property_not_utf8_is_a_format_error(text: str) -> None:
    info = CursorInfo(Position(3, 4), properties={"mark-prop": 7}, cursor_properties={"cursor-prop": "cursor-value"})
    with pytest.raises(MLFormatError, match="not UTF-8"):
        CursorInfo.decode(_corrupt(info.encode(), text))
    assert CursorInfo.decode(info.encode()) == info
