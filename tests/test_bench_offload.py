"""The tiered-storage benchmark (bench/offload_bench.py): the settings its figures rest on, and a
small run of the whole sequence with the filesystem driver.

A later edit could make the "from the tier" read silently come from the bookies (a deletion lag
left at its default, ledgers never rolled so nothing is closed); the first test guards those
choices, the smoke run checks that the read after offload happened with the bookie copies gone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import offload_bench


def _sets(args: list[str]) -> dict[str, str]:
    assert args[::2] == ["--set"] * (len(args) // 2)
    return dict(a.split("=", 1) for a in args[1::2])


def test_broker_args_roll_small_ledgers_and_delete_bookie_copies_at_once(tmp_path: Path) -> None:
    fs = _sets(offload_bench.broker_args("filesystem", tmp_path, None, 4))
    assert fs["offload.managedLedgerOffloadDeletionLagMs"] == "0"
    assert fs["managed_ledger.managedLedgerMaxSizePerLedgerMbytes"] == "4"
    assert fs["managed_ledger.managedLedgerMinLedgerRolloverTimeMinutes"] == "0"
    assert fs["offload.managedLedgerOffloadDriver"] == "filesystem"
    assert fs["offload.fileSystemURI"] == f"file://{tmp_path}"
    with pytest.raises(ValueError, match="unknown driver"):
        offload_bench.broker_args("hdfs", tmp_path, None, 4)


def test_unknown_driver_is_refused() -> None:
    with pytest.raises(SystemExit):
        offload_bench.main(["--drivers", "filesystem,gcs"])


@pytest.mark.slow
def test_small_run_reads_everything_back_from_the_tier(capsys: pytest.CaptureFixture[str]) -> None:
    runs = offload_bench.main(["--mb", "2", "--size", "1000", "--ledger-mb", "1", "--drivers", "filesystem"])
    (run,) = runs
    assert not run.skipped
    assert run.bookies and run.tier and run.offload
    assert run.bookies.messages == run.tier.messages == 2000
    assert run.tier.payload_bytes == 2_000_000
    assert run.offload.ledgers >= 1 and run.offload.bytes >= 2_000_000  # every message was in the tier
    assert "| filesystem |" in capsys.readouterr().out
