"""Dynamic broker configuration: the keys Pulsar lets an admin change on running brokers.

Rules:

* Rule 1 (which keys): `DYNAMIC_KEYS`, the keys that are dynamic in Pulsar and that Magnetar
  has (Pulsar's names). Any other key is refused (412 at the REST layer, as Pulsar refuses a
  non-dynamic key).
* Rule 2 (storage): the overrides are one JSON object ``{name: value-string}`` at Pulsar's
  metadata path ``/admin/configuration``, written compare-and-set, so every broker of the
  cluster sees the same overrides and two admins never lose each other's change.
* Rule 3 (applying): a broker applies the stored overrides over its own config file's values
  when it starts and on every policy recheck (``policy_recheck_interval_s``), and at once when
  the update came through its own admin API. Applying builds a new frozen `BrokerConfig`
  (validated as at start-up) and swaps ``service.config``; the dispatchers read the read-batch
  keys from the service each round, and the limit keys reach loaded topics through
  `_topic_limits` (the service re-resolves every loaded topic's limits). A stored value that no
  longer validates is logged and skipped, never half-applied.
* Rule 4 (removal): deleting an override brings back the value of the broker's config file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any

from magnetar.common.config import ConfigError, parse_value
from metadata import BadVersionError, NodeExistsError, NoNodeError

from ._config import BrokerConfig

if TYPE_CHECKING:
    from metadata import MetadataStore

    from ._service import BrokerService

__all__ = ["DYNAMIC_KEYS", "DYNAMIC_CONFIG_PATH", "DynamicConfig", "runtime_values"]

log = logging.getLogger(__name__)

DYNAMIC_CONFIG_PATH = "/admin/configuration"

DYNAMIC_KEYS: tuple[str, ...] = (
    "allowAutoTopicCreation",
    "allowAutoTopicCreationType",
    "defaultNumPartitions",
    "maxNumPartitionsPerPartitionedTopic",
    "brokerDeleteInactiveTopicsEnabled",
    "brokerDeleteInactiveTopicsFrequencySeconds",
    "brokerDeleteInactiveTopicsMode",
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds",
    "brokerDeleteInactivePartitionedTopicMetadataEnabled",
    "dispatcherMaxReadBatchSize",
    "dispatcherMaxReadSizeBytes",
    "dispatchThrottlingRatePerTopicInMsg",
    "dispatchThrottlingRatePerTopicInByte",
    "dispatchThrottlingRatePerSubscriptionInMsg",
    "dispatchThrottlingRatePerSubscriptionInByte",
    "maxPublishRatePerTopicInMessages",
    "maxPublishRatePerTopicInBytes",
)
"""Rule 1: Pulsar's names of the keys that can change on running brokers."""

_SECRET_KEYS = frozenset({"tokenSecretKey", "basicAuthConf"})


def _fields_by_alias() -> dict[str, dataclasses.Field[Any]]:
    return {f.metadata.get("alias") or f.name: f for f in dataclasses.fields(BrokerConfig)}


_FIELDS = _fields_by_alias()


def _to_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def runtime_values(config: BrokerConfig) -> dict[str, str]:
    """Every key of ``config`` by Pulsar's name with its value as a string (secrets hidden)."""
    out = {}
    for name, f in sorted(_FIELDS.items()):
        value = getattr(config, f.name)
        out[name] = "******" if name in _SECRET_KEYS and value else _to_string(value)
    return out


class DynamicConfig:
    """Reads, writes and applies the stored overrides of one broker (see the module rules).

    ``base`` is the broker's config as loaded from its file; the applied config is always
    ``base`` plus the stored overrides, so a removed override falls back to the file's value.
    """

    def __init__(self, base: BrokerConfig) -> None:
        self.base = base
        self.applied: dict[str, str] = {}

    @staticmethod
    async def stored(store: MetadataStore) -> dict[str, str]:
        """The stored overrides (empty when none)."""
        try:
            data, _ = await store.get(DYNAMIC_CONFIG_PATH)
        except NoNodeError:
            return {}
        value = json.loads(data) if data else {}
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    def build(self, overrides: dict[str, str]) -> BrokerConfig:
        """``base`` with ``overrides`` applied and validated; raises `ConfigError` (Rule 3)."""
        changes = {}
        for name, raw in overrides.items():
            if name not in DYNAMIC_KEYS:
                raise ConfigError(name, "is not a dynamic configuration key")
            f = _FIELDS[name]
            changes[f.name] = parse_value(BrokerConfig, name, raw)  # as the config file's value
        config = dataclasses.replace(self.base, **changes)
        config.validate()
        return config

    async def update(self, store: MetadataStore, name: str, value: str | None) -> None:
        """Store (``value`` None: remove) one override after checking it applies; raises
        `ConfigError` for a key that is not dynamic or a value that does not validate."""
        if name not in DYNAMIC_KEYS:
            raise ConfigError(name, "is not a dynamic configuration key")
        while True:
            try:
                data, stat = await store.get(DYNAMIC_CONFIG_PATH)
                current = json.loads(data) if data else {}
                version: int | None = stat.version
            except NoNodeError:
                current, version = {}, None
            if value is None:
                current.pop(name, None)
            else:
                current[name] = value
            self.build(current)  # refuse what would not apply (Rule 3)
            encoded = json.dumps(current, sort_keys=True).encode()
            try:
                if version is None:
                    await store.create(DYNAMIC_CONFIG_PATH, encoded, make_parents=True)
                else:
                    await store.set(DYNAMIC_CONFIG_PATH, encoded, version=version)
                return
            except (BadVersionError, NodeExistsError):
                continue

    async def refresh(self, service: BrokerService) -> bool:
        """Apply the stored overrides to ``service`` when they changed (Rule 3); True if applied."""
        overrides = await self.stored(service.store)
        if overrides == self.applied:
            return False
        try:
            config = self.build(overrides)
        except ConfigError as exc:
            log.warning("dynamic configuration not applied: %s", exc)
            return False
        service.config = config
        self.applied = overrides
        log.info("dynamic configuration applied: %s", overrides or "(none: the config file's values)")
        await service.apply_namespace_policies()  # loaded topics re-resolve their limits
        return True
