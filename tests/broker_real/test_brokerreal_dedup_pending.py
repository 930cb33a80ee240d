"""A resend whose original is still on its way to the bookies, over real bookie processes.

ZooKeeper + 2 ``magnetar bookie`` processes (E=Qw=Qa=2, no spare) + a ``magnetar broker`` process,
deduplication on. A raw connection plays the client, doing what the official clients do: resend
whatever has no SEND_RECEIPT after its connection broke, a SEND_ERROR came, or the broker closed
its producer.

1. ``m1`` is sent while one bookie is stopped (SIGSTOP): its add waits for that bookie's ack.
2. The connection drops; the producer comes back on a new one and resends ``m1``.
3. The stopped bookie is killed: the original's add fails (no bookie to replace it, none to make a
   new ledger with), after the resend arrived.
4. A new bookie joins; the client resends what was never confirmed.

Before: the resend was confirmed at once, so the client never sent ``m1`` again and it was lost.
Now it is confirmed only with its original: ``m1`` is stored exactly once.
"""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from pathlib import Path

import pulsar
import pytest

from protocols.pulsar import encode_payload_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.admin import new_namespace, rest
from tests.support.bookies import RealCluster
from tests.support.brokers import BrokerProcess, wait_bookies
from tests.support.clients import drain
from tests.support.raw_pulsar import RawPeer
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

BROKER_ARGS = (
    "--set",
    "managed_ledger.managedLedgerDefaultEnsembleSize=2",
    "--set",
    "managed_ledger.managedLedgerDefaultWriteQuorum=2",
    "--set",
    "managed_ledger.managedLedgerDefaultAckQuorum=2",
    # the stopped bookie fails the add when it is killed, not by a timeout before that
    "--set",
    "bk_client.add_entry_timeout_s=120",
)
_requests = itertools.count(1)


class RawProducer:
    """A producer named ``name`` on its own raw connection; `send` and the answers as they come."""

    def __init__(self, port: int, topic: str, name: str) -> None:
        deadline = time.monotonic() + 60
        while True:  # ProducerBusy until the broker saw the old connection go, refused while storage is down
            self.peer = RawPeer(port)
            self.peer.connect()
            self.peer.send(
                "PRODUCER",
                topic=topic,
                producer_id=1,
                request_id=next(_requests),
                producer_name=name,
                user_provided_producer_name=True,
            )
            answer = self.peer.recv()
            if answer is not None and answer.type == pb.BaseCommand.PRODUCER_SUCCESS:
                break
            self.peer.close()
            assert time.monotonic() < deadline, f"producer never created: {answer}"
            time.sleep(0.2)
        self.name = name

    def send(self, seq: int) -> None:
        md = pb.MessageMetadata(producer_name=self.name, sequence_id=seq, publish_time=int(time.time() * 1000))
        self.peer.send_bytes(
            encode_payload_command(make_command("SEND", producer_id=1, sequence_id=seq), md, f"m{seq}".encode())
        )

    def answers_until_pong(self) -> list[pb.BaseCommand]:
        """Every command up to the PONG for a PING sent now: the SENDs before it were handled."""
        self.peer.send("PING")
        out = []
        while (cmd := self.peer.recv()) is not None and cmd.type != pb.BaseCommand.PONG:
            out.append(cmd)
        return out

    def answers_until_settled(self, seq: int) -> tuple[bool, list[pb.BaseCommand]]:
        """Read until ``seq`` is receipted (True) or the client would resend it (False): a SEND_ERROR,
        CLOSE_PRODUCER, or the connection closing."""
        seen = []
        while (cmd := self.peer.recv()) is not None:
            seen.append(cmd)
            if cmd.type == pb.BaseCommand.SEND_RECEIPT and cmd.send_receipt.sequence_id == seq:
                return True, seen
            if cmd.type in (pb.BaseCommand.SEND_ERROR, pb.BaseCommand.CLOSE_PRODUCER):
                return False, seen
        return False, seen


def _receipted(commands: list[pb.BaseCommand]) -> set[int]:
    return {c.send_receipt.sequence_id for c in commands if c.type == pb.BaseCommand.SEND_RECEIPT}


def test_a_resend_is_stored_once_when_its_original_fails_after_it_arrived(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    url = zookeeper.url(f"/dedup-pending-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    bookies = RealCluster(tmp_path / "bookies", url)
    broker = BrokerProcess(tmp_path / "broker", url, *BROKER_ARGS)
    try:
        bookies.start(2)
        wait_bookies(url, set(bookies.live_ids))
        broker.start()
        ns = new_namespace(broker.admin_url, "dedup-pending")
        rest("POST", broker.admin_url, f"/admin/v2/namespaces/{ns}/deduplication", json=True)
        rest(
            "POST",
            broker.admin_url,
            f"/admin/v2/namespaces/{ns}/retention",
            json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
        topic = f"persistent://{ns}/t"
        port = int(broker.service_url.rsplit(":", 1)[1])
        # the official client's lookup makes this broker own the topic's bundle (raw peers do no lookup)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=20)
        consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)

        first = RawProducer(port, topic, "p")
        first.send(0)
        assert first.answers_until_settled(0)[0]
        receipted = {0}

        # 1. one bookie stops: the add of m1 waits for its ack
        stalled = bookies.bookies[0]
        stalled.signal(signal.SIGSTOP)
        first.send(1)
        assert _receipted(first.answers_until_pong()) == set()
        # 2. the connection drops; the client resends on a new one
        first.peer.close()
        second = RawProducer(port, topic, "p")
        second.send(1)
        receipted |= _receipted(second.answers_until_pong())
        # 3. the stopped bookie dies (SIGKILL without SIGCONT: it never acks): the original fails
        stalled.signal(signal.SIGKILL)
        assert stalled.process is not None
        stalled.process.proc.wait(30)
        if 1 not in receipted:
            _, seen = second.answers_until_settled(1)
            receipted |= _receipted(seen)
        second.peer.close()
        # 4. storage comes back; what was never confirmed is sent again
        bookies.start(1)
        while 1 not in receipted:
            again = RawProducer(port, topic, "p")
            again.send(1)
            _, seen = again.answers_until_settled(1)
            receipted |= _receipted(seen)
            again.peer.close()

        stored = [m.data() for m in drain(consumer, wait_ms=3000)]
        client.close()
        assert stored == [b"m0", b"m1"], f"receipted {sorted(receipted)} but stored {stored}"
    finally:
        broker.stop()
        bookies.stop_all()
