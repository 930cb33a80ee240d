"""Fixtures shared by every test area."""

from tests.support.zookeeper import zk_url as zk_url
from tests.support.zookeeper import zookeeper as zookeeper
from tests.support.zookeeper import zookeeper_tls as zookeeper_tls
