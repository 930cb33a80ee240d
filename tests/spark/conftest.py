"""Fixtures of the Spark tests: one standalone and one SparkSession per test run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.spark.spark_harness import SparkEnv, spark_env_fixture
from tests.support.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def spark_env(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkEnv]:
    yield from spark_env_fixture(zookeeper, tmp_path_factory)
