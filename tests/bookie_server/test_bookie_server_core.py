"""The bookie core (`open_bookie` / `Bookie`) without a network: ledger semantics and states."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import trio
import trio.testing

from bookie import BookieError, BookieState, JournalDisk, ReadOnlyReason, open_bookie
from protocols.bookkeeper import StatusCode, encode_lac
from tests.support.bookie_server import KEY, entry, make_config


async def test_add_read_round_trip_and_last_entry(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        for i in range(5):
            await b.add_entry(1, i, KEY, entry(1, i, b"payload-%d" % i))
        assert await b.read_entry(1, 3) == entry(1, 3, b"payload-3")
        assert await b.read_entry(1, -1) == entry(1, 4, b"payload-4")
        with pytest.raises(BookieError) as err:
            await b.read_entry(1, 99)
        assert err.value.status is StatusCode.ENOENTRY
        with pytest.raises(BookieError) as err:
            await b.read_entry(2, 0)
        assert err.value.status is StatusCode.ENOLEDGER


async def test_entries_survive_a_clean_restart(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    async with open_bookie(cfg) as b:
        for i in range(50):
            await b.add_entry(7, i, KEY, entry(7, i, bytes([i]) * 1000))
        await b.fence(7, KEY)
    async with open_bookie(cfg) as b:
        assert [await b.read_entry(7, i) for i in range(50)] == [entry(7, i, bytes([i]) * 1000) for i in range(50)]
        with pytest.raises(BookieError) as err:
            await b.add_entry(7, 50, KEY, entry(7, 50, b"x"))
        assert err.value.status is StatusCode.EFENCED
        assert await b.lac(7) == 48


async def test_master_key_is_recorded_by_the_first_add_and_checked(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        await b.add_entry(1, 0, KEY, entry(1, 0, b"a"))
        with pytest.raises(BookieError) as err:
            await b.add_entry(1, 1, b"wrong", entry(1, 1, b"b"))
        assert err.value.status is StatusCode.EUA
        with pytest.raises(BookieError) as err:
            await b.fence(1, b"wrong")
        assert err.value.status is StatusCode.EUA
        with pytest.raises(BookieError) as err:
            await b.write_lac(1, 0, b"wrong", encode_lac(1, 0))
        assert err.value.status is StatusCode.EUA


async def test_fencing_rejects_adds_but_not_recovery_adds(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        await b.add_entry(3, 0, KEY, entry(3, 0, b"a"))
        await b.fence(3, KEY)
        await b.fence(3, KEY)  # idempotent
        with pytest.raises(BookieError) as err:
            await b.add_entry(3, 1, KEY, entry(3, 1, b"b"))
        assert err.value.status is StatusCode.EFENCED
        await b.add_entry(3, 1, KEY, entry(3, 1, b"b"), recovery=True)
        assert await b.read_entry(3, 1) == entry(3, 1, b"b")


async def test_fencing_an_unknown_ledger_creates_it_fenced(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        await b.fence(9, KEY)
        with pytest.raises(BookieError) as err:
            await b.read_entry(9, 0)
        assert err.value.status is StatusCode.ENOENTRY
        with pytest.raises(BookieError) as err:
            await b.add_entry(9, 0, KEY, entry(9, 0, b"a"))
        assert err.value.status is StatusCode.EFENCED


async def test_lac_from_piggyback_and_explicit_write(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        with pytest.raises(BookieError) as err:
            await b.lac(4)
        assert err.value.status is StatusCode.ENOLEDGER
        for i in range(3):
            await b.add_entry(4, i, KEY, entry(4, i, b"x"))
        assert await b.lac(4) == 1  # entry 2 piggybacks LAC 1
        await b.write_lac(4, 2, KEY, encode_lac(4, 2))
        assert await b.lac(4) == 2
        lac_body, last = await b.read_lac(4)
        assert lac_body == encode_lac(4, 2)
        assert last == entry(4, 2, b"x")


async def test_long_poll_times_out_with_the_current_lac(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        await b.add_entry(5, 0, KEY, entry(5, 0, b"x", lac=-1))
        with trio.fail_after(5):
            assert await b.wait_lac(5, previous=-1, timeout_s=0.05) == -1


async def test_long_poll_wakes_up_when_the_lac_passes(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        await b.add_entry(5, 0, KEY, entry(5, 0, b"x", lac=-1))
        result: list[int] = []

        async def poll() -> None:
            result.append(await b.wait_lac(5, previous=-1, timeout_s=30))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll)
                await trio.testing.wait_all_tasks_blocked()  # the long poll is waiting
                assert not result
                await b.add_entry(5, 1, KEY, entry(5, 1, b"y", lac=0))
        assert result == [0]


async def test_long_poll_waiters_are_bounded(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path, long_poll_max_waiters=1)) as b:
        await b.add_entry(5, 0, KEY, entry(5, 0, b"x", lac=-1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(b.wait_lac, 5, -1, 30.0)
            await trio.testing.wait_all_tasks_blocked()  # the first waiter holds the one slot
            with pytest.raises(BookieError) as err:
                await b.wait_lac(5, -1, 30.0)
            assert err.value.status is StatusCode.ETOOMANYREQUESTS
            nursery.cancel_scope.cancel()


async def test_read_only_rejects_adds_but_serves_reads(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        await b.add_entry(1, 0, KEY, entry(1, 0, b"a"))
        b.set_manual_read_only(True)
        assert b.state is BookieState.READ_ONLY
        with pytest.raises(BookieError) as err:
            await b.add_entry(1, 1, KEY, entry(1, 1, b"b"))
        assert err.value.status is StatusCode.EREADONLY
        with pytest.raises(BookieError) as err:
            await b.write_lac(1, 0, KEY, encode_lac(1, 0))
        assert err.value.status is StatusCode.EREADONLY
        await b.add_entry(1, 1, KEY, entry(1, 1, b"b"), recovery=True)  # recovery still works
        assert await b.read_entry(1, 0) == entry(1, 0, b"a")
        b.set_disk_full(True, "test")
        b.set_manual_read_only(False)
        assert b.state is BookieState.READ_ONLY  # the disk still holds it
        b.set_disk_full(False)
        assert b.state is BookieState.WRITABLE
        await b.add_entry(1, 2, KEY, entry(1, 2, b"c"))


async def test_short_body_is_a_bad_request(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        with pytest.raises(BookieError) as err:
            await b.add_entry(1, 0, KEY, b"short")
        assert err.value.status is StatusCode.EBADREQ


class _FailingDisk(JournalDisk):
    """Writes fail with EIO once told to (a full disk, ENOSPC, is recoverable: see
    test_bookie_full_disk.py)."""

    def __init__(self) -> None:
        self.fail = False

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        if self.fail:
            raise OSError(errno.EIO, "Input/output error (injected)")
        super().pwrite(fd, data, offset)


async def test_journal_write_error_turns_read_only_without_losing_acknowledged_adds(tmp_path: Path) -> None:
    disk = _FailingDisk()
    cfg = make_config(tmp_path)
    async with open_bookie(cfg, journal_disk=disk) as b:
        for i in range(10):
            await b.add_entry(1, i, KEY, entry(1, i, b"ok"))
        disk.fail = True
        with pytest.raises(BookieError) as err:
            await b.add_entry(1, 10, KEY, entry(1, 10, b"lost"))
        assert err.value.status is StatusCode.EIO
        assert b.state is BookieState.READ_ONLY
        assert ReadOnlyReason.JOURNAL_FAILED in b.read_only_reasons
        with pytest.raises(BookieError) as err:
            await b.add_entry(1, 11, KEY, entry(1, 11, b"x"))
        assert err.value.status is StatusCode.EREADONLY
        assert [await b.read_entry(1, i) for i in range(10)] == [entry(1, i, b"ok") for i in range(10)]
    async with open_bookie(cfg) as b:
        assert [await b.read_entry(1, i) for i in range(10)] == [entry(1, i, b"ok") for i in range(10)]
        assert b.state is BookieState.WRITABLE


async def test_checkpoint_mark_never_passes_an_add_not_yet_in_the_write_cache(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as b:
        await b.add_entry(1, 0, KEY, entry(1, 0, b"a"))
        ticket = b.submit_add(1, 1, KEY, entry(1, 1, b"b"))
        before = b._safe_mark()
        await ticket.journal_ticket.wait()  # durable, but not in the write cache yet
        assert b.journal.current_mark() > before
        assert b._safe_mark() == before
        await b.complete_add(ticket)
        assert b._safe_mark() == b.journal.current_mark()
