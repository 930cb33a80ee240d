"""Real bookie clusters shared by the tests of this folder: three bookies (for E=3 Qw=2 Qa=2) and
one bookie (for E=Qw=Qa=1), each registered in its own ZooKeeper chroot, started once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.managed_ledger_real.mlr_cluster import BookieCluster
from tests.support.zookeeper import ZooKeeperServer


def _cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, n: int) -> Iterator[BookieCluster]:
    url = zookeeper.url(f"/mlr{n}-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    cluster = BookieCluster(url, tmp_path_factory.mktemp(f"mlr-bookies{n}"))
    cluster.start(n)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="package")
def cluster3(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BookieCluster]:
    """Three real bookies (ensembles of 3)."""
    yield from _cluster(zookeeper, tmp_path_factory, 3)


@pytest.fixture(scope="package")
def cluster1(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BookieCluster]:
    """One real bookie (E=Qw=Qa=1)."""
    yield from _cluster(zookeeper, tmp_path_factory, 1)


@pytest.fixture(params=["e3qw2qa2", "e1qw1qa1"])
def cluster_and_quorum(request: pytest.FixtureRequest) -> tuple[BookieCluster, list[str]]:
    """Each real cluster with the quorum flags of the worker (``--e --qw --qa``)."""
    if request.param == "e3qw2qa2":
        return request.getfixturevalue("cluster3"), ["--e", "3", "--qw", "2", "--qa", "2"]
    return request.getfixturevalue("cluster1"), ["--e", "1", "--qw", "1", "--qa", "1"]
