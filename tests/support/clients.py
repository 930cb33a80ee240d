"""The official ``pulsar-client`` in tests and benchmarks: a client that closes, draining and
producing helpers, and a pattern subscription with a real discovery period."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any

import pulsar

__all__ = ["RECEIVE_MS", "drain", "produce", "pulsar_client", "subscribe_pattern"]

RECEIVE_MS = 5000
"""How long a test waits for a message it expects (a hang guard; it arrives in milliseconds)."""


@contextlib.contextmanager
def pulsar_client(url: str, **kwargs: Any) -> Iterator[pulsar.Client]:
    """An official client on ``url`` (10 s operation timeout, Python logging), closed on exit."""
    kwargs.setdefault("operation_timeout_seconds", 10)
    c = pulsar.Client(url, logger=logging.getLogger("pulsar-client"), **kwargs)
    try:
        yield c
    finally:
        c.close()


def drain(consumer: pulsar.Consumer, *, ack: bool = True, wait_ms: int = 1500) -> list[pulsar.Message]:
    """Receive until nothing arrives for ``wait_ms``; acknowledge each message unless told not to.

    ``wait_ms`` bounds the wait for "nothing more comes": the messages a test expects are already
    on their way, so the quiet period only has to outlast their delivery."""
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=wait_ms)
        except pulsar.Timeout:
            return out
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)


def produce(
    client: pulsar.Client, topic: str, n: int, *, key: Any = None, batching: bool = False, **kwargs: Any
) -> None:
    """Send ``m0`` .. ``m{n-1}`` to ``topic`` (with partition key ``key``, or ``key(i)`` when it
    is callable) and wait until all are acknowledged."""
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=5, **kwargs)
    for i in range(n):
        k = key(i) if callable(key) else key
        if k is None:
            producer.send_async(f"m{i}".encode(), None)
        else:
            producer.send_async(f"m{i}".encode(), None, partition_key=k)
    producer.flush()
    producer.close()


def subscribe_pattern(
    client: pulsar.Client, pattern: str, subscription: str, *, discovery_period_s: int, **kwargs: Any
) -> pulsar.Consumer:
    """``client.subscribe(re.compile(pattern), ...)`` with a real discovery period.

    pulsar-client 3.13's Python wrapper checks ``pattern_auto_discovery_period`` but never passes
    it to the C++ consumer configuration, which keeps its 60 s default. This creates the
    configuration with the period set, through the same wrapper call.
    """
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
