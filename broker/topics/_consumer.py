"""A consumer attached to a subscription through one client connection."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from managed_ledger import Entry, Position
from protocols.pulsar import encode_command, encode_message, make_command

from ._entries import UINT64_MAX, entry_metadata
from ._stats import Rates, java_date

if TYPE_CHECKING:
    from ._nonpersistent import NonPersistentSubscription
    from ._subscription import Subscription

__all__ = ["Consumer", "PendingEntries", "understands_end_of_topic"]


def understands_end_of_topic(client_version: str) -> bool:
    """Whether a client announcing ``client_version`` in CONNECT handles REACHED_END_OF_TOPIC:
    every client but the libpulsar family (``Pulsar-CPP-v...``), which drops its connection on it."""
    return not client_version.startswith("Pulsar-CPP")


def _is_chunk(data: bytes) -> bool:
    """Whether a stored entry is a chunk of a chunked message."""
    try:
        return entry_metadata(data).num_chunks_from_msg > 1
    except Exception:
        return False


class PendingEntries(dict[Position, int]):
    """``position -> message count`` of delivered, unacked entries, with ``messages``, the sum of
    the counts, kept up to date by every mutation the broker uses (set, del, pop, clear), so the
    dispatcher's per-entry unacked-limit check is O(1) instead of a sum over the whole map."""

    __slots__ = ("messages",)

    def __init__(self) -> None:
        super().__init__()
        self.messages = 0

    def __setitem__(self, key: Position, value: int) -> None:
        self.messages += value - dict.get(self, key, 0)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Position) -> None:
        self.messages -= dict.pop(self, key)

    def pop(self, key: Position, *default: Any) -> Any:
        """Remove ``key`` and return its count (or ``default`` when absent)."""
        if key in self:
            value = dict.pop(self, key)
            self.messages -= value
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def clear(self) -> None:
        """Forget every entry."""
        dict.clear(self)
        self.messages = 0

    def update(self, *args: Any, **kwargs: Any) -> None:  # keep the total right if ever used
        """Set several counts."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: Position, default: int = 0) -> int:
        """The count of ``key``, set to ``default`` first when absent."""
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def popitem(self) -> tuple[Position, int]:
        """Remove and return the last entry."""
        key, value = dict.popitem(self)
        self.messages -= value
        return key, value


class Consumer:
    """State of one consumer: permits from FLOW, what it holds unacked, and how to reach it.

    ``pending`` maps each delivered, not yet acked entry to its message count; it is what a
    consumer leaving, a redelivery request or a failover switch hands back to the dispatcher.
    Sending goes through the connection's bounded outgoing queue, so a slow client slows its
    dispatcher rather than growing memory (`_connection` Rule B3).

    Statistics (Pulsar's ConsumerStats, `_stats`): ``msg_out_counter`` counts messages (a batch of
    N counts N) and ``bytes_out_counter`` entry bytes, both for every delivery, redeliveries
    included; ``msg_redeliver_counter`` the messages handed back for redelivery,
    ``msg_ack_counter`` the messages acknowledged, ``chunk_out_counter`` the chunks of chunked
    messages delivered. Deliveries also count on the subscription and topic, which keep them after
    the consumer leaves. ``rates`` are those counters per second over
    the last stats period (`_stats.StatsUpdater`).
    """

    def __init__(
        self,
        *,
        consumer_id: int,
        name: str,
        connection: Any,
        subscription: Subscription | NonPersistentSubscription,
        priority: int,
        seq: int,
        hash_ranges: Sequence[tuple[int, int]] = (),
        metadata: dict[str, str] | None = None,
    ) -> None:
        self.consumer_id = consumer_id
        self.name = name
        self.connection = connection
        self.subscription = subscription
        self.priority = priority
        self.seq = seq
        self.hash_ranges = tuple(hash_ranges)
        self.metadata = metadata or {}
        self.permits = 0
        self.pending = PendingEntries()
        self.closed = False
        self.join_barrier: Position | None = None  # Key_Shared: see the dispatcher's Rule 3b
        self.ready = False  # set once SUCCESS was sent: nothing else may reach the client before it
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.msg_redeliver_counter = 0
        self.msg_ack_counter = 0
        self.chunk_out_counter = 0
        self.last_consumed_ms = 0
        self.last_acked_ms = 0
        self.last_flow_ms = 0
        self.avg_messages_per_entry = 0.0
        self.read_position_when_joining: Position | None = None  # Key_Shared: where it joined
        self.connected_since = java_date(int(time.time() * 1000))
        self.rates = Rates(5)  # out msgs, out bytes, redelivered, acked, chunks out
        self.end_of_topic_sent = False

    @property
    def unacked_messages(self) -> int:
        """Messages delivered to this consumer and not acked yet."""
        return self.pending.messages

    @property
    def writable(self) -> bool:
        """Whether its connection takes more frames now (`_connection` Rule B3): a dispatcher
        hands entries only to consumers whose connection is writable."""
        return bool(getattr(self.connection, "writable", True))

    @property
    def address(self) -> str:
        """The client's address, for stats."""
        return str(getattr(self.connection, "remote", ""))

    async def send_entries(self, items: Sequence[tuple[Entry, int, list[int] | None]]) -> None:
        """Send MESSAGE frames for ``(entry, redelivery_count, ack_set)`` items, in order."""
        if self.closed or not items:
            return
        frames = []
        sub = self.subscription
        topic = sub.topic
        # a partition's messages carry its index, as Pulsar's dispatcher sets it: clients route,
        # ack and seek by message id across the partitions of a topic
        partition = topic.name.partition
        pending = self.pending
        # only a topic that has seen a chunked message pays for looking for chunks
        chunks = topic.stats_state.chunks_seen
        msgs = size = chunk_count = 0
        consumer_id = self.consumer_id
        for entry, redelivery, ack_set in items:
            position = entry.position
            frames.append(
                encode_message(
                    consumer_id,
                    position.ledger_id,
                    position.entry_id,
                    entry.data,
                    partition=partition,
                    redelivery_count=redelivery,
                    ack_set=ack_set,
                )
            )
            # the dispatcher records each entry's message count in ``pending`` before sending it
            n = pending.get(entry.position, 1)
            msgs += n
            size += len(entry.data)
            if chunks and n == 1 and _is_chunk(entry.data):
                chunk_count += 1
        await self.connection.send(b"".join(frames))
        # counted once handed to the connection, as Pulsar counts what it wrote
        self.note_sent(msgs, size, len(items), chunk_count)

    def note_sent(self, msgs: int, size: int, entries: int, chunks: int = 0) -> None:
        """Count a delivery of ``entries`` entries holding ``msgs`` messages and ``size`` bytes on
        this consumer, its subscription and its topic (`_stats` Rules 1 and 2)."""
        self.msg_out_counter += msgs
        self.bytes_out_counter += size
        self.chunk_out_counter += chunks
        self.last_consumed_ms = int(time.time() * 1000)
        # Pulsar's moving average: the first send sets it, later ones weigh in at 10 %
        per_entry = msgs / entries if entries else 0.0
        avg = self.avg_messages_per_entry
        self.avg_messages_per_entry = per_entry if avg < 1 else avg * 0.9 + per_entry * 0.1
        self.subscription.out_counters.add(msgs, size)

    def notify_active(self, is_active: bool) -> None:
        """Tell a Failover consumer whether it is now the active one (ACTIVE_CONSUMER_CHANGE)."""
        if self.ready and not self.closed:
            self.connection.send_nowait(
                encode_command(
                    make_command("ACTIVE_CONSUMER_CHANGE", consumer_id=self.consumer_id, is_active=is_active)
                )
            )

    def reached_end_of_topic(self) -> None:
        """Tell the client, once, that the terminated topic has no more messages for it
        (REACHED_END_OF_TOPIC; the Java and Go clients then report end of topic).

        Clients of the libpulsar family (C++, and the Python and Node.js clients built on it,
        whose CONNECT says ``Pulsar-CPP-v...``) are not sent it: their connection accepts a fixed
        set of commands and closes itself on any other, REACHED_END_OF_TOPIC included, so the
        consumer would reconnect, re-subscribe and be told again, in a loop. They keep their
        connection and simply receive nothing more.
        """
        if self.end_of_topic_sent or not self.ready or self.closed:
            return
        self.end_of_topic_sent = True
        if not understands_end_of_topic(str(getattr(self.connection, "client_version", ""))):
            return
        self.connection.send_nowait(encode_command(make_command("REACHED_END_OF_TOPIC", consumer_id=self.consumer_id)))

    def close_from_broker(self) -> None:
        """Tell the client the broker closed this consumer (it will re-subscribe) and detach it."""
        if self.closed:
            return
        self.closed = True
        self.connection.forget_consumer(self.consumer_id, self)
        self.connection.send_nowait(
            encode_command(make_command("CLOSE_CONSUMER", consumer_id=self.consumer_id, request_id=UINT64_MAX))
        )
