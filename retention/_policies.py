"""Retention, message-TTL and backlog-quota policies: frozen values with Pulsar's v2 admin JSON shapes,
and their resolution topic > namespace > broker defaults.

JSON shapes (Pulsar's admin REST API, v2):

* retention: ``{"retentionTimeInMinutes": int, "retentionSizeInMB": int}``; -1 is "no limit" on that
  axis, ``-1/-1`` is infinite retention, ``0/0`` keeps nothing once consumed. As in Pulsar, a single
  limit of 0 next to a non-zero one is refused (use -1 to ignore one axis).
* message TTL: a bare integer of seconds; 0 (or absent) is off.
* backlog quota: ``{"limitSize": bytes, "limitTime": seconds, "policy": "producer_request_hold" |
  "producer_exception" | "consumer_backlog_eviction"}``, one per quota type ``destination_storage``
  (size) and ``message_age`` (time); the deprecated ``"limit"`` key is read as ``limitSize``.

Integer fields also take a decimal integer written as a JSON string (``"10240"``), as Pulsar's JSON
mapper does. Everything here is pure; bad input raises `ValueError` with a message naming the field.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from magnetar.common.config import ConfigError, config_field, require_at_least, require_positive

__all__ = [
    "BacklogQuota",
    "BacklogQuotaPolicy",
    "BacklogQuotaType",
    "PolicyOverrides",
    "RetentionConfig",
    "RetentionPolicies",
    "TopicPolicies",
    "parse_message_ttl",
]

_MB = 1024 * 1024
_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1


_DECIMAL = re.compile(r"[-+]?[0-9]+")


def _int_field(
    data: Mapping[str, Any], key: str, *, default: int | None = None, minimum: int = -1, maximum: int = _I64_MAX
) -> int:
    if key not in data or data[key] is None:
        if default is None:
            raise ValueError(f"{key!r} is required")
        return default
    value = data[key]
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        # Pulsar's JSON mapper reads an integer written as a string ("10240") for an integer field
        value = int(value.strip())
    # bool is an int in Python; JSON true is never a size or a duration.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key!r} must be an integer, not {value!r}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{key!r} must be between {minimum} and {maximum}, not {value}")
    return value


def _mapping(data: object, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object, not {type(data).__name__}")
    return data


@dataclass(frozen=True)
class RetentionPolicies:
    """How long / how much *acknowledged* data is kept. -1 on an axis means no limit on it.

    The constructor validates like Pulsar's admin API and raises `ValueError`.
    """

    retention_time_minutes: int = 0
    retention_size_mb: int = 0

    def __post_init__(self) -> None:
        for name in ("retention_time_minutes", "retention_size_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise ValueError(f"retention {name} must be an integer >= -1, not {value!r}")
        t, s = self.retention_time_minutes, self.retention_size_mb
        if (t == 0) != (s == 0):
            raise ValueError(
                "invalid retention policy: a single time or size limit of 0 next to a "
                "non-zero one is refused; use -1 to ignore one limit, 0/0 to retain nothing"
            )

    @property
    def infinite(self) -> bool:
        """True when neither time nor size ever lets consumed data go (-1/-1)."""
        return self.retention_time_minutes == -1 and self.retention_size_mb == -1

    @property
    def time_ms(self) -> int | None:
        """The time limit in milliseconds, None when there is none."""
        return None if self.retention_time_minutes < 0 else self.retention_time_minutes * 60_000

    @property
    def size_bytes(self) -> int | None:
        """The size limit in bytes, None when there is none."""
        return None if self.retention_size_mb < 0 else self.retention_size_mb * _MB

    @classmethod
    def from_json(cls, data: object) -> RetentionPolicies:
        """Parse ``{"retentionTimeInMinutes": int, "retentionSizeInMB": int}``; raise `ValueError`."""
        d = _mapping(data, "retention policies")
        return cls(_int_field(d, "retentionTimeInMinutes", maximum=_I32_MAX), _int_field(d, "retentionSizeInMB"))

    def to_json(self) -> dict[str, int]:
        """Pulsar's JSON shape."""
        return {"retentionTimeInMinutes": self.retention_time_minutes, "retentionSizeInMB": self.retention_size_mb}


def parse_message_ttl(value: object) -> int | None:
    """A message TTL in seconds from JSON: an int >= 0 (0 = off) or None (not set). Raises
    `ValueError` for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _I32_MAX:
        raise ValueError(f"messageTTLInSeconds must be an integer between 0 and {_I32_MAX}, not {value!r}")
    return value


class BacklogQuotaType(enum.Enum):
    """Which backlog a quota limits: bytes of the slowest subscription, or age of its oldest entry."""

    DESTINATION_STORAGE = "destination_storage"
    MESSAGE_AGE = "message_age"


class BacklogQuotaPolicy(enum.Enum):
    """What the broker does when a backlog quota is exceeded."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


@dataclass(frozen=True)
class BacklogQuota:
    """A backlog limit: ``limit_size`` bytes (destination_storage) and/or ``limit_time`` seconds
    (message_age); -1 disables an axis. Raises `ValueError` on bad values."""

    limit_size: int = -1
    limit_time: int = -1
    policy: BacklogQuotaPolicy = BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD

    def __post_init__(self) -> None:
        for name in ("limit_size", "limit_time"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise ValueError(f"backlog quota {name} must be an integer >= -1, not {value!r}")
        if not isinstance(self.policy, BacklogQuotaPolicy):
            raise ValueError(f"backlog quota policy must be a BacklogQuotaPolicy, not {self.policy!r}")

    @classmethod
    def from_json(cls, data: object) -> BacklogQuota:
        """Parse Pulsar's backlog-quota JSON (``limit`` accepted for ``limitSize``); raise `ValueError`."""
        d = _mapping(data, "backlog quota")
        size_key = "limitSize" if d.get("limitSize") is not None else "limit"
        policy_name = d.get("policy", BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD.value)
        try:
            policy = BacklogQuotaPolicy(policy_name)
        except ValueError:
            allowed = ", ".join(p.value for p in BacklogQuotaPolicy)
            raise ValueError(f"backlog quota policy must be one of {allowed}, not {policy_name!r}") from None
        return cls(
            _int_field(d, size_key, default=-1), _int_field(d, "limitTime", default=-1, maximum=_I32_MAX), policy
        )

    def to_json(self) -> dict[str, Any]:
        """Pulsar's JSON shape."""
        return {"limitSize": self.limit_size, "limitTime": self.limit_time, "policy": self.policy.value}


def _quota_type(name: object) -> BacklogQuotaType:
    try:
        return BacklogQuotaType(name)
    except ValueError:
        allowed = ", ".join(t.value for t in BacklogQuotaType)
        raise ValueError(f"backlog quota type must be one of {allowed}, not {name!r}") from None


@dataclass(frozen=True)
class PolicyOverrides:
    """The policies set at one level (a namespace or a topic); None / absent means "inherit".

    JSON uses the field names of Pulsar's namespace ``Policies``: ``retention_policies``,
    ``message_ttl_in_seconds``, ``backlog_quota_map`` (keyed by quota type).
    """

    retention: RetentionPolicies | None = None
    message_ttl_s: int | None = None
    backlog_quotas: Mapping[BacklogQuotaType, BacklogQuota] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parse_message_ttl(self.message_ttl_s)
        object.__setattr__(self, "backlog_quotas", MappingProxyType(dict(self.backlog_quotas)))

    @classmethod
    def from_json(cls, data: object) -> PolicyOverrides:
        """Parse the three policies from a ``Policies``-shaped object; raise `ValueError`."""
        d = _mapping(data, "policies")
        ret = d.get("retention_policies")
        quotas_json = d.get("backlog_quota_map") or {}
        quotas = {
            _quota_type(k): BacklogQuota.from_json(v) for k, v in _mapping(quotas_json, "backlog_quota_map").items()
        }
        return cls(
            None if ret is None else RetentionPolicies.from_json(ret),
            parse_message_ttl(d.get("message_ttl_in_seconds")),
            quotas,
        )

    def to_json(self) -> dict[str, Any]:
        """The ``Policies``-shaped JSON (unset policies are omitted)."""
        out: dict[str, Any] = {}
        if self.retention is not None:
            out["retention_policies"] = self.retention.to_json()
        if self.message_ttl_s is not None:
            out["message_ttl_in_seconds"] = self.message_ttl_s
        if self.backlog_quotas:
            out["backlog_quota_map"] = {t.value: q.to_json() for t, q in self.backlog_quotas.items()}
        return out


@dataclass(frozen=True)
class RetentionConfig:
    """Broker-level defaults and intervals of retention, TTL and backlog quotas (broker.conf names).

    The only declaration of these keys: the broker's config inherits them, so a broker's TOML
    table takes them flat under the same names and aliases. ``validate()`` raises `ConfigError`
    naming the key.
    """

    default_retention_time_minutes: int = config_field(
        0, alias="defaultRetentionTimeInMinutes", help="Retention time when no policy sets one (-1 infinite)."
    )
    default_retention_size_mb: int = config_field(
        0, alias="defaultRetentionSizeInMB", help="Retention size when no policy sets one (-1 infinite)."
    )
    ttl_duration_default_s: int = config_field(
        0, alias="ttlDurationDefaultInSeconds", help="Message TTL when no policy sets one (0 = off)."
    )
    backlog_quota_default_limit_bytes: int = config_field(
        -1, alias="backlogQuotaDefaultLimitBytes", help="Default destination_storage quota (-1 = none)."
    )
    backlog_quota_default_limit_gb: float = config_field(
        -1.0,
        alias="backlogQuotaDefaultLimitGB",
        help="Pulsar's older spelling of the default destination_storage quota, in GiB; when positive it "
        "wins over backlogQuotaDefaultLimitBytes, as in Pulsar.",
    )
    backlog_quota_default_limit_s: int = config_field(
        -1, alias="backlogQuotaDefaultLimitSecond", help="Default message_age quota (-1 = none)."
    )
    backlog_quota_default_retention_policy: str = config_field(
        "producer_request_hold",
        alias="backlogQuotaDefaultRetentionPolicy",
        help="What a default backlog quota does when exceeded.",
    )
    retention_check_interval_s: float = config_field(
        120.0, alias="retentionCheckIntervalInSeconds", help="How often retention trims ledgers."
    )
    message_expiry_check_interval_minutes: float = config_field(
        5.0, alias="messageExpiryCheckIntervalInMinutes", help="How often message TTL is applied."
    )
    backlog_quota_check_interval_s: float = config_field(
        60.0, alias="backlogQuotaCheckIntervalInSeconds", help="How often backlog quotas are checked."
    )
    idle_ledger_rollover_s: float = config_field(
        0.0,
        help="Roll a non-empty current ledger idle (no add) for this long so retention can trim it "
        "(0 = the retention check interval).",
    )
    retention_check_unloaded_topics: bool = config_field(
        True,
        help="Retention also opens, trims and closes topics (managed ledgers) stored but not loaded on this broker.",
    )

    def validate(self) -> None:
        """Raise `ConfigError` naming the key of the first invalid value."""
        try:
            RetentionPolicies(self.default_retention_time_minutes, self.default_retention_size_mb)
        except ValueError as exc:
            raise ConfigError("default_retention_time_minutes", str(exc)) from None
        require_at_least(self, "ttl_duration_default_s")
        require_at_least(
            self,
            "backlog_quota_default_limit_bytes",
            "backlog_quota_default_limit_s",
            minimum=-1,
            message="must be -1 (none) or a limit >= 0",
        )
        try:
            BacklogQuotaPolicy(self.backlog_quota_default_retention_policy)
        except ValueError:
            raise ConfigError(
                "backlog_quota_default_retention_policy",
                f"must be one of {', '.join(p.value for p in BacklogQuotaPolicy)}",
            ) from None
        require_positive(
            self,
            "retention_check_interval_s",
            "message_expiry_check_interval_minutes",
            "backlog_quota_check_interval_s",
        )
        require_at_least(self, "idle_ledger_rollover_s")

    def default_policies(self) -> PolicyOverrides:
        """The broker defaults as a full set of policies (the bottom level of resolution)."""
        quotas: dict[BacklogQuotaType, BacklogQuota] = {}
        policy = BacklogQuotaPolicy(self.backlog_quota_default_retention_policy)
        limit_bytes = self.backlog_quota_default_limit_bytes
        if self.backlog_quota_default_limit_gb > 0:
            limit_bytes = int(self.backlog_quota_default_limit_gb * 1024**3)
        if limit_bytes >= 0:
            quotas[BacklogQuotaType.DESTINATION_STORAGE] = BacklogQuota(limit_bytes, -1, policy)
        if self.backlog_quota_default_limit_s >= 0:
            quotas[BacklogQuotaType.MESSAGE_AGE] = BacklogQuota(-1, self.backlog_quota_default_limit_s, policy)
        return PolicyOverrides(
            RetentionPolicies(self.default_retention_time_minutes, self.default_retention_size_mb),
            self.ttl_duration_default_s,
            quotas,
        )


@dataclass(frozen=True)
class TopicPolicies:
    """The policies in force for one topic, with where each came from (``"topic"``,
    ``"namespace"`` or ``"broker"``) so explain can say why."""

    retention: RetentionPolicies
    message_ttl_s: int
    backlog_quotas: Mapping[BacklogQuotaType, BacklogQuota]
    sources: Mapping[str, str]

    @classmethod
    def resolve(
        cls,
        defaults: RetentionConfig | PolicyOverrides,
        namespace: PolicyOverrides | None = None,
        topic: PolicyOverrides | None = None,
    ) -> TopicPolicies:
        """Topic-level values over namespace-level ones over broker defaults, per policy (and per
        backlog-quota type). A TTL of 0 set at a level turns TTL off there (it is not "unset")."""
        base = defaults.default_policies() if isinstance(defaults, RetentionConfig) else defaults
        levels = [("topic", topic), ("namespace", namespace), ("broker", base)]
        sources: dict[str, str] = {}

        def pick(attr: str) -> Any:
            for name, level in levels:
                value = None if level is None else getattr(level, attr)
                if value is not None:
                    sources[attr] = name
                    return value
            sources[attr] = "broker"
            return None

        retention = pick("retention") or RetentionPolicies(0, 0)
        ttl = pick("message_ttl_s") or 0
        quotas: dict[BacklogQuotaType, BacklogQuota] = {}
        for qtype in BacklogQuotaType:
            for name, level in levels:
                if level is not None and qtype in level.backlog_quotas:
                    quotas[qtype] = level.backlog_quotas[qtype]
                    sources[f"backlog_quota.{qtype.value}"] = name
                    break
        return cls(retention, ttl, MappingProxyType(quotas), MappingProxyType(sources))

    def to_json(self) -> dict[str, Any]:
        """The effective policies and their sources, for explain."""
        return {
            "retention": self.retention.to_json(),
            "messageTTLInSeconds": self.message_ttl_s,
            "backlogQuotaMap": {t.value: q.to_json() for t, q in self.backlog_quotas.items()},
            "sources": dict(self.sources),
        }
