"""The journal's I/O stage: the blocking write / sync calls and the force-write task.

Part of `Journal` (a mixin over the same state; see the data path in `bookie._journal`). The
force writer receives `_Sync` items in file order. An item whose ``parts`` is set was handed
over unwritten (the force writer was idle): it is written and synced in ONE worker-thread call.
Other items were written by the journal task already. One ``fdatasync`` covers every item
received so far, then their batches are acknowledged in order.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import trio

from ._journal_types import _Batch

__all__: list[str] = []

log = logging.getLogger("bookie._journal")


@dataclass(slots=True)
class _Sync:
    """A force-write request: (write `parts` at `start`, then) sync file `file_id`, then ack
    `batch` and/or close the fd. `parts` is None when the journal task wrote the batch already."""

    fd: int
    file_id: int
    batch: _Batch | None
    close: bool
    parts: list[bytes] | None = None
    start: int = 0


class _JournalIO:
    """The I/O half of `Journal` (only `Journal` derives from it; state is set up there)."""

    def _write_blocking(self, fd: int, parts: list[bytes], start: int, grow: tuple[int, int] | None) -> float:
        """Worker thread: grow the file if asked, write the records; returns the seconds taken."""
        t0 = time.perf_counter()
        if grow is not None:
            self._disk.allocate(fd, *grow)
            self.metrics.preallocation.observe((time.perf_counter() - t0) * 1000.0)
        self._disk.pwritev(fd, parts, start)
        return time.perf_counter() - t0

    def _write_and_sync(self, fd: int, writes: list[_Sync]) -> tuple[float, float]:
        """Worker thread: write the unwritten batches, then fdatasync; returns (write s, sync s)."""
        t0 = time.perf_counter()
        for it in writes:
            self._disk.pwritev(fd, it.parts, it.start)  # type: ignore[arg-type]
        t1 = time.perf_counter()
        self._disk.fdatasync(fd)
        return t1 - t0, time.perf_counter() - t1

    async def _send_sync(self, item: _Sync) -> None:
        self._fw_pending += 1
        self.metrics.force_write_queue_size.set(self._fw_pending)
        await self._fw_send.send(item)

    async def _force_write_loop(self) -> None:
        recv = self._fw_recv
        while True:
            try:
                items = [await recv.receive()]
            except trio.EndOfChannel:
                return
            self._fw_busy = True
            while True:
                try:
                    items.append(recv.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            self._fw_pending -= len(items)
            self.metrics.force_write_queue_size.set(self._fw_pending)
            i = 0
            while i < len(items):
                j = i
                while j < len(items) and items[j].file_id == items[i].file_id:
                    j += 1
                await self._sync_group(items[i:j])
                i = j
            self._fw_busy = False
            if self._open.count:
                self._wake.set()  # the journal task may hand over what queued during the sync

    async def _sync_group(self, group: list[_Sync]) -> None:
        fd, file_id = group[0].fd, group[0].file_id
        batches = [it.batch for it in group if it.batch is not None]
        unwritten = [it for it in group if it.parts is not None]
        handed = [it.batch for it in unwritten if it.batch is not None]
        if self._error is None:
            try:
                write_s, sync_s = await trio.to_thread.run_sync(self._write_and_sync, fd, unwritten)
            except OSError as exc:
                if unwritten:
                    self._written(handed, 0, 0.0)
                self._fail(exc, f"writing or syncing journal file {file_id:x}")
            else:
                if unwritten:
                    self._written(handed, sum(b.nbytes for b in handed), write_s)
                self._force_writes += 1
                m = self.metrics
                m.num_force_writes.inc()
                m.sync.observe(sync_s * 1000.0)
                m.force_write_batch_entries.observe(sum(b.count for b in batches))
                m.force_write_batch_bytes.observe(sum(b.nbytes for b in batches))
                for b in batches:
                    self._ack(b)
            finally:
                for it in unwritten:
                    it.parts = None
        elif unwritten:
            self._written(handed, 0, 0.0)
        if any(it.close for it in group):
            self._fds_open.pop(file_id, None)
            try:
                await trio.to_thread.run_sync(self._disk.close, fd)
            except OSError as exc:
                log.warning("journal: closing file %x: %s", file_id, exc)
