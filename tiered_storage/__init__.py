"""Magnetar tiered storage: closed ledgers copied to a filesystem or an S3-compatible object store
and read back by entry range.

One layout for every store (``_format``: blocks with CRC32C and an index per ledger), one offloader
over any `BlobStore` (`BlockOffloader`), two stores (`FileSystemStore` for the ``filesystem``
driver, `S3Store` for ``aws-s3`` / ``S3``), the policies that choose them (`OffloadPolicies`, with
Pulsar's field names; `TieredStorageConfig`, the broker's ``[offload]`` keys), and `TieredStorage`,
which a broker shares between its managed ledgers. This package knows nothing of managed ledgers or
BookKeeper: the managed ledger hands it entries and records what it reports.
"""

from ._errors import ObjectNotFound as ObjectNotFound
from ._errors import OffloadError as OffloadError
from ._errors import TierError as TierError
from ._errors import TierUnavailable as TierUnavailable
from ._filesystem import FileSystemStore as FileSystemStore
from ._format import LedgerIndex as LedgerIndex
from ._format import OffloadFormatError as OffloadFormatError
from ._offloader import BlockCache as BlockCache
from ._offloader import BlockOffloader as BlockOffloader
from ._offloader import EntrySource as EntrySource
from ._offloader import LedgerOffloader as LedgerOffloader
from ._offloader import OffloadedLedger as OffloadedLedger
from ._offloader import OffloadResult as OffloadResult
from ._offloader import data_key as data_key
from ._offloader import index_key as index_key
from ._policies import DEFAULT_DELETION_LAG_MS as DEFAULT_DELETION_LAG_MS
from ._policies import DRIVERS as DRIVERS
from ._policies import OffloadPolicies as OffloadPolicies
from ._policies import ReadPriority as ReadPriority
from ._policies import TieredStorageConfig as TieredStorageConfig
from ._s3 import S3Store as S3Store
from ._store import BlobStore as BlobStore
from ._store import Upload as Upload
from ._tier import FORMAT as FORMAT
from ._tier import TieredStorage as TieredStorage
from .metrics import TieredStorageMetrics as TieredStorageMetrics

__all__ = [
    "BlobStore",
    "BlockCache",
    "BlockOffloader",
    "DEFAULT_DELETION_LAG_MS",
    "DRIVERS",
    "EntrySource",
    "FORMAT",
    "FileSystemStore",
    "LedgerIndex",
    "LedgerOffloader",
    "ObjectNotFound",
    "OffloadError",
    "OffloadFormatError",
    "OffloadPolicies",
    "OffloadResult",
    "OffloadedLedger",
    "ReadPriority",
    "S3Store",
    "TierError",
    "TierUnavailable",
    "TieredStorage",
    "TieredStorageConfig",
    "TieredStorageMetrics",
    "Upload",
    "data_key",
    "index_key",
]
