"""A fake clock for code that takes its time from an injected ``clock()`` callable (rate limiters,
the managed ledger's rollover and retention decisions, the chaos checker's history)."""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """A settable clock in seconds: ``clock()`` returns `now`; `advance` moves it. With ``step``
    every call first moves it by that much (a clock that ticks once per reading)."""

    def __init__(self, start: float = 1_700_000_000.0, *, step: float = 0.0) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on."""
        self.now += seconds
