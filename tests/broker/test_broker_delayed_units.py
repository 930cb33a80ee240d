"""The delayed-delivery index without a broker: its snapshot format, how it cuts segments, and the
index itself over an in-memory `BucketStore` that fails on cue (the worker runs on trio's mock
clock; the index's wall clock is a fake one the tests move)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping

import pytest
import trio
import trio.testing

from broker.topics._delayed import MERGE_FAN_IN, BucketState, DelayedIndex, IndexSettings
from broker.topics._delayed_format import (
    BucketFooter,
    DelayedIndexFormatError,
    IndexRun,
    SegmentCutter,
    SegmentInfo,
    bucket_key,
    decode_footer,
    decode_segment,
    encode_footer,
    encode_segment,
    pack,
    parse_bucket_key,
    unpack,
)
from magnetar.common.backoff import Backoff
from managed_ledger import ManagedLedgerError, Position, SideLedgerMissing

# ------------------------------------------------------------------------------------- format


def test_segments_and_footers_round_trip_and_garbage_is_refused() -> None:
    run = IndexRun()
    for i in range(50):
        run.append(1_700_000_000_000 + i * 7, 3 + i // 10, i)
    back = decode_segment(encode_segment(run))
    assert list(back.ts) == list(run.ts) and list(back.ledger) == list(run.ledger)
    assert list(back.entry) == list(run.entry)
    footer = BucketFooter(Position(3, 0), Position(7, 9), (run.info(), SegmentInfo(2, run.ts[-1], run.ts[-1] + 5)))
    assert decode_footer(encode_footer(footer)) == footer
    data = encode_segment(run)
    for bad in (b"", data[:-1], b"XXXX" + data[4:], data + b"\0" * 24):
        with pytest.raises(DelayedIndexFormatError):
            decode_segment(bad)
    raw = encode_footer(footer)
    for bad in (
        raw[:-1],
        b"MDXS" + raw[4:],
        encode_footer(BucketFooter(Position(7, 9), Position(3, 0), footer.segments)),
        encode_footer(BucketFooter(Position(3, 0), Position(7, 9), (SegmentInfo(0, 1, 2),))),
        encode_footer(BucketFooter(Position(3, 0), Position(7, 9), (SegmentInfo(1, 10, 20), SegmentInfo(1, 5, 30)))),
    ):
        with pytest.raises(DelayedIndexFormatError):
            decode_footer(bad)


def test_bucket_keys_and_packed_keys() -> None:
    key = bucket_key(Position(12, 0), Position(15, 99))
    assert key == "#pulsar.internal.delayed.bucket_12:0_15:99"
    assert parse_bucket_key(key) == (Position(12, 0), Position(15, 99))
    assert parse_bucket_key("some.other.property") is None
    for bad in (
        "#pulsar.internal.delayed.bucket_1_2",
        "#pulsar.internal.delayed.bucket_1:x_2:3",
        "#pulsar.internal.delayed.bucket_5:0_1:0",
    ):
        with pytest.raises(DelayedIndexFormatError):
            parse_bucket_key(bad)
    big = (1 << 63) - 1
    triples = [(0, 0, 0), (1, 0, big), (1, 1, 0), (big, big, big), (5, 2, 7)]
    assert sorted(triples) == sorted(triples, key=lambda t: pack(*t))
    assert all(unpack(pack(*t)) == t for t in triples)


def test_segments_are_cut_by_count_by_time_step_and_by_bytes() -> None:
    def cut(cutter: SegmentCutter, times: Iterable[int]) -> list[list[int]]:
        out = []
        for i, ts in enumerate(times):
            done = cutter.add(ts, 1, i)
            if done is not None:
                out.append(list(done.ts))
        last = cutter.finish()
        if last is not None:
            out.append(list(last.ts))
        return out

    assert cut(SegmentCutter(1000, 3, 1 << 20), range(7)) == [[0, 1, 2], [3, 4, 5], [6]]
    # a segment spans at most the time step from its first entry
    assert cut(SegmentCutter(100, None, 1 << 20), [0, 50, 99, 100, 150, 400]) == [[0, 50, 99], [100, 150], [400]]
    # and fits in one stored entry: 8 header bytes and 24 an entry
    assert cut(SegmentCutter(1000, None, 8 + 2 * 24), range(5)) == [[0, 1], [2, 3], [4]]


# ------------------------------------------------------------------------------------- index


class FakeStore:
    """An in-memory `BucketStore` whose operations fail on cue: ``fail[op] = n`` fails the next
    ``n`` operations of that kind (create, add, read, props, delete)."""

    def __init__(self) -> None:
        self.ledgers: dict[int, list[bytes]] = {}
        self.props: dict[str, str] = {"unrelated": "kept"}
        self.fail = {"create": 0, "add": 0, "read": 0, "props": 0, "delete": 0}
        self.failures = 0
        self.deleted: list[int] = []
        self._next = 100

    def _maybe_fail(self, op: str) -> None:
        if self.fail[op] > 0:
            self.fail[op] -= 1
            self.failures += 1
            raise ManagedLedgerError(f"injected {op} failure")

    def properties(self) -> Mapping[str, str]:
        return dict(self.props)

    async def update_properties(self, put: Mapping[str, str], remove: Iterable[str]) -> None:
        await trio.lowlevel.checkpoint()
        self._maybe_fail("props")
        for k in remove:
            self.props.pop(k, None)
        self.props.update(put)

    async def create(self) -> FakeWriter:
        await trio.lowlevel.checkpoint()
        self._maybe_fail("create")
        self._next += 1
        self.ledgers[self._next] = []
        return FakeWriter(self, self._next)

    async def last_entry_id(self, ledger_id: int) -> int:
        await trio.lowlevel.checkpoint()
        self._maybe_fail("read")
        if ledger_id not in self.ledgers:
            raise SideLedgerMissing(f"no ledger {ledger_id}")
        return len(self.ledgers[ledger_id]) - 1

    async def read(self, ledger_id: int, entry_id: int) -> bytes:
        await trio.lowlevel.checkpoint()
        self._maybe_fail("read")
        if ledger_id not in self.ledgers:
            raise SideLedgerMissing(f"no ledger {ledger_id}")
        return self.ledgers[ledger_id][entry_id]

    async def delete(self, ledger_id: int) -> None:
        await trio.lowlevel.checkpoint()
        self._maybe_fail("delete")
        if self.ledgers.pop(ledger_id, None) is not None:
            self.deleted.append(ledger_id)

    def bucket_ledgers(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.props.items() if k.startswith("#pulsar.internal.delayed.bucket")}


class FakeWriter:
    def __init__(self, store: FakeStore, ledger_id: int) -> None:
        self.store = store
        self.ledger_id = ledger_id

    async def add(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint()
        self.store._maybe_fail("add")
        self.store.ledgers[self.ledger_id].append(data)

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()


class WallClock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> float:
        return self.ms


def settings(**kw: object) -> IndexSettings:
    base: dict[str, object] = dict(
        persistent=True,
        min_index_count=50,
        time_step_ms=10_000,
        max_indexes_per_segment=10,
        max_num_buckets=-1,
        max_segment_bytes=1 << 20,
        read_batch=10,
    )
    base.update(kw)
    return IndexSettings(**base)  # type: ignore[arg-type]


def new_index(
    store: FakeStore, clock: WallClock, cfg: IndexSettings, acked: list[Position] | None = None
) -> DelayedIndex:
    mark = acked if acked is not None else [Position(-1, -1)]
    return DelayedIndex(
        "t/s", store, cfg, acked_up_to=lambda: mark[0], backoff=Backoff(0.05, 1.0, jitter=0.1), clock_ms=clock
    )


async def settle() -> None:
    """Let the worker do everything it can (mock clock: instant)."""
    await trio.sleep(30)  # virtual time (mock clock): every timer of the worker fires


def run_trio(fn) -> None:  # type: ignore[no-untyped-def]
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def positions(n: int, per_ledger: int = 40) -> list[Position]:
    return [Position(10 + i // per_ledger, i % per_ledger) for i in range(n)]


async def offer_all(index: DelayedIndex, items: Iterable[tuple[Position, int]], now: float) -> None:
    """Offer as the dispatcher does: no read while the index is full (Rule 3)."""
    for p, t in items:
        while not index.accepting:
            await trio.sleep(0.01)
        assert index.offer(p, t, now)


async def drain(
    index: DelayedIndex, clock: WallClock, until_ms: float, acked: set[Position] | None = None
) -> list[tuple[float, Position]]:
    """Pop everything due up to ``until_ms``, moving the clock 1 s at a time and letting the
    worker load heads in between: ``(time, pos)``."""
    out = []
    while clock.ms < until_ms:
        clock.ms += 1000
        for p in index.pop_due(clock.ms, 10**9, lambda p: acked is not None and p in acked):
            out.append((clock.ms, p))
        await trio.sleep(0.5)
    return out


def test_entries_come_out_in_due_order_never_early_and_once() -> None:
    async def main() -> None:
        store, clock = FakeStore(), WallClock()
        index = new_index(store, clock, settings(persistent=False))
        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            await index.wait_ready()
            rng = random.Random(1)
            due = {p: clock.ms + rng.randrange(1, 60_000) for p in positions(300)}
            for p, t in due.items():
                assert index.offer(p, t, clock.ms)
            # offered again (a rewound cursor): held, not added twice
            assert all(index.offer(p, t, clock.ms) for p, t in due.items())
            assert index.count == 300
            # an entry already due when first read is not held
            assert not index.offer(Position(99, 0), clock.ms - 1, clock.ms)
            got = await drain(index, clock, clock.ms + 61_000)
            assert sorted(p for _, p in got) == sorted(due)
            assert all(t >= due[p] for t, p in got)
            assert [due[p] for _, p in got] == sorted(due[p] for _, p in got)
            assert index.count == 0 and not store.bucket_ledgers()
            nursery.cancel_scope.cancel()

    run_trio(main)


def test_sealed_buckets_survive_a_restart_and_nothing_is_early_lost_or_doubled() -> None:
    async def main() -> None:
        store, clock = FakeStore(), WallClock()
        cfg = settings(time_step_ms=10**9)  # segments cut by count only: 5 of 10 a bucket
        start = clock.ms
        rng = random.Random(2)
        due = {p: start + rng.randrange(5_000, 120_000) for p in positions(230)}
        async with trio.open_nursery() as nursery:
            index = new_index(store, clock, cfg)
            await nursery.start(index.run)
            await index.wait_ready()
            for p, t in due.items():
                while not index.accepting:  # as the dispatcher: no read while the index is full
                    await trio.sleep(0.01)
                assert index.offer(p, t, clock.ms)
            await settle()
            # 4 buckets of 50 sealed and stored; 30 entries still only in memory
            assert len(store.bucket_ledgers()) == 4 and index.buckets == 4 and index.count == 230
            assert all(len(store.ledgers[lid]) == 6 for lid in store.bucket_ledgers().values())  # 5 + footer
            # some time passes and what came due goes out
            first = await drain(index, clock, start + 30_000)
            assert all(t >= due[p] for t, p in first)
            nursery.cancel_scope.cancel()  # the broker dies: the mutable bucket is lost

        async with trio.open_nursery() as nursery:
            index = new_index(store, clock, cfg)
            await nursery.start(index.run)
            await index.wait_ready()
            # the dispatcher reads everything unacked again, as after a restart
            delivered_now = [p for p, t in due.items() if not index.offer(p, t, clock.ms)]
            assert all(due[p] <= clock.ms for p in delivered_now)
            await settle()
            rest = await drain(index, clock, start + 130_000, acked={p for _, p in first})
            assert all(t >= due[p] for t, p in rest)
            got = sorted([p for _, p in first] + [p for _, p in rest] + delivered_now)
            # nothing lost; what came due before the restart may come again (unacked), nothing else
            assert set(got) == set(due)
            doubled = {p for p in got if got.count(p) > 1}
            assert all(due[p] <= start + 30_000 for p in doubled)
            await settle()
            assert index.count == 0 and index.buckets == 0 and not store.bucket_ledgers()
            assert not store.ledgers  # every bucket ledger deleted once used up
            assert store.props == {"unrelated": "kept"}
            nursery.cancel_scope.cancel()

    run_trio(main)


def test_memory_stays_under_the_bound_as_buckets_are_merged() -> None:
    async def main() -> None:
        store, clock = FakeStore(), WallClock()
        cfg = settings(min_index_count=100, max_indexes_per_segment=20, max_num_buckets=3, time_step_ms=60_000)
        bound = cfg.memory_bound
        assert bound is not None
        index = new_index(store, clock, cfg)
        rng = random.Random(3)
        start = clock.ms
        due = {p: start + rng.randrange(10_000, 3_600_000) for p in positions(4000, per_ledger=500)}
        peak = 0
        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            await index.wait_ready()
            for i, (p, t) in enumerate(due.items()):
                while not index.accepting:  # the dispatcher reads no more until the index has room
                    await trio.sleep(0.01)
                assert index.offer(p, t, clock.ms)
                if i % 10 == 0:
                    peak = max(peak, index.memory_bytes())
                    await trio.lowlevel.checkpoint()
            await settle()
            peak = max(peak, index.memory_bytes())
            assert index.counters["merge"] > 0
            assert index.buckets <= cfg.max_num_buckets + MERGE_FAN_IN
            assert index.count == 4000
            got = []
            while clock.ms < start + 3_700_000:
                clock.ms += 10_000
                got += [(clock.ms, p) for p in index.pop_due(clock.ms, 10**9, lambda p: False)]
                peak = max(peak, index.memory_bytes())
                await trio.sleep(0.1)
            assert peak <= bound, (peak, bound)
            assert sorted(p for _, p in got) == sorted(due)
            assert all(t >= due[p] for t, p in got)
            await settle()
            assert not store.ledgers and not store.bucket_ledgers()
            nursery.cancel_scope.cancel()

    run_trio(main)


def test_storage_failures_are_retried_and_drop_nothing() -> None:
    async def main() -> None:
        store, clock = FakeStore(), WallClock()
        cfg = settings(min_index_count=20, max_indexes_per_segment=5, max_num_buckets=2)
        index = new_index(store, clock, cfg)
        start = clock.ms
        due = {p: start + 1000 * (i % 97 + 2) for i, p in enumerate(positions(200))}
        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            await index.wait_ready()
            store.fail.update(create=2, add=3, props=2, read=3, delete=2)
            for p, t in due.items():
                while not index.accepting:
                    await trio.sleep(0.01)
                assert index.offer(p, t, clock.ms)
                await trio.lowlevel.checkpoint()
            await settle()
            got = []
            while clock.ms < start + 100_000:
                clock.ms += 1000
                got += [(clock.ms, p) for p in index.pop_due(clock.ms, 10**9, lambda p: False)]
                await trio.sleep(1)
            await settle()
            assert store.failures == 12 and not any(store.fail.values())  # every failure happened
            assert index.counters["failed"] >= 10  # and was retried (a few by the next step instead)
            assert sorted(p for _, p in got) == sorted(due)
            assert all(t >= due[p] for t, p in got)
            assert not store.ledgers and not store.bucket_ledgers()
            nursery.cancel_scope.cancel()

    run_trio(main)


def test_acknowledged_buckets_are_deleted_and_a_lost_ledger_is_dropped() -> None:
    async def main() -> None:
        store, clock = FakeStore(), WallClock()
        cfg = settings(min_index_count=10)
        acked = [Position(-1, -1)]
        ps = positions(35, per_ledger=10)
        async with trio.open_nursery() as nursery:
            index = new_index(store, clock, cfg, acked)
            await nursery.start(index.run)
            await index.wait_ready()
            await offer_all(index, [(p, clock.ms + 50_000) for p in ps], clock.ms)
            await settle()
            assert index.buckets == 3 and len(store.bucket_ledgers()) == 3
            acked[0] = ps[9]  # everything of the first bucket acknowledged
            await settle()
            assert index.buckets == 2 and len(store.bucket_ledgers()) == 2 and len(store.deleted) == 1
            nursery.cancel_scope.cancel()
        # a bucket ledger deleted behind the index's back: dropped on recovery, its range re-indexed
        lost_key, lost_ledger = sorted(store.bucket_ledgers().items())[0]
        del store.ledgers[lost_ledger]
        async with trio.open_nursery() as nursery:
            index = new_index(store, clock, cfg, acked)
            await nursery.start(index.run)
            await index.wait_ready()
            await settle()
            assert lost_key not in store.props and index.buckets == 1
            lost = [p for p in ps if parse_bucket_key(lost_key)[0] <= p <= parse_bucket_key(lost_key)[1]]
            assert not index.covered(lost[0])
            nursery.cancel_scope.cancel()

    run_trio(main)


def test_a_seal_never_spans_another_buckets_range() -> None:
    async def main() -> None:
        store, clock = FakeStore(), WallClock()
        index = new_index(store, clock, settings(min_index_count=5))
        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            await index.wait_ready()
            await offer_all(index, [(p, clock.ms + 10_000) for p in positions(5, per_ledger=100)], clock.ms)
            await settle()
            nursery.cancel_scope.cancel()
        assert len(store.bucket_ledgers()) == 1
        async with trio.open_nursery() as nursery:
            # after a restart, entries before and after the stored bucket are offered again
            index = new_index(store, clock, settings(min_index_count=5))
            await nursery.start(index.run)
            await index.wait_ready()
            await settle()
            index.offer(Position(9, 0), clock.ms + 10_000, clock.ms)
            assert index.offer(Position(10, 2), clock.ms + 10_000, clock.ms)  # covered: held, not added
            index.offer(Position(11, 0), clock.ms + 10_000, clock.ms)
            await settle()
            ranges = sorted(parse_bucket_key(k) for k in store.bucket_ledgers())  # type: ignore[type-var]
            assert ranges[0] == (Position(9, 0), Position(9, 0))
            assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))
            assert index.count == 7
            assert [b.state for b in index._buckets] == [BucketState.STORED] * 2
            nursery.cancel_scope.cancel()

    run_trio(main)
