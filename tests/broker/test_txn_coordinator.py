"""The transaction coordinator over the wire (raw frames, as Pulsar's clients send them) and its
log's recovery, on MockBookKeeper: placement through the coordinator-assign topic, the TC commands
and their error answers, ending a transaction on its participants, timeouts, and replay."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from broker import BrokerConfig
from broker.transactions import TxnAction, TxnID
from broker.transactions.coordinator import (
    ASSIGN_TOPIC,
    LOG_CURSOR,
    InvalidTxnStatusError,
    StoreState,
    TransactionCoordinators,
    TransactionNotFoundError,
    TxnStatus,
    log_topic,
)
from broker.transactions.coordinator._store import SEQUENCE_BATCH, SEQUENCE_PROPERTY, open_store
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.broker.inproc_service import inproc_config, running_service
from tests.support.broker_thread import BrokerThread
from tests.support.raw_pulsar import RawPeer
from tests.support.waiting import wait_until, wait_until_async

_request_ids = itertools.count(1)


class RecordingParticipant:
    """A `TxnParticipant` that records each call and fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.failing = False

    async def end_txn_on_partition(self, topic: str, txn: TxnID, action: TxnAction) -> None:
        if self.failing:
            from broker._errors import ServiceNotReadyError

            raise ServiceNotReadyError(f"{topic} is not ready")
        self.calls.append(("partition", topic, txn, action))

    async def end_txn_on_subscription(self, topic: str, subscription: str, txn: TxnID, action: TxnAction) -> None:
        self.calls.append(("subscription", topic, subscription, txn, action))


def _config(**overrides: object) -> BrokerConfig:
    base: dict[str, object] = {
        "advertised_address": "127.0.0.1",
        "bind_address": "127.0.0.1",
        "broker_service_port": 0,
        "web_service_port": 0,
        "transaction_coordinator_enabled": True,
    }
    base.update(overrides)
    return BrokerConfig(**base)  # type: ignore[arg-type]


@pytest.fixture
def txn_broker() -> Iterator[tuple[BrokerThread, RecordingParticipant]]:
    participant = RecordingParticipant()
    with BrokerThread(_config(transaction_buffer_client_operation_timeout_ms=300)) as b:
        assert b.service is not None
        b.service.txn_participant = participant
        yield b, participant


def _ask(peer: RawPeer, type_: str, **fields: Any) -> pb.BaseCommand:
    request_id = next(_request_ids)
    peer.send(type_, request_id=request_id, **fields)
    answer = peer.recv()
    assert answer is not None, f"{type_}: the broker closed the connection"
    return answer


def _new_txn(peer: RawPeer, ttl_ms: int = 600_000) -> TxnID:
    answer = _ask(peer, "NEW_TXN", tc_id=0, txn_ttl_seconds=ttl_ms)
    assert answer.type == pb.BaseCommand.NEW_TXN_RESPONSE and not answer.newTxnResponse.HasField("error"), answer
    return TxnID(answer.newTxnResponse.txnid_most_bits, answer.newTxnResponse.txnid_least_bits)


def _end(peer: RawPeer, txn: TxnID, action: TxnAction) -> pb.CommandEndTxnResponse:
    answer = _ask(
        peer,
        "END_TXN",
        txnid_most_bits=txn.most_bits,
        txnid_least_bits=txn.least_bits,
        txn_action=int(action),
    )
    assert answer.type == pb.BaseCommand.END_TXN_RESPONSE, answer
    return answer.endTxnResponse


def test_transactions_off_refuses_the_coordinator_commands() -> None:
    # Pulsar answers a generic ERROR NotAllowed when transactionCoordinatorEnabled is off
    with BrokerThread(_config(transaction_coordinator_enabled=False)) as b:
        peer = RawPeer(b.port)
        try:
            peer.connect()
            for type_, fields in (("TC_CLIENT_CONNECT_REQUEST", {"tc_id": 0}), ("NEW_TXN", {"tc_id": 0})):
                answer = _ask(peer, type_, **fields)
                assert answer.type == pb.BaseCommand.ERROR and answer.error.error == pb.NotAllowedError, answer
            peer.send("PARTITIONED_METADATA", request_id=99, topic=str(ASSIGN_TOPIC))
            meta = peer.recv()
            assert meta is not None and meta.partitionMetadataResponse.partitions == 0
        finally:
            peer.close()


def test_a_transaction_from_connect_to_commit(txn_broker: tuple[BrokerThread, RecordingParticipant]) -> None:
    broker, participant = txn_broker
    peer = RawPeer(broker.port)
    try:
        peer.connect()
        # placement: standalone creates the assign topic with one partition, as Pulsar's standalone
        peer.send("PARTITIONED_METADATA", request_id=1000, topic=str(ASSIGN_TOPIC))
        meta = peer.recv()
        assert meta is not None and meta.partitionMetadataResponse.partitions == 1, meta
        peer.send("LOOKUP", request_id=1001, topic=str(ASSIGN_TOPIC.partition_name(0)))
        lookup = peer.recv()
        assert lookup is not None and lookup.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Connect
        # a coordinator this broker has no partition for
        answer = _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=5)
        assert answer.tcClientConnectResponse.error == pb.TransactionCoordinatorNotFound, answer
        answer = _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=0)
        assert answer.type == pb.BaseCommand.TC_CLIENT_CONNECT_RESPONSE, answer
        assert not answer.tcClientConnectResponse.HasField("error"), answer

        txn = _new_txn(peer)
        assert txn == TxnID(0, 1)
        assert _new_txn(peer) == TxnID(0, 2)  # sequences grow by one
        answer = _ask(
            peer,
            "ADD_PARTITION_TO_TXN",
            txnid_most_bits=0,
            txnid_least_bits=1,
            partitions=["persistent://public/default/out"],
        )
        assert not answer.addPartitionToTxnResponse.HasField("error"), answer
        assert answer.addPartitionToTxnResponse.txnid_least_bits == 1
        answer = _ask(
            peer,
            "ADD_SUBSCRIPTION_TO_TXN",
            txnid_most_bits=0,
            txnid_least_bits=1,
            subscription=[{"topic": "persistent://public/default/in", "subscription": "s"}],
        )
        assert not answer.addSubscriptionToTxnResponse.HasField("error"), answer

        assert not _end(peer, txn, TxnAction.COMMIT).HasField("error")
        assert sorted(participant.calls, key=str) == [
            ("partition", "persistent://public/default/out", txn, TxnAction.COMMIT),
            ("subscription", "persistent://public/default/in", "s", txn, TxnAction.COMMIT),
        ]
        # an ended transaction is forgotten: its second end, and any addition, find nothing
        assert _end(peer, txn, TxnAction.COMMIT).error == pb.TransactionNotFound
        answer = _ask(peer, "ADD_PARTITION_TO_TXN", txnid_most_bits=0, txnid_least_bits=1, partitions=["x"])
        assert answer.addPartitionToTxnResponse.error == pb.TransactionNotFound
        # an unknown coordinator id in a transaction id
        assert _end(peer, TxnID(7, 1), TxnAction.ABORT).error == pb.TransactionCoordinatorNotFound
        peer.assert_alive()
    finally:
        peer.close()


def test_an_end_that_its_topics_refuse_is_retried_and_the_other_action_is_invalid(
    txn_broker: tuple[BrokerThread, RecordingParticipant],
) -> None:
    broker, participant = txn_broker
    peer = RawPeer(broker.port)
    try:
        peer.connect()
        _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=0)
        txn = _new_txn(peer)
        _ask(peer, "ADD_PARTITION_TO_TXN", txnid_most_bits=0, txnid_least_bits=txn.least_bits, partitions=["p"])
        participant.failing = True
        # the topic refuses for longer than the operation timeout: the client hears of it...
        assert _end(peer, txn, TxnAction.COMMIT).error == pb.ServiceNotReady
        # ...the transaction stays COMMITTING, so aborting it now is refused...
        assert _end(peer, txn, TxnAction.ABORT).error == pb.InvalidTxnStatus
        # ...and once the topic takes it, the background retry commits it
        participant.failing = False
        assert broker.service is not None
        coordinators = broker.service.transactions

        def ended() -> bool:
            return txn not in coordinators.stores[0].txns

        wait_until(ended, "the retried commit to complete")
        assert ("partition", "p", txn, TxnAction.COMMIT) in participant.calls
    finally:
        peer.close()


def test_a_transaction_past_its_timeout_is_aborted(txn_broker: tuple[BrokerThread, RecordingParticipant]) -> None:
    broker, participant = txn_broker
    peer = RawPeer(broker.port)
    try:
        peer.connect()
        _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=0)
        short = _new_txn(peer, ttl_ms=300)
        long = _new_txn(peer)
        for txn in (short, long):
            _ask(peer, "ADD_PARTITION_TO_TXN", txnid_most_bits=0, txnid_least_bits=txn.least_bits, partitions=["t"])
        assert broker.service is not None
        store = broker.service.transactions.stores[0]
        wait_until(lambda: short not in store.txns, "the timeout's abort")
        assert ("partition", "t", short, TxnAction.ABORT) in participant.calls
        assert _end(peer, short, TxnAction.COMMIT).error == pb.TransactionNotFound
        assert not _end(peer, long, TxnAction.COMMIT).HasField("error")
        assert store.timed_out == 1
    finally:
        peer.close()


async def test_the_log_replays_open_and_ending_transactions_and_never_reuses_an_id() -> None:
    clock = [1_000_000]
    async with running_service(inproc_config(transaction_coordinator_enabled=True)) as (service, _nursery):
        factory = service.factory
        store = await open_store(factory, 3, clock_ms=lambda: clock[0], max_active=10)
        opened = await store.new_txn(60_000, owner="alice")
        await store.add_partitions(opened.txn_id, ["a", "b"])
        await store.add_subscriptions(opened.txn_id, [("a", "sub")])
        committing = await store.new_txn(60_000)
        await store.update_status(committing, TxnStatus.COMMITTING, TxnStatus.OPEN)
        ended = await store.new_txn(60_000)
        await store.update_status(ended, TxnStatus.ABORTING, TxnStatus.OPEN)
        await store.update_status(ended, TxnStatus.ABORTED, TxnStatus.ABORTING)
        with pytest.raises(InvalidTxnStatusError):
            await store.update_status(committing, TxnStatus.ABORTED, TxnStatus.ABORTING)
        with pytest.raises(TransactionNotFoundError):
            store.get(ended.txn_id)
        await store.close()
        assert store.state is StoreState.CLOSED

        again = await open_store(factory, 3, clock_ms=lambda: clock[0], max_active=10)
        assert set(again.txns) == {opened.txn_id, committing.txn_id}
        meta = again.get(opened.txn_id)
        assert (meta.status, meta.partitions, meta.subscriptions, meta.owner, meta.open_ms) == (
            TxnStatus.OPEN,
            ["a", "b"],
            [("a", "sub")],
            "alice",
            1_000_000,
        )
        assert again.get(committing.txn_id).status == TxnStatus.COMMITTING
        # ids continue after the reservation (Rule 2), never below what was handed out
        assert int(again.ml.properties[SEQUENCE_PROPERTY]) == SEQUENCE_BATCH
        fresh = await again.new_txn(1000)
        assert fresh.txn_id.least_bits > ended.txn_id.least_bits
        assert fresh.txn_id == TxnID(3, SEQUENCE_BATCH + 1)
        # the ended transaction's log entries are acknowledged on the log's cursor
        assert again.cursor.name == LOG_CURSOR and all(again.cursor.is_acked(p) for p in ended.positions)
        assert not any(again.cursor.is_acked(p) for p in opened.positions)
        assert again.ml.name == log_topic(3).managed_ledger_name
        await again.close()


async def test_a_coordinator_recovers_and_finishes_what_was_ending() -> None:
    participant = RecordingParticipant()
    async with running_service(inproc_config(transaction_coordinator_enabled=True)) as (service, nursery):
        service.txn_participant = participant
        store = await open_store(service.factory, 0, clock_ms=lambda: int(trio.current_time() * 1000), max_active=10)
        meta = await store.new_txn(600_000)
        await store.add_partitions(meta.txn_id, ["p"])
        await store.update_status(meta, TxnStatus.ABORTING, TxnStatus.OPEN)
        await store.close()
        coordinators: TransactionCoordinators = service.transactions
        recovered = await coordinators.connect(0)
        await wait_until_async(lambda: meta.txn_id not in recovered.txns, "the recovered abort to finish")
        assert participant.calls == [("partition", "p", meta.txn_id, TxnAction.ABORT)]
        nursery.cancel_scope.cancel()


def test_admin_shows_coordinators_and_transactions() -> None:
    import httpx

    with BrokerThread(_config(), admin=True) as broker:
        assert broker.service is not None
        broker.service.txn_participant = RecordingParticipant()
        base = f"{broker.http}/admin/v3/transactions"
        peer = RawPeer(broker.port)
        try:
            peer.connect()
            _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=0)
            txn = _new_txn(peer, ttl_ms=120_000)
            _ask(peer, "ADD_PARTITION_TO_TXN", txnid_most_bits=0, txnid_least_bits=txn.least_bits, partitions=["p"])
            _ask(
                peer,
                "ADD_SUBSCRIPTION_TO_TXN",
                txnid_most_bits=0,
                txnid_least_bits=txn.least_bits,
                subscription=[{"topic": "t", "subscription": "s"}],
            )
            meta = httpx.get(f"{base}/transactionMetadata/0/{txn.least_bits}").json()
            assert meta["txnId"] == f"(0,{txn.least_bits})" and meta["status"] == "OPEN"
            assert meta["timeoutAt"] == 120_000 and "p" in meta["producedPartitions"]
            assert "s" in meta["ackedPartitions"]["t"]
            stats = httpx.get(f"{base}/coordinatorStats", params={"coordinatorId": 0}).json()
            assert (
                stats["state"] == "Ready" and stats["ongoingTxnSize"] == 1 and stats["leastSigBits"] == txn.least_bits
            )
            assert httpx.get(f"{base}/coordinatorStats").json() == {"0": stats}
            assert list(httpx.get(f"{base}/slowTransactions/0").json()) == [str(txn)]
            assert httpx.get(f"{base}/slowTransactions/3600000").json() == {}
            internal = httpx.get(f"{base}/coordinatorInternalStats/0").json()["transactionLogStats"]
            assert internal["managedLedgerName"] == log_topic(0).managed_ledger_name
            assert httpx.get(f"{base}/coordinators").json() == [{"id": 0, "brokerServiceUrl": broker.url}]
            _check_cli(broker.http, txn)
            _end(peer, txn, TxnAction.ABORT)
            assert httpx.get(f"{base}/transactionMetadata/0/{txn.least_bits}").status_code == 404
            metrics = httpx.get(f"{broker.http}/metrics").text
            for line in (
                'pulsar_txn_active_count{cluster="standalone",coordinator_id="0"} 0.0',
                'pulsar_txn_created_total{cluster="standalone",coordinator_id="0"} 1.0',
                'pulsar_txn_aborted_total{cluster="standalone",coordinator_id="0"} 1.0',
                'pulsar_txn_committed_total{cluster="standalone",coordinator_id="0"} 0.0',
                # NEW, ADD_PARTITION, ADD_SUBSCRIPTION, ABORTING, ABORTED
                'pulsar_txn_append_log_total{cluster="standalone",coordinator_id="0"} 5.0',
            ):
                assert line in metrics, line
            assert httpx.get(f"{base}/coordinatorStats", params={"coordinatorId": 4}).status_code == 404
        finally:
            peer.close()
    with BrokerThread(_config(transaction_coordinator_enabled=False), admin=True) as off:
        assert httpx.get(f"{off.http}/admin/v3/transactions/coordinatorStats").status_code == 503


def _check_cli(admin_url: str, txn: TxnID) -> None:
    import json

    from click.testing import CliRunner

    from magnetar.cli import main

    def run(*args: str) -> Any:
        result = CliRunner().invoke(main, ["admin", "--admin-url", admin_url, "transactions", *args, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    assert run("coordinator-stats", "-c", "0")["ongoingTxnSize"] == 1
    assert run("transaction-metadata", "-m", "0", "-l", str(txn.least_bits))["status"] == "OPEN"
    assert list(run("slow-transactions", "-t", "0s")) == [str(txn)]
    assert run("slow-transactions", "-t", "1h", "-c", "0") == {}
    assert run("coordinators-list")[0]["id"] == 0


async def test_a_trimmed_log_keeps_open_transactions_and_ids_unique() -> None:
    async with running_service(inproc_config(transaction_coordinator_enabled=True)) as (service, _nursery):
        store = await open_store(service.factory, 1, clock_ms=lambda: 5_000, max_active=10)
        for _ in range(3):  # ended, in a ledger of their own
            meta = await store.new_txn(60_000)
            await store.update_status(meta, TxnStatus.COMMITTING, TxnStatus.OPEN)
            await store.update_status(meta, TxnStatus.COMMITTED, TxnStatus.COMMITTING)
        last_ended = meta.txn_id
        await store.ml.rollover()
        kept = await store.new_txn(60_000)
        await store.ml.rollover()
        ledgers_before = len(store.ml.ledgers)
        assert await store.trim()  # the first ledger held only ended transactions
        assert len(store.ml.ledgers) < ledgers_before
        await store.close()
        again = await open_store(service.factory, 1, clock_ms=lambda: 5_000, max_active=10)
        assert set(again.txns) == {kept.txn_id}
        assert (await again.new_txn(1000)).txn_id.least_bits > max(last_ended.least_bits, kept.txn_id.least_bits)
        await again.close()


def test_topics_another_broker_serves_are_ended_on_that_broker() -> None:
    remote, local = RecordingParticipant(), RecordingParticipant()
    with BrokerThread(_config()) as owner, BrokerThread(_config()) as tc_broker:
        assert owner.service is not None and tc_broker.service is not None
        owner.service.txn_participant = remote
        tc_broker.service.txn_participant = local
        owner_url = owner.url

        async def topic_owner_url(topic: str) -> str | None:
            return owner_url if "/remote-" in topic else None

        tc_broker.service.transactions.host.topic_owner_url = topic_owner_url  # type: ignore[method-assign]
        peer = RawPeer(tc_broker.port)
        try:
            peer.connect()
            _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=0)
            txn = _new_txn(peer)
            there, here = "persistent://public/default/remote-a", "persistent://public/default/local-b"
            _ask(peer, "ADD_PARTITION_TO_TXN", txnid_most_bits=0, txnid_least_bits=txn.least_bits, partitions=[there])
            _ask(peer, "ADD_PARTITION_TO_TXN", txnid_most_bits=0, txnid_least_bits=txn.least_bits, partitions=[here])
            _ask(
                peer,
                "ADD_SUBSCRIPTION_TO_TXN",
                txnid_most_bits=0,
                txnid_least_bits=txn.least_bits,
                subscription=[{"topic": there, "subscription": "s"}],
            )
            assert not _end(peer, txn, TxnAction.COMMIT).HasField("error")
            assert sorted(remote.calls, key=str) == [
                ("partition", there, txn, TxnAction.COMMIT),
                ("subscription", there, "s", txn, TxnAction.COMMIT),
            ]
            assert local.calls == [("partition", here, txn, TxnAction.COMMIT)]
        finally:
            peer.close()


def test_a_topic_that_does_not_exist_has_nothing_to_end() -> None:
    class Missing(RecordingParticipant):
        async def end_txn_on_subscription(self, topic: str, subscription: str, txn: TxnID, action: TxnAction) -> None:
            from broker._errors import TopicNotFoundError

            raise TopicNotFoundError(f"topic {topic} does not exist and auto-creation is disabled")

    with BrokerThread(_config(transaction_buffer_client_operation_timeout_ms=2000)) as broker:
        assert broker.service is not None
        broker.service.txn_participant = Missing()
        peer = RawPeer(broker.port)
        try:
            peer.connect()
            _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=0)
            txn = _new_txn(peer)
            _ask(
                peer,
                "ADD_SUBSCRIPTION_TO_TXN",
                txnid_most_bits=0,
                txnid_least_bits=txn.least_bits,
                subscription=[{"topic": "persistent://public/default/gone", "subscription": "s"}],
            )
            assert not _end(peer, txn, TxnAction.COMMIT).HasField("error")
        finally:
            peer.close()
