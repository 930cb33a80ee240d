"""Loaded (through PYTHONPATH) only by chaos-run processes started under libfaketime with the
monotonic clock left real: libfaketime 0.9.10 fails clock_nanosleep on an absolute monotonic
deadline with EINVAL, which is how Python's time.sleep waits. This time.sleep waits on select
with a relative timeout instead; nothing else changes."""

import select
import time

_monotonic = time.monotonic


def _sleep(secs: float) -> None:
    if secs < 0:
        raise ValueError("sleep length must be non-negative")
    end = _monotonic() + secs
    while True:
        left = end - _monotonic()
        if left <= 0:
            return
        select.select([], [], [], left)


time.sleep = _sleep
