"""The load manager's decisions (pure): which bundles the leader sheds and which it splits.

Inputs are the brokers' load reports (`broker.cluster._ownership.Ownership.load_report`: ``cpu.usage``
in percent of one core, and per bundle ``bundleStats`` with ``topics``, ``producers``,
``consumers``, ``msgRateIn``/``Out`` and ``msgThroughputIn``/``Out``); outputs are `Decision`s
with the reason each was taken, which the leader carries out through the owners' admin API and
records (``/admin/v2/broker-stats/load-decisions``).

Shedding (Pulsar's ``ThresholdShedder`` idea): a broker's load is its CPU usage, smoothed over
time (``history`` weight of the previous value, Pulsar's ``loadBalancerHistoryResourcePercentage``
0.9). A broker whose load exceeds the cluster average by more than ``threshold_pct`` percentage
points sheds bundles, largest throughput first, until the throughput shed reaches the fraction
of its load above (average + threshold); a broker never sheds its last bundle, and a bundle
moved recently (``recently_moved``) stays, so one bundle does not bounce between brokers. With
fewer than two brokers nothing is shed.

Splitting (``loadBalancerAutoBundleSplitEnabled``): a bundle with more topics than
``max_topics``, more producers + consumers than ``max_sessions``, or a message rate (in + out)
above ``max_msg_rate`` is split in halves, while its namespace has fewer than ``max_bundles``
bundles and the bundle holds more than one topic (a single hot topic cannot be split).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

__all__ = ["Decision", "ShedPolicy", "SplitPolicy", "smoothed_load", "plan_shedding", "plan_splits"]


@dataclass(frozen=True)
class Decision:
    """Unload or split ``bundle`` (``tenant/ns/0xLOWER_0xUPPER``) owned by ``broker``, and why."""

    action: str  # "unload" | "split"
    broker: str
    bundle: str
    reason: str


@dataclass(frozen=True)
class ShedPolicy:
    """Shedding thresholds (Pulsar's names in the config: ``loadBalancerBrokerThresholdShedderPercentage``)."""

    threshold_pct: float = 10.0
    history: float = 0.9


@dataclass(frozen=True)
class SplitPolicy:
    """Auto-split limits (Pulsar's ``loadBalancerNamespaceBundleMax*``, ``...MaximumBundles``)."""

    max_topics: int = 1000
    max_sessions: int = 1000
    max_msg_rate: float = 30000.0
    max_bundles: int = 128


def smoothed_load(previous: float | None, current: float, history: float) -> float:
    """The new smoothed load: ``previous * history + current * (1 - history)`` (the current one
    when there is no previous)."""
    if previous is None:
        return current
    return previous * history + current * (1.0 - history)


def _throughput(stats: Mapping[str, Any]) -> float:
    return float(stats.get("msgThroughputIn", 0.0)) + float(stats.get("msgThroughputOut", 0.0))


def plan_shedding(
    loads: Mapping[str, float],
    reports: Mapping[str, Mapping[str, Any]],
    policy: ShedPolicy,
    recently_moved: Set[str] = frozenset(),
) -> list[Decision]:
    """The bundles to unload now (module header). ``loads`` are the brokers' smoothed loads."""
    if len(loads) < 2:
        return []
    avg = sum(loads.values()) / len(loads)
    out: list[Decision] = []
    for broker, load in sorted(loads.items()):
        excess = load - avg - policy.threshold_pct
        if excess <= 0 or load <= 0:
            continue
        stats: Mapping[str, Mapping[str, Any]] = (reports.get(broker) or {}).get("bundleStats") or {}
        if len(stats) < 2:
            continue  # never shed a broker's last bundle
        total = sum(_throughput(s) for s in stats.values())
        if total <= 0:
            continue
        to_shed = total * excess / load
        shed = 0.0
        kept = len(stats)
        for bundle, s in sorted(stats.items(), key=lambda kv: -_throughput(kv[1])):
            if shed >= to_shed or kept <= 1:
                break
            if bundle in recently_moved or _throughput(s) <= 0:
                continue
            out.append(
                Decision(
                    "unload",
                    broker,
                    bundle,
                    f"broker load {load:.0f}% > average {avg:.0f}% + threshold {policy.threshold_pct:.0f}%:"
                    f" shedding {_throughput(s):.0f} B/s of {to_shed:.0f} B/s to offload",
                )
            )
            shed += _throughput(s)
            kept -= 1
    return out


def plan_splits(
    reports: Mapping[str, Mapping[str, Any]], bundle_counts: Mapping[str, int], policy: SplitPolicy
) -> list[Decision]:
    """The bundles to split now (module header); ``bundle_counts`` maps ``tenant/ns`` to its
    number of bundles."""
    out: list[Decision] = []
    planned: dict[str, int] = {}
    for broker, report in sorted(reports.items()):
        stats: Mapping[str, Mapping[str, Any]] = report.get("bundleStats") or {}
        for bundle, s in sorted(stats.items()):
            ns = bundle.rsplit("/", 1)[0]
            count = bundle_counts.get(ns, 0) + planned.get(ns, 0)
            topics = int(s.get("topics", 0))
            if count >= policy.max_bundles or topics < 2:
                continue
            sessions = int(s.get("producers", 0)) + int(s.get("consumers", 0))
            rate = float(s.get("msgRateIn", 0.0)) + float(s.get("msgRateOut", 0.0))
            reason = ""
            if topics > policy.max_topics:
                reason = f"{topics} topics > {policy.max_topics}"
            elif sessions > policy.max_sessions:
                reason = f"{sessions} producers and consumers > {policy.max_sessions}"
            elif rate > policy.max_msg_rate:
                reason = f"{rate:.0f} msg/s > {policy.max_msg_rate:.0f}"
            if reason:
                out.append(Decision("split", broker, bundle, reason))
                planned[ns] = planned.get(ns, 0) + 1
    return out
