"""Waiting for an observable event in tests and benchmarks: poll a check until it holds, with a
bound, and fail naming what was awaited (and the last value seen) when the bound runs out.

    wait_until(lambda: stats()["msgBacklog"] == 0, "the backlog to drain", timeout_s=20)
    row = wait_until(lambda: find_row(), "the trim to be recorded")        # returns the truthy value
    await wait_until_async(lambda: store.exists(path), "the node", timeout_s=10)  # in trio tests

The bound is a hang guard, not a timing assertion: set it well above what the event takes on a
loaded machine, so that a slow run passes and only a real hang fails.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

__all__ = ["wait_until", "wait_until_async"]

T = TypeVar("T")


def wait_until(check: Callable[[], T], what: str, *, timeout_s: float = 30.0, interval_s: float = 0.05) -> T:
    """Call ``check`` every ``interval_s`` until it returns something truthy, and return that.
    Raises AssertionError naming ``what`` and the last value after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last: {value!r}")
        time.sleep(interval_s)


async def wait_until_async(
    check: Callable[[], Any | Awaitable[Any]], what: str, *, timeout_s: float = 10.0, interval_s: float = 0.02
) -> Any:
    """`wait_until` for trio code: ``check`` may be a plain or an async function; sleeps with
    ``trio.sleep``. Raises AssertionError naming ``what`` after ``timeout_s``."""
    value: Any = None
    with trio.move_on_after(timeout_s):
        while True:
            value = check()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            await trio.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last: {value!r}")
