"""Transactions on the topic side survive a SIGKILL of the broker, over real bookie storage.

`magnetar standalone` (its bookie's journal and entry logs on disk, reached over loopback TCP) is
killed with open, committed and aborted transactions on a topic and an ack held by an open
transaction on its subscription; after the restart the transaction buffer and the pending acks
are rebuilt from what was stored (the snapshot cursor, the entries after it, the cursor's
properties), so the topic behaves as if nothing happened. A raw connection plays the client and
the coordinator (`tests.support.txn_peer`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.standalone import start_standalone
from tests.support.txn_peer import ABORT, COMMIT, TxnPeer

pytestmark = pytest.mark.slow

TOPIC = "persistent://public/default/txn-restart"
ARGS = ("--set", "standalone.in_process_transport=false", "--set", "broker.transaction_coordinator_enabled=true")


def _port(service_url: str) -> int:
    return int(service_url.rsplit(":", 1)[1])


def test_open_committed_aborted_transactions_and_held_acks_survive_a_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "standalone"
    sa = start_standalone(data, *ARGS)
    try:
        peer = TxnPeer(_port(sa.service_url))
        peer.subscribe(TOPIC, "s", 1)
        peer.producer(TOPIC, 1)
        p0 = peer.send(1, 0, b"p0")
        peer.drain()
        assert peer.payloads(1) == [b"p0"]
        assert not peer.ack(1, [p0], txn=(9, 4)).HasField("error")  # held by the open (9, 4)
        peer.send(1, 1, b"a1", txn=(9, 1))  # stays open across the crash
        peer.send(1, 2, b"b1", txn=(9, 2))
        peer.send(1, 3, b"c1", txn=(9, 3))
        peer.send(1, 4, b"p1")
        assert not peer.end_on_partition(TOPIC, (9, 2), COMMIT).HasField("error")
        assert not peer.end_on_partition(TOPIC, (9, 3), ABORT).HasField("error")
        peer.drain()
        assert peer.payloads(1) == [b"p0"]  # all behind the open (9, 1)
        peer.close()
        sa.kill()

        sa = start_standalone(data, *ARGS)
        peer = TxnPeer(_port(sa.service_url))
        peer.subscribe(TOPIC, "s", 2)
        peer.drain()
        # p0 is held by (9, 4); everything else still waits behind (9, 1)
        assert peer.payloads(2) == []
        # the aborted (9, 3) is remembered: a late SEND of it is refused, its end cannot turn to commit
        peer.producer(TOPIC, 2)
        assert peer.send_error(2, 0, b"late", (9, 3)).error == pb.NotAllowedError
        assert peer.end_on_partition(TOPIC, (9, 3), COMMIT).error == pb.InvalidTxnStatus

        assert not peer.end_on_partition(TOPIC, (9, 1), COMMIT).HasField("error")
        peer.drain()
        assert peer.payloads(2) == [b"a1", b"b1", b"p1"]  # c1 aborted, markers skipped
        assert not peer.end_on_subscription(TOPIC, "s", (9, 4), ABORT).HasField("error")
        peer.drain()
        assert peer.payloads(2) == [b"a1", b"b1", b"p1", b"p0"]  # released by the abort
        peer.close()
    finally:
        sa.kill()
