"""Retry delays that double after each failure up to a cap, as Pulsar's ``Backoff``.

Pure: no clock and no sleeping; the caller sleeps for what `Backoff.next` returns. The
dispatcher backs off its reads with it (``dispatcherReadFailureBackoff*``) and the delayed-delivery
index its storage operations. (autorecovery's ``RetryTable`` keeps one delay per ledger for a pool
of workers; the broker may not import it, and one delay per retrying loop is all it needs.)
"""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays for retrying one operation: ``initial_s``, then twice the previous, at most ``max_s``.

    Each delay is lowered by up to 10 % at random so that many retrying loops (one per
    subscription) do not hit a recovering bookie in step; it never goes below ``initial_s``.
    `reduce_to_half` (a success after failures, as Pulsar's dispatcher does after a good read)
    halves the next delay down to ``initial_s``; `reset` starts over. Memory is constant.
    """

    def __init__(self, initial_s: float, max_s: float, *, rng: random.Random | None = None) -> None:
        if initial_s <= 0 or max_s < initial_s:
            raise ValueError("need 0 < initial_s <= max_s")
        self.initial_s = initial_s
        self.max_s = max_s
        self._next = initial_s
        self._rng = rng or random.Random()
        self.failures = 0
        """Failures since the last `reset` (for logs and tests)."""

    @property
    def upcoming_s(self) -> float:
        """The delay the next `next` returns before its random lowering."""
        return self._next

    def next(self) -> float:
        """The delay before the next attempt (seconds); doubles the one after it, up to the cap."""
        current = self._next
        self._next = min(current * 2, self.max_s)
        self.failures += 1
        jittered = current - self._rng.uniform(0.0, current / 10)
        return max(self.initial_s, jittered)

    def reduce_to_half(self) -> None:
        """An attempt succeeded: halve the next delay (not below ``initial_s``)."""
        self._next = max(self._next / 2, self.initial_s)
        if self._next == self.initial_s:
            self.failures = 0

    def reset(self) -> None:
        """Forget every failure: the next delay is ``initial_s`` again."""
        self._next = self.initial_s
        self.failures = 0
