"""What a topic knows of geo-replication: the names Pulsar gives replicators, and the narrow view
of a running replicator that the topic, its stats and the metrics read (the replicators
themselves live in `broker.replication`, which builds on topics, never the other way round).

* A replicator's durable cursor is ``pulsar.repl.<remote cluster>``: it is not a subscription
  (no consumer may attach to it, admin subscription lists leave it out), but it holds entries
  like one, so retention, backlog quotas and explain-storage count it.
* A replicator's producer on the remote topic is named ``pulsar.repl.<local>--><remote>``; a
  broker recognises replicated SENDs by the ``pulsar.repl.`` prefix of the producer name and
  deduplicates them on the original producer's name and sequence ids, as Pulsar does.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._stats import Rates

__all__ = ["REPLICATOR_PREFIX", "ReplicatorView", "is_replicator_name", "replicator_cursor", "replicator_producer"]

REPLICATOR_PREFIX = "pulsar.repl"
"""Pulsar's ``replicatorPrefix``."""


def replicator_cursor(remote_cluster: str) -> str:
    """The cursor name of the replicator to ``remote_cluster``."""
    return f"{REPLICATOR_PREFIX}.{remote_cluster}"


def replicator_producer(local_cluster: str, remote_cluster: str) -> str:
    """The producer name of the replicator from ``local_cluster`` to ``remote_cluster``."""
    return f"{REPLICATOR_PREFIX}.{local_cluster}-->{remote_cluster}"


def is_replicator_name(name: str) -> bool:
    """Whether a cursor or producer name is a replicator's (Pulsar's ``startsWith(replicatorPrefix)``)."""
    return name.startswith(REPLICATOR_PREFIX + ".")


class ReplicatorView(Protocol):
    """A running replicator as its topic sees it."""

    remote_cluster: str
    msg_out: int  # messages the remote confirmed (a batch of N counts N)
    bytes_out: int
    rates: Rates  # msg_out and bytes_out per second over the last stats period

    @property
    def backlog(self) -> int:
        """Entries the replicator has not had confirmed by the remote yet."""
        ...

    def stop(self) -> None:
        """Stop replicating (the cursor stays); returns at once."""
        ...

    def stats(self) -> dict[str, Any]:
        """Pulsar's ReplicatorStats JSON for this replicator."""
        ...
