"""Small value types of the managed-ledger API."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from protocols.managed_ledger import Position

__all__ = ["Entry", "InitialPosition"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a managed ledger: its position and the exact bytes that were added."""

    position: Position
    data: bytes

    @property
    def length(self) -> int:
        """Payload size in bytes."""
        return len(self.data)


class InitialPosition(enum.Enum):
    """Where a new cursor starts: after the last entry (LATEST) or at the first one (EARLIEST)."""

    LATEST = "latest"
    EARLIEST = "earliest"
