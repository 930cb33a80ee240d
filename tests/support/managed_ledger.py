"""Helpers shared by the managed-ledger tests."""

from __future__ import annotations

from typing import Any

from managed_ledger import ManagedLedgerConfig

NAME = "public/default/persistent/t1"


def config(**overrides: Any) -> ManagedLedgerConfig:
    """A config for tests: no minimum roll-over age, small limits unless overridden."""
    base: dict[str, Any] = dict(
        ensemble_size=1, write_quorum=1, ack_quorum=1, min_ledger_rollover_time_minutes=0.0, cache_size_mb=1.0
    )
    base.update(overrides)
    return ManagedLedgerConfig(**base)
