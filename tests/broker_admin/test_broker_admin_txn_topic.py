"""The topic side's transaction stats: Pulsar's v3 transactionBufferStats / pendingAckStats (and
per-transaction) endpoints, the topic stats' transaction counts and the pulsar_txn_tb_* metrics,
as a raw connection opens, commits and aborts transactions on a topic."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.broker_admin.admin_harness import AdminBroker
from tests.support.broker_thread import loopback_config
from tests.support.txn_peer import ABORT, COMMIT, TxnPeer

BASE = "/admin/v3/transactions"


@pytest.fixture
def broker() -> Iterator[AdminBroker]:
    """A broker with transactions on: without, transactional requests are refused, as in Pulsar."""
    with AdminBroker(loopback_config(transaction_coordinator_enabled=True)) as b:
        yield b


def test_buffer_and_pending_ack_stats(broker: AdminBroker, http: httpx.Client) -> None:
    topic = "persistent://public/default/txn-stats"
    path = "public/default/txn-stats"
    peer = TxnPeer(broker.port)
    try:
        peer.subscribe(topic, "s", 1)
        peer.producer(topic, 1)
        p0 = peer.send(1, 0, b"p0")
        a1 = peer.send(1, 1, b"a1", txn=(3, 1))
        peer.send(1, 2, b"b1", txn=(3, 2))
        peer.send(1, 3, b"c1", txn=(3, 3))
        assert not peer.end_on_partition(topic, (3, 2), COMMIT).HasField("error")
        assert not peer.end_on_partition(topic, (3, 3), ABORT).HasField("error")
        peer.drain()
        assert not peer.ack(1, [p0], txn=(3, 4)).HasField("error")

        stats = http.get(f"{BASE}/transactionBufferStats/{path}").json()
        assert stats["ongoingTxnSize"] == 1
        assert stats["maxReadPosition"] == f"{p0[0]}:{p0[1]}"  # just before the open (3, 1)
        assert stats["lowWaterMarks"] is None
        one = http.get(f"{BASE}/transactionInBufferStats/{path}/3/1").json()
        assert one == {"startPosition": f"{a1[0]}:{a1[1]}", "aborted": False}
        assert http.get(f"{BASE}/transactionInBufferStats/{path}/3/3").json()["aborted"] is True

        pending = http.get(f"{BASE}/pendingAckStats/{path}/s").json()
        assert pending["ongoingTxnSize"] == 1 and pending["state"] == "Ready"
        assert http.get(f"{BASE}/pendingAckStats/{path}/nope").status_code == 404

        topic_stats = http.get(f"/admin/v2/persistent/{path}/stats").json()
        assert (topic_stats["ongoingTxnCount"], topic_stats["committedTxnCount"], topic_stats["abortedTxnCount"]) == (
            1,
            1,
            1,
        )
        # the backlog counts p0 (held by (3, 4), not acknowledged) and nothing behind the open (3, 1)
        assert topic_stats["subscriptions"]["s"]["msgBacklog"] == 1
        explained = http.get(f"/admin/v2/persistent/{path}/explain-storage").json()
        assert explained["transactions"]["open"] == [{"txnId": "(3,1)", "firstPosition": f"{a1[0]}:{a1[1]}"}]
        assert explained["cursors"]["pulsar.txn.buffer"]["system"] is True
        metrics = http.get("/metrics").text
        line = next(ln for ln in metrics.splitlines() if ln.startswith("pulsar_txn_tb_committed_total{") and path in ln)
        assert line.endswith(" 1.0")
        assert any(ln.startswith("pulsar_txn_tb_active_total{") and path in ln for ln in metrics.splitlines())
    finally:
        peer.close()
