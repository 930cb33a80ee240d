"""Transaction coordinators in a 2-broker cluster: each is served by the owner of its partition of
the coordinator-assign topic (found by a lookup, as clients find it), and when that broker is
SIGKILLed the broker that takes the partition over recovers the coordinator's open transactions
from its log."""

from __future__ import annotations

import itertools
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.transactions import TxnID
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.admin import rest
from tests.support.raw_pulsar import RawPeer
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer

from .mb_support import MultiBrokerCluster

pytestmark = pytest.mark.slow

SESSION_MS = 4000
_ids = itertools.count(1)
_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign"


def _ask(peer: RawPeer, type_: str, **fields: Any) -> pb.BaseCommand:
    peer.send(type_, request_id=next(_ids), **fields)
    answer = peer.recv()
    assert answer is not None, f"{type_}: connection closed"
    return answer


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _owner_url(entry_url: str, tc_id: int) -> str:
    """The broker serving coordinator ``tc_id``: LOOKUP of its partition, redirects followed."""
    url, authoritative = entry_url, False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            peer = RawPeer(_port(url))
        except ConnectionRefusedError:  # the killed owner, until its session expires: ask again
            time.sleep(0.5)
            url, authoritative = entry_url, False
            continue
        try:
            peer.connect()
            answer = _ask(peer, "LOOKUP", topic=f"{_ASSIGN}-partition-{tc_id}", authoritative=authoritative)
        finally:
            peer.close()
        lookup = answer.lookupTopicResponse
        if lookup.response == pb.CommandLookupTopicResponse.Connect:
            return url
        if lookup.response != pb.CommandLookupTopicResponse.Redirect:
            time.sleep(0.5)  # the bundle's previous owner's session has not expired yet
            continue
        url, authoritative = lookup.brokerServiceUrl, lookup.authoritative
    raise AssertionError(f"no owner found for coordinator {tc_id}")


def _coordinator(url: str, tc_id: int) -> RawPeer:
    peer = RawPeer(_port(url))
    peer.connect()
    answer = _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=tc_id)
    assert not answer.tcClientConnectResponse.HasField("error"), answer
    return peer


def test_a_killed_brokers_coordinators_recover_on_the_other_broker(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url(f"/mb-txn-{uuid.uuid4().hex[:8]}", session_timeout_ms=SESSION_MS)
    cluster = MultiBrokerCluster(tmp_path, url, 2, "--set", "broker.transaction_coordinator_enabled=true").start()
    try:
        a, b = cluster.brokers
        # as initialize-cluster-metadata would (pulsar/system is there: the brokers made it)
        rest("PUT", a.admin_url, "/admin/v2/persistent/pulsar/system/transaction_coordinator_assign/partitions", json=4)
        served: dict[int, str] = {}
        txns: dict[int, TxnID] = {}
        for tc_id in range(4):
            served[tc_id] = _owner_url(a.service_url, tc_id)
            peer = _coordinator(served[tc_id], tc_id)
            answer = _ask(peer, "NEW_TXN", tc_id=tc_id, txn_ttl_seconds=600_000).newTxnResponse
            assert not answer.HasField("error"), answer
            txns[tc_id] = TxnID(answer.txnid_most_bits, answer.txnid_least_bits)
            assert txns[tc_id].most_bits == tc_id
            peer.close()
        # a broker that does not serve a coordinator refuses it
        for tc_id, owner in served.items():
            other = b.service_url if owner == a.service_url else a.service_url
            peer = RawPeer(_port(other))
            peer.connect()
            refused = _ask(peer, "TC_CLIENT_CONNECT_REQUEST", tc_id=tc_id).tcClientConnectResponse
            assert refused.error == pb.TransactionCoordinatorNotFound, refused
            peer.close()
            break

        victim = a if served[0] == a.service_url else b
        survivor = b if victim is a else a
        moved = [tc for tc, owner in served.items() if owner == victim.service_url]
        victim.kill()
        for tc_id in moved:
            owner = _owner_url(survivor.service_url, tc_id)  # waits out the victim's session
            assert owner == survivor.service_url
            _coordinator(owner, tc_id).close()  # the survivor replays the coordinator's log
            meta = httpx.get(
                f"{survivor.admin_url}/admin/v3/transactions/transactionMetadata/{tc_id}/{txns[tc_id].least_bits}",
                timeout=15,
            )
            assert meta.status_code == 200 and meta.json()["status"] == "OPEN", meta.text

        def stats_of_moved() -> bool:
            got = httpx.get(f"{survivor.admin_url}/admin/v3/transactions/coordinatorStats", timeout=15).json()
            return all(str(tc) in got and got[str(tc)]["ongoingTxnSize"] == 1 for tc in moved)

        wait_until(stats_of_moved, "the survivor to serve the moved coordinators")
    finally:
        cluster.close()
