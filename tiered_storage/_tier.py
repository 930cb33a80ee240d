"""`TieredStorage`: a broker's offloaders, built from offload policies and shared by its managed
ledgers, with the read cache and the limits they share.

* `offloader_for(policies)`: the offloader new offloads go to (one per distinct location, reused).
* `offloader_for_ledger(driver, metadata, policies)`: the offloader that reads or deletes a ledger
  offloaded earlier, from the driver and location recorded with it, so ledgers stay readable after
  the policies moved new offloads elsewhere. Credentials are not recorded: they come from the
  policies in force (or botocore's default chain).
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from ._errors import TierError
from ._filesystem import FileSystemStore
from ._offloader import BlockCache, BlockOffloader, LedgerOffloader
from ._policies import OffloadPolicies, TieredStorageConfig
from ._s3 import S3Store
from .metrics import TieredStorageMetrics

__all__ = ["FORMAT", "TieredStorage"]

FORMAT = "magnetar-blocks-1"
"""Recorded in the driver metadata of every ledger this code offloads (the layout of ``_format``)."""

_RATE_INTERVAL_S = 10.0


class TieredStorage:
    """Offloaders, read cache and limiters of one broker (see the module docstring)."""

    def __init__(
        self,
        config: TieredStorageConfig | None = None,
        *,
        metrics: TieredStorageMetrics | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
    ) -> None:
        self.config = config if config is not None else TieredStorageConfig()
        self.config.validate()
        self.metrics = metrics if metrics is not None else TieredStorageMetrics()
        self.cache = BlockCache(self.config.read_cache_size_bytes, self.metrics)
        self.offload_limiter = trio.CapacityLimiter(self.config.max_threads)
        self.read_limiter = trio.CapacityLimiter(self.config.read_threads)
        self._io_limiter = trio.CapacityLimiter(self.config.max_threads + self.config.read_threads)
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self._offloaders: dict[tuple[object, ...], BlockOffloader] = {}

    @property
    def broker_policies(self) -> OffloadPolicies:
        """The broker level of the offload policies (from the ``[offload]`` config)."""
        return self.config.policies()

    def offloader_for(self, policies: OffloadPolicies) -> LedgerOffloader:
        """The offloader the (resolved) ``policies`` name; `TierError` when they name none that works."""
        try:
            policies.validate()
        except ValueError as exc:
            raise TierError(f"offload policies: {exc}") from None
        if policies.is_filesystem:
            meta = {"fileSystemURI": policies.file_system_uri}
        else:
            meta = {"bucket": policies.bucket, "region": policies.region, "endpoint": policies.endpoint}
        return self._build(policies.driver, meta, policies)

    def offloader_for_ledger(
        self, driver: str, metadata: Mapping[str, str], policies: OffloadPolicies | None = None
    ) -> LedgerOffloader:
        """The offloader that reads a ledger offloaded with ``driver`` to ``metadata``'s location."""
        fmt = metadata.get("format", FORMAT)
        if fmt != FORMAT:
            raise TierError(f"offloaded ledger in format {fmt!r}, which this broker cannot read")
        return self._build(
            driver, {k: v for k, v in metadata.items() if k != "format"}, policies or self.broker_policies
        )

    def _build(self, driver: str, location: Mapping[str, str], policies: OffloadPolicies) -> BlockOffloader:
        kind = driver.lower()
        creds = (policies.credential_id, policies.credential_secret) if kind != "filesystem" else ("", "")
        key = (kind, tuple(sorted(location.items())), policies.read_buffer_size, policies.max_block_size, creds)
        found = self._offloaders.get(key)
        if found is not None:
            return found
        try:
            if kind == "filesystem":
                store: FileSystemStore | S3Store = FileSystemStore(location.get("fileSystemURI", ""), self._io_limiter)
            elif kind in ("aws-s3", "s3"):
                store = S3Store(
                    location.get("bucket", ""),
                    region=location.get("region", ""),
                    endpoint=location.get("endpoint", ""),
                    credential_id=creds[0],
                    credential_secret=creds[1],
                    part_size=policies.max_block_size,
                    limiter=self._io_limiter,
                    connect_timeout_s=self._timeouts[0],
                    read_timeout_s=self._timeouts[1],
                )
            else:
                raise TierError(f"offload driver {driver!r} is not supported")
        except ValueError as exc:
            raise TierError(str(exc)) from None
        offloader = BlockOffloader(
            store,
            driver,
            {**location, "format": FORMAT},
            block_size=policies.read_buffer_size,
            cache=self.cache,
            metrics=self.metrics,
            offload_limiter=self.offload_limiter,
            read_limiter=self.read_limiter,
        )
        if len(self._offloaders) >= 64:  # locations are few; never let a churn of policies grow this
            self._offloaders.pop(next(iter(self._offloaders)))
        self._offloaders[key] = offloader
        return offloader

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Update the rate gauges every few seconds until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(_RATE_INTERVAL_S)
            self.metrics.update_rates()
