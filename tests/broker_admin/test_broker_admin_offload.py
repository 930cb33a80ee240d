"""Offload over the admin REST (Pulsar's paths and JSON) and ``magnetar admin``, with the official
client: namespace and topic offload policies, manual offload and its status, stats and
internalStats, explain-storage, metrics, and consumers reading offloaded ledgers once their bookie
copies are gone (broker over MockBookKeeper, filesystem tier)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from click.testing import CliRunner

from broker import BrokerConfig
from magnetar.cli import main
from managed_ledger import ManagedLedgerConfig
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns
from tests.support.clients import drain, pulsar_client
from tests.support.waiting import wait_until
from tiered_storage import TieredStorage, TieredStorageConfig


def _run(broker: AdminBroker, *args: str, ok: bool = True) -> str:
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, *args])
    assert (result.exit_code == 0) == ok, result.output
    return result.output


def _json(broker: AdminBroker, *args: str) -> object:
    return json.loads(_run(broker, "--json", *args))


@pytest.fixture(scope="module")
def tier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tier")


@pytest.fixture(scope="module")
def broker(tier_dir: Path) -> Iterator[AdminBroker]:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        retention_check_interval_s=3600.0,
    )
    ml = ManagedLedgerConfig(
        ensemble_size=1, write_quorum=1, ack_quorum=1, max_entries_per_ledger=10, min_ledger_rollover_time_minutes=0.0
    )
    tier = TieredStorage(TieredStorageConfig(read_buffer_size=512))  # no broker-level driver
    with AdminBroker(config, ml, tier=tier) as b:
        yield b


@pytest.fixture
def http(broker: AdminBroker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.http, timeout=10) as c:
        yield c


@pytest.fixture
def client(broker: AdminBroker) -> Iterator[pulsar.Client]:
    with pulsar_client(broker.url) as c:
        yield c


def test_namespace_offload_policies_round_trip(
    broker: AdminBroker, http: httpx.Client, name: str, tier_dir: Path
) -> None:
    base = f"{V2}/namespaces/{new_tenant_ns(http, name)}"
    assert http.get(f"{base}/offloadThreshold").json() == -1
    assert http.put(f"{base}/offloadThreshold", json=1000).status_code == 204
    assert http.get(f"{base}/offloadThreshold").json() == 1000
    assert http.get(base).json()["offload_threshold"] == 1000
    assert http.put(f"{base}/offloadThreshold", json="x").status_code == 400
    assert http.get(f"{base}/offloadThresholdInSeconds").json() == -1
    assert http.put(f"{base}/offloadThresholdInSeconds", json=-60).status_code == 400
    assert http.put(f"{base}/offloadThresholdInSeconds", json=60).status_code == 204
    assert http.get(f"{base}/offloadThresholdInSeconds").json() == 60
    assert http.get(f"{base}/offloadDeletionLagMs").status_code == 204
    assert http.put(f"{base}/offloadDeletionLagMs", json=5000).status_code == 204
    assert http.get(f"{base}/offloadDeletionLagMs").json() == 5000
    assert http.delete(f"{base}/offloadDeletionLagMs").status_code == 204
    assert http.get(f"{base}/offloadDeletionLagMs").status_code == 204
    assert http.get(f"{base}/offloadPolicies").status_code == 204
    bad = http.post(
        f"{base}/offloadPolicies",
        json={"managedLedgerOffloadDriver": "google-cloud-storage", "managedLedgerOffloadBucket": "b"},
    )
    assert bad.status_code == 400 and "not supported" in bad.json()["reason"]
    no_bucket = http.post(f"{base}/offloadPolicies", json={"managedLedgerOffloadDriver": "aws-s3"})
    assert no_bucket.status_code == 400 and "bucket" in no_bucket.json()["reason"]
    s3 = {
        "managedLedgerOffloadDriver": "aws-s3",
        "managedLedgerOffloadBucket": "b",
        "s3ManagedLedgerOffloadCredentialSecret": "hush",
        "managedLedgerOffloadThresholdInBytes": 77,
    }
    assert http.post(f"{base}/offloadPolicies", json=s3).status_code == 204
    got = http.get(f"{base}/offloadPolicies").json()
    assert got["managedLedgerOffloadBucket"] == "b" and got["s3Driver"] is True
    assert got["s3ManagedLedgerOffloadCredentialSecret"] != "hush"  # never answered back
    assert http.get(f"{base}/offloadThreshold").json() == 77  # kept in step, as Pulsar
    assert http.put(f"{base}/offloadThreshold", json=88).status_code == 204
    assert http.get(f"{base}/offloadPolicies").json()["managedLedgerOffloadThresholdInBytes"] == 88
    assert http.delete(f"{base}/removeOffloadPolicies").status_code == 204
    assert http.get(f"{base}/offloadPolicies").status_code == 204
    assert http.get(f"{V2}/namespaces/{name}/missing/offloadThreshold").status_code == 404


def test_manual_offload_stats_explain_and_reads_after_bookie_deletion(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str, tier_dir: Path
) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"persistent://{ns}/t"
    tp = f"{V2}/persistent/{ns}/t"
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(45):
        producer.send(b"msg-%03d" % i)
    assert http.get(f"{tp}/offload").json()["status"] == "NOT_RUN"
    # no driver for this topic yet: refused with the reason
    refused = http.put(f"{tp}/offload", json={"ledgerId": 2**62, "entryId": 0, "partitionIndex": -1})
    assert refused.status_code == 400 and "no offload driver" in refused.json()["reason"]
    # the namespace names the filesystem driver; then the CLI offloads all but the last ~100 bytes
    _run(
        broker,
        "namespaces",
        "set-offload-policies",
        ns,
        "-d",
        "filesystem",
        "--fileSystemURI",
        f"file://{tier_dir}",
        "-rb",
        "256",
    )
    _run(broker, "namespaces", "set-offload-deletion-lag", ns, "-l", "1h")
    out = _run(broker, "topics", "offload", topic, "-s", "100")
    assert "Offload triggered" in out
    wait_until(lambda: http.get(f"{tp}/offload").json()["status"] != "RUNNING", "the offload to finish")
    status = http.get(f"{tp}/offload").json()
    assert status["status"] == "SUCCESS", status
    internal = http.get(f"{tp}/internalStats").json()
    offloaded = [li for li in internal["ledgers"] if li["offloaded"]]
    assert 3 <= len(offloaded) < len(internal["ledgers"])
    assert status["firstUnoffloadedMessage"]["ledgerId"] == internal["ledgers"][len(offloaded)]["ledgerId"]
    stats = http.get(f"{tp}/stats").json()
    assert stats["offloadedStorageSize"] == sum(li["size"] for li in offloaded)
    assert stats["lastOffloadLedgerId"] == offloaded[-1]["ledgerId"] and stats["lastOffloadSuccessTimeStamp"] > 0
    explain = http.get(f"{tp}/explain-storage").json()
    first = explain["ledgers"][0]["tieredStorage"]
    assert first["location"] == "both" and "deletion lag" in first["bookieCopy"]
    assert "tiered storage" in _run(broker, "topics", "explain-storage", topic)
    assert _json(broker, "topics", "offload-status", topic)["status"] == "SUCCESS"
    # lag 0: the next check deletes the bookie copies; consumers still read everything
    _run(broker, "namespaces", "set-offload-deletion-lag", ns, "-l", "0")
    ml = broker.service.topics[topic].ml  # type: ignore[union-attr]
    deleted = broker.call(ml.check_offload)["bookieCopiesDeleted"]
    assert deleted == [li["ledgerId"] for li in offloaded]
    assert not set(deleted) & set(broker.bk.ledger_ids())
    assert http.get(f"{tp}/explain-storage").json()["ledgers"][0]["tieredStorage"]["location"] == "tier"

    async def drop_cached_entries() -> None:  # so that the reads below reach the tier
        broker.service.factory.cache.invalidate(ml.name)  # type: ignore[union-attr]

    broker.call(drop_cached_entries)
    assert [m.data() for m in drain(consumer)] == [b"msg-%03d" % i for i in range(45)]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"msg-000"
    consumer.seek(pulsar.MessageId.earliest)
    assert consumer.receive(10_000).data() == b"msg-000"
    metrics = http.get("/metrics").text
    assert f'pulsar_storage_offloaded_size{{cluster="standalone",namespace="{ns}",topic="{topic}"}}' in metrics
    assert f'brk_ledgeroffloader_read_bytes_total{{namespace="{ns}"}}' in metrics
    assert f'magnetar_offload_ledgers_total{{namespace="{ns}"}} {float(len(offloaded))}' in metrics


def test_topic_offload_policies_override_the_namespace(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str, tier_dir: Path
) -> None:
    ns = new_tenant_ns(http, name)
    client.create_producer(f"persistent://{ns}/t").close()
    tp = f"{V2}/persistent/{ns}/t"
    assert (
        http.post(
            f"{V2}/namespaces/{ns}/offloadPolicies",
            json={
                "managedLedgerOffloadDriver": "filesystem",
                "fileSystemURI": str(tier_dir),
                "managedLedgerOffloadThresholdInBytes": 5,
            },
        ).status_code
        == 204
    )
    assert http.get(f"{tp}/offloadPolicies").status_code == 204
    assert (
        http.post(
            f"{tp}/offloadPolicies",
            json={
                "managedLedgerOffloadDriver": "S3",
                "s3ManagedLedgerOffloadBucket": "topic-bucket",
                "s3ManagedLedgerOffloadServiceEndpoint": "http://x",
            },
        ).status_code
        == 204
    )
    applied = http.get(f"{tp}/offloadPolicies", params={"applied": "true"}).json()
    assert (
        applied["managedLedgerOffloadDriver"],
        applied["s3ManagedLedgerOffloadBucket"],
        applied["managedLedgerOffloadThresholdInBytes"],
    ) == ("S3", "topic-bucket", 5)
    assert (
        _json(broker, "topics", "get-offload-policies", f"persistent://{ns}/t")["s3ManagedLedgerOffloadBucket"]
        == "topic-bucket"
    )
    _run(broker, "topics", "remove-offload-policies", f"persistent://{ns}/t")
    assert http.get(f"{tp}/offloadPolicies").status_code == 204
    applied = http.get(f"{tp}/offloadPolicies", params={"applied": "true"}).json()
    assert applied["managedLedgerOffloadDriver"] == "filesystem"
