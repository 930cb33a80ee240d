"""Several journal directories (``journalDirectories``): ledger ``l`` is journaled in directory
``l % n`` by its own journal; a checkpoint persists one lastMark file per journal; a bookie
reopened replays every journal; the cookie names every directory. The SIGKILL test with real
processes is in test_bookie_journal_dirs_process.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from bookie import open_bookie, serve_bookie
from bookie.journal import JournalGroup, last_mark_file
from bookie.server import expected_cookie
from magnetar.config import ConfigError
from protocols.bookkeeper import StatusCode, add_request, read_request

from .helpers import KEY, Client, entry, make_config

LEDGERS = range(1, 7)
ENTRIES = 20


def body(lid: int, eid: int) -> bytes:
    return entry(lid, eid, b"journal-dirs %d %d " % (lid, eid) * 10)


async def _write_and_read(port: int, *, write: bool) -> None:
    c = await Client.connect(port)
    txn = 0
    if write:
        for lid in LEDGERS:
            for eid in range(ENTRIES):
                txn += 1
                await c.send(add_request(txn, lid, eid, KEY, body(lid, eid)))
        for t in range(1, txn + 1):
            assert (await c.receive(t)).status == StatusCode.EOK
    for lid in LEDGERS:
        for eid in range(ENTRIES):
            txn += 1
            resp = await c.call(read_request(txn, lid, eid))
            assert resp.status == StatusCode.EOK and resp.readResponse.body == body(lid, eid)
    await c.aclose()


async def test_ledgers_spread_over_journals_and_replay_from_each(tmp_path: Path) -> None:
    jdirs = [str(tmp_path / f"j{i}") for i in range(3)]
    cfg = make_config(tmp_path, journal_dirs=jdirs)
    async with open_bookie(cfg) as bookie, trio.open_nursery() as nursery:
        assert isinstance(bookie.journal, JournalGroup)
        port = (await nursery.start(serve_bookie, bookie, "127.0.0.1", 0))[0].socket.getsockname()[1]
        await _write_and_read(port, write=True)
        stats = [j.statistics() for j in bookie.journal.journals]
        # 6 ledgers over 3 journals: two ledgers' adds (plus their master keys) in each
        assert all(s.records_written >= 2 * ENTRIES for s in stats)
        assert bookie.journal.statistics().records_written == sum(s.records_written for s in stats)
        nursery.cancel_scope.cancel()
    # a clean stop checkpointed: one lastMark per journal
    for i in range(3):
        assert (Path(cfg.ledger_dirs[0]) / last_mark_file(i)).exists()
    cookie = await expected_cookie(cfg, None)
    assert cookie.journal_dir.count(",") == 2
    async with open_bookie(cfg) as bookie, trio.open_nursery() as nursery:
        port = (await nursery.start(serve_bookie, bookie, "127.0.0.1", 0))[0].socket.getsockname()[1]
        await _write_and_read(port, write=False)
        nursery.cancel_scope.cancel()


async def test_force_ledger_waits_for_every_journal(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, journal_dirs=[str(tmp_path / "ja"), str(tmp_path / "jb")])
    async with open_bookie(cfg) as bookie:
        await bookie.add_entry(1, 0, KEY, body(1, 0))
        await bookie.add_entry(2, 0, KEY, body(2, 0))
        await bookie.force_ledger(1)  # the padding barrier went to both journals and is durable


def test_journal_dirs_must_be_distinct(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="journal_dirs"):
        make_config(tmp_path, journal_dirs=[str(tmp_path / "j"), str(tmp_path / "j")])
