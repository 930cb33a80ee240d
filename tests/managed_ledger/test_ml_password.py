"""managedLedgerPassword: new ledgers are created with it; ledgers created with the old empty
password stay readable after it is set (the recovery open of the last ledger and reads of older
ones); a ledger with another password cannot be opened."""

from __future__ import annotations

import pytest

from bk_client import Unauthorized
from magnetar.common.config import load_config
from managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory
from tests.support.managed_ledger import NAME, config


def test_config_key_has_pulsars_name() -> None:
    cfg = load_config(ManagedLedgerConfig, {"managedLedgerPassword": "s3cret"})
    assert cfg.ledger_password == b"s3cret" and cfg.read_passwords == (b"s3cret", b"")
    assert ManagedLedgerConfig().read_passwords == (b"",)


async def test_old_empty_password_ledgers_stay_readable(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=3), clock) as f:
        ml = await f.open(NAME)
        await ml.open_cursor("sub", InitialPosition.EARLIEST)
        for i in range(7):  # three ledgers, the last one left open
            await ml.add_entry(b"old%d" % i)
    old_ledgers = sorted(bk._ledgers)
    assert {bk._ledgers[lid].password for lid in old_ledgers} == {b""}

    secret = config(max_entries_per_ledger=3, password="s3cret")
    async with ManagedLedgerFactory(bk, store, secret, clock) as f:
        ml = await f.open(NAME)  # recovers the last old ledger with the legacy password
        await ml.add_entry(b"new0")
        new_ledgers = sorted(set(bk._ledgers) - set(old_ledgers))
        assert new_ledgers and {bk._ledgers[lid].password for lid in new_ledgers} == {b"s3cret"}
    async with ManagedLedgerFactory(bk, store, secret, clock) as f:  # a fresh reader: no cached handle
        ml = await f.open(NAME)
        entries = await ml.cursors["sub"].read_entries(100)
        assert [e.data for e in entries] == [b"old%d" % i for i in range(7)] + [b"new0"]


async def test_a_ledger_with_another_password_cannot_be_opened(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(password="one"), clock) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"x")
    (lid,) = bk._ledgers
    with pytest.raises(Unauthorized):
        await bk.open_ledger(lid, password=b"", recovery=False)
    assert (await bk.open_ledger(lid, password=b"one", recovery=False)).last_add_confirmed == 0
