"""A transaction coordinator recovers from its log after a SIGKILL of a real ``magnetar standalone``
(its log on the standalone's real bookie): open transactions come back with their participants,
ended ones stay ended, one whose timeout passed meanwhile is aborted (on its topic too: its message is
never delivered), and no id is handed out twice. Driven as a client drives a coordinator and a
topic, over raw frames."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.transactions import TxnID
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.raw_pulsar import RawPeer
from tests.support.standalone import Standalone, start_standalone
from tests.support.txn_peer import TxnPeer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

_ids = itertools.count(1)
_TXN_ON = ("--set", "broker.transaction_coordinator_enabled=true")
_TOPIC = "persistent://public/default/txn-recovered"


def _ask(peer: RawPeer, type_: str, **fields: Any) -> pb.BaseCommand:
    peer.send(type_, request_id=next(_ids), **fields)
    answer = peer.recv()
    assert answer is not None, f"{type_}: connection closed"
    return answer


def _connect(sa: Standalone) -> RawPeer:
    peer = RawPeer(int(sa.service_url.rsplit(":", 1)[1]))
    peer.connect()
    answer = _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=0)
    assert not answer.tcClientConnectResponse.HasField("error"), answer
    return peer


def _new_txn(peer: RawPeer, ttl_ms: int) -> TxnID:
    answer = _ask(peer, "NEW_TXN", tc_id=0, txn_ttl_seconds=ttl_ms).newTxnResponse
    assert not answer.HasField("error"), answer
    return TxnID(answer.txnid_most_bits, answer.txnid_least_bits)


def _metadata(sa: Standalone, txn: TxnID) -> httpx.Response:
    return httpx.get(f"{sa.admin_url}/admin/v3/transactions/transactionMetadata/0/{txn.least_bits}", timeout=15)


def test_open_transactions_survive_a_sigkill_and_timed_out_ones_are_aborted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data, *_TXN_ON)
    try:
        peer = _connect(sa)
        kept = _new_txn(peer, ttl_ms=600_000)
        answer = _ask(
            peer,
            "ADD_SUBSCRIPTION_TO_TXN",
            txnid_most_bits=0,
            txnid_least_bits=kept.least_bits,
            subscription=[{"topic": "persistent://public/default/in", "subscription": "s"}],
        )
        assert not answer.addSubscriptionToTxnResponse.HasField("error"), answer
        short = _new_txn(peer, ttl_ms=6_000)  # expires while the broker is down or recovering
        topic_peer = TxnPeer(int(sa.service_url.rsplit(":", 1)[1]))
        topic_peer.subscribe(_TOPIC, "s", consumer_id=1)  # durable, before anything is produced
        topic_peer.producer(_TOPIC, producer_id=1)
        for seq, (txn, payload) in enumerate(((kept, b"kept"), (short, b"short"))):
            answer = _ask(
                peer, "ADD_PARTITION_TO_TXN", txnid_most_bits=0, txnid_least_bits=txn.least_bits, partitions=[_TOPIC]
            )
            assert not answer.addPartitionToTxnResponse.HasField("error"), answer
            topic_peer.send(1, seq, payload, (txn.most_bits, txn.least_bits))
        topic_peer.send(1, 2, b"plain")
        topic_peer.close()
        committed = _new_txn(peer, ttl_ms=600_000)
        answer = _ask(peer, "END_TXN", txnid_most_bits=0, txnid_least_bits=committed.least_bits, txn_action=pb.COMMIT)
        assert not answer.endTxnResponse.HasField("error"), answer
        before = _metadata(sa, kept).json()
        assert before["status"] == "OPEN"
        peer.close()
    finally:
        sa.kill()

    sa = start_standalone(data, *_TXN_ON)
    try:
        peer = _connect(sa)  # the coordinator replays its log here
        after = _metadata(sa, kept)
        assert after.status_code == 200, after.text
        assert after.json() == before  # status, open time, timeout, subscriptions
        assert _metadata(sa, committed).status_code == 404
        # the short one's deadline passed while the broker was down: aborted once recovered
        wait_until(lambda: _metadata(sa, short).status_code == 404, "the timed-out transaction to be aborted")
        metrics = httpx.get(f"{sa.admin_url}/metrics", timeout=15).text
        assert 'pulsar_txn_timeout_total{cluster="standalone",coordinator_id="0"} 1.0' in metrics
        answer = _ask(peer, "END_TXN", txnid_most_bits=0, txnid_least_bits=short.least_bits, txn_action=pb.COMMIT)
        assert answer.endTxnResponse.error == pb.TransactionNotFound
        # the kept transaction commits after the restart: its message and the plain one behind it
        # are delivered, the timed-out one's never
        answer = _ask(peer, "END_TXN", txnid_most_bits=0, txnid_least_bits=kept.least_bits, txn_action=pb.COMMIT)
        assert not answer.endTxnResponse.HasField("error"), answer
        topic_peer = TxnPeer(int(sa.service_url.rsplit(":", 1)[1]))
        topic_peer.subscribe(_TOPIC, "s", consumer_id=1)
        wait_until(lambda: (topic_peer.drain(0.3), len(topic_peer.payloads(1)) >= 2)[1], "the committed messages")
        topic_peer.drain(1.0)
        assert topic_peer.payloads(1) == [b"kept", b"plain"]
        topic_peer.close()
        fresh = _new_txn(peer, ttl_ms=600_000)
        assert fresh.least_bits > committed.least_bits
        stats = httpx.get(f"{sa.admin_url}/admin/v3/transactions/coordinatorStats?coordinatorId=0", timeout=15).json()
        assert stats["state"] == "Ready" and stats["ongoingTxnSize"] == 1 and stats["recoverEndTime"] > 0
        peer.close()
        assert sa.stop() == 0, sa.log()[-3000:]
    finally:
        if sa.proc.poll() is None:
            sa.kill()
