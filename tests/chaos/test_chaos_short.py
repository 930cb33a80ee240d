"""A short chaos run on real processes (the long one is ``bench/chaos.py``; figures in
bench/RESULTS.md): the reported holes-after-restart scenario on standalone and on a cluster, and
a few random cycles of broker and producer kills with every invariant checked after each cycle.

Bookie kills are a separate test, expected to fail until the open defect it names is fixed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chaos.run import ChaosRun, RunOptions
from tests.support.chaos.scenarios import holes_after_restart
from tests.support.zookeeper import zookeeper_available

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

needs_zk = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper (Debian's zookeeper package) or java missing"
)


@pytest.mark.parametrize("deploy", ["standalone", pytest.param("cluster", marks=needs_zk)])
def test_holes_after_restart(deploy: str, tmp_path: Path) -> None:
    report = holes_after_restart(deploy, persist_interval_s=1.0, workdir=tmp_path)
    assert report.ok, (report.violations, report.failed_expectations)


@needs_zk
def test_chaos_short_broker_and_producer_kills(tmp_path: Path) -> None:
    options = RunOptions(
        deploy="cluster",
        cycles=3,
        seed=11,
        duration_s=8.0,
        targets=("broker", "broker-clean", "producer"),
        rate=40.0,
        drain_timeout_s=60.0,
        workdir=tmp_path,
    )
    report = ChaosRun(options).run()
    assert report.cycles_done == 3
    assert report.totals["receipted"] > 1000 and report.owed_checked > 0
    assert report.ok, [str(v) for v in report.violations]
    assert not report.stalls, report.stalls


@needs_zk
def test_chaos_short_bookie_kills(tmp_path: Path) -> None:
    # Found a defect once: after an add failed on a ledger whose ensemble lost a bookie, the next
    # SENDs were stored on a new ledger while the failed one was answered with an error, so a
    # producer's entries were stored out of order and, with deduplication, its re-send was taken
    # for a duplicate and lost. The managed ledger now fails every add after one it gave up on.
    options = RunOptions(
        deploy="cluster",
        cycles=2,
        seed=2,
        duration_s=10.0,
        targets=("bookie",),
        dedup="on",
        batching="off",
        trim_topic=False,
        drain_timeout_s=30.0,
        workdir=tmp_path,
    )
    report = ChaosRun(options).run()
    assert report.ok, [str(v) for v in report.violations]
