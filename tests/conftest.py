"""Fixtures shared by every test area."""

from tests.support.s3server import s3_server as s3_server
from tests.support.zookeeper import zk_url as zk_url
from tests.support.zookeeper import zookeeper as zookeeper
from tests.support.zookeeper import zookeeper_tls as zookeeper_tls
