"""Magnetar metadata: a ZooKeeper-semantics store over ZooKeeper, sqlite, or memory.

    async with open_metadata_store("zk://127.0.0.1:2181/magnetar") as store:
        await store.create("/ledgers/available/b1", ephemeral=True, make_parents=True)

See `MetadataStore` for the contract both backends keep, and `ZkSecurity` for ZooKeeper digest
authentication with CREATOR_ALL ACLs on created nodes.
"""

from ._errors import BadVersionError as BadVersionError
from ._errors import ConnectionLossError as ConnectionLossError
from ._errors import InvalidPathError as InvalidPathError
from ._errors import MetadataError as MetadataError
from ._errors import NoAuthError as NoAuthError
from ._errors import NoChildrenForEphemeralsError as NoChildrenForEphemeralsError
from ._errors import NodeExistsError as NodeExistsError
from ._errors import NoNodeError as NoNodeError
from ._errors import NotEmptyError as NotEmptyError
from ._errors import SessionExpiredError as SessionExpiredError
from ._errors import StoreLockedError as StoreLockedError
from ._errors import TransactionFailedError as TransactionFailedError
from ._open import StoreUrl as StoreUrl
from ._open import ensure_path as ensure_path
from ._open import open_metadata_store as open_metadata_store
from ._open import parse_store_url as parse_store_url
from ._security import ZkSecurity as ZkSecurity
from ._types import Check as Check
from ._types import Create as Create
from ._types import Delete as Delete
from ._types import MetadataStore as MetadataStore
from ._types import Op as Op
from ._types import OpResult as OpResult
from ._types import SessionState as SessionState
from ._types import SetData as SetData
from ._types import Stat as Stat
from ._types import WatchEvent as WatchEvent
from ._types import WatchKind as WatchKind
from ._zk_tls import ZkTls as ZkTls

__all__ = [
    "BadVersionError",
    "Check",
    "ConnectionLossError",
    "Create",
    "Delete",
    "InvalidPathError",
    "MetadataError",
    "MetadataStore",
    "NoAuthError",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "Op",
    "OpResult",
    "SessionExpiredError",
    "SessionState",
    "SetData",
    "Stat",
    "StoreLockedError",
    "StoreUrl",
    "TransactionFailedError",
    "WatchEvent",
    "WatchKind",
    "ZkSecurity",
    "ZkTls",
    "ensure_path",
    "open_metadata_store",
    "parse_store_url",
]
