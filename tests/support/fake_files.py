"""Fakes that fail on cue for the storage tests."""

from __future__ import annotations

import errno
import os

from bookie.storage import FileOps


class FailingFileOps(FileOps):
    """Real file calls until told to fail: ``fail_writes``/``fail_syncs`` raise ENOSPC/EIO."""

    def __init__(self) -> None:
        self.fail_writes = False
        self.fail_syncs = False
        self.partial_then_fail = False
        self.writes = 0

    def write(self, fd: int, data: memoryview) -> int:
        self.writes += 1
        if self.partial_then_fail:
            # a torn write: half the bytes land, then the disk is full
            self.partial_then_fail = False
            self.fail_writes = True
            return os.write(fd, data[: max(1, len(data) // 2)])
        if self.fail_writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    def sync(self, fd: int) -> None:
        if self.fail_syncs:
            raise OSError(errno.EIO, "Input/output error")
        os.fdatasync(fd)


class BlockingFileOps(FileOps):
    """Writes block (in the worker thread) while ``gate`` is clear; ``entered`` says one is waiting."""

    def __init__(self) -> None:
        import threading

        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def write(self, fd: int, data: memoryview) -> int:
        if not self.gate.is_set():
            self.entered.set()
            self.gate.wait(30)
        return os.write(fd, data)


class RecordingCheckpointSource:
    """A journal stand-in that records the order of checkpoint calls."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.marks = 0
        self.completed: list[int] = []

    def new_checkpoint(self) -> int:
        self.marks += 1
        self.events.append(f"mark{self.marks}")
        return self.marks

    async def checkpoint_complete(self, checkpoint: int) -> None:
        self.events.append(f"complete{checkpoint}")
        self.completed.append(checkpoint)
