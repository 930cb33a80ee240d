"""managedLedgerDigestType: Pulsar's key and names, validated, passed to every ledger created."""

from __future__ import annotations

import pytest

from magnetar.common.config import ConfigError, load_config
from managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from protocols.bookkeeper import DigestType
from tests.support.managed_ledger import NAME, config


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("CRC32C", DigestType.CRC32C),
        ("crc32", DigestType.CRC32),
        ("MAC", DigestType.HMAC),
        ("HMAC", DigestType.HMAC),
        ("DUMMY", DigestType.DUMMY),
    ],
)
def test_pulsar_key_and_names(name: str, dtype: DigestType) -> None:
    cfg = load_config(ManagedLedgerConfig, {"managedLedgerDigestType": name})
    assert cfg.ledger_digest_type is dtype
    assert ManagedLedgerConfig().ledger_digest_type is DigestType.CRC32C


def test_an_unknown_type_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="digest_type"):
        ManagedLedgerConfig(digest_type="SHA1").validate()


async def test_new_ledgers_get_the_configured_type(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=2, digest_type="MAC"), clock) as f:
        ml = await f.open(NAME)
        for i in range(5):
            await ml.add_entry(b"e%d" % i)
    assert bk.created_digest_types and set(bk.created_digest_types.values()) == {DigestType.HMAC}
