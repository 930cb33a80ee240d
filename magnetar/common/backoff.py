"""Retry delays that double after each failure up to a cap (Pulsar's and BookKeeper's ``Backoff``):
one home for every retrying loop of Magnetar (the BookKeeper client's reconnects, the bookie's
flush retries, AutoRecovery's per-ledger retries).

Pure: no clock and no sleeping. `doubled` is the rule, for callers that keep their own delay per
key (a table of ledgers); `Backoff` keeps the delay of one retrying loop. A caller sleeps, or
records a retry time, with what they return.

Rules:

* The first delay is ``initial_s``; each next one twice the previous, at most ``max_s``.
* `Backoff.reset` (a success) starts over at ``initial_s``; `Backoff.reduce_to_half` (a success
  that should not forget the trouble at once) halves the next delay, not below ``initial_s``.
* ``jitter`` (a fraction, 0 by default) lowers each delay by up to that share at random, never
  below ``initial_s``, so that many loops retrying one peer do not retry in step.
"""

from __future__ import annotations

import random

__all__ = ["Backoff", "doubled"]


def doubled(previous_s: float | None, initial_s: float, max_s: float) -> float:
    """The delay after ``previous_s``: ``initial_s`` when there was none, else twice it, at most
    ``max_s``."""
    if not previous_s:
        return min(initial_s, max_s)
    return min(previous_s * 2, max_s)


class Backoff:
    """The delays of one retrying loop (module rules). Constant memory."""

    def __init__(
        self, initial_s: float, max_s: float, *, jitter: float = 0.0, rng: random.Random | None = None
    ) -> None:
        if initial_s <= 0 or max_s < initial_s:
            raise ValueError("need 0 < initial_s <= max_s")
        if not 0.0 <= jitter < 1.0:
            raise ValueError("need 0 <= jitter < 1")
        self.initial_s = initial_s
        self.max_s = max_s
        self._jitter = jitter
        self._rng = rng or random.Random()
        self._next = initial_s
        self.failures = 0
        """Failures since the last `reset` (for logs and tests)."""

    @property
    def upcoming_s(self) -> float:
        """The delay the next `next` returns, before any jitter."""
        return self._next

    def next(self) -> float:
        """The delay before the next attempt (seconds); the one after it doubles, up to the cap."""
        current = self._next
        self._next = doubled(current, self.initial_s, self.max_s)
        self.failures += 1
        if self._jitter:
            current = max(self.initial_s, current - self._rng.uniform(0.0, current * self._jitter))
        return current

    def reduce_to_half(self) -> None:
        """An attempt succeeded: halve the next delay (not below ``initial_s``)."""
        self._next = max(self._next / 2, self.initial_s)
        if self._next == self.initial_s:
            self.failures = 0

    def reset(self) -> None:
        """Forget every failure: the next delay is ``initial_s`` again."""
        self._next = self.initial_s
        self.failures = 0
