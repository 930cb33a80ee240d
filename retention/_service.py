"""`RetentionService`: the periodic task that applies retention, message TTL and backlog quotas.

Each pass, for every managed ledger stored in metadata (``factory.list("")``):

1. Loaded ones are used as they are; stored-but-not-loaded ones are opened, worked on and closed
   again (when ``retention_check_unloaded_topics`` and ``owns(name)``; see below).
2. An idle current ledger (non-empty, no add since ``idle_ledger_rollover_s``) is rolled
   (``ml.rollover()``) so that it gets a close time and stops being the last ledger: otherwise the
   data of an idle topic would stay forever whatever retention says.
   *System cursors* (``system_cursors``, e.g. the broker's ``pulsar.dedup``) are not subscriptions:
   TTL and backlog quotas skip them; retention still keeps what they have not marked deleted.
3. TTL (every ``messageExpiryCheckIntervalInMinutes``): each durable cursor's mark-delete moves to
   the newest expired entry (`expired_ttl_position`).
4. Backlog quotas (every ``backlogQuotaCheckIntervalInSeconds``) are evaluated; eviction is applied
   here (the slowest cursor skips entries / expires by age); hold and reject are recorded for the
   broker (`producer_quota_action`) in its `QuotaStates`, and only for loaded topics: producers
   exist only on loaded topics, and the broker evaluates a topic again when a producer attaches.
   That state lives as long as the topic stays loaded, whatever the number of topics checked; the
   explain reports are bounded on their own (``max_reports``).
5. Retention (every ``retentionCheckIntervalInSeconds``): `decide_retention` over the ledger list
   and the cursors, intersected with ``ml.trimmable_ledgers()``; ``ml.trim(ids)`` removes them from
   the list (metadata CAS) and then deletes them in BookKeeper. ``trim`` re-checks trimmability
   under the managed ledger's own lock, so a cursor moved back (reset) between the decision and the
   trim cannot lose data: the service never races a cursor.

6. Offload (every pass, when the managed ledger has tiered storage): ``ml.check_offload()`` starts
   the automatic offload of the ledgers over the topic's offload thresholds (in the background
   for a loaded topic, awaited for one opened just for this pass) and deletes the bookie copies of
   offloaded ledgers whose deletion lag passed; trimming (5) deletes the tier copies of the
   ledgers it removes.

An error on one topic is logged, counted (``stage`` label) and recorded for explain; the pass goes on.

Unloaded topics: opening a managed ledger fences its previous owner and creates a ledger (deleted
again on close since it stays empty), so it costs two metadata writes and a ledger create/delete
per topic per pass, and it must only be done for topics this broker may own (``owns``; in a cluster
the broker passes its bundle-ownership check). The alternative -- leaving unloaded topics alone --
would never free the space of topics nobody uses, which is the case users complain about most.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from managed_ledger import Entry, ManagedCursor, ManagedLedger, ManagedLedgerFactory, ManagedLedgerState
from protocols.managed_ledger import LedgerInfo, Position

from ._decide import (
    CursorBacklog,
    QuotaAction,
    QuotaDecision,
    RetentionDecision,
    decide_retention,
    evaluate_backlog_quota,
    expired_ttl_position,
)
from ._policies import BacklogQuotaType, RetentionConfig, TopicPolicies
from ._provider import PoliciesProvider, ml_name_of, topic_of
from .metrics import RetentionMetrics

__all__ = ["LoadedQuotaStates", "QuotaStates", "RetentionService", "TopicReport", "first_unacked_position"]

log = logging.getLogger(__name__)

PublishTimeOf = Callable[[Entry], "int | None"]


def first_unacked_position(ledgers: Sequence[LedgerInfo], mark_delete: Position) -> Position | None:
    """The first entry after ``mark_delete`` in the ledger list, None when there is none (pure)."""
    for info in ledgers:
        if info.ledger_id < mark_delete.ledger_id:
            continue
        first = mark_delete.entry_id + 1 if info.ledger_id == mark_delete.ledger_id else 0
        if first < info.entries:
            return Position(info.ledger_id, max(first, 0))
    return None


class QuotaStates(Protocol):
    """Where the hold / reject decisions of the backlog quota (`producer_quota_action`) are kept.

    Rules: the service calls `put` only for a topic whose managed ledger was loaded when it was
    checked, with its decisions that hold or reject producers (possibly none); `discard` when the
    topic has no quota or was checked while not loaded; `prune` once per pass. An implementation
    keeps a topic's decisions while the topic is loaded (never evicting them for other topics, or
    enforcement would lapse) and forgets them when it unloads, so it is bounded by the loaded
    topics. Topic names are ``persistent://tenant/ns/topic``.
    """

    def put(self, topic: str, decisions: Sequence[QuotaDecision]) -> None:
        """Record the decisions of a loaded topic (replacing the previous ones)."""
        ...

    def get(self, topic: str) -> Sequence[QuotaDecision]:
        """The recorded decisions of ``topic`` (empty when none, or when it is not loaded)."""
        ...

    def discard(self, topic: str) -> None:
        """Forget ``topic``'s decisions."""
        ...

    def prune(self) -> None:
        """Forget the decisions of topics that are not loaded any more."""
        ...


class LoadedQuotaStates:
    """`QuotaStates` in a map keyed by topic, holding only topics whose managed ledger ``factory``
    has loaded: an entry goes as soon as its managed ledger is seen unloaded (by `get`, or by
    `prune` on each pass), so the map is bounded by the loaded managed ledgers. The broker keeps
    the decisions on its topic objects instead; this one serves the service on its own."""

    def __init__(self, factory: ManagedLedgerFactory) -> None:
        self._factory = factory
        self._by_topic: dict[str, tuple[QuotaDecision, ...]] = {}

    def _loaded(self, topic: str) -> bool:
        return self._factory.get(ml_name_of(topic)) is not None

    def put(self, topic: str, decisions: Sequence[QuotaDecision]) -> None:
        """See `QuotaStates.put`."""
        if decisions and self._loaded(topic):
            self._by_topic[topic] = tuple(decisions)
        else:
            self._by_topic.pop(topic, None)

    def get(self, topic: str) -> Sequence[QuotaDecision]:
        """See `QuotaStates.get`."""
        decisions = self._by_topic.get(topic)
        if decisions is None:
            return ()
        if not self._loaded(topic):
            del self._by_topic[topic]
            return ()
        return decisions

    def discard(self, topic: str) -> None:
        """See `QuotaStates.discard`."""
        self._by_topic.pop(topic, None)

    def prune(self) -> None:
        """See `QuotaStates.prune`."""
        for topic in [t for t in self._by_topic if not self._loaded(t)]:
            del self._by_topic[topic]

    def __len__(self) -> int:
        return len(self._by_topic)


@dataclass
class TopicReport:
    """What one check of one topic did (also the body of `RetentionService.explain`)."""

    topic: str
    checked_at_ms: int
    loaded: bool
    policies: TopicPolicies | None = None
    decision: RetentionDecision | None = None
    trimmed: list[int] = field(default_factory=list)
    trimmed_bytes: int = 0
    rolled: bool = False
    ttl_moves: dict[str, tuple[str, str]] = field(default_factory=dict)
    quota: list[QuotaDecision] = field(default_factory=list)
    evicted: dict[str, tuple[str, str]] = field(default_factory=dict)
    offload: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON for the REST / CLI ``explain-storage`` (bookie GC state is joined in by the broker)."""
        return {
            "topic": self.topic,
            "checkedAtMs": self.checked_at_ms,
            "loaded": self.loaded,
            "policies": None if self.policies is None else self.policies.to_json(),
            "retention": None if self.decision is None else self.decision.to_json(),
            "trimmed": self.trimmed,
            "trimmedBytes": self.trimmed_bytes,
            "rolledIdleLedger": self.rolled,
            "ttl": {c: {"from": a, "to": b} for c, (a, b) in self.ttl_moves.items()},
            "backlogQuota": [q.to_json() for q in self.quota],
            "evicted": {c: {"from": a, "to": b} for c, (a, b) in self.evicted.items()},
            "offload": dict(self.offload),
            "errors": dict(self.errors),
        }


class RetentionService:
    """Applies retention, TTL and backlog quotas to every managed ledger of ``factory``.

    ``clock`` returns seconds (the factory's clock in tests). ``interval_s`` overrides
    ``config.retention_check_interval_s``. ``publish_time_of(entry)`` returns an entry's publish time
    in ms (the broker parses its Pulsar metadata); without it TTL and age quotas work at ledger
    granularity (close times) only. ``owns(ml_name)`` says whether this broker may open a topic that
    is not loaded. Explain data is kept for at most ``max_reports`` topics (least recently checked
    dropped first). ``quota_states`` keeps the producer-facing quota decisions of loaded topics
    (a `LoadedQuotaStates` over ``factory`` unless given; the broker keeps them with its topics).
    """

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        policies_provider: PoliciesProvider,
        clock: Callable[[], float] = time.time,
        interval_s: float | None = None,
        *,
        config: RetentionConfig | None = None,
        publish_time_of: PublishTimeOf | None = None,
        owns: Callable[[str], bool] | None = None,
        metrics: RetentionMetrics | None = None,
        max_reports: int = 10_000,
        system_cursors: frozenset[str] = frozenset(),
        quota_states: QuotaStates | None = None,
    ) -> None:
        self.config = config if config is not None else RetentionConfig()
        self.config.validate()
        self._factory = factory
        self._policies = policies_provider
        self._clock = clock
        self.interval_s = interval_s if interval_s is not None else self.config.retention_check_interval_s
        if self.interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self._publish_time_of = publish_time_of
        self._owns = owns if owns is not None else (lambda name: True)
        self.metrics = metrics if metrics is not None else RetentionMetrics()
        self._max_reports = max(1, max_reports)
        self.system_cursors = frozenset(system_cursors)
        self._reports: OrderedDict[str, TopicReport] = OrderedDict()
        # Called with the report right after a trim, so that a listener (the broker's record of
        # deleted ledgers, for explain-storage) sees every trim, not just the latest report.
        self.trim_listeners: list[Callable[[TopicReport], object]] = []
        # Called with (managed ledger name, cursor name, entries expired) after message TTL moved a
        # cursor, so that the broker can count expired messages per subscription.
        self.expiry_listeners: list[Callable[[str, str, int], object]] = []
        self.quota_states: QuotaStates = quota_states if quota_states is not None else LoadedQuotaStates(factory)
        # ml name -> (entriesAddedCounter, clock time it was first seen at that value)
        self._activity: dict[str, tuple[int, float]] = {}
        self._next_ttl = 0.0
        self._next_quota = 0.0

    # --- the loop ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run passes until cancelled: retention every ``interval_s``; TTL and quotas on their own
        intervals, checked at each pass. Start with ``await nursery.start(service.run)``."""
        task_status.started()
        while True:
            await self.run_once()
            await trio.sleep(self.interval_s)

    async def run_once(self, *, force: bool = False) -> list[TopicReport]:
        """One pass over every stored managed ledger. TTL and quotas run when their interval is due
        (or ``force``). Never raises for a per-topic failure."""
        started = time.monotonic()
        now = self._clock()
        do_ttl = force or now >= self._next_ttl
        do_quota = force or now >= self._next_quota
        if do_ttl:
            self._next_ttl = now + self.config.message_expiry_check_interval_minutes * 60
        if do_quota:
            self._next_quota = now + self.config.backlog_quota_check_interval_s
        try:
            names = await self._factory.list("")
        except Exception as exc:  # the metadata store is down: try again next pass
            log.warning("retention: cannot list managed ledgers: %s", exc)
            self.metrics.errors.labels(stage="list").inc()
            names = []
        reports = []
        for name in names:
            report = await self.check_topic(name, ttl=do_ttl, quota=do_quota)
            if report is not None:
                reports.append(report)
        for gone in set(self._activity) - set(names):
            del self._activity[gone]
        self.quota_states.prune()
        self.metrics.runs.inc()
        self.metrics.last_run.set(time.time())
        self.metrics.last_run_duration.set(time.monotonic() - started)
        return reports

    # --- one topic ---------------------------------------------------------------------------

    async def check_topic(
        self, name: str, *, ttl: bool = True, quota: bool = True, trim: bool = True
    ) -> TopicReport | None:
        """Check one managed ledger (or ``persistent://`` topic) now. Returns its report, or None when
        it is not loaded and may not be opened here. Errors are recorded in the report, not raised."""
        name = ml_name_of(name)
        topic = topic_of(name)
        ml = self._factory.get(name)
        loaded = ml is not None
        if ml is None:
            if not self.config.retention_check_unloaded_topics or not self._owns(name):
                return None
            try:
                ml = await self._factory.open(name)
            except Exception as exc:
                return self._failed(TopicReport(topic, self._now_ms(), False), "open", exc)
        self.metrics.topics_checked.labels(loaded=str(loaded).lower()).inc()
        report = TopicReport(topic, self._now_ms(), loaded)
        try:
            await self._check(ml, report, ttl=ttl, quota=quota, trim=trim)
        finally:
            if not loaded:
                try:
                    await ml.close()
                except Exception as exc:
                    self._failed(report, "close", exc)
        self._remember(report)
        return report

    async def _check(self, ml: ManagedLedger, report: TopicReport, *, ttl: bool, quota: bool, trim: bool) -> None:
        try:
            report.policies = policies = await self._policies.topic_policies(report.topic)
        except Exception as exc:
            self._failed(report, "policies", exc)
            return
        if ml.state in (ManagedLedgerState.CLOSED, ManagedLedgerState.FENCED):
            return
        await self._stage(report, "rollover", self._roll_if_idle(ml, report))
        if ttl and policies.message_ttl_s > 0:
            await self._stage(report, "ttl", self._apply_ttl(ml, report, policies.message_ttl_s))
        if quota:
            await self._stage(report, "backlog_quota", self._apply_quota(ml, report, policies))
        if trim:
            await self._stage(report, "trim", self._trim(ml, report, policies))
            await self._stage(report, "offload", self._offload(ml, report))

    async def _stage(self, report: TopicReport, stage: str, work: Any) -> None:
        try:
            await work
        except Exception as exc:
            self._failed(report, stage, exc)

    async def _roll_if_idle(self, ml: ManagedLedger, report: TopicReport) -> None:
        stats = ml.internal_stats()
        added, now = int(stats["entriesAddedCounter"]), self._clock()
        seen = self._activity.get(ml.name)
        if seen is None or seen[0] != added:
            self._activity[ml.name] = (added, now)
            return
        idle_for = self.config.idle_ledger_rollover_s or self.interval_s
        if (
            ml.state is ManagedLedgerState.LEDGER_OPENED
            and stats["currentLedgerEntries"] > 0
            and now - seen[1] >= idle_for
        ):
            await ml.rollover()
            report.rolled = True
            self.metrics.idle_rollovers.inc()

    def _finder(self, cursor: ManagedCursor) -> Any:
        publish_time_of = self._publish_time_of
        if publish_time_of is None:
            return None

        async def find(cutoff_ms: int) -> Position | None:
            def published_before(entry: Entry) -> bool:
                t = publish_time_of(entry)
                return t is not None and t < cutoff_ms

            return await cursor.find_newest_matching(published_before)

        return find

    async def _expire(self, ml: ManagedLedger, cursor: ManagedCursor, age_s: int) -> tuple[str, str] | None:
        before = cursor.mark_delete_position
        target = await expired_ttl_position(ml.ledgers, before, age_s, self._now_ms(), self._finder(cursor))
        if target is None or target <= before:
            return None
        await cursor.mark_delete(target)
        return str(before), str(cursor.mark_delete_position)

    def _subscriptions(self, ml: ManagedLedger) -> list[tuple[str, ManagedCursor]]:
        return sorted((n, c) for n, c in ml.cursors.items() if n not in self.system_cursors)

    async def _apply_ttl(self, ml: ManagedLedger, report: TopicReport, ttl_s: int) -> None:
        for name, cursor in self._subscriptions(ml):
            backlog = cursor.backlog
            moved = await self._expire(ml, cursor, ttl_s)
            if moved is not None:
                report.ttl_moves[name] = moved
                self.metrics.ttl_cursor_moves.inc()
                expired = backlog - cursor.backlog
                for listener in list(self.expiry_listeners):
                    try:
                        listener(ml.name, name, expired)
                    except Exception:
                        log.exception("retention: an expiry listener failed for %s", ml.name)

    async def _oldest_unacked_ms(self, ml: ManagedLedger, cursor: ManagedCursor) -> int | None:
        ledgers = ml.ledgers
        pos = first_unacked_position(ledgers, cursor.mark_delete_position)
        if pos is None:
            return None
        if self._publish_time_of is not None:
            t = self._publish_time_of(await ml.read_entry(pos))
            if t is not None:
                return t
        # Without a publish time the entry is at most as old as the close of the ledger before
        # its own: use that bound (the open ledger's own close time is not known yet).
        prev = [i for i in ledgers if i.ledger_id < pos.ledger_id]
        return prev[-1].timestamp_ms if prev and prev[-1].timestamp_ms else None

    async def _apply_quota(self, ml: ManagedLedger, report: TopicReport, policies: TopicPolicies) -> None:
        if not policies.backlog_quotas:
            self.quota_states.discard(report.topic)
            return
        need_age = BacklogQuotaType.MESSAGE_AGE in policies.backlog_quotas
        backlogs = []
        for name, cursor in self._subscriptions(ml):
            oldest = await self._oldest_unacked_ms(ml, cursor) if need_age else None
            backlogs.append(
                CursorBacklog(name, cursor.mark_delete_position, cursor.backlog, cursor.backlog_size, oldest)
            )
        decisions = evaluate_backlog_quota(backlogs, policies.backlog_quotas, self._now_ms())
        report.quota = decisions
        if report.loaded:  # producers attach only to loaded topics (rule 4 of the module)
            self.quota_states.put(report.topic, [d for d in decisions if d.action is not QuotaAction.EVICT])
        else:
            self.quota_states.discard(report.topic)
        cursors = ml.cursors
        for d in decisions:
            self.metrics.quota_exceeded.labels(type=d.quota_type.value, action=d.action.value).inc()
            victim = cursors.get(d.cursor)
            if d.action is not QuotaAction.EVICT or victim is None:
                continue
            before = victim.mark_delete_position
            if d.quota_type is BacklogQuotaType.DESTINATION_STORAGE:
                if d.skip_entries > 0:
                    await victim.skip_entries(d.skip_entries)
            else:
                await self._expire(ml, victim, d.quota.limit_time)
            if victim.mark_delete_position > before:
                report.evicted[d.cursor] = (str(before), str(victim.mark_delete_position))
                self.metrics.quota_evictions.labels(type=d.quota_type.value).inc()
                log.info(
                    "%s: backlog quota %s evicted %s from %s to %s",
                    ml.name,
                    d.quota_type.value,
                    d.cursor,
                    before,
                    victim.mark_delete_position,
                )

    async def _offload(self, ml: ManagedLedger, report: TopicReport) -> None:
        report.offload = await ml.check_offload(wait=not report.loaded)

    async def _trim(self, ml: ManagedLedger, report: TopicReport, policies: TopicPolicies) -> None:
        cursors = {name: c.mark_delete_position for name, c in ml.cursors.items()}
        decision = decide_retention(
            ml.ledgers, cursors, policies.retention, self._now_ms(), system_cursors=self.system_cursors
        )
        report.decision = decision
        allowed = {i.ledger_id for i in ml.trimmable_ledgers()}
        ids = [lid for lid in decision.deletable if lid in allowed]
        if not ids:
            return
        sizes = {d.ledger_id: d.size for d in decision.ledgers}
        trimmed = await ml.trim(ids)
        report.trimmed = list(trimmed)
        report.trimmed_bytes = sum(sizes.get(lid, 0) for lid in trimmed)
        self.metrics.ledgers_trimmed.inc(len(trimmed))
        self.metrics.bytes_trimmed.inc(report.trimmed_bytes)
        if trimmed:
            log.info("%s: retention trimmed ledgers %s (%d bytes)", ml.name, trimmed, report.trimmed_bytes)
            for listener in list(self.trim_listeners):
                try:
                    listener(report)
                except Exception:
                    log.exception("retention: a trim listener failed for %s", report.topic)

    # --- bookkeeping and hooks ---------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _failed(self, report: TopicReport, stage: str, exc: BaseException) -> TopicReport:
        log.warning("retention: %s: %s failed: %s", report.topic, stage, exc)
        self.metrics.errors.labels(stage=stage).inc()
        report.errors[stage] = f"{type(exc).__name__}: {exc}"
        self._remember(report)
        return report

    def _remember(self, report: TopicReport) -> None:
        # explain data only: dropping a report never touches the quota state (rule 4)
        self._reports[report.topic] = report
        self._reports.move_to_end(report.topic)
        while len(self._reports) > self._max_reports:
            self._reports.popitem(last=False)

    def explain(self, topic: str) -> dict[str, Any] | None:
        """The last check of ``topic`` (``persistent://`` or managed-ledger name) as JSON: per ledger
        its size, entries, age, decision and reason; policies and their sources; TTL moves, quota
        state, trims and errors. None when the topic has not been checked (yet)."""
        report = self._reports.get(topic_of(topic))
        return None if report is None else report.to_json()

    def reports(self) -> Mapping[str, TopicReport]:
        """The last report of every remembered topic (read-only view)."""
        return dict(self._reports)

    def producer_quota_action(self, topic: str) -> QuotaDecision | None:
        """Broker hook for CommandProducer / SEND: the exceeded quota that holds (HOLD_PRODUCERS)
        or rejects (REJECT_PRODUCERS) producers of ``topic`` per the last quota check, None when
        producers may go on. Eviction decisions are applied by the service and never returned."""
        for d in self.quota_states.get(topic_of(topic)):
            if d.action is not QuotaAction.EVICT:
                return d
        return None

    def forget(self, topic: str) -> None:
        """Drop what is remembered of a deleted topic."""
        key = topic_of(topic)
        self._reports.pop(key, None)
        self.quota_states.discard(key)
        self._activity.pop(ml_name_of(key), None)
