"""Several journal directories (BookKeeper's ``journalDirectories``): one `Journal` per directory,
each with its own writer and force-write (fsync) loop, ledgers spread over them by
``ledger_id % len(journals)``.

Rules:

1. Every record of a ledger (adds, fence, master key, explicit LAC) goes to the journal of that
   ledger, so each ledger's records keep their order and a replay of each journal on its own
   restores every ledger; journals are replayed one after the other.
2. A mark of the group is a `GroupMark`: one `LogMark` per journal. ``earliest`` is
   component-wise, so the checkpoint mark the bookie takes (the earliest of the current mark and
   the marks of adds in flight) is safe for every journal; `persist_last_mark` persists each
   component in its own ``lastMark``/``lastMark.{i}`` file (`last_mark_file`).
3. The group's state is the worst of its journals' (FAILED, then NO_SPACE, else the first's);
   ``error`` is the first journal error; a state change of any journal is reported through
   ``on_state_change``. `resume`, `ensure_reserve` and `wait_for_space` act on every journal
   (``wait_for_space`` returns once none is full).
4. A padding record (the bookie's ``force_ledger`` barrier) is written to every journal; its
   ticket completes once every journal made it durable.

The journals share one `JournalMetrics` (counters add up; the queue gauges show the journal that
changed last).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from .._space import SpaceGuard
from ..metrics import JournalMetrics
from ._codec import AddEntry, JournalRecord, LogMark, Padding
from ._config import JournalConfig
from ._files import ReplayReport
from ._journal import Journal
from ._last_mark import last_mark_file
from ._types import JournalError, JournalState, JournalStatistics, JournalTicket

__all__ = ["GroupMark", "JournalGroup"]

GroupMark = tuple[LogMark, ...]
"""One mark per journal of a `JournalGroup`, in directory order."""


class _AllTicket:
    """The ticket of a record written to every journal: done once all of theirs are."""

    def __init__(self, tickets: Sequence[JournalTicket]) -> None:
        self._tickets = list(tickets)

    @property
    def done(self) -> bool:
        """True once every journal's ticket completed (successfully or not)."""
        return all(t.done for t in self._tickets)

    async def wait(self) -> None:
        """Wait until every journal's ticket completed."""
        for t in self._tickets:
            if not t.done:
                await t.wait()

    def result(self) -> GroupMark:
        """Every journal's mark; raises the first journal's error."""
        return tuple(t.result() for t in self._tickets)


class JournalGroup:
    """Journals over several directories behind the `Journal` methods the bookie uses (module
    rules). Create with `JournalGroup.open`, run with `serve`."""

    def __init__(self, journals: Sequence[Journal]) -> None:
        if len(journals) < 2:
            raise ValueError("a journal group needs at least two journals (use a Journal)")
        self.journals = tuple(journals)
        self._on_state_change: Callable[[JournalState], None] | None = None
        for j in self.journals:
            j.on_state_change = self._state_changed

    @classmethod
    async def open(
        cls,
        journal_dirs: Sequence[str | os.PathLike[str]],
        ledger_dirs: Sequence[str | os.PathLike[str]],
        config: JournalConfig | None = None,
        *,
        metrics: JournalMetrics | None = None,
        space_guard: SpaceGuard | None = None,
    ) -> JournalGroup:
        """Open one `Journal` per directory (``Journal.open``), journal ``i`` keeping its mark in
        ``last_mark_file(i)``. Raises what ``Journal.open`` raises, ValueError for fewer than two
        or repeated directories."""
        if len({os.fspath(d) for d in journal_dirs}) != len(journal_dirs):
            raise ValueError("journal directories must be distinct")
        shared = metrics or JournalMetrics()
        journals = [
            await Journal.open(
                d, ledger_dirs, config, metrics=shared, space_guard=space_guard, mark_file=last_mark_file(i)
            )
            for i, d in enumerate(journal_dirs)
        ]
        return cls(journals)

    # ------------------------------------------------------------------ routing (rule 1)

    def journal_of(self, ledger_id: int) -> Journal:
        """The journal that holds ``ledger_id``'s records."""
        return self.journals[ledger_id % len(self.journals)]

    def submit_add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> JournalTicket:
        """``Journal.submit_add_entry`` on the ledger's journal."""
        return self.journal_of(ledger_id).submit_add_entry(ledger_id, entry_id, data)

    def submit(self, record: JournalRecord) -> Any:
        """``Journal.submit`` on the record's ledger's journal; a `Padding` goes to every journal
        (rule 4) and its ticket completes when all of them made it durable."""
        if isinstance(record, Padding):
            return _AllTicket([j.submit(record) for j in self.journals])
        if isinstance(record, AddEntry):
            return self.submit_add_entry(record.ledger_id, record.entry_id, record.data)
        return self.journal_of(record.ledger_id).submit(record)

    async def wait_for_space(self) -> None:
        """Return once no journal's queue is full (rule 3)."""
        for j in self.journals:
            await j.wait_for_space()

    # ------------------------------------------------------------------ marks (rule 2)

    @staticmethod
    def earliest(a: GroupMark, b: GroupMark) -> GroupMark:
        """The component-wise earlier of two group marks."""
        return tuple(min(x, y) for x, y in zip(a, b, strict=True))

    def current_mark(self) -> GroupMark:
        """Every journal's ``current_mark``."""
        return tuple(j.current_mark() for j in self.journals)

    @property
    def persisted_mark(self) -> GroupMark:
        """Every journal's persisted mark."""
        return tuple(j.persisted_mark for j in self.journals)

    async def persist_last_mark(self, mark: GroupMark) -> list[int]:
        """``Journal.persist_last_mark`` of each component; the journal file ids removed."""
        removed: list[int] = []
        for j, m in zip(self.journals, mark, strict=True):
            removed += await j.persist_last_mark(m)
        return removed

    # ------------------------------------------------------------------ replay

    async def replay(
        self, apply: Callable[[LogMark, JournalRecord], Awaitable[None] | None] | None = None
    ) -> ReplayReport:
        """Replay each journal in turn (rule 1); one report: files and records summed, the first
        early stop."""
        total = ReplayReport()
        for j in self.journals:
            r = await j.replay(apply)
            total.files += r.files
            total.records += r.records
            total.end = max(total.end, r.end)
            if total.stop is None:
                total.stop = r.stop
            total.bridged += r.bridged
            total.skipped_files += r.skipped_files
        return total

    # ------------------------------------------------------------------ state (rule 3)

    @property
    def on_state_change(self) -> Callable[[JournalState], None] | None:
        """Called after a state change of any journal, with the group's state."""
        return self._on_state_change

    @on_state_change.setter
    def on_state_change(self, callback: Callable[[JournalState], None] | None) -> None:
        self._on_state_change = callback

    def _state_changed(self, _state: JournalState) -> None:
        if self._on_state_change is not None:
            self._on_state_change(self.state)

    @property
    def state(self) -> JournalState:
        """FAILED if a journal failed, else NO_SPACE if one is out of space, else the first's."""
        states = [j.state for j in self.journals]
        for worst in (JournalState.FAILED, JournalState.NO_SPACE):
            if worst in states:
                return worst
        return states[0]

    @property
    def error(self) -> JournalError | None:
        """The first journal error, if any."""
        return next((j.error for j in self.journals if j.error is not None), None)

    async def resume(self) -> bool:
        """``Journal.resume`` on every journal that is out of space; True if all serve again."""
        ok = True
        for j in self.journals:
            if j.state is JournalState.NO_SPACE:
                ok = await j.resume() and ok
        return ok

    async def ensure_reserve(self) -> bool:
        """``Journal.ensure_reserve`` on every journal; True if every reserve is in place."""
        ok = True
        for j in self.journals:
            ok = await j.ensure_reserve() and ok
        return ok

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, task_status: trio.TaskStatus[JournalGroup] = trio.TASK_STATUS_IGNORED) -> None:
        """Run every journal's loops until `aclose` (each journal in this task's nursery)."""
        async with trio.open_nursery() as nursery:
            for j in self.journals:
                await nursery.start(j.serve)
            task_status.started(self)

    async def aclose(self) -> None:
        """Close every journal (``Journal.aclose``)."""
        for j in self.journals:
            await j.aclose()

    def statistics(self) -> JournalStatistics:
        """The first journal's statistics with the counters of all journals added up."""
        stats = [j.statistics() for j in self.journals]
        first = stats[0]
        summed: dict[str, Any] = {}
        for f in dataclasses.fields(first):
            value = getattr(first, f.name)
            if isinstance(value, int) and not isinstance(value, bool):
                summed[f.name] = sum(getattr(s, f.name) for s in stats)
            elif isinstance(value, dict):
                summed[f.name] = {k: sum(getattr(s, f.name).get(k, 0) for s in stats) for k in value}
        return dataclasses.replace(first, state=self.state, **summed)
