"""Retention never trims what an open transaction needs: the transaction buffer's snapshot cursor
(a system cursor) pins the ledgers from the max read position on, on a topic without any
subscription, until the transaction ends and a snapshot moves it."""

from __future__ import annotations

from managed_ledger import ManagedLedgerConfig
from protocols.pulsar import TopicName
from tests.broker.inproc_service import inproc_config, running_service

ML = ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)


async def test_an_open_transaction_pins_its_ledgers_until_it_ends() -> None:
    from broker.transactions import TxnAction, TxnID

    name = TopicName.parse("persistent://public/default/txn-retention")
    async with running_service(inproc_config(), ML) as (service, _):
        topic = await service.get_topic(name)
        txn = TxnID(1, 1)
        before = await topic.ml.add_entry(b"\x00\x00\x00\x00")
        topic.txn_buffer.note_stored(before, None)
        await topic.ml.rollover()
        await topic.txn_buffer.prepare(txn)  # as a transactional SEND does before it is stored
        first = await topic.ml.add_entry(b"\x00\x00\x00\x00")
        topic.txn_buffer.note_stored(first, txn)
        for _ in range(3):  # one entry per ledger
            await topic.ml.rollover()
            topic.txn_buffer.note_stored(await topic.ml.add_entry(b"\x00\x00\x00\x00"), None)
        ledgers_before = [i.ledger_id for i in topic.ml.ledgers]
        await service.retention.check_topic(str(name), ttl=False, quota=False)
        kept = [i.ledger_id for i in topic.ml.ledgers]
        # the ledger before the transaction goes (no subscription, no retention); its own stays
        assert kept == [lid for lid in ledgers_before if lid >= first.ledger_id]
        assert before.ledger_id not in kept

        await topic.txn_buffer.end(txn, TxnAction.COMMIT)
        await topic.txn_buffer.snapshot()
        await service.retention.check_topic(str(name), ttl=False, quota=False)
        assert first.ledger_id not in [i.ledger_id for i in topic.ml.ledgers]
