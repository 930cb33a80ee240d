"""Dynamic broker configuration and broker-stats over the admin REST (Pulsar's paths and JSON),
with the official client; the overrides are applied to the running broker at once, and ones
written by another broker (straight into the metadata store) on its next policy recheck."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pulsar
import pytest

from broker import BrokerConfig
from broker._dynamic_config import DYNAMIC_CONFIG_PATH
from broker.resources._bundles import bundle_for, default_boundaries
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.clients import pulsar_client
from tests.support.waiting import wait_until

V2 = "/admin/v2"


@pytest.fixture(scope="module")
def broker() -> Iterator[AdminBroker]:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        policy_recheck_interval_s=0.2,
    )
    with AdminBroker(config) as b:
        yield b


def test_dynamic_configuration(broker: AdminBroker, http: httpx.Client, name: str) -> None:
    base = f"{V2}/brokers/configuration"
    names = http.get(base).json()
    assert "allowAutoTopicCreation" in names and "dispatchThrottlingRatePerTopicInMsg" in names
    assert http.get(f"{base}/values").json() == {}
    runtime = http.get(f"{base}/runtime").json()
    assert runtime["allowAutoTopicCreation"] == "true" and runtime["clusterName"] == "standalone"

    assert http.post(f"{base}/dispatchThrottlingRatePerTopicInMsg/250").status_code == 204
    assert http.get(f"{base}/values").json() == {"dispatchThrottlingRatePerTopicInMsg": "250"}
    assert http.get(f"{base}/runtime").json()["dispatchThrottlingRatePerTopicInMsg"] == "250"
    with pulsar_client(broker.url) as client:
        client.create_producer(name).close()
        applied = http.get(f"{V2}/persistent/public/default/{name}/dispatchRate", params={"applied": "true"}).json()
        assert applied["dispatchThrottlingRateInMsg"] == 250  # the broker default reached the loaded topic

        # not dynamic, unknown, or a value that does not validate: 412, nothing stored
        for path in ("clusterName/x", "noSuchKey/1", "defaultNumPartitions/zero", "defaultNumPartitions/0"):
            r = http.post(f"{base}/{path}")
            assert r.status_code == 412, (path, r.text)
        assert http.get(f"{base}/values").json() == {"dispatchThrottlingRatePerTopicInMsg": "250"}

        assert http.post(f"{base}/allowAutoTopicCreation/false").status_code == 204
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(f"{name}-new")
        assert http.delete(f"{base}/allowAutoTopicCreation").status_code == 204
        client.create_producer(f"{name}-new").close()  # the config file's value is back

    # another broker's update reaches this one through the metadata store on its recheck
    async def write_override() -> None:
        data, stat = await broker.service.store.get(DYNAMIC_CONFIG_PATH)  # type: ignore[union-attr]
        values = json.loads(data)
        values["dispatcherMaxReadBatchSize"] = "7"
        await broker.service.store.set(
            DYNAMIC_CONFIG_PATH,
            json.dumps(values).encode(),  # type: ignore[union-attr]
            version=stat.version,
        )

    broker.call(write_override)
    wait_until(
        lambda: http.get(f"{base}/runtime").json()["dispatcherMaxReadBatchSize"] == "7",
        "the stored override to be applied by the recheck",
        timeout_s=20.0,
    )
    for key in ("dispatcherMaxReadBatchSize", "dispatchThrottlingRatePerTopicInMsg"):
        assert http.delete(f"{base}/{key}").status_code == 204
    assert http.get(f"{base}/values").json() == {}
    assert http.get(f"{base}/runtime").json()["dispatcherMaxReadBatchSize"] == "100"


def test_broker_stats(broker: AdminBroker, http: httpx.Client, name: str) -> None:
    with pulsar_client(broker.url) as client:
        consumer = client.subscribe(name, "s")
        producer = client.create_producer(name)
        for i in range(3):
            producer.send(f"m{i}".encode())
        topic = f"persistent://public/default/{name}"
        tree = http.get(f"{V2}/broker-stats/topics").json()
        bundle = bundle_for(default_boundaries(4), topic).name  # public/default has 4 bundles
        stats = tree["public/default"][bundle]["persistent"][topic]
        assert stats["msgInCounter"] == 3 and "s" in stats["subscriptions"]

        metrics = http.get(f"{V2}/broker-stats/metrics").json()
        ns = next(m for m in metrics if m["dimensions"]["namespace"] == "public/default")
        assert ns["dimensions"]["cluster"] == "standalone"
        assert ns["metrics"]["brk_no_of_producers"] >= 1 and ns["metrics"]["brk_no_of_consumers"] >= 1
        assert {"brk_in_rate", "brk_out_rate", "brk_msg_backlog", "brk_storage_size"} <= set(ns["metrics"])

        report = http.get(f"{V2}/broker-stats/load-report").json()
        assert report["pulsarServiceUrl"] == broker.url
        assert report["numProducers"] >= 1 and report["numConsumers"] >= 1 and report["numTopics"] >= 1
        assert report["cpu"]["limit"] > 0 and report["memory"]["usage"] > 0
        assert f"public/default/{bundle}" in report["bundles"]
        consumer.close()
        producer.close()
