"""Under-replication names and records that bench/fuzz_decoders.py fed to their decoders."""

from __future__ import annotations

import pytest

from autorecovery._underreplication import _ledger_id_of, decode_ur_record


def test_lock_name_with_non_ascii_digits_is_not_a_ledger() -> None:
    # Before: "²".isdigit() is True and int("²") raised ValueError while listing the locks.
    assert _ledger_id_of("urL²") is None
    assert _ledger_id_of("urL0000000007") == 7


@pytest.mark.parametrize("data", [b"\xff\xfe", b"ctime: \xc2\xb2\n", b"replica: x\n", b"no separator\n"])
def test_malformed_records_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_ur_record(data)
