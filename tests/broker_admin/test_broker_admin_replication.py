"""Replication clusters over the admin REST (namespace and topic ``/replication``) with Pulsar's
checks, and what a change does to a loaded topic: a replicator and its ``pulsar.repl.<remote>``
cursor appear, hold the backlog while the remote cannot be reached, and go when the cluster is
removed."""

from __future__ import annotations

import socket

import httpx
import pulsar
import pytest

from protocols.pulsar import encode_payload_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.clients import drain
from tests.support.raw_pulsar import RawPeer
from tests.support.waiting import wait_until

V2 = "/admin/v2"


def _unreachable_url() -> str:
    """A pulsar:// URL nothing listens on (a port bound and closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"pulsar://127.0.0.1:{port}"


@pytest.fixture
def tenant(http: httpx.Client, name: str) -> str:
    """A tenant allowed on ``standalone`` and ``east`` (a remote cluster nothing serves)."""
    r = http.put(
        f"{V2}/clusters/east", json={"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": _unreachable_url()}
    )
    assert r.status_code in (204, 409)
    assert http.put(f"{V2}/tenants/{name}", json={"allowedClusters": ["standalone", "east"]}).status_code == 204
    assert http.put(f"{V2}/namespaces/{name}/ns").status_code == 204
    return name


def test_namespace_replication_clusters_are_checked(http: httpx.Client, tenant: str, name: str) -> None:
    path = f"{V2}/namespaces/{tenant}/ns/replication"
    assert http.get(path).json() == ["standalone"]  # a new namespace replicates to its own cluster only
    assert http.post(path, json=["standalone", "east"]).status_code == 204
    assert http.get(path).json() == ["east", "standalone"]

    r = http.post(path, json=[])
    assert r.status_code == 412 and "should not be null or empty" in r.json()["reason"]
    assert http.post(path, json=["global"]).status_code == 412
    r = http.post(path, json=["standalone", "nowhere"])
    assert r.status_code == 403 and r.json()["reason"] == "Invalid cluster id: nowhere"
    assert http.post(path, json="east").status_code == 400
    # a cluster that exists but that the tenant does not allow
    assert http.put(f"{V2}/clusters/west", json={"brokerServiceUrl": "pulsar://west:6650"}).status_code in (204, 409)
    r = http.post(path, json=["west"])
    assert r.status_code == 403
    assert r.json()["reason"] == f"Cluster [west] is not in the list of allowed clusters list for tenant [{tenant}]"
    assert http.get(path).json() == ["east", "standalone"]  # refused changes store nothing
    assert http.get(f"{V2}/namespaces/{tenant}/missing/replication").status_code == 404


def test_a_replicated_topic_runs_a_replicator_holding_its_backlog(
    http: httpx.Client, client: pulsar.Client, tenant: str
) -> None:
    topic = f"persistent://{tenant}/ns/t"
    rest = f"{V2}/persistent/{tenant}/ns/t"
    producer = client.create_producer(topic)
    assert http.get(f"{rest}/stats").json()["replication"] == {}
    assert http.post(f"{V2}/namespaces/{tenant}/ns/replication", json=["standalone", "east"]).status_code == 204
    # the loaded topic follows at once: a replicator to east, its cursor created at the end
    wait_until(lambda: "east" in http.get(f"{rest}/stats").json()["replication"], "a replicator to east")
    for i in range(5):
        producer.send(f"m{i}".encode())
    stats = http.get(f"{rest}/stats").json()
    repl = stats["replication"]["east"]
    assert repl["connected"] is False and repl["replicationBacklog"] == 5
    assert "pulsar.repl.east" not in stats["subscriptions"]
    series = {
        line.split("{")[0]: line.rsplit(" ", 1)[1]
        for line in http.get("/metrics").text.splitlines()
        if line.startswith("pulsar_replication_") and f'topic="{topic}"' in line and 'remote_cluster="east"' in line
    }
    assert series["pulsar_replication_backlog"] == "5.0"
    assert series["pulsar_replication_connected_count"] == "0.0"
    assert "pulsar.repl.east" in http.get(f"{rest}/internalStats").json()["cursors"]
    explained = http.get(f"{rest}/explain-storage").json()
    cursor = explained["cursors"]["pulsar.repl.east"]
    assert cursor["replicatesTo"] == "east" and cursor["backlog"] == 5 and cursor["pinsLedgers"]
    with pytest.raises(pulsar.PulsarException):  # the replicator's cursor is no subscription
        client.subscribe(topic, "pulsar.repl.east")

    # a topic-level override wins over the namespace's
    unset = http.get(f"{rest}/replication")
    assert unset.status_code in (200, 204) and not unset.content  # nothing of its own (Pulsar: null)
    assert http.get(f"{rest}/replication", params={"applied": "true"}).json() == ["east", "standalone"]
    assert http.post(f"{rest}/replication", json=["standalone"]).status_code == 204
    assert http.get(f"{rest}/replication").json() == ["standalone"]
    assert http.get(f"{rest}/stats").json()["replication"] == {}
    assert "pulsar.repl.east" not in http.get(f"{rest}/internalStats").json()["cursors"]  # its entries may go
    assert http.delete(f"{rest}/replication").status_code == 204
    wait_until(lambda: "east" in http.get(f"{rest}/stats").json()["replication"], "a replicator to east")
    assert http.get(f"{V2}/persistent/{tenant}/ns/other/replication").status_code == 404
    producer.close()


def test_replicator_cursor_survives_an_unload(
    http: httpx.Client, client: pulsar.Client, broker: AdminBroker, tenant: str
) -> None:
    topic = f"persistent://{tenant}/ns/u"
    rest = f"{V2}/persistent/{tenant}/ns/u"
    assert http.post(f"{V2}/namespaces/{tenant}/ns/replication", json=["standalone", "east"]).status_code == 204
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    producer.close()
    assert http.put(f"{rest}/unload").status_code == 204
    # loaded again (stats load it): the backlog is still owed to east
    wait_until(
        lambda: http.get(f"{rest}/stats").json()["replication"].get("east", {}).get("replicationBacklog") == 3,
        "the backlog owed to east after the reload",
    )


def _replicated_send(peer: RawPeer, origin: str, sequence_id: int, payload: bytes) -> pb.BaseCommand | None:
    md = pb.MessageMetadata(producer_name=origin, sequence_id=sequence_id, publish_time=1, replicated_from="east")
    peer.send_bytes(encode_payload_command(make_command("SEND", producer_id=1, sequence_id=sequence_id), md, payload))
    return peer.recv()


def test_a_replicated_message_sent_again_is_stored_once(
    http: httpx.Client, client: pulsar.Client, broker: AdminBroker, tenant: str
) -> None:
    """A replicator resending after an outage: with deduplication on, the broker keys a
    ``pulsar.repl.*`` producer's SENDs on the original producer's name and sequence id."""
    topic = f"persistent://{tenant}/ns/dedup"
    assert http.post(f"{V2}/namespaces/{tenant}/ns/deduplication", json=True).status_code == 204
    consumer = client.subscribe(topic, "s")
    peer = RawPeer(int(broker.url.rsplit(":", 1)[1]))
    try:
        peer.connect()
        peer.send("PRODUCER", topic=topic, producer_id=1, request_id=1, producer_name="pulsar.repl.east-->standalone")
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.PRODUCER_SUCCESS, answer
        # two original producers through one replicator: their sequence ids are independent
        sends = [
            ("origin-0", 5, b"a5"),
            ("origin-1", 1, b"b1"),
            ("origin-0", 5, b"a5 again"),
            ("origin-1", 1, b"b1 again"),
        ]
        for origin, seq, payload in sends:
            receipt = _replicated_send(peer, origin, seq, payload)
            assert receipt is not None and receipt.type == pb.BaseCommand.SEND_RECEIPT, receipt
            assert receipt.send_receipt.sequence_id == seq
    finally:
        peer.close()
    got = drain(consumer)
    assert [m.data() for m in got] == [b"a5", b"b1"]
