"""A transaction's identity and the two ways it ends, as the Pulsar protocol carries them."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, order=True, slots=True)
class TxnID:
    """A transaction id: ``most_bits`` names the coordinator (its partition of the coordinator-assign
    topic), ``least_bits`` the transaction within it, as in the protocol's ``txnid_most_bits`` and
    ``txnid_least_bits``. Hashable and ordered (by coordinator, then sequence)."""

    most_bits: int
    least_bits: int

    def __str__(self) -> str:
        return f"({self.most_bits},{self.least_bits})"


class TxnAction(enum.IntEnum):
    """How a transaction ends; the values are the protocol's ``TxnAction``."""

    COMMIT = 0
    ABORT = 1
