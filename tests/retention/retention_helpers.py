"""Helpers of the retention tests: a topic whose entries carry their publish time, a static
policies provider, and filling a managed ledger on the fake clock."""

from __future__ import annotations

import struct

from managed_ledger import Entry, Position
from retention import PolicyOverrides, RetentionConfig, RetentionPolicies, StaticPoliciesProvider
from tests.support.clocks import FakeClock

__all__ = ["NAME", "TOPIC", "fill", "payload", "provider", "publish_time_of"]

NAME = "public/default/persistent/t1"
TOPIC = "persistent://public/default/t1"


def payload(publish_ms: int) -> bytes:
    """Test entries carry their publish time in the first 8 bytes."""
    return struct.pack(">q", publish_ms) + b"x" * 92


def publish_time_of(entry: Entry) -> int:
    return struct.unpack(">q", entry.data[:8])[0]


def provider(
    retention: RetentionPolicies | None = None, ttl: int | None = None, quotas: dict | None = None
) -> StaticPoliciesProvider:
    return StaticPoliciesProvider(
        RetentionConfig(),
        namespaces={"public/default": PolicyOverrides(retention or RetentionPolicies(0, 0), ttl, quotas or {})},
    )


async def fill(ml, clock: FakeClock, n: int) -> list[Position]:
    out = []
    for _ in range(n):
        out.append(await ml.add_entry(payload(int(clock() * 1000))))
    return out
