"""Helpers for the real-process broker tests: admin REST calls, draining consumers, namespaces."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pulsar

__all__ = ["rest", "new_namespace", "drain", "wait_for", "subscribe_pattern"]


def rest(method: str, admin_url: str, path: str, json: Any = None, ok: tuple[int, ...] = (200, 204)) -> httpx.Response:
    """One admin REST call; AssertionError (with the body) unless the status is in ``ok``."""
    r = httpx.request(method, f"{admin_url}{path}", json=json, timeout=15)
    assert r.status_code in ok, f"{method} {path} -> {r.status_code} {r.text}"
    return r


def new_namespace(admin_url: str, prefix: str) -> str:
    """Create ``public/<prefix>-<random>`` and return it (tests sharing a standalone stay apart)."""
    ns = f"public/{prefix}-{uuid.uuid4().hex[:6]}"
    rest("PUT", admin_url, f"/admin/v2/namespaces/{ns}")
    return ns


def drain(consumer: pulsar.Consumer, *, ack: bool = True, wait_ms: int = 1500) -> list[pulsar.Message]:
    """Receive until nothing arrives for ``wait_ms``; acknowledge each message unless told not to."""
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=wait_ms)
        except pulsar.Timeout:
            return out
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)


def wait_for(check: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``check`` until true; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def subscribe_pattern(client: pulsar.Client, pattern: str, subscription: str, *, discovery_period_s: int,
                      **kwargs: Any) -> pulsar.Consumer:
    """``client.subscribe(re.compile(pattern), ...)`` with a real discovery period.

    pulsar-client 3.13's Python wrapper checks ``pattern_auto_discovery_period`` but never passes
    it to the C++ consumer configuration, which keeps its 60 s default. This creates the
    configuration with the period set, through the same wrapper call.
    """
    import re

    import _pulsar

    original = _pulsar.ConsumerConfiguration

    def configured() -> Any:
        conf = original()
        conf.pattern_auto_discovery_period(discovery_period_s)
        return conf

    pulsar._pulsar.ConsumerConfiguration = configured  # type: ignore[attr-defined]
    try:
        return client.subscribe(re.compile(pattern), subscription, **kwargs)
    finally:
        pulsar._pulsar.ConsumerConfiguration = original  # type: ignore[attr-defined]
