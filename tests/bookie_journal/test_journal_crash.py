"""Crash test: SIGKILL a process that journals in a loop; every acknowledged record replays."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .journal_helpers import adds, payload, replay_all

ROOT = Path(__file__).resolve().parents[2]


def _run_and_kill(base: Path, run_for: float, first_ledger: int) -> set[tuple[int, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bookie_journal.journal_crash_child", str(base), str(first_ledger)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == b"ready\n", proc.stderr.read() if proc.stderr else first
        time.sleep(run_for)  # how long the child writes before the crash (a parameter)
        proc.send_signal(signal.SIGKILL)
        rest, _err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    acked = set()
    for line in rest.decode().splitlines():
        parts = line.split()
        if len(parts) == 2:  # a line cut by the kill is not an acknowledgement we can trust
            acked.add((int(parts[0]), int(parts[1])))
    return acked


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(3))
def test_sigkill_loses_no_acknowledged_record(tmp_path, seed) -> None:
    rng = random.Random(seed)
    all_acked: set[tuple[int, int]] = set()
    # two crashes in a row: the second run replays, repairs the torn tail and appends after it
    for run in range(2):
        acked = _run_and_kill(tmp_path, rng.uniform(0.3, 1.5), first_ledger=100 * run)
        assert acked, "the child acknowledged nothing"
        all_acked |= acked
    records, report = replay_all(tmp_path)
    got = adds(records)
    missing = all_acked - got.keys()
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    for ledger, entry in all_acked:
        assert got[(ledger, entry)] == payload(ledger, entry, 10 + (entry * 37 + ledger) % 3000)
    # earlier files end cleanly (the first crash's torn tail was cut); only the last may be torn
    assert report.stop is None or report.stop.last_file
