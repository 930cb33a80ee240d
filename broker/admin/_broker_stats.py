"""Broker statistics over the admin REST, with Pulsar's paths and JSON shapes.

* ``GET /admin/v2/broker-stats/topics`` - the stats of every topic loaded on this broker,
  ``{namespace: {bundle: {"persistent" | "non-persistent": {topic: TopicStats}}}}``, each topic
  under the bundle of its namespace that holds it (`broker.resources._bundles`).
* ``GET /admin/v2/broker-stats/metrics`` - Pulsar's list of ``{"metrics": {...}, "dimensions":
  {...}}``: one entry per namespace with loaded topics (``brk_in_rate``, ``brk_out_rate``,
  ``brk_in_tp_rate``, ``brk_out_tp_rate``, ``brk_storage_size``, ``brk_msg_backlog``,
  ``brk_no_of_producers``, ``brk_no_of_subscriptions``, ``brk_no_of_consumers``, ``brk_no_of_topics``).
* ``GET /admin/v2/broker-stats/load-report`` - Pulsar's ``LocalBrokerData``: the broker's URLs,
  its cpu / memory / bandwidth usage (``{"usage": x, "limit": y}``; cpu in percent of one core,
  memory in MB, bandwidth in KB/s with no known limit: -1), its message rates and counts, and per
  bundle holding a loaded topic its ``lastStats`` (Pulsar's NamespaceBundleStats); in a
  multi-broker cluster also the load manager's report (owned bundles and their loads, the value of
  the broker's registration node: `broker.cluster._ownership`).

Rates are the stats updater's for the last stats period, the ones ``topics stats`` reports
(`broker.topics._stats` Rule 3).
Authorization (`_auth`): super users only.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from magnetar.common.version import VERSION

from ..resources._bundles import boundaries_of, bundle_for
from ..topics._nonpersistent import NonPersistentTopic
from ..topics._stats_json import np_topic_stats, topic_stats
from ..topics._topic import Topic
from ._common import endpoint, json_response, service_of

__all__ = ["routes"]


async def _loaded_stats(request: Request) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(namespace, bundle, topic, stats) of every loaded topic of either kind, by topic name."""
    s = service_of(request)
    boundaries: dict[str, list[int]] = {}
    out = []
    loaded: list[Topic | NonPersistentTopic] = [*s.topics.values(), *s.np_topics.values()]
    for t in sorted(loaded, key=lambda t: str(t.name)):
        if t.closed:
            continue
        ns = str(t.name.namespace_name)
        if ns not in boundaries:
            policies = await s.namespaces.get_policies(t.name.namespace_name)
            boundaries[ns] = boundaries_of(policies)
        bundle = bundle_for(boundaries[ns], str(t.name)).name
        stats = await topic_stats(t) if isinstance(t, Topic) else np_topic_stats(t)
        out.append((ns, bundle, str(t.name), stats))
    return out


@endpoint
async def topics(request: Request) -> Response:
    tree: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for ns, bundle, name, stats in await _loaded_stats(request):
        domain = "persistent" if name.startswith("persistent://") else "non-persistent"
        tree.setdefault(ns, {}).setdefault(bundle, {}).setdefault(domain, {})[name] = stats
    return json_response(tree)


@endpoint
async def metrics(request: Request) -> Response:
    s = service_of(request)
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for ns, _, _, st in await _loaded_stats(request):
        m = sums[ns]
        m["brk_in_rate"] += st["msgRateIn"]
        m["brk_out_rate"] += st["msgRateOut"]
        m["brk_in_tp_rate"] += st["msgThroughputIn"]
        m["brk_out_tp_rate"] += st["msgThroughputOut"]
        m["brk_storage_size"] += st["storageSize"]
        m["brk_msg_backlog"] += sum(sub["msgBacklog"] for sub in st["subscriptions"].values())
        m["brk_no_of_producers"] += len(st["publishers"])
        m["brk_no_of_subscriptions"] += len(st["subscriptions"])
        m["brk_no_of_consumers"] += sum(len(sub["consumers"]) for sub in st["subscriptions"].values())
        m["brk_no_of_topics"] += 1
    broker = f"{s.config.advertised_address}:{s.config.web_service_port}"
    return json_response(
        [
            {
                "metrics": dict(values),
                "dimensions": {"broker": broker, "cluster": s.config.cluster_name, "namespace": ns},
            }
            for ns, values in sorted(sums.items())
        ]
    )


def _memory_mb() -> tuple[float, float]:
    """(resident MB of this process, total MB of the machine; -1 where unknown)."""
    used = -1.0
    try:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        used = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = -1.0
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (ValueError, OSError):
        pass
    return used, total


class _CpuMeter:
    """CPU used by this process between two looks, in percent of one core."""

    def __init__(self) -> None:
        self._last = (time.monotonic(), self._cpu())

    @staticmethod
    def _cpu() -> float:
        t = os.times()
        return t.user + t.system

    def usage(self) -> float:
        now, cpu = time.monotonic(), self._cpu()
        last_now, last_cpu = self._last
        self._last = (now, cpu)
        return 0.0 if now <= last_now else 100.0 * (cpu - last_cpu) / (now - last_now)


_cpu = _CpuMeter()


@endpoint
async def load_report(request: Request) -> Response:
    s = service_of(request)
    stats = await _loaded_stats(request)
    rate_in = sum(st["msgRateIn"] for *_, st in stats)
    rate_out = sum(st["msgRateOut"] for *_, st in stats)
    thr_in = sum(st["msgThroughputIn"] for *_, st in stats)
    thr_out = sum(st["msgThroughputOut"] for *_, st in stats)
    used_mb, total_mb = _memory_mb()
    cores = os.cpu_count() or 1
    bundles: dict[str, dict[str, Any]] = {}
    for ns, bundle, _, st in stats:
        b = bundles.setdefault(
            f"{ns}/{bundle}",
            {
                "msgRateIn": 0.0,
                "msgThroughputIn": 0.0,
                "msgRateOut": 0.0,
                "msgThroughputOut": 0.0,
                "consumerCount": 0,
                "producerCount": 0,
                "topics": 0,
                "cacheSize": 0,
            },
        )
        for key in ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut"):
            b[key] += st[key]
        b["consumerCount"] += sum(len(sub["consumers"]) for sub in st["subscriptions"].values())
        b["producerCount"] += len(st["publishers"])
        b["topics"] += 1
    report = {
        "webServiceUrl": s.web_service_url,
        "webServiceUrlTls": s.web_service_url_tls or None,
        "pulsarServiceUrl": s.service_url,
        "pulsarServiceUrlTls": s.service_url_tls or None,
        "persistentTopicsEnabled": True,
        "nonPersistentTopicsEnabled": True,
        "cpu": {"usage": _cpu.usage(), "limit": 100.0 * cores},
        "memory": {"usage": used_mb, "limit": total_mb},
        "directMemory": {"usage": 0.0, "limit": -1.0},
        "bandwidthIn": {"usage": thr_in / 1024, "limit": -1.0},
        "bandwidthOut": {"usage": thr_out / 1024, "limit": -1.0},
        "msgThroughputIn": thr_in,
        "msgThroughputOut": thr_out,
        "msgRateIn": rate_in,
        "msgRateOut": rate_out,
        "numTopics": len(stats),
        "numBundles": len(bundles),
        "numConsumers": sum(b["consumerCount"] for b in bundles.values()),
        "numProducers": sum(b["producerCount"] for b in bundles.values()),
        "bundles": sorted(bundles),
        "lastStats": bundles,
        "lastUpdate": int(time.time() * 1000),
        "brokerVersionString": f"Magnetar-{VERSION}",
    }
    if s.ownership is not None:
        # in a cluster the owned bundles and their loads are the load manager's (`broker.cluster._ownership`)
        report.update(s.ownership.load_report())
    return json_response(report)


def routes() -> list[Route]:
    """The routes of this module."""
    base = "/admin/v2/broker-stats"
    return [
        Route(f"{base}/topics", topics, methods=["GET"]),
        Route(f"{base}/metrics", metrics, methods=["GET"]),
        Route(f"{base}/load-report", load_report, methods=["GET"]),
    ]
