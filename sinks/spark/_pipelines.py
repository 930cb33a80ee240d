"""The durable subscriptions of Spark queries, found and removed through the admin REST.

A streaming query keeps a durable subscription on every partition it reads (see
`MagnetarStreamReader`), whose properties say who owns it: ``pipeline`` (a label), ``spark.source``
(what it reads), ``spark.subscription`` (``auto`` or ``named``) and ``spark.heartbeatMs`` (refreshed
while the query runs). A query stopped for good leaves its subscription behind, pinning everything
published since; these functions list such subscriptions and remove them:

* by idleness: no heartbeat for longer than a given time (a query triggered rarely, e.g. daily
  with AvailableNow, needs a longer time than its schedule);
* by checkpoint: the subscription a checkpoint's offsets name (for a checkpoint being deleted);
* by name.

Only subscriptions carrying ``spark.heartbeatMs`` are ever listed or removed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._admin import AdminClient
from ._offsets import SUBSCRIPTION_KEY

__all__ = [
    "PipelineSubscription",
    "find_pipelines",
    "remove_pipeline",
    "checkpoint_subscription",
    "parse_duration",
    "HEARTBEAT_PROPERTY",
]

HEARTBEAT_PROPERTY = "spark.heartbeatMs"


@dataclass
class PipelineSubscription:
    """One query's subscription, over every partition that has it."""

    name: str
    pipeline: str
    source: str
    mode: str
    heartbeat_ms: int
    topics: list[str] = field(default_factory=list)
    backlog: int = 0

    def idle_s(self, now_ms: int | None = None) -> float:
        """Seconds since the last heartbeat."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0.0, (now - self.heartbeat_ms) / 1000)

    def to_json(self) -> dict[str, Any]:
        return {
            "subscription": self.name,
            "pipeline": self.pipeline,
            "source": self.source,
            "mode": self.mode,
            "heartbeatMs": self.heartbeat_ms,
            "idleSeconds": round(self.idle_s()),
            "backlog": self.backlog,
            "topics": self.topics,
        }


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``7d`` (or plain seconds) as seconds; ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (e.g. 90s, 30m, 2h, 7d)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _namespaces(admin: AdminClient, namespaces: Iterable[str] | None) -> list[str]:
    if namespaces:
        return list(namespaces)
    return [ns for tenant in admin.tenants() for ns in admin.namespaces(tenant)]


def find_pipelines(admin: AdminClient, namespaces: Iterable[str] | None = None) -> list[PipelineSubscription]:
    """Every Spark query subscription of ``namespaces`` (``tenant/ns``; default: all), grouped by
    subscription name, oldest heartbeat first."""
    found: dict[str, PipelineSubscription] = {}
    for ns in _namespaces(admin, namespaces):
        tenant, name = ns.split("/", 1)
        for topic in admin.list_topics(tenant, name):
            if admin.partitions(topic) > 0:
                continue  # its partitions are listed too
            subs = admin.subscriptions(topic)
            if not subs:
                continue
            stats = admin._call("GET", f"{admin._tp(topic)}/stats", ok404=True) or {}
            for sub in subs:
                props = admin.subscription_properties(topic, sub) or {}
                if HEARTBEAT_PROPERTY not in props:
                    continue
                entry = found.setdefault(
                    sub,
                    PipelineSubscription(
                        sub,
                        props.get("pipeline", ""),
                        props.get("spark.source", ""),
                        props.get("spark.subscription", ""),
                        0,
                    ),
                )
                entry.heartbeat_ms = max(entry.heartbeat_ms, int(props[HEARTBEAT_PROPERTY] or 0))
                entry.topics.append(topic)
                entry.backlog += int((stats.get("subscriptions") or {}).get(sub, {}).get("msgBacklog", 0))
    return sorted(found.values(), key=lambda p: (p.heartbeat_ms, p.name))


def remove_pipeline(admin: AdminClient, pipeline: PipelineSubscription) -> int:
    """Delete the subscription from every topic that has it; the number removed."""
    return sum(1 for topic in pipeline.topics if admin.delete_subscription(topic, pipeline.name))


def checkpoint_subscription(checkpoint: str | Path) -> str | None:
    """The subscription a streaming checkpoint's latest offsets name (None when none does)."""
    offsets = Path(checkpoint) / "offsets"
    if not offsets.is_dir():
        raise ValueError(f"{checkpoint} is not a streaming checkpoint (no offsets directory)")
    batches = sorted((int(p.name) for p in offsets.iterdir() if p.name.isdigit()), reverse=True)
    for batch in batches:
        for line in (offsets / str(batch)).read_text().splitlines()[2:]:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and value.get(SUBSCRIPTION_KEY):
                return str(value[SUBSCRIPTION_KEY])
    return None
