"""A producer attached to a topic through one client connection, and its in-order receipts.

Rules:

* Rule 1: SEND_RECEIPTs go out in the order the SENDs arrived, each only after the managed
  ledger acknowledged that entry (a duplicate's receipt waits for the entries before it). A SEND
  stays in its connection's publish window until its answer is written (`_connection` Rule B1).
* Rule 2: a failed add answers SEND_ERROR (PersistenceError) for that SEND; the client then closes
  the connection and resends whatever is pending, which dedup (when on) filters.
* Rule 3: after one of its adds failed, no later SEND of the producer is stored (each is answered
  SEND_ERROR too): the client resends from the failed one, so storing a later one first would
  reorder its messages, and with dedup the resent one would look like a duplicate and be lost.
  The topic enforces it with ``failed`` (set when it answers a failed add) and ``last_add`` (the
  managed ledger's add of the producer's latest appended SEND): an add admitted while an earlier
  one is unfinished fails with it (`managed_ledger.ManagedLedger.append`), so a SEND is refused
  when ``last_add`` already failed, even before the topic answered that failure. A producer whose
  duplicate SEND is held on another SEND still in flight (the topic's Rule 8) keeps that one in
  ``awaits``, and fails with it the same way.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from managed_ledger import PendingAdd
from protocols.pulsar import encode_command, encode_send_receipt, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from ._entries import UINT64_MAX
from ._stats import Rates, java_date

if TYPE_CHECKING:
    from ._nonpersistent import NonPersistentTopic
    from ._topic import Topic

__all__ = ["Producer", "AccessMode", "Receipt"]


class AccessMode:
    """ProducerAccessMode values."""

    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3


@dataclass(slots=True)
class Receipt:
    """The answer a SEND is owed (Rule 1): reserved on arrival, completed once."""

    sequence_id: int
    highest_sequence_id: int
    size: int
    done: bool = False
    ledger_id: int = -1
    entry_id: int = -1
    error: str | None = None


class Producer:
    """One producer: its name, access mode and the receipts it still owes (Rule 1)."""

    def __init__(
        self,
        *,
        topic: Topic | NonPersistentTopic,
        producer_id: int,
        name: str,
        connection: Any,
        access_mode: int,
        user_provided_name: bool,
        epoch: int = 0,
        requested_epoch: int | None = None,
        schema_version: bytes = b"",
    ) -> None:
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.connection = connection
        self.access_mode = access_mode
        self.user_provided_name = user_provided_name
        self.epoch = epoch
        self.requested_epoch = requested_epoch  # the topic epoch a reconnecting exclusive producer held
        self.schema_version = schema_version  # what PRODUCER_SUCCESS reported (empty: no schema)
        self.closed = False
        self.failed = False  # Rule 3
        self.last_add: PendingAdd | None = None  # Rule 3: the add of the latest appended SEND
        self.awaits: Any = None  # Rule 3: the topic's SEND a held duplicate of this producer waits on
        self._receipts: deque[Receipt] = deque()
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        # statistics (`_stats`): chunks in, the producer's metadata, its rates per stats period
        self.chunk_in_counter = 0
        self.metadata: dict[str, str] = {}
        self.connected_since = java_date(int(time.time() * 1000))
        self.rates = Rates(3)  # msgs in, bytes in, chunks in

    @property
    def exclusive(self) -> bool:
        """Whether this producer holds the topic exclusively."""
        return self.access_mode != AccessMode.SHARED

    def new_receipt(self, sequence_id: int, highest: int, size: int) -> Receipt:
        """Reserve the receipt position of a SEND that just arrived."""
        receipt = Receipt(sequence_id, highest, size)
        self._receipts.append(receipt)
        return receipt

    def complete(self, receipt: Receipt, ledger_id: int, entry_id: int, error: str | None = None) -> None:
        """Record a SEND's outcome and send every receipt that is now at the head (Rule 1)."""
        receipt.done, receipt.ledger_id, receipt.entry_id, receipt.error = True, ledger_id, entry_id, error
        receipts = self._receipts
        while receipts and receipts[0].done:
            s = receipts.popleft()
            if self.closed:
                self.connection.publish_done(s.size)  # no answer will be written
                continue
            if s.error is not None:
                frame = encode_command(
                    make_command(
                        "SEND_ERROR",
                        producer_id=self.producer_id,
                        sequence_id=s.sequence_id,
                        error=pb.PersistenceError,
                        message=s.error,
                    )
                )
            else:
                frame = encode_send_receipt(
                    self.producer_id, s.sequence_id, s.highest_sequence_id, s.ledger_id, s.entry_id
                )
            # the SEND's bytes leave the connection's publish window once this is written
            self.connection.send_receipt(frame, s.size)

    def close_from_broker(self) -> None:
        """Tell the client the broker closed this producer (it reconnects) and detach it."""
        if self.closed:
            return
        self.closed = True
        self.connection.forget_producer(self.producer_id, self)
        self.connection.send_nowait(
            encode_command(make_command("CLOSE_PRODUCER", producer_id=self.producer_id, request_id=UINT64_MAX))
        )
