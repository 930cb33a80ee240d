"""Fixtures shared by every test area."""

from tests.support.zookeeper import zk_url as zk_url  # noqa: F401
from tests.support.zookeeper import zookeeper as zookeeper  # noqa: F401
