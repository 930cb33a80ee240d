"""`magnetar.cli._common.run_until_signal` freezes the start-up heap out of the cyclic GC and
lowers the GIL switch interval."""

from __future__ import annotations

import gc
import os
import signal
import sys
from typing import Any

import trio

from magnetar.cli._common import SERVER_SWITCH_INTERVAL_S, run_until_signal


async def test_objects_made_before_start_are_frozen_and_the_signal_ends_the_run() -> None:
    seen: dict[str, Any] = {}

    async def main(task_status: trio.TaskStatus[str]) -> None:
        seen["startup_object"] = {"made": "before started"}  # a tracked container
        task_status.started("endpoints")
        with trio.move_on_after(10):  # run_until_signal freezes right after on_started
            while not gc.get_freeze_count():
                await trio.sleep(0.01)
        seen["frozen"] = gc.get_freeze_count()
        os.kill(os.getpid(), signal.SIGTERM)  # caught by run_until_signal's receiver
        await trio.sleep_forever()

    gc.unfreeze()
    interval = sys.getswitchinterval()
    try:
        result = await run_until_signal(main, lambda ep: seen.setdefault("started", ep))
        assert result == "SIGTERM"
        assert seen["started"] == "endpoints"
        assert seen["frozen"] > 0
        assert sys.getswitchinterval() == SERVER_SWITCH_INTERVAL_S
        # what existed at start-up is no longer in a collectable generation
        assert not any(o is seen["startup_object"] for g in range(3) for o in gc.get_objects(g))
    finally:
        gc.unfreeze()
        sys.setswitchinterval(interval)
