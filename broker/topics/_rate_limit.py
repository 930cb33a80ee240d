"""Fixed-window rate limiters for publish and dispatch throttling, as Pulsar's broker throttles.

Rules:

* Rule 1 (windows): a limiter allows at most ``max_msgs`` messages and ``max_bytes`` bytes per
  window of ``period_s`` seconds (0 switches either bound off). Windows start when the first
  use after the previous one ends, so an idle limiter never holds a debt.
* Rule 2 (overshoot by one): `record` always counts what was let through; a limiter is
  `exhausted` once a bound is reached, so the last admitted unit (a SEND, a dispatch round) may
  pass it by its own size, as in Pulsar, and the window after it is not shortened for that.
* Rule 3 (publish): a topic whose publish limiter is exhausted pauses reading from the
  connection that sent the SEND until the window ends (the SEND handler runs inline in the
  connection's read loop, so no frame behind it is read: TCP back-pressure reaches the client,
  as Pulsar disables auto-read). Nothing is dropped or refused.
* Rule 4 (dispatch): a dispatcher reads no more messages than the topic's and its
  subscription's limiters have left in the window, and while either is exhausted it waits for
  the window's end (`wait_s`) instead of reading.

Limiters are plain objects with a clock (seconds, monotonic) and no task of their own.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

__all__ = ["RateLimiter"]


class RateLimiter:
    """See the module rules. ``clock`` defaults to trio's clock; the limits can change at any time
    (`configure`), taking effect in the current window."""

    def __init__(
        self,
        max_msgs: int = 0,
        max_bytes: int = 0,
        period_s: float = 1.0,
        *,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._clock = clock
        self.max_msgs = 0
        self.max_bytes = 0
        self.period_s = 1.0
        self._window_start = float("-inf")
        self._msgs = 0
        self._bytes = 0
        self.throttled = 0  # how many times a caller had to wait (for stats and metrics)
        self.configure(max_msgs, max_bytes, period_s)

    def configure(self, max_msgs: int, max_bytes: int, period_s: float = 1.0) -> None:
        """Set the bounds (0 or less = off); raises `ValueError` for a period that is not positive."""
        if period_s <= 0:
            raise ValueError(f"rate period must be positive, not {period_s}")
        self.max_msgs = max(0, int(max_msgs))
        self.max_bytes = max(0, int(max_bytes))
        self.period_s = float(period_s)

    @property
    def enabled(self) -> bool:
        """Whether any bound is set."""
        return self.max_msgs > 0 or self.max_bytes > 0

    def _roll(self) -> None:
        now = self._clock()
        if now >= self._window_start + self.period_s:
            self._window_start = now
            self._msgs = 0
            self._bytes = 0

    def record(self, msgs: int, nbytes: int) -> None:
        """Count ``msgs`` messages of ``nbytes`` bytes let through in the current window."""
        if not self.enabled:
            return
        self._roll()
        self._msgs += msgs
        self._bytes += nbytes

    def exhausted(self) -> bool:
        """Whether a bound of the current window is reached."""
        if not self.enabled:
            return False
        self._roll()
        return (self.max_msgs > 0 and self._msgs >= self.max_msgs) or (
            self.max_bytes > 0 and self._bytes >= self.max_bytes
        )

    def available_msgs(self) -> int | None:
        """Messages still allowed in this window (None: no message bound; 0 when exhausted)."""
        if self.exhausted():
            return 0
        if self.max_msgs <= 0:
            return None
        return self.max_msgs - self._msgs

    def wait_s(self) -> float:
        """Seconds until the current window ends when exhausted, else 0."""
        if not self.exhausted():
            return 0.0
        return max(0.0, self._window_start + self.period_s - self._clock())

    async def wait_if_exhausted(self) -> None:
        """Sleep to the end of the window while the limiter is exhausted (Rule 3)."""
        delay = self.wait_s()
        if delay > 0:
            self.throttled += 1
            await trio.sleep(delay)
