"""Child process of the compaction crash test: open the storage in ``argv[1]`` and run one forced
GC (compaction throttled to ``argv[2]`` bytes/s). The parent SIGKILLs it at some point, or the
``MAGNETAR_GC_KILL_AT`` hook does."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from bookie.gc import GarbageCollector, GcConfig
from tests.bookie_gc.gc_helpers import open_storage


async def main(directory: str, rate: int) -> None:
    storage = await open_storage(Path(directory))
    gc = GarbageCollector(
        storage, GcConfig(compaction_free_space_reserve_bytes=0, throttle_by_bytes=True, compaction_rate_by_bytes=rate)
    )
    print("START", flush=True)
    res = await gc.run_once(force=True)
    print("DONE", res.result, res.compacted_logs, flush=True)
    await storage.aclose()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
