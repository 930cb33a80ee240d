"""Retention never trims what an open transaction needs: the transaction buffer's snapshot cursor
(a system cursor) pins the ledgers from the max read position on, on a topic without any
subscription, until the transaction ends; afterwards its periodic snapshot follows the plain
entries, so it pins nothing for good."""

from __future__ import annotations

import pytest
import trio

import broker.topics._topic as topic_module
from broker.transactions import TxnAction, TxnID
from managed_ledger import ManagedLedgerConfig
from protocols.pulsar import TopicName
from tests.broker.inproc_service import inproc_config, running_service

ML = ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)
ENTRY = b"\x00\x00\x00\x00"  # an empty MessageMetadata: a plain entry


async def test_an_open_transaction_pins_its_ledgers_until_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_module, "TXN_SNAPSHOT_MIN_INTERVAL_S", 0.05)
    name = TopicName.parse("persistent://public/default/txn-retention")
    async with running_service(inproc_config(), ML) as (service, _):
        topic = await service.get_topic(name)
        buffer = topic.txn_buffer

        async def add(txn: TxnID | None = None) -> int:
            await topic.ml.rollover()  # one entry per ledger
            pos = await topic.ml.add_entry(ENTRY)
            buffer.note_stored(pos, txn)  # as the topic's completer does
            return pos.ledger_id

        async def ledgers_after_retention() -> list[int]:
            await service.retention.check_topic(str(name), ttl=False, quota=False)
            return [i.ledger_id for i in topic.ml.ledgers]

        before = await add()
        txn = TxnID(1, 1)
        await buffer.prepare(txn)  # as a transactional SEND does before it is stored
        first = await add(txn)
        later = [await add() for _ in range(3)]
        kept = await ledgers_after_retention()
        # the ledger before the transaction goes (no subscription, no retention); its own stays
        assert before not in kept and first in kept and set(later) <= set(kept)

        await buffer.end(txn, TxnAction.COMMIT)
        plain = [await add() for _ in range(3)]
        await topic.ml.rollover()
        with trio.fail_after(10):
            while set(plain) & set(await ledgers_after_retention()):
                await trio.sleep(0.05)  # until the periodic snapshot moved past the plain entries
        assert first not in [i.ledger_id for i in topic.ml.ledgers]
