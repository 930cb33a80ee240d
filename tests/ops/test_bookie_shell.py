"""``magnetar bookie shell`` against real bookies on a real ZooKeeper: listing, metadata, reading
ledgers and entry logs, simpletest, then a bookie decommissioned with a real AutoRecovery process
and another recovered in-process, each checked by reading the data back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from bk_client import BookKeeper, LedgerManager
from metadata import open_metadata_store
from protocols.bookkeeper import cookie_path
from tests.support.bookies import REPO, MagnetarProcess, RealCluster, wait_registered

pytestmark = pytest.mark.slow


def _shell(zk_url: str, *args: str, bookie: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "magnetar", "bookie", "--metadata-url", zk_url, *bookie, "shell", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _write_ledger(zk_url: str, entries: int) -> tuple[int, tuple[str, ...]]:
    async def write() -> tuple[int, tuple[str, ...]]:
        async with open_metadata_store(zk_url) as store, BookKeeper.open(store) as bk:
            w = await bk.create_ledger(2, 2, 2, password=b"pw")
            for i in range(entries):
                await w.add_entry(f"payload-{i}".encode())
            await w.close()
            return w.ledger_id, w.metadata.segments[0].ensemble

    return trio.run(write)


def _ensembles(zk_url: str, lid: int) -> set[str]:
    async def read() -> set[str]:
        async with open_metadata_store(zk_url) as store:
            md, _ = await LedgerManager(store).read(lid)
            return {b for s in md.segments for b in s.ensemble}

    return trio.run(read)


def _exists(zk_url: str, path: str) -> bool:
    async def check() -> bool:
        async with open_metadata_store(zk_url) as store:
            return await store.exists(path) is not None

    return trio.run(check)


def _wait_unregistered(zk_url: str, bookie_id: str) -> None:
    async def wait() -> None:
        async with open_metadata_store(zk_url) as store:
            lm = LedgerManager(store)
            with trio.fail_after(60):
                while bookie_id in await lm.list_bookies():
                    await trio.sleep(0.2)

    trio.run(wait)


def test_bookie_shell_commands(zk_url: str, tmp_path: Path) -> None:
    cluster = RealCluster(tmp_path / "bookies", zk_url)
    autorecovery: MagnetarProcess | None = None
    try:
        cluster.start(4)
        wait_registered(zk_url, 4)
        out = _ok(_shell(zk_url, "listbookies", "-rw"))
        assert out.splitlines()[0] == "ReadWrite Bookies :"
        assert set(out.splitlines()[1:]) == set(cluster.ids)
        assert "No bookie is available" in _ok(_shell(zk_url, "listbookies", "-ro"))
        assert _shell(zk_url, "listbookies").returncode == 2  # which list: a usage error

        out = _ok(
            _shell(zk_url, "simpletest", "-ensemble", "3", "-writeQuorum", "2", "-ackQuorum", "2", "-numEntries", "30")
        )
        assert "30 entries read back and verified" in out

        lid, ensemble = _write_ledger(zk_url, 20)
        assert f"ledgerID: {lid}" in _ok(_shell(zk_url, "listledgers")).splitlines()
        assert f"ledgerID: {lid}" in _ok(_shell(zk_url, "listledgers", "-bookieid", ensemble[0]))
        outsider = next(b for b in cluster.ids if b not in ensemble)
        assert f"ledgerID: {lid}" not in _ok(_shell(zk_url, "listledgers", "-bookieid", outsider))
        meta = json.loads(_ok(_shell(zk_url, "ledgermetadata", "-ledgerid", str(lid))))
        assert meta["state"] == "CLOSED" and meta["lastEntryId"] == 19 and meta["ensembles"]["0"] == list(ensemble)
        missing = _shell(zk_url, "ledgermetadata", "-ledgerid", "999999999")
        assert missing.returncode == 2 and "does not exist" in missing.stderr
        out = _ok(_shell(zk_url, "readledger", "-ledgerid", str(lid), "-firstentryid", "5", "-msg"))
        assert f"--------- Lid={lid}, Eid=5," in out and "Data: payload-19" in out and "Eid=4," not in out

        # local files of a bookie that held the ledger: stopped cleanly, so its entry log is flushed
        first = cluster.by_id(ensemble[0])
        assert first.stop() == 0
        local = ("--journal-dir", str(first.base / "journal"), "--ledger-dirs", str(first.base / "ledgers"))
        assert "LastLogMark : Journal Id - " in _ok(_shell(zk_url, "lastmark", bookie=local))
        logs = sorted((first.base / "ledgers").glob("*.log"))
        assert logs
        found = "".join(
            _ok(_shell(zk_url, "readlog", str(p), "-ledgerid", str(lid), "-msg", bookie=local)) for p in logs
        )
        assert found.count(f"Lid={lid},") == 20 and "Data: payload-7" in found

        # decommission the stopped bookie through a real AutoRecovery process
        _wait_unregistered(zk_url, first.bookie_id)
        autorecovery = MagnetarProcess(["autorecovery", "--metadata-url", zk_url], tmp_path / "autorecovery.log", {})
        out = _ok(_shell(zk_url, "decommissionbookie", "-bookieid", first.bookie_id, "--timeout", "180"))
        assert f"bookie {first.bookie_id} decommissioned" in out
        assert first.bookie_id not in _ensembles(zk_url, lid)
        assert not _exists(zk_url, cookie_path("", first.bookie_id))
        autorecovery.stop()
        autorecovery = None

        # recover a crashed bookie in this process (no AutoRecovery running)
        crashed = cluster.by_id(sorted(_ensembles(zk_url, lid))[0])
        crashed.kill()
        _wait_unregistered(zk_url, crashed.bookie_id)
        out = _ok(_shell(zk_url, "recover", crashed.bookie_id, "-deleteCookie"))
        assert "re-replicated" in out and "recovered" in out
        assert crashed.bookie_id not in _ensembles(zk_url, lid)
        assert not _exists(zk_url, cookie_path("", crashed.bookie_id))
        out = _ok(_shell(zk_url, "readledger", "-ledgerid", str(lid), "-msg"))
        assert all(f"Data: payload-{i}\n" in out for i in range(20))
    finally:
        if autorecovery is not None:
            autorecovery.stop()
        cluster.stop_all()
