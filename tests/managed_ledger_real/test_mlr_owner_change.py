"""Owner change between two real processes over real bookies and ZooKeeper.

Process A opens a managed ledger and keeps appending (several adds in flight, rolling to new
ledgers as it goes), printing every position it was told succeeded. Process B then opens the same
managed ledger, which fences A; A's next add fails with `ManagedLedgerFenced` and it stops. B reads
the whole log: every entry A was told succeeded is there at the position A was given, in order,
and the log is exactly A's admissions 0..m-1 (nothing duplicated, nothing skipped; entries past
A's last acknowledgement may be there, since A was never told about them either way).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.managed_ledger_real.mlr_cluster import BookieCluster, Worker

pytestmark = pytest.mark.slow

# (A's acks before B opens, adds in flight in A, A's max random pause between adds in ms,
#  entries per ledger of A)
TIMINGS = [
    pytest.param(0, 1, 0.0, 50, id="at-once"),
    pytest.param(3, 1, 3.0, 50, id="slow-sequential"),
    pytest.param(60, 4, 0.0, 25, id="pipelined-rolling"),
    pytest.param(150, 16, 0.0, 40, id="deep-pipeline"),
    pytest.param(250, 32, 0.3, 1000, id="one-long-ledger"),
]


def _drain(worker: Worker) -> list[dict[str, Any]]:
    out = []
    while (msg := worker.read()) is not None:
        out.append(msg)
    return out


@pytest.mark.parametrize("acks_before, inflight, delay_ms, per_ledger", TIMINGS)
async def test_takeover_keeps_every_acknowledged_entry(
    cluster_and_quorum: tuple[BookieCluster, list[str]],
    tmp_path: Path,
    acks_before: int,
    inflight: int,
    delay_ms: float,
    per_ledger: int,
) -> None:
    cluster, quorum = cluster_and_quorum
    name = f"t/ns/persistent/owner-{uuid.uuid4().hex[:8]}"
    a = Worker(
        tmp_path / "a.log",
        "append",
        cluster.url,
        name,
        *quorum,
        "--inflight",
        str(inflight),
        "--delay-ms",
        str(delay_ms),
        "--max-entries",
        str(per_ledger),
    )
    b: Worker | None = None
    try:
        lines = await trio.to_thread.run_sync(a.read_until, "opened")
        acked = 0
        while acked < acks_before:
            msg = await trio.to_thread.run_sync(a.read)
            assert msg is not None and msg["event"] == "ack", (msg, a.stderr_tail())
            lines.append(msg)
            acked += msg["event"] == "ack"
        b = Worker(tmp_path / "b.log", "takeover", cluster.url, name, *quorum)
        b_lines = await trio.to_thread.run_sync(b.read_until, "entries")
        assert await trio.to_thread.run_sync(b.wait) == 0, b.stderr_tail()
        lines += await trio.to_thread.run_sync(_drain, a)
        assert await trio.to_thread.run_sync(a.wait) == 0, a.stderr_tail()
    finally:
        a.stop()
        if b is not None:
            b.stop()

    # A stopped because it was fenced, not for any other error.
    assert lines[-1]["event"] == "stopped", lines[-3:]
    assert [m["event"] for m in lines if m["event"] != "ack"] == ["opened", "fenced", "stopped"]
    admitted = lines[-1]["admitted"]
    acks = {m["seq"]: (m["ledger"], m["entry"]) for m in lines if m["event"] == "ack"}
    assert len(acks) >= acks_before

    entries = b_lines[-1]["entries"]
    seqs = [seq for _, _, seq in entries]
    # The log is A's admissions in order with no gap or duplicate ...
    assert seqs == list(range(len(seqs))), seqs[:50]
    assert len(seqs) <= admitted
    # ... acknowledgements complete in order, so A's acks are a prefix of it ...
    assert sorted(acks) == list(range(len(acks)))
    assert len(acks) <= len(seqs), (len(acks), len(seqs))
    # ... and each entry sits at the position A was told.
    where = {seq: (ledger, entry) for ledger, entry, seq in entries}
    assert all(where[seq] == pos for seq, pos in acks.items())
    positions = [(ledger, entry) for ledger, entry, _ in entries]
    assert positions == sorted(positions)
