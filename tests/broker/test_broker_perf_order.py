"""Pipelined publishing keeps order (Topic Rule 1) and the unacked bookkeeping stays exact."""

from __future__ import annotations

import threading

import pulsar

from broker.topics._consumer import PendingEntries
from managed_ledger import Position


def test_many_async_sends_are_stored_and_acknowledged_in_order(client: pulsar.Client, topic: str) -> None:
    n = 3000
    consumer = client.subscribe(topic, "order", consumer_type=pulsar.ConsumerType.Shared)
    producers = [
        client.create_producer(topic, batching_enabled=False, max_pending_messages=n, block_if_queue_full=True)
        for _ in range(2)
    ]
    ids: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    lock = threading.Lock()
    done = threading.Event()

    def receipt(k: int, result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
        assert result == pulsar.Result.Ok
        with lock:
            ids[k].append((msg_id.ledger_id(), msg_id.entry_id()))
            if len(ids[0]) + len(ids[1]) == n:
                done.set()

    for i in range(n):
        k = i % 2
        producers[k].send_async(f"{k}-{i}".encode(), lambda r, m, k=k: receipt(k, r, m))
    assert done.wait(60)
    for k in (0, 1):
        assert ids[k] == sorted(ids[k]) and len(set(ids[k])) == len(ids[k])  # receipts in send order
    got = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=10_000)
        got.append(msg.data().decode())
        consumer.acknowledge(msg)
    for k in (0, 1):
        mine = [int(s.split("-")[1]) for s in got if s.startswith(f"{k}-")]
        assert mine == sorted(mine) and len(mine) == n // 2


def test_pending_entries_keeps_the_message_total() -> None:
    p = PendingEntries()
    p[Position(1, 1)] = 10
    p[Position(1, 2)] = 1
    p[Position(1, 1)] = 4
    assert p.messages == 5
    assert p.pop(Position(1, 2)) == 1 and p.pop(Position(9, 9), None) is None
    p.setdefault(Position(2, 0), 3)
    p.update({Position(2, 1): 2})
    assert p.messages == 9
    del p[Position(2, 0)]
    assert p.messages == 6 and p.popitem() == (Position(2, 1), 2) and p.messages == 4
    p.clear()
    assert p.messages == 0 and not p
