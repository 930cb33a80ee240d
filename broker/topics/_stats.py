"""Statistics: counters bumped on the hot path, rates computed once per stats period.

Rules (each follows Pulsar's broker; the JSON shapes are `_stats_json`'s):

* Rule 1 (counters): the hot path only bumps plain integers: a producer's messages, bytes and
  chunks in (per SEND), a consumer's messages, bytes and chunks out (per delivery, a batch of N
  counts N, redeliveries included), messages handed back for redelivery and messages
  acknowledged. A topic counts what its producers publish.
* Rule 2 (what stays): a persistent subscription counts every delivery to any of its consumers
  and its topic every delivery of any subscription (`OutCounters`), so a subscription's and a
  topic's ``msgOutCounter`` / ``bytesOutCounter`` keep what departed consumers and removed
  subscriptions received, as Pulsar's ``...FromRemovedConsumers`` / ``...FromRemovedSubscriptions``.
  Everything restarts when the topic is loaded again.
* Rule 3 (rates): every ``statsUpdateFrequencyInSecs`` (after ``statsUpdateInitialDelayInSecs``)
  `StatsUpdater.update` turns each producer's, consumer's and subscription's counters into rates
  (`Rates`: what each counter gained since the previous update divided by the seconds between,
  the first period measured from the object's creation), as Pulsar's ``Rate.calculateRate`` in
  ``BrokerService.updateRates``. A subscription's rates are the sums over its consumers and a
  topic's over its producers and subscriptions, as in Pulsar: a consumer or producer that left
  takes its rate with it. REST stats, ``/metrics``, CONSUMER_STATS, broker-stats and load reports
  all read these same figures.
* Rule 4 (blocked on unacked): a Shared or Key_Shared consumer is blocked while its unacked
  messages reach the topic's resolved ``maxUnackedMessagesPerConsumer`` (topic policy >
  namespace policy > broker config, `_topic_limits`), its subscription while the sum reaches
  ``maxUnackedMessagesPerSubscription``: the limits the dispatcher enforces (`_dispatcher` Rule 3).
* Rule 5 (backlog age): the age of the oldest unacknowledged message of the durable
  subscriptions and that subscription's name are refreshed by reading the first unacked entry of
  each (`refresh_backlog_age`, at most every few seconds); ``-1`` while nothing is unacknowledged,
  as Pulsar reports no oldest position.
* Rule 6 (requests never wait on storage for the backlog age): REST stats and ``/metrics`` ask
  for a refresh through `backlog_age_for_request`, which runs it in the topic's nursery (one at a
  time per topic) and waits for it at most ``BACKLOG_AGE_WAIT_S``; after that the request
  answers with the age known so far and the refresh lands for the next one. Those reads queue
  behind the dispatchers' reads of a backlog and wait on slow or unreachable bookies, and a stats
  request that awaited them was seen taking over 10 s while its broker sat idle.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import trio

from managed_ledger import ManagedLedgerError
from protocols.pulsar import InvalidTopicNameError, TopicName
from retention import first_unacked_position

if TYPE_CHECKING:
    from .._service import BrokerService
    from ._nonpersistent import NonPersistentSubscription, NonPersistentTopic
    from ._replication_view import ReplicatorView
    from ._subscription import Subscription
    from ._topic import Topic

__all__ = [
    "Rates",
    "OutCounters",
    "TopicStatsState",
    "StatsUpdater",
    "java_date",
    "refresh_backlog_age",
    "backlog_age_for_request",
    "BACKLOG_AGE_REFRESH_S",
    "BACKLOG_AGE_WAIT_S",
    "storage_numbers",
    "backlog_age_seconds",
    "topic_rates",
    "update_topic_rates",
    "INDIVIDUAL_ACK_TYPES",
]

log = logging.getLogger(__name__)

BACKLOG_AGE_REFRESH_S = 5.0
"""How old the backlog age (Rule 5) may be when stats or ``/metrics`` report it."""

BACKLOG_AGE_WAIT_S = 0.5
"""How long a request waits for the backlog-age refresh it asked for (Rule 6)."""

INDIVIDUAL_ACK_TYPES = (1, 3)
"""Shared and Key_Shared (CommandSubscribe.SubType): the types with unacked limits and replay."""


def java_date(ms: int) -> str:
    """``ms`` (epoch milliseconds) as Pulsar's ``DateFormatter`` writes it: Java's ISO offset
    date-time in the local zone, ``Z`` for UTC, the fraction only when not zero and without
    trailing zeros (``2024-05-01T10:00:00.12Z``)."""
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).astimezone()
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    millis = ms % 1000
    if millis:
        text += "." + f"{millis:03d}".rstrip("0")
    offset = when.utcoffset() or datetime.timedelta(0)
    if not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


class Rates:
    """Pulsar's ``Rate`` over monotonic counters (Rule 3).

    `update` divides what each counter gained since the previous update by the seconds between
    the two (the first update measures from creation, when every counter was 0); ``per_s`` holds
    the results and ``gained`` the gains. A period that is not positive (a clock given by a test)
    only takes the counters as the new base.
    """

    __slots__ = ("_at", "_last", "per_s", "gained")

    def __init__(self, n: int) -> None:
        self._at = time.monotonic()
        self._last: tuple[int, ...] = (0,) * n
        self.per_s: tuple[float, ...] = (0.0,) * n
        self.gained: tuple[int, ...] = (0,) * n

    def update(self, now: float, *counters: int) -> tuple[float, ...]:
        """Take the counters at ``now`` (seconds, monotonic); return the new rates."""
        period = now - self._at
        self.gained = tuple(c - p for c, p in zip(counters, self._last, strict=True))
        self._last, self._at = counters, now
        if period > 0:
            self.per_s = tuple(max(0, g) / period for g in self.gained)
        else:
            self.per_s = (0.0,) * len(counters)
        return self.per_s


class OutCounters:
    """Messages and bytes delivered, kept past the consumers (Rule 2); ``parent`` (the topic's)
    counts the same deliveries."""

    __slots__ = ("msgs", "bytes", "parent")

    def __init__(self, parent: OutCounters | None = None) -> None:
        self.msgs = 0
        self.bytes = 0
        self.parent = parent

    def add(self, msgs: int, size: int) -> None:
        """Count a delivery of ``msgs`` messages and ``size`` bytes."""
        self.msgs += msgs
        self.bytes += size
        if self.parent is not None:
            self.parent.add(msgs, size)


class TopicStatsState:
    """What a topic keeps for its statistics besides its producers' and subscriptions' own."""

    def __init__(self) -> None:
        self.out = OutCounters()  # Rule 2: every delivery of every subscription
        self.chunks_seen = False  # a chunk was published since the topic was loaded
        self.msg_chunk_published = False  # Pulsar's flag: set by the updater (Rule 3)
        self.oldest_publish_ms: int | None = None  # Rule 5
        self.oldest_subscription: str | None = None
        self.backlog_age_at = 0.0  # monotonic time of the last refresh
        self.backlog_age_running: trio.Event | None = None  # set when the refresh in flight ends (Rule 6)


def backlog_age_seconds(state: TopicStatsState, now_ms: int) -> int:
    """Pulsar's ``oldestBacklogMessageAgeSeconds``: whole seconds since the oldest unacknowledged
    message was published, -1 when there is none (Rule 5)."""
    if state.oldest_publish_ms is None:
        return -1
    return max(0, now_ms - state.oldest_publish_ms) // 1000


class StatsUpdater:
    """Computes every loaded topic's rates once per stats period (Rule 3).

    Run it in the service's nursery (`run`); `update` may also be called directly with a clock
    value, which is how tests get exact rates. The updater also counts what message TTL expires
    (it listens to the retention service)."""

    def __init__(self, service: BrokerService, clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.clock = clock
        self.updates = 0
        service.retention.expiry_listeners.append(self.expired)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Update after ``statsUpdateInitialDelayInSecs``, then every ``statsUpdateFrequencyInSecs``
        (both read from the service's current config each time); until cancelled."""
        task_status.started()
        await trio.sleep(max(0, self.service.config.stats_update_initial_delay_s))
        while True:
            self.update()
            await trio.sleep(max(1, self.service.config.stats_update_frequency_s))

    def update(self, now: float | None = None) -> None:
        """Compute the rates of every loaded topic at ``now`` (the updater's clock by default)."""
        at = self.clock() if now is None else now
        topics: Iterable[Topic | NonPersistentTopic] = [*self.service.topics.values(), *self.service.np_topics.values()]
        for topic in topics:
            if not topic.closed:
                update_topic_rates(topic, at)
        self.updates += 1

    def expired(self, ml_name: str, cursor_name: str, entries: int) -> None:
        """Message TTL moved a cursor past ``entries`` unacknowledged entries (the retention
        service's expiry listener): count them on the subscription (``totalMsgExpired``)."""
        try:
            name = TopicName.from_managed_ledger_name(ml_name)
        except InvalidTopicNameError:
            return
        topic = self.service.topics.get(str(name))
        sub = None if topic is None else topic.subscriptions.get(cursor_name)
        if sub is not None:
            sub.note_expired(entries)


def update_topic_rates(topic: Topic | NonPersistentTopic, now: float) -> None:
    """Rule 3 for one topic: its producers', consumers' and subscriptions' rates at ``now``."""
    persistent = topic.name.persistent
    for p in list(topic.producers.values()):
        p.rates.update(now, p.msg_in_counter, p.bytes_in_counter, p.chunk_in_counter)
        if persistent and p.rates.gained[2] > 0:
            topic.stats_state.msg_chunk_published = True
    subs: list[Subscription | NonPersistentSubscription] = list(topic.subscriptions.values())
    for sub in subs:
        for c in list(sub.consumers):
            c.rates.update(
                now,
                c.msg_out_counter,
                c.bytes_out_counter,
                c.msg_redeliver_counter,
                c.msg_ack_counter,
                c.chunk_out_counter,
            )
        sub.update_rates(now)
    replicators: dict[str, ReplicatorView] = getattr(topic, "replicators", {})  # persistent topics only
    for r in list(replicators.values()):
        r.rates.update(now, r.msg_out, r.bytes_out)


def topic_rates(topic: Topic | NonPersistentTopic) -> tuple[float, float, float, float]:
    """(messages in/s, bytes in/s, messages out/s, bytes out/s) of a topic over the last stats
    period: sums over its producers and its subscriptions' consumers (Rule 3)."""
    rate_in = thr_in = rate_out = thr_out = 0.0
    for p in list(topic.producers.values()):
        rate_in += p.rates.per_s[0]
        thr_in += p.rates.per_s[1]
    subs: list[Subscription | NonPersistentSubscription] = list(topic.subscriptions.values())
    for sub in subs:
        for c in list(sub.consumers):
            rate_out += c.rates.per_s[0]
            thr_out += c.rates.per_s[1]
    return rate_in, thr_in, rate_out, thr_out


def storage_numbers(topic: Topic) -> dict[str, int]:
    """Storage size, slowest backlog (messages and bytes) and subscription backlog sum."""
    ml = topic.ml
    durable = [s for s in topic.subscriptions.values() if s.durable]
    backlogs = [s.backlog for s in durable]
    sizes = [s.cursor.backlog_size for s in durable]
    return {
        "storageSize": ml.total_size,
        "msgBacklog": sum(backlogs),
        "backlogSize": max(sizes, default=0),
        "numberOfEntries": ml.number_of_entries,
    }


async def refresh_backlog_age(topic: Topic, now_ms: int) -> int:
    """Rule 5: read the publish time of each durable subscription's first unacknowledged entry
    (one entry read per subscription with a backlog) and keep the oldest and its subscription on
    the topic; return the age in seconds (-1: nothing unacknowledged)."""
    from ..housekeeping._retention_hooks import publish_time_of

    oldest: int | None = None
    oldest_sub: str | None = None
    ledgers = topic.ml.ledgers
    for sub in list(topic.subscriptions.values()):
        if not sub.durable or sub.closed:
            continue
        pos = first_unacked_position(ledgers, sub.cursor.mark_delete_position)
        if pos is None:
            continue
        try:
            t = publish_time_of(await topic.ml.read_entry(pos))
        except ManagedLedgerError:
            continue
        if t is not None and (oldest is None or t < oldest):
            oldest, oldest_sub = t, sub.name
    state = topic.stats_state
    state.oldest_publish_ms, state.oldest_subscription = oldest, oldest_sub
    state.backlog_age_at = time.monotonic()
    return backlog_age_seconds(state, now_ms)


def _start_backlog_age_refresh(topic: Topic, now_ms: int) -> trio.Event | None:
    """Rule 6: the event of the refresh in flight, starting one in the topic's nursery when the
    age is older than ``BACKLOG_AGE_REFRESH_S`` and none runs; None when none runs or can start."""
    state = topic.stats_state
    if state.backlog_age_running is not None:
        return state.backlog_age_running
    if topic.closed or time.monotonic() - state.backlog_age_at < BACKLOG_AGE_REFRESH_S:
        return None
    done = trio.Event()

    async def refresh() -> None:
        try:
            await refresh_backlog_age(topic, now_ms)
        except Exception as exc:  # the next request tries again; stats must not fail for it
            log.debug("backlog age of %s: %s", topic.name, exc)
        finally:
            state.backlog_age_running = None
            done.set()

    if not topic.start_soon(refresh):
        return None
    state.backlog_age_running = done
    return done


async def backlog_age_for_request(topics: Iterable[Topic], now_ms: int) -> None:
    """Rule 6: refresh the backlog age of ``topics`` where it is due, waiting for those refreshes
    at most ``BACKLOG_AGE_WAIT_S`` in all; the ones still reading finish in the background."""
    running = [e for t in topics if (e := _start_backlog_age_refresh(t, now_ms)) is not None]
    with trio.move_on_after(BACKLOG_AGE_WAIT_S):
        for event in running:
            await event.wait()
