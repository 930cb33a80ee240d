"""Several journal directories (``journalDirectories``): ledger ``l`` is journaled in directory
``l % n`` by its own journal; a checkpoint persists one lastMark file per journal; a bookie
reopened replays every journal; the cookie names every directory. The SIGKILL test with real
processes is in test_bookie_journal_dirs_process.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from bookie import open_bookie, serve_bookie
from bookie.journal import JournalDisk, JournalGroup, last_mark_file
from bookie.server import expected_cookie
from magnetar.common.config import ConfigError
from protocols.bookkeeper import StatusCode, add_request, read_request
from tests.support.bookie_server import KEY, Client, entry, make_config

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


async def test_force_ledger_waits_for_every_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The barrier goes to both journals and returns only once both synced it: with the second
    journal's fsync held, force_ledger waits although the first journal's barrier is durable."""
    jb = tmp_path / "jb"
    paths: dict[int, Path] = {}
    hold, held = threading.Event(), threading.Event()
    hold.set()
    real_create, real_sync = JournalDisk.create, JournalDisk.fdatasync

    def create(self: JournalDisk, path: Path) -> int:
        fd = real_create(self, path)
        paths[fd] = Path(path)
        return fd

    def fdatasync(self: JournalDisk, fd: int) -> None:
        if paths.get(fd, Path("/")).parent == jb and not hold.is_set():
            held.set()
            hold.wait(30)
        real_sync(self, fd)

    monkeypatch.setattr(JournalDisk, "create", create)
    monkeypatch.setattr(JournalDisk, "fdatasync", fdatasync)
    cfg = make_config(tmp_path, journal_dirs=[str(tmp_path / "ja"), str(jb)])
    async with open_bookie(cfg) as bookie, trio.open_nursery() as nursery:
        await bookie.add_entry(1, 0, KEY, body(1, 0))
        await bookie.add_entry(2, 0, KEY, body(2, 0))
        assert isinstance(bookie.journal, JournalGroup)
        ja_journal, jb_journal = bookie.journal.journals
        before = [j.statistics().durable_mark for j in (ja_journal, jb_journal)]
        hold.clear()
        returned = trio.Event()

        async def force() -> None:
            await bookie.force_ledger(1)
            returned.set()

        try:
            nursery.start_soon(force)
            with trio.fail_after(20):
                while not held.is_set() or ja_journal.statistics().durable_mark <= before[0]:
                    await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked()
            assert not returned.is_set()  # the first journal's barrier alone does not answer
        finally:
            hold.set()
        with trio.fail_after(20):
            await returned.wait()
        after = [j.statistics().durable_mark for j in (ja_journal, jb_journal)]
        assert after[0] > before[0] and after[1] > before[1]


def test_journal_dirs_must_be_distinct(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="journal_dirs"):
        make_config(tmp_path, journal_dirs=[str(tmp_path / "j"), str(tmp_path / "j")])
