"""The managed ledger's append path (`AppendPipeline`, over every write handle's ``append``), fast
and in one process: MockBookKeeper handles wrapped with an ``append`` that, like the real
client's, fixes the entry id in call order and returns a pending add.
Pipelined adds complete in admission order; an add failure mid-burst rolls to a new ledger and
the failed adds are reissued there in order."""

from __future__ import annotations

import uuid
from typing import Any

import trio

from bk_client import WriteError
from bk_client.testing import MockBookKeeper
from managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from metadata import open_metadata_store

NAME = "t/ns/persistent/pipeline"
CONFIG = ManagedLedgerConfig(
    ensemble_size=1,
    write_quorum=1,
    ack_quorum=1,
    max_entries_per_ledger=10_000,
    min_ledger_rollover_time_minutes=0.0,
    cache_size_mb=1.0,
)


class FakePending:
    """What the managed ledger reads of `bk_client.PendingAdd`."""

    def __init__(self) -> None:
        self.entry_id = -1
        self.error: BaseException | None = None
        self.finished = False
        self._done = trio.Event()

    def finish(self, entry_id: int, error: BaseException | None) -> None:
        self.entry_id, self.error, self.finished = entry_id, error, True
        self._done.set()

    async def result(self) -> int:
        await self._done.wait()
        if self.error is not None:
            raise self.error
        return self.entry_id


class AppendingHandle:
    """A mock write handle plus ``append``: calls reach ``add_entry`` in the order they were made."""

    def __init__(self, inner: Any, nursery: trio.Nursery) -> None:
        self._inner = inner
        self._nursery = nursery
        self._turn = trio.Event()
        self._turn.set()
        self.appended = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, data: bytes) -> FakePending:
        pending = FakePending()
        previous, mine = self._turn, trio.Event()
        self._turn = mine
        self._nursery.start_soon(self._add, data, previous, mine, pending)
        self.appended += 1
        await trio.lowlevel.checkpoint()
        return pending

    async def _add(self, data: bytes, previous: trio.Event, mine: trio.Event, pending: FakePending) -> None:
        await previous.wait()
        add = self._inner.add_entry(data)
        mine.set()  # the mock takes the id at add's first step, before anyone else runs
        try:
            pending.finish(await add, None)
        except Exception as exc:
            pending.finish(-1, exc)


class AppendingBookKeeper(MockBookKeeper):
    def __init__(self, nursery: trio.Nursery) -> None:
        super().__init__()
        self.nursery = nursery
        self.handles: list[AppendingHandle] = []

    async def create_ledger(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        handle = AppendingHandle(await super().create_ledger(*args, **kwargs), self.nursery)
        self.handles.append(handle)
        return handle


async def burst(ml: Any, n: int) -> list[tuple[Any, int]]:
    out: list[tuple[Any, int]] = []

    async def one(i: int) -> None:
        out.append((await ml.add_entry(b"%d" % i), i))

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return out


async def test_burst_completes_in_admission_order_through_append() -> None:
    async with trio.open_nursery() as nursery, open_metadata_store(f"memory://p-{uuid.uuid4().hex}") as store:
        bk = AppendingBookKeeper(nursery)
        async with ManagedLedgerFactory(bk, store, CONFIG) as factory:
            ml = await factory.open(NAME)
            results = await burst(ml, 300)
            assert sum(h.appended for h in bk.handles) == 300  # every add went through append
            by_pos = sorted(results)
            assert [pos.entry_id for pos, _ in by_pos] == list(range(300))
            entries = bk.ledger_entries(by_pos[0][0].ledger_id)
            assert [int(e) for e in entries] == [i for _, i in by_pos]
        nursery.cancel_scope.cancel()


async def test_add_failure_mid_burst_rolls_and_reissues_in_order() -> None:
    async with trio.open_nursery() as nursery, open_metadata_store(f"memory://p-{uuid.uuid4().hex}") as store:
        bk = AppendingBookKeeper(nursery)
        async with ManagedLedgerFactory(bk, store, CONFIG) as factory:
            ml = await factory.open(NAME)
            bk.fail_after(40, WriteError("injected"), ops={"add"})
            results = await burst(ml, 200)
            assert len(results) == 200  # nobody saw the failure: the adds went to the next ledger
            by_pos = sorted(results)
            ledgers = [info.ledger_id for info in ml.ledgers]
            assert len(ledgers) >= 2
            # the log, ledger by ledger as listed, is the adds in the order they got positions
            log = [
                int(e)
                for lid in ledgers
                for e in bk.ledger_entries(lid)[: next(i.entries for i in ml.ledgers if i.ledger_id == lid)]
            ]
            assert log == [i for _, i in by_pos]
            assert sorted(log) == list(range(200))
        nursery.cancel_scope.cancel()
