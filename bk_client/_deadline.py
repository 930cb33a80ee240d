"""Timeouts that a stalled event loop does not turn into a bookie's silence.

When the process is paused (SIGSTOP) or a step blocks the event loop past a request's deadline,
the bookies' answers arrive meanwhile and wait unread in the sockets. When the loop runs again,
the expired deadline and the connection readers that would deliver those answers are ready in
the same scheduler batch, in random order: a deadline judged first would count as unanswered a
request whose answer is already here. So a deadline the loop reaches more than `stall_slack`
late is moved once, by that slack, and judged after the readers had their turn.
"""

from __future__ import annotations

import trio

__all__ = ["stall_slack", "wait_within"]


def stall_slack(timeout: float) -> float:
    """How late a wake-up may be before it counts as a stall, for a ``timeout``-second wait: the
    write handle's add-monitor tick (a quarter of the timeout, at most a second)."""
    return min(1.0, timeout / 4)


async def wait_within(event: trio.Event, timeout: float) -> bool:  # noqa: ASYNC109 - the deadline is the point
    """Wait at most ``timeout`` seconds for ``event``; True once it is set, False when it was not
    set in time. A deadline reached more than `stall_slack` late (module docstring) is extended by
    that slack once before it is judged."""
    slack = stall_slack(timeout)
    deadline = trio.current_time() + timeout
    extended = False
    while True:
        with trio.move_on_at(deadline):
            await event.wait()
            return True
        now = trio.current_time()
        if event.is_set():
            return True
        if extended or now - deadline <= slack:
            return False
        extended = True
        deadline = now + slack
