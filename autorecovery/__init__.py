"""Magnetar autorecovery: the AutoRecovery service (BookKeeper's ``autorecovery`` module).

A separate service next to the bookies, run by ``magnetar autorecovery``: the elected auditor
notices lost bookies and marks their ledgers under-replicated; replication workers copy the
lost replicas to other bookies and install the new ensembles. It is a client of the cluster:
it uses ``bk_client``'s public API (ledger metadata, placement, ``BookKeeper.bookie_client`` for
per-bookie reads and recovery adds, ``open_ledger`` to recover open ledgers), the bookie wire
format (``protocols.bookkeeper``) and the metadata store (``metadata``).

The public names are re-exported here from private modules; import them from ``autorecovery``.
"""

from ._auditor import Auditor as Auditor
from ._auditor import AuditorElection as AuditorElection
from ._auditor import AuditorStatistics as AuditorStatistics
from ._auditor import current_auditor as current_auditor
from ._autorecovery import AutoRecovery as AutoRecovery
from ._autorecovery import AutoRecoveryConfig as AutoRecoveryConfig
from ._autorecovery import AutoRecoveryMetrics as AutoRecoveryMetrics
from ._autorecovery import run_autorecovery as run_autorecovery
from ._replication import EntryCopier as EntryCopier
from ._replication import PoolEntryCopier as PoolEntryCopier
from ._replication import RateLimiter as RateLimiter
from ._replication import ReplicationError as ReplicationError
from ._replication import ReplicationOutcome as ReplicationOutcome
from ._replication import ReplicationWorker as ReplicationWorker
from ._replication import RetryTable as RetryTable
from ._replication import WorkerStatistics as WorkerStatistics
from ._underreplication import UnderReplicatedLedger as UnderReplicatedLedger
from ._underreplication import UnderReplicationManager as UnderReplicationManager

__all__ = [
    "Auditor",
    "AuditorElection",
    "AuditorStatistics",
    "current_auditor",
    "AutoRecovery",
    "AutoRecoveryConfig",
    "AutoRecoveryMetrics",
    "run_autorecovery",
    "EntryCopier",
    "PoolEntryCopier",
    "RateLimiter",
    "ReplicationError",
    "ReplicationOutcome",
    "ReplicationWorker",
    "RetryTable",
    "WorkerStatistics",
    "UnderReplicatedLedger",
    "UnderReplicationManager",
]
