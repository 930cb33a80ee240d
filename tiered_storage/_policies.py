"""Offload policies: Pulsar's ``OffloadPoliciesImpl`` (JSON field for field) and the broker's
``[offload]`` settings (`TieredStorageConfig`, with Pulsar's broker.conf names).

Resolution, as Pulsar's ``OffloadPoliciesImpl.mergeConfiguration``: each field comes from the
topic's policies if set there, else the namespace's, else the broker's config. The namespace's
older ``offload_threshold`` / ``offload_threshold_in_seconds`` / ``offload_deletion_lag_ms`` fill
the matching fields the namespace's ``offload_policies`` leave unset (``oldPoliciesCompatible``).

Drivers: ``filesystem`` (needs ``fileSystemURI``) and ``aws-s3`` / ``S3`` (need a bucket; ``S3``
is meant for S3-compatible services at ``s3ManagedLedgerOffloadServiceEndpoint``). The universal
``managedLedgerOffload{Bucket,Region,ServiceEndpoint,MaxBlockSizeInBytes,ReadBufferSizeInBytes}``
win over the ``s3``-prefixed ones, as in Pulsar.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.common.config import ConfigError, config_field

__all__ = [
    "DEFAULT_DELETION_LAG_MS",
    "DRIVERS",
    "OffloadPolicies",
    "ReadPriority",
    "TieredStorageConfig",
]

DRIVERS = ("filesystem", "aws-s3", "S3")
"""The drivers Magnetar implements (Pulsar also names google-cloud-storage, azureblob, aliyun-oss)."""
_PULSAR_ONLY_DRIVERS = ("google-cloud-storage", "azureblob", "aliyun-oss")
DEFAULT_DELETION_LAG_MS = 4 * 3600 * 1000
"""Pulsar's default ``managedLedgerOffloadDeletionLagMs`` (4 hours)."""
_MB = 1024 * 1024


class ReadPriority(enum.Enum):
    """Where a ledger that is both offloaded and still on bookies is read from
    (``managedLedgerOffloadedReadPriority``, Pulsar's names)."""

    TIERED_STORAGE_FIRST = "tiered-storage-first"
    BOOKKEEPER_FIRST = "bookkeeper-first"


# Pulsar's OffloadPoliciesImpl fields (JSON names) and their types; all optional.
_FIELDS: dict[str, type] = {
    "offloadersDirectory": str,
    "managedLedgerOffloadDriver": str,
    "managedLedgerOffloadMaxThreads": int,
    "managedLedgerOffloadReadThreads": int,
    "managedLedgerOffloadPrefetchRounds": int,
    "managedLedgerOffloadThresholdInBytes": int,
    "managedLedgerOffloadThresholdInSeconds": int,
    "managedLedgerOffloadDeletionLagInMillis": int,
    "managedLedgerOffloadedReadPriority": str,
    "s3ManagedLedgerOffloadRegion": str,
    "s3ManagedLedgerOffloadBucket": str,
    "s3ManagedLedgerOffloadServiceEndpoint": str,
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes": int,
    "s3ManagedLedgerOffloadReadBufferSizeInBytes": int,
    "s3ManagedLedgerOffloadCredentialId": str,
    "s3ManagedLedgerOffloadCredentialSecret": str,
    "s3ManagedLedgerOffloadRole": str,
    "s3ManagedLedgerOffloadRoleSessionName": str,
    "gcsManagedLedgerOffloadRegion": str,
    "gcsManagedLedgerOffloadBucket": str,
    "gcsManagedLedgerOffloadMaxBlockSizeInBytes": int,
    "gcsManagedLedgerOffloadReadBufferSizeInBytes": int,
    "gcsManagedLedgerOffloadServiceAccountKeyFile": str,
    "fileSystemProfilePath": str,
    "fileSystemURI": str,
    "managedLedgerOffloadBucket": str,
    "managedLedgerOffloadRegion": str,
    "managedLedgerOffloadServiceEndpoint": str,
    "managedLedgerOffloadMaxBlockSizeInBytes": int,
    "managedLedgerOffloadReadBufferSizeInBytes": int,
    "managedLedgerExtraConfigurations": dict,
}
# Jackson also writes these getters of OffloadPoliciesImpl; a GET-modify-POST round trip sends them back.
_DERIVED = {"s3Driver", "gcsDriver", "fileSystemDriver"}
_SECRET_FIELDS = ("s3ManagedLedgerOffloadCredentialSecret",)


@dataclass(frozen=True)
class OffloadPolicies:
    """One level of offload policies (any field may be unset: None). ``values`` maps Pulsar's JSON
    field names to values. Use `from_json` to parse a REST body, `merge` to resolve levels, and the
    properties for the effective settings."""

    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", {k: v for k, v in dict(self.values).items() if v is not None})

    @classmethod
    def from_json(cls, body: Any) -> OffloadPolicies:
        """Parse Pulsar's OffloadPolicies JSON; ValueError naming the field for a wrong type or an
        unknown field (Jackson's derived ``s3Driver``-style booleans are accepted and ignored)."""
        if not isinstance(body, dict):
            raise ValueError("offload policies must be a JSON object")
        out: dict[str, Any] = {}
        for key, value in body.items():
            if key in _DERIVED or value is None:
                continue
            kind = _FIELDS.get(key)
            if kind is None:
                raise ValueError(f"unknown offload policies field {key!r}")
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{key} must be an integer, not {value!r}")
            if kind is str and not isinstance(value, str):
                raise ValueError(f"{key} must be a string, not {value!r}")
            if kind is dict and not isinstance(value, dict):
                raise ValueError(f"{key} must be an object, not {value!r}")
            out[key] = value
        return cls(out)

    def to_json(self, *, hide_secrets: bool = False) -> dict[str, Any]:
        """Pulsar's JSON: every field (null when unset) and the derived driver booleans."""
        out: dict[str, Any] = {k: self.values.get(k) for k in _FIELDS}
        if hide_secrets:
            for key in _SECRET_FIELDS:
                if out.get(key):
                    out[key] = "******"
        out["s3Driver"] = self.is_s3
        out["gcsDriver"] = self.driver.lower() == "google-cloud-storage"
        out["fileSystemDriver"] = self.is_filesystem
        return out

    def with_values(self, **values: Any) -> OffloadPolicies:
        """A copy with some fields replaced (None unsets)."""
        merged = dict(self.values)
        merged.update(values)
        return OffloadPolicies(merged)

    @staticmethod
    def merge(*levels: OffloadPolicies | None) -> OffloadPolicies:
        """Field by field, the first level (most specific first) that sets it."""
        out: dict[str, Any] = {}
        for level in levels:
            if level is None:
                continue
            for key, value in level.values.items():
                out.setdefault(key, value)
        return OffloadPolicies(out)

    def validate(self) -> None:
        """ValueError unless the driver is one Magnetar implements and its location is set (as
        Pulsar's ``driverSupported`` / ``bucketValid`` checks, for the drivers here)."""
        driver = self.driver
        if not driver:
            raise ValueError("managedLedgerOffloadDriver is not set")
        if driver.lower() in _PULSAR_ONLY_DRIVERS:
            raise ValueError(f"driver {driver!r} is not supported by Magnetar; supported: {', '.join(DRIVERS)}")
        if driver.lower() not in {d.lower() for d in DRIVERS}:
            raise ValueError(f"The driver is not supported, support value: {', '.join(DRIVERS)}")
        if self.is_s3 and not self.bucket:
            raise ValueError("The bucket must be specified for namespace offload.")
        if self.is_filesystem and not self.file_system_uri:
            raise ValueError("the filesystem driver needs fileSystemURI")
        priority = self.values.get("managedLedgerOffloadedReadPriority")
        if priority is not None and priority not in {p.value for p in ReadPriority}:
            raise ValueError(
                f"managedLedgerOffloadedReadPriority must be one of "
                f"{', '.join(p.value for p in ReadPriority)}, not {priority!r}"
            )

    # --- effective settings ---------------------------------------------------------------------

    def _first(self, *keys: str) -> Any:
        for key in keys:
            value = self.values.get(key)
            if value is not None and value != "":
                return value
        return None

    @property
    def driver(self) -> str:
        """The driver name as configured ('' when none)."""
        return str(self.values.get("managedLedgerOffloadDriver") or "")

    @property
    def configured(self) -> bool:
        """Whether a driver is set, so that offloading can happen at all."""
        return bool(self.driver)

    @property
    def is_s3(self) -> bool:
        """``aws-s3`` or ``S3`` (any case)."""
        return self.driver.lower() in ("aws-s3", "s3")

    @property
    def is_filesystem(self) -> bool:
        """``filesystem``."""
        return self.driver.lower() == "filesystem"

    @property
    def bucket(self) -> str:
        """The bucket (universal key first)."""
        return str(self._first("managedLedgerOffloadBucket", "s3ManagedLedgerOffloadBucket") or "")

    @property
    def region(self) -> str:
        """The region (universal key first)."""
        return str(self._first("managedLedgerOffloadRegion", "s3ManagedLedgerOffloadRegion") or "")

    @property
    def endpoint(self) -> str:
        """The S3 service endpoint (universal key first)."""
        return str(self._first("managedLedgerOffloadServiceEndpoint", "s3ManagedLedgerOffloadServiceEndpoint") or "")

    @property
    def credential_id(self) -> str:
        """``s3ManagedLedgerOffloadCredentialId`` ('' = botocore's default chain)."""
        return str(self.values.get("s3ManagedLedgerOffloadCredentialId") or "")

    @property
    def credential_secret(self) -> str:
        """``s3ManagedLedgerOffloadCredentialSecret``."""
        return str(self.values.get("s3ManagedLedgerOffloadCredentialSecret") or "")

    @property
    def file_system_uri(self) -> str:
        """``fileSystemURI``."""
        return str(self.values.get("fileSystemURI") or "")

    @property
    def max_block_size(self) -> int:
        """Bytes per uploaded part (Pulsar's default 64 MiB)."""
        value = self._first("managedLedgerOffloadMaxBlockSizeInBytes", "s3ManagedLedgerOffloadMaxBlockSizeInBytes")
        return int(value) if value else 64 * _MB

    @property
    def read_buffer_size(self) -> int:
        """Bytes per block of the offloaded layout: the unit a read fetches (Pulsar's default 1 MiB)."""
        value = self._first("managedLedgerOffloadReadBufferSizeInBytes", "s3ManagedLedgerOffloadReadBufferSizeInBytes")
        return int(value) if value else _MB

    @property
    def threshold_bytes(self) -> int | None:
        """Bytes a topic keeps on bookies before older ledgers are offloaded (None: off; 0: offload
        every closed ledger)."""
        value = self.values.get("managedLedgerOffloadThresholdInBytes")
        return None if value is None or value < 0 else int(value)

    @property
    def threshold_seconds(self) -> int | None:
        """Age (since close) after which a ledger is offloaded (None: off)."""
        value = self.values.get("managedLedgerOffloadThresholdInSeconds")
        return None if value is None or value < 0 else int(value)

    @property
    def deletion_lag_ms(self) -> int:
        """How long after its offload a ledger's bookie copy is kept (Pulsar's default 4 hours)."""
        value = self.values.get("managedLedgerOffloadDeletionLagInMillis")
        return DEFAULT_DELETION_LAG_MS if value is None else max(0, int(value))

    @property
    def read_priority(self) -> ReadPriority:
        """Where a ledger on both tiers is read from."""
        value = self.values.get("managedLedgerOffloadedReadPriority")
        return ReadPriority(value) if value in {p.value for p in ReadPriority} else ReadPriority.TIERED_STORAGE_FIRST


@dataclass(frozen=True)
class TieredStorageConfig:
    """The broker's offload settings (the ``[offload]`` table; Pulsar's broker.conf names as aliases).

    They are the broker level of `OffloadPolicies` (`policies`); namespaces and topics override them
    field by field. ``validate()`` raises `ConfigError` naming the key.
    """

    driver: str = config_field(
        "",
        alias="managedLedgerOffloadDriver",
        help="Offloader driver: filesystem, aws-s3 or S3 ('' = no tiered storage "
        "unless a namespace or topic sets offload policies)",
    )
    file_system_uri: str = config_field(
        "", alias="fileSystemURI", help="filesystem driver: the directory (file:///path or /path)"
    )
    bucket: str = config_field("", alias="managedLedgerOffloadBucket", help="Bucket (any object-store driver)")
    region: str = config_field("", alias="managedLedgerOffloadRegion", help="Region (any object-store driver)")
    service_endpoint: str = config_field(
        "", alias="managedLedgerOffloadServiceEndpoint", help="Object store endpoint URL (any object-store driver)"
    )
    max_block_size: int = config_field(
        0,
        alias="managedLedgerOffloadMaxBlockSizeInBytes",
        help="Bytes per uploaded part (0 = the s3 key's, else 64 MiB)",
    )
    read_buffer_size: int = config_field(
        0,
        alias="managedLedgerOffloadReadBufferSizeInBytes",
        help="Bytes per block read back (0 = the s3 key's, else 1 MiB)",
    )
    s3_bucket: str = config_field("", alias="s3ManagedLedgerOffloadBucket", help="aws-s3 / S3: the bucket")
    s3_region: str = config_field("", alias="s3ManagedLedgerOffloadRegion", help="aws-s3 / S3: the region")
    s3_service_endpoint: str = config_field(
        "",
        alias="s3ManagedLedgerOffloadServiceEndpoint",
        help="aws-s3 / S3: endpoint of an S3-compatible service (http://host:port); '' = AWS",
    )
    s3_max_block_size: int = config_field(
        64 * _MB,
        alias="s3ManagedLedgerOffloadMaxBlockSizeInBytes",
        help="aws-s3 / S3: bytes per multipart part (at least 5 MiB); one part per offload is buffered",
    )
    s3_read_buffer_size: int = config_field(
        _MB,
        alias="s3ManagedLedgerOffloadReadBufferSizeInBytes",
        help="aws-s3 / S3: bytes per block of the offloaded layout, the unit one read fetches",
    )
    s3_credential_id: str = config_field(
        "",
        alias="s3ManagedLedgerOffloadCredentialId",
        help="aws-s3 / S3: access key id ('' = AWS_ACCESS_KEY_ID, ~/.aws or the instance role)",
    )
    s3_credential_secret: str = config_field(
        "", alias="s3ManagedLedgerOffloadCredentialSecret", help="aws-s3 / S3: secret access key"
    )
    threshold_bytes: int = config_field(
        -1,
        alias="managedLedgerOffloadAutoTriggerSizeThresholdBytes",
        help="Bytes a topic keeps on bookies before older ledgers are offloaded (-1 = off, 0 = at once)",
    )
    threshold_seconds: int = config_field(
        -1,
        alias="managedLedgerOffloadThresholdInSeconds",
        help="Offload ledgers closed longer ago than this (-1 = off)",
    )
    deletion_lag_ms: int = config_field(
        DEFAULT_DELETION_LAG_MS,
        alias="managedLedgerOffloadDeletionLagMs",
        help="How long an offloaded ledger keeps its bookie copy before it is deleted",
    )
    max_threads: int = config_field(
        2,
        alias="managedLedgerOffloadMaxThreads",
        help="Ledgers offloaded at once by this broker (each buffers one part)",
    )
    read_threads: int = config_field(
        2, alias="managedLedgerOffloadReadThreads", help="Reads from the tier in flight at once"
    )
    read_priority: str = config_field(
        "tiered-storage-first",
        alias="managedLedgerDataReadPriority",
        help="Where a ledger both offloaded and still on bookies is read from: tiered-storage-first or "
        "bookkeeper-first",
    )
    read_cache_size_mb: float = config_field(
        64.0, help="Bytes of blocks read back from the tier kept in memory (per broker; 0 = none)"
    )
    offload_retries: int = config_field(3, help="Attempts per ledger within one offload run before it fails with ERROR")

    def validate(self) -> None:
        """Raise `ConfigError` naming the key when a value cannot work."""
        for key in ("max_threads", "read_threads", "offload_retries"):
            if getattr(self, key) < 1:
                raise ConfigError(key, "must be at least 1")
        for key in ("s3_read_buffer_size", "s3_max_block_size"):
            if getattr(self, key) < 1:
                raise ConfigError(key, "must be positive")
        if self.read_cache_size_mb < 0:
            raise ConfigError("read_cache_size_mb", "must not be negative")
        if self.read_priority not in {p.value for p in ReadPriority}:
            raise ConfigError("read_priority", f"must be one of {', '.join(p.value for p in ReadPriority)}")
        if self.driver:
            try:
                self.policies().validate()
            except ValueError as exc:
                raise ConfigError("driver", str(exc)) from None

    def policies(self) -> OffloadPolicies:
        """The broker level of the offload policies."""
        return OffloadPolicies(
            {
                "managedLedgerOffloadDriver": self.driver or None,
                "fileSystemURI": self.file_system_uri or None,
                "managedLedgerOffloadBucket": self.bucket or None,
                "managedLedgerOffloadRegion": self.region or None,
                "managedLedgerOffloadServiceEndpoint": self.service_endpoint or None,
                "managedLedgerOffloadMaxBlockSizeInBytes": self.max_block_size or None,
                "managedLedgerOffloadReadBufferSizeInBytes": self.read_buffer_size or None,
                "s3ManagedLedgerOffloadBucket": self.s3_bucket or None,
                "s3ManagedLedgerOffloadRegion": self.s3_region or None,
                "s3ManagedLedgerOffloadServiceEndpoint": self.s3_service_endpoint or None,
                "s3ManagedLedgerOffloadMaxBlockSizeInBytes": self.s3_max_block_size,
                "s3ManagedLedgerOffloadReadBufferSizeInBytes": self.s3_read_buffer_size,
                "s3ManagedLedgerOffloadCredentialId": self.s3_credential_id or None,
                "s3ManagedLedgerOffloadCredentialSecret": self.s3_credential_secret or None,
                "managedLedgerOffloadThresholdInBytes": self.threshold_bytes,
                "managedLedgerOffloadThresholdInSeconds": self.threshold_seconds,
                "managedLedgerOffloadDeletionLagInMillis": self.deletion_lag_ms,
                "managedLedgerOffloadMaxThreads": self.max_threads,
                "managedLedgerOffloadReadThreads": self.read_threads,
                "managedLedgerOffloadedReadPriority": self.read_priority,
            }
        )

    @property
    def read_cache_size_bytes(self) -> int:
        """``read_cache_size_mb`` in bytes."""
        return int(self.read_cache_size_mb * _MB)
