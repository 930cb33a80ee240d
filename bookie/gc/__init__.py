"""The bookie's garbage collector: ledger GC against the metadata store, dead entry-log deletion,
minor and major compaction, and why a log is still on disk.

`GarbageCollector` (``_gc``) runs the loop; ``_compaction`` copies a log's live entries,
``_logs`` tracks the entry logs' usage, ``_explain`` answers "why is this log still here",
``_config`` holds its settings (`GcConfig`, inherited by `BookieConfig`) and ``_http`` its REST
routes (`gc_routes`, mounted by the bookie's HTTP app).

Above the ledger storage (`bookie.storage`), below the server (`bookie.server` starts it after
the journal replay).
"""

from ._compaction import CompactionKind as CompactionKind
from ._compaction import CompactionTimeout as CompactionTimeout
from ._config import GcConfig as GcConfig
from ._explain import GcExplanation as GcExplanation
from ._gc import GarbageCollector as GarbageCollector
from ._gc import GcRunResult as GcRunResult
from ._gc import GcStatus as GcStatus
from ._gc import MetadataListingError as MetadataListingError
from ._http import gc_routes as gc_routes

__all__ = [
    "GarbageCollector",
    "GcConfig",
    "GcStatus",
    "GcRunResult",
    "GcExplanation",
    "CompactionKind",
    "gc_routes",
    # errors
    "CompactionTimeout",
    "MetadataListingError",
]
