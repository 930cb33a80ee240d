"""Geo-replication as Pulsar does it: for each replicated persistent topic and each remote cluster
of its replication clusters, a replicator reads the topic from its own durable cursor
(``pulsar.repl.<remote>``) and produces every message to the remote cluster's owner of the same
topic over the binary protocol, with the original metadata plus ``replicated_from``
(`_replicator`); `_manager` decides which replicators a loaded topic runs; `_remote` is the
replicator's producer on the remote cluster."""

from ._manager import NAMESPACE_REPLICATION_KEY, TOPIC_REPLICATION_KEY, Replication
from ._remote import Dialer, RemoteError, open_remote_producer
from ._replicator import Replicator, ReplicatorState

__all__ = [
    "Dialer",
    "NAMESPACE_REPLICATION_KEY",
    "TOPIC_REPLICATION_KEY",
    "RemoteError",
    "Replication",
    "Replicator",
    "ReplicatorState",
    "open_remote_producer",
]
