"""The deduplication state stays bounded (`_dedup` Rules 2-4): inactive producer names are purged,
at most ``brokerDeduplicationMaxNumberOfProducers`` are kept, a snapshot always fits in one
metadata node, and snapshots follow Pulsar's entry and time intervals.

Before: one entry per producer name for ever, written whole into the cursor's properties on every
snapshot; no time-based snapshot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from bk_client.testing import MockBookKeeper
from broker import BrokerConfig, BrokerService
from broker.topics._dedup import DEDUP_CURSOR, Deduplication, DedupVerdict
from managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory, Position
from metadata import open_metadata_store
from protocols.pulsar import TopicName, encode_metadata_and_payload
from protocols.pulsar import pulsar_api_pb2 as pb


def _state(**kwargs: Any) -> Deduplication:
    return Deduplication(
        store=None,
        ml_name="x",
        snapshot_interval=kwargs.pop("snapshot_interval", 1000),  # type: ignore[arg-type]
        **kwargs,
    )


def _stored(d: Deduplication, name: str, seq: int, entry: int, *, attached: bool = True, now: float = 0.0) -> bool:
    assert d.check(name, seq, seq) is DedupVerdict.NEW
    due = d.on_persisted(name, seq, seq, Position(1, entry), attached=attached, now=now)
    d.settle(name)
    return due


# ---------------------------------------------------------------------------------- pure units


def test_a_failed_send_is_accepted_again_only_once_nothing_of_its_name_is_in_flight() -> None:
    d = _state()
    assert d.check("p", 1, 1) is DedupVerdict.NEW
    assert d.check("p", 2, 2) is DedupVerdict.NEW
    d.settle("p")  # 1 failed; 2 may still be stored
    assert d.check("p", 1, 1) is DedupVerdict.DUPLICATE_PENDING
    d.settle("p")  # 2 failed too
    assert d.pushed("p") == -1
    assert d.check("p", 1, 1) is DedupVerdict.NEW


def test_inactive_producers_are_purged_after_the_timeout() -> None:
    d = _state()
    _stored(d, "gone", 5, 0)
    _stored(d, "stays", 7, 1)
    _stored(d, "reconnected", 9, 2)
    d.producer_removed("gone", now=100.0)
    d.producer_removed("reconnected", now=100.0)
    d.producer_added("reconnected")
    assert d.inactive_producers == ["gone"]
    assert not d.purge_inactive(now=100.0 + 59, timeout_s=60, attached={"stays", "reconnected"})
    assert d.purge_inactive(now=100.0 + 60, timeout_s=60, attached={"stays", "reconnected"})
    assert d.last_sequence_id("gone") == -1
    assert d.last_sequence_id("stays") == 7 and d.last_sequence_id("reconnected") == 9
    assert d.tracked_producers == 2


def test_a_name_stored_after_its_producer_left_is_inactive_too() -> None:
    d = _state()
    _stored(d, "left-early", 3, 0, attached=False, now=10.0)
    assert d.inactive_producers == ["left-early"]
    assert d.purge_inactive(now=70.0, timeout_s=60)
    assert d.tracked_producers == 0


def test_a_purge_puts_missed_departures_right() -> None:
    # a name whose producer left without the topic saying so is counted inactive from the purge on
    d = _state()
    _stored(d, "fenced-out", 1, 0)
    assert not d.purge_inactive(now=10.0, timeout_s=60, attached=set())
    assert d.inactive_producers == ["fenced-out"]
    assert d.purge_inactive(now=70.0, timeout_s=60, attached=set())


def test_the_longest_inactive_names_go_first_past_the_cap() -> None:
    d = _state(max_producers=3)
    for i in range(10):
        _stored(d, f"p{i}", i, i)
        d.producer_removed(f"p{i}", now=float(i))
    assert sorted(d.persisted) == ["p7", "p8", "p9"]
    assert d.inactive_producers == ["p7", "p8", "p9"]


def test_attached_names_are_never_forgotten_past_the_cap() -> None:
    d = _state(max_producers=2)
    for i in range(4):
        _stored(d, f"on{i}", i, i)  # all still connected
    assert d.tracked_producers == 4
    _stored(d, "off", 1, 5)
    d.producer_removed("off", now=1.0)
    assert "off" not in d.persisted  # the only inactive one goes
    assert d.tracked_producers == 4


def test_a_snapshot_holds_at_most_the_cap_attached_then_most_recent_first() -> None:
    d = _state(max_producers=3)
    for i in range(3):
        _stored(d, f"old{i}", i, i)
        d.producer_removed(f"old{i}", now=float(i))
    _stored(d, "live", 1, 3)
    props = d.snapshot_properties()
    assert len(props) == 3
    assert "live" in props and "old2" in props and "old1" in props


def test_a_snapshot_fits_its_byte_budget_whatever_the_names() -> None:
    d = _state(snapshot_max_bytes=64 * 1024)
    for i in range(100):
        _stored(d, f"{i:03d}" + "x" * 2000, i, i)
        d.producer_removed(f"{i:03d}" + "x" * 2000, now=float(i))
    _stored(d, "short", 1, 100)
    props = d.snapshot_properties()
    assert sum(len(k) for k in props) <= 64 * 1024
    assert "short" in props
    assert f"{99:03d}" + "x" * 2000 in props  # the most recently active long names are kept
    assert f"{0:03d}" + "x" * 2000 not in props
    assert d.tracked_producers == 101  # only the snapshot leaves names out


def test_snapshots_every_entries_interval() -> None:
    d = _state(snapshot_interval=3)
    assert [_stored(d, "p", i, i) for i in range(6)] == [False, False, True, True, True, True]


# ---------------------------------------------------------------------------------- with a topic


@pytest.fixture
async def service() -> AsyncIterator[BrokerService]:
    config = BrokerConfig(
        broker_deduplication_enabled=True,
        advertised_address="127.0.0.1",
        deduplication_producer_inactivity_timeout_minutes=1,
        deduplication_snapshot_frequency_s=1,
        deduplication_snapshot_interval_s=5,
    )
    async with open_metadata_store("memory://dedup-state") as store, trio.open_nursery() as nursery:
        factory = ManagedLedgerFactory(
            MockBookKeeper(), store, ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)
        )
        await nursery.start(factory.run)
        svc = BrokerService(factory, store, config, clock=trio.current_time)
        await nursery.start(svc.run)
        yield svc
        nursery.cancel_scope.cancel()


def _entry(name: str, seq: int) -> bytes:
    return encode_metadata_and_payload(pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1), b"x")


async def test_a_loaded_topic_purges_inactive_names_and_snapshots_by_time(
    service: BrokerService, autojump_clock: trio.testing.MockClock
) -> None:
    from broker.topics._producer import AccessMode, Producer

    class Conn:
        def publish_done(self, size: int) -> None:
            pass

        def send_nowait(self, data: bytes) -> None:
            pass

        def send_receipt(self, data: bytes, publish_size: int) -> None:
            pass

        def forget_producer(self, *_: object) -> None:
            pass

    topic = await service.get_topic(TopicName.parse("persistent://public/default/dedup-state"))
    assert topic.dedup is not None
    cursor = topic.ml.cursors[DEDUP_CURSOR]
    producers = {}
    for i, name in enumerate(["gone", "stays"]):
        p = producers[name] = Producer(
            topic=topic,
            producer_id=i,
            name=name,
            connection=Conn(),
            access_mode=AccessMode.SHARED,
            user_provided_name=True,
        )
        assert await topic.add_producer(p, lambda _e: None)
        topic.publish(p, 0, 0, _entry(name, 0), 1)
    await trio.testing.wait_all_tasks_blocked()
    assert topic.dedup.tracked_producers == 2
    last = topic.ml.last_confirmed_entry
    assert cursor.mark_delete_position < last  # 2 entries: the entries interval (1000) is far off
    await trio.sleep(6)  # brokerDeduplicationSnapshotIntervalSeconds, checked every second
    assert cursor.mark_delete_position == last
    assert cursor.properties == {"gone": 0, "stays": 0}

    topic.remove_producer(producers["gone"])
    await trio.sleep(60 + 20)  # the inactivity timeout, checked every third of it
    assert topic.dedup.last_sequence_id("gone") == -1
    assert topic.dedup.last_sequence_id("stays") == 0
    assert cursor.properties == {"stays": 0}  # and a snapshot without it


async def test_recovery_replays_after_the_snapshot_and_snapshots_when_it_read_an_interval() -> None:
    async with open_metadata_store("memory://dedup-recover") as store, trio.open_nursery() as nursery:
        factory = ManagedLedgerFactory(
            MockBookKeeper(), store, ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)
        )
        await nursery.start(factory.run)
        ml = await factory.open("public/default/persistent/recover")
        for i in range(5):
            await ml.add_entry(_entry(f"p{i}", 10 + i))
        d = Deduplication(store, ml.name, snapshot_interval=3, max_producers=4)
        await d.recover(ml, now=50.0, attached={"p4"})
        cursor = ml.cursors[DEDUP_CURSOR]
        # five entries replayed: at least an interval, so a snapshot at once (as Pulsar)
        assert cursor.mark_delete_position == ml.last_confirmed_entry
        # over the cap of 4: the longest inactive name went; the attached one stays
        assert d.persisted == {"p1": 11, "p2": 12, "p3": 13, "p4": 14}
        assert cursor.properties == d.persisted
        assert d.inactive_producers == ["p1", "p2", "p3"]
        assert d.purge_inactive(now=50.0 + 60, timeout_s=60, attached={"p4"})
        assert d.persisted == {"p4": 14}
        await cursor.close()

        # loaded again with nothing stored after the snapshot: a purge still rewrites it
        again = Deduplication(store, ml.name, snapshot_interval=3, max_producers=4)
        await again.recover(ml, now=200.0)
        cursor = ml.cursors[DEDUP_CURSOR]
        assert again.persisted == {"p1": 11, "p2": 12, "p3": 13, "p4": 14}
        assert again.purge_inactive(now=200.0 + 60, timeout_s=60)
        await again.snapshot()
        assert cursor.properties == {}
        assert cursor.mark_delete_position == ml.last_confirmed_entry
        nursery.cancel_scope.cancel()
