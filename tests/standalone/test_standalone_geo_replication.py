"""Geo-replication between two standalones on one machine (clusters ``a`` and ``b``, each with its
own ports, data and metadata store), set up as a user sets up two Pulsar clusters: each knows the
other's cluster record, the tenant allows both, the namespace replicates to both and
deduplicates. Checked with the official client: both ways with the metadata kept, no echo,
partitioned and schema'd topics, and every message arriving once when the remote or the local
standalone is SIGKILLed mid-replication and restarted."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pulsar
import pytest
from pulsar.schema import JsonSchema, Record, String

from tests.support.clients import drain, pulsar_client
from tests.support.ports import free_port
from tests.support.standalone import Standalone, start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

NS = "geo/ns"


@dataclass
class Cluster:
    """One standalone playing one cluster; `restart` keeps its ports, data and metadata."""

    name: str
    data: Path
    port: int
    web_port: int
    proc: Standalone | None = None

    def start(self) -> None:
        self.proc = start_standalone(
            self.data,
            "--set",
            f"broker.cluster_name={self.name}",
            "--set",
            f"broker.broker_service_port={self.port}",
            "--set",
            f"broker.web_service_port={self.web_port}",
        )

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def admin(self, method: str, path: str, body: object = None) -> httpx.Response:
        return httpx.request(method, self.http + path, json=body, timeout=10)

    def replication(self, topic: str, remote: str) -> dict:
        """The topic's replicator stats for ``remote`` ({} until it has one)."""
        r = self.admin("GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
        return r.json().get("replication", {}).get(remote, {}) if r.status_code == 200 else {}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Cluster]]:
    root = tmp_path_factory.mktemp("geo")
    a = Cluster("a", root / "a", free_port(), free_port())
    b = Cluster("b", root / "b", free_port(), free_port())
    for c in (a, b):
        c.start()
    try:
        for me, other in ((a, b), (b, a)):
            body = {"serviceUrl": other.http, "brokerServiceUrl": other.url}
            assert me.admin("PUT", f"/admin/v2/clusters/{other.name}", body).status_code == 204
            assert me.admin("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b"]}).status_code == 204
            assert me.admin("PUT", f"/admin/v2/namespaces/{NS}").status_code == 204
            assert me.admin("POST", f"/admin/v2/namespaces/{NS}/replication", ["a", "b"]).status_code == 204
            assert me.admin("POST", f"/admin/v2/namespaces/{NS}/deduplication", True).status_code == 204
        yield a, b
    finally:
        for c in (a, b):
            if c.proc is not None and c.proc.proc.poll() is None:
                c.proc.stop()


def _backlog(c: Cluster, topic: str) -> int:
    r = c.admin("GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    return r.json()["subscriptions"]["s"]["msgBacklog"] if r.status_code == 200 else 0


def _caught_up(c: Cluster, topic: str, remote: str) -> bool:
    stats = c.replication(topic, remote)
    return bool(stats) and stats["replicationBacklog"] == 0


def test_both_ways_with_metadata_and_no_echo(clusters: tuple[Cluster, Cluster]) -> None:
    a, b = clusters
    topic = f"persistent://{NS}/both-ways"
    with pulsar_client(a.url) as ca, pulsar_client(b.url) as cb:
        sub_a = ca.subscribe(topic, "s")
        sub_b = cb.subscribe(topic, "s")
        pa, pb = ca.create_producer(topic), cb.create_producer(topic)
        for i in range(20):
            pa.send(f"a{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}", event_timestamp=1000 + i)
        for i in range(10):
            pb.send(f"b{i}".encode())
        wait_until(lambda: _caught_up(a, topic, "b") and _caught_up(b, topic, "a"), "both replicators caught up")
        got_b = drain(sub_b)
        got_a = drain(sub_a)
    # each side holds its own and the other's messages exactly once: nothing was sent back
    assert sorted(m.data() for m in got_b) == sorted(
        [f"a{i}".encode() for i in range(20)] + [f"b{i}".encode() for i in range(10)]
    )
    assert sorted(m.data() for m in got_a) == sorted(m.data() for m in got_b)
    from_a = [m for m in got_b if m.data().startswith(b"a")]
    for m in from_a:
        i = int(m.properties()["i"])
        assert m.data() == f"a{i}".encode() and m.partition_key() == f"k{i}" and m.event_timestamp() == 1000 + i
    assert a.replication(topic, "b")["connected"] is True


def test_partitioned_topic_replicates_partition_by_partition(clusters: tuple[Cluster, Cluster]) -> None:
    a, b = clusters
    name = "parted"
    # created on a only: the replicators create it on b with the same partitions
    assert a.admin("PUT", f"/admin/v2/persistent/{NS}/{name}/partitions", 3).status_code == 204
    topic = f"persistent://{NS}/{name}"
    with pulsar_client(a.url) as ca, pulsar_client(b.url) as cb:
        producer = ca.create_producer(topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        producer.send(b"first")  # loads the partitions on a: their replicators prepare b
        wait_until(
            lambda: b.admin("GET", f"/admin/v2/persistent/{NS}/{name}/partitions").json()["partitions"] == 3,
            "the partitioned topic created on b",
        )
        sub_b = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        for i in range(30):
            producer.send(f"p{i}".encode(), partition_key=str(i))
        for p in range(3):
            wait_until(lambda p=p: _caught_up(a, f"{topic}-partition-{p}", "b"), f"partition {p} replicated")
        got = drain(sub_b)
    assert sorted(m.data() for m in got) == sorted([b"first"] + [f"p{i}".encode() for i in range(30)])
    assert len({m.topic_name() for m in got}) == 3


class Reading(Record):
    sensor = String()
    value = String()


def test_schema_topic_replicates_with_its_schema(clusters: tuple[Cluster, Cluster]) -> None:
    a, b = clusters
    topic = f"persistent://{NS}/schema"
    with pulsar_client(a.url) as ca, pulsar_client(b.url) as cb:
        sub_b = cb.subscribe(topic, "s", schema=JsonSchema(Reading))
        producer = ca.create_producer(topic, schema=JsonSchema(Reading))
        for i in range(5):
            producer.send(Reading(sensor=f"s{i}", value=str(i)))
        wait_until(lambda: _caught_up(a, topic, "b"), "schema topic replicated")
        got = [sub_b.receive(10_000) for _ in range(5)]
    assert [(m.value().sensor, m.value().value) for m in got] == [(f"s{i}", str(i)) for i in range(5)]
    schema = b.admin("GET", f"/admin/v2/schemas/{NS}/schema/schema").json()
    assert schema["type"] == "JSON"


def _produce(url: str, topic: str, first: int, n: int) -> None:
    """Messages ``m{first}`` .. ``m{first + n - 1}``, every one confirmed."""
    ok: list[int] = []
    with pulsar_client(url) as c:
        # one entry per message, so replication takes a while and a kill lands in the middle of it
        producer = c.create_producer(topic, block_if_queue_full=True, batching_enabled=False)
        for i in range(first, first + n):
            producer.send_async(f"m{i}".encode(), lambda res, _id: ok.append(1) if res == pulsar.Result.Ok else None)
        producer.flush()
        producer.close()
    assert len(ok) == n


def _received_once(c: Cluster, topic: str, n: int) -> None:
    with pulsar_client(c.url) as client:
        got = drain(client.subscribe(topic, "s"))
    bodies = [m.data() for m in got]
    assert len(bodies) == len(set(bodies)), f"{len(bodies) - len(set(bodies))} messages arrived twice"
    assert set(bodies) == {f"m{i}".encode() for i in range(n)}


def test_remote_killed_while_producing_then_restarted(clusters: tuple[Cluster, Cluster]) -> None:
    a, b = clusters
    topic = f"persistent://{NS}/remote-killed"
    half = 2500
    with pulsar_client(b.url) as cb:
        cb.subscribe(topic, "s").close()  # the subscription on b keeps what arrives while nobody reads
    _produce(a.url, topic, 0, half)
    assert b.proc is not None
    b.proc.kill()  # replication of the first half is under way
    _produce(a.url, topic, half, half)
    assert a.replication(topic, "b")["replicationBacklog"] > 0  # owed to b while it is down
    b.start()
    wait_until(lambda: _caught_up(a, topic, "b"), "replication to b caught up after its restart", timeout_s=120)
    _received_once(b, topic, 2 * half)


def test_local_killed_mid_replication_then_restarted(clusters: tuple[Cluster, Cluster]) -> None:
    a, b = clusters
    topic = f"persistent://{NS}/local-killed"
    n = 5000
    with pulsar_client(b.url) as cb:
        cb.subscribe(topic, "s").close()
    _produce(a.url, topic, 0, n)
    assert a.proc is not None
    a.proc.kill()  # replication under way, or done with the cursor's last deletes not persisted
    a.start()  # nothing touches the topic on a: the restarted broker resumes replication by itself
    wait_until(lambda: _backlog(b, topic) >= n, "everything arrived at b", timeout_s=120)
    wait_until(lambda: _caught_up(a, topic, "b"), "replication caught up")
    _received_once(b, topic, n)


def test_a_terminated_topic_replicates_what_it_holds(clusters: tuple[Cluster, Cluster]) -> None:
    a, b = clusters
    name = "terminated"
    topic = f"persistent://{NS}/{name}"
    with pulsar_client(b.url) as cb:
        cb.subscribe(topic, "s").close()
    _produce(a.url, topic, 0, 50)
    assert a.admin("POST", f"/admin/v2/persistent/{NS}/{name}/terminate").status_code == 200
    wait_until(lambda: _caught_up(a, topic, "b"), "the terminated topic replicated")
    assert a.replication(topic, "b")["connected"] is True
    _received_once(b, topic, 50)
